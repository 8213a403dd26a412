"""
The first GPU command's compile and speed phases, the main process's side: the worker processes
started (one per paper run to time, one for compiled against eager), their compiles awaited, each
speed worker timed alone and then all at once, the compile check collected.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from lab.gpu_first_base import DEFAULTS, REPO, csv, gpt_fields, paper_runs, read_json, run_config
from lab.gpu_first_report import write_all


# ----------------------------------------------------------------------------- 2a. workers (compile, speed)


def launch_workers(ctx):
    """Start the preflight's worker processes: one per paper run to time (speed) and one for the
    compiled-against-eager check. They compile while the main process runs kernels and fused."""
    c, size = ctx.c, ctx.size
    wdir = os.path.join(c.scratch, 'preflight')
    if os.path.isdir(wdir):
        shutil.rmtree(wdir)
    os.makedirs(wdir)
    jobs = []
    deadline = time.time() + ctx.clock.left() - c.final_s
    if 'speed' in ctx.phases:
        names = c.speed_runs or ('dot,fox_mope_rel' if c.toy else '')
        for run in paper_runs(names):
            cfg = run_config(run)
            train_keys = dict(batch_size=cfg['batch_size'], learning_rate=cfg['learning_rate'],
                              weight_decay=cfg['weight_decay'], beta1=cfg['beta1'], beta2=cfg['beta2'],
                              grad_clip=cfg['grad_clip'])
            g = gpt_fields(cfg)
            g.update({k: v for k, v in size['speed'].items() if k in g})
            train_keys.update({k: v for k, v in size['speed'].items() if k in train_keys})
            jobs.append(dict(kind='speed', name=run[0], cfg=g, train=train_keys))
    if 'compile' in ctx.phases:
        forms = csv(c.compile_forms)
        if c.toy and c.compile_forms == DEFAULTS['compile_forms']:
            forms = forms[:1]
        jobs.append(dict(kind='check', name='compile_check', forms=forms, cfg=dict(size['compile'])))
    n = len(jobs)
    cores = ctx.env.get('usable_cores') or os.cpu_count() or 2
    for job in jobs:
        job.update(dir=wdir, device=ctx.dev, seed=c.seed, warm=size['warm'],
                   backend=size['speed_backend'] if job['kind'] == 'speed' else size['backend'],
                   alone_steps=size['alone_steps'], threads=size['threads'], deadline=deadline,
                   vocab_size=65)
        path = os.path.join(wdir, f"{job['name']}.job.json")
        with open(path, 'w') as f:
            json.dump(job, f)
        env = dict(os.environ, PYTHONUNBUFFERED='1', TORCHINDUCTOR_COMPILE_THREADS=str(max(2, cores // max(n, 1))))
        log = open(os.path.join(wdir, f"{job['name']}.console.txt"), 'w')
        proc = subprocess.Popen([sys.executable, '-m', 'lab.gpu_first', f'--worker={path}'], cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        ctx.children.append(proc)
        ctx.workers[job['name']] = dict(proc=proc, job=job, dir=wdir, t0=ctx.clock.now())
    ctx.say(f"workers: started {n} ({', '.join(ctx.workers)}), compile threads {max(2, cores // max(n, 1))} each")


def worker_tail(w, n=3):
    try:
        with open(os.path.join(w['dir'], f"{w['job']['name']}.console.txt")) as f:
            lines = [x.rstrip() for x in f if x.strip() and 'USDT' not in x]
        return lines[-n:]
    except OSError:
        return []


def worker_error(w):
    err = read_json(os.path.join(w['dir'], f"{w['job']['name']}.error.json"))
    if err:
        return err['error']
    tail = worker_tail(w, 1)
    return f"exit {w['proc'].returncode}" + (f": {tail[-1]}" if tail else '')


def collect_workers(ctx, preflight_end):
    """Wait for the workers' compiles (until the preflight's end less the measuring time), then time
    each speed worker alone and all of them at once; collect the compile check."""
    c, size = ctx.c, ctx.size
    if not ctx.workers:
        return 'no workers were started'
    speed = {n: w for n, w in ctx.workers.items() if w['job']['kind'] == 'speed'}
    check = ctx.workers.get('compile_check')
    ready_by = min(preflight_end - size['measure_cap'], ctx.clock.budget - c.final_s - 5)

    def ready(n, w):
        return os.path.exists(os.path.join(w['dir'], f'{n}.ready.json'))

    while ctx.clock.now() < ready_by:
        waiting = [n for n, w in speed.items() if not ready(n, w) and w['proc'].poll() is None]
        check_running = check is not None and check['proc'].poll() is None
        if not waiting and not check_running:
            break
        time.sleep(0.2)
    # each speed worker: its compile, then alone, one after another
    notes = []
    for n, w in speed.items():
        row = dict(run=n, cfg={k: w['job']['cfg'].get(k) for k in ('attn', 'pos', 'n_layer', 'n_embd',
                                                                   'block_size', 'dropout')},
                   batch_size=w['job']['train']['batch_size'])
        ctx.speed.append(row)
        r = read_json(os.path.join(w['dir'], f'{n}.ready.json'))
        if r is None:
            if w['proc'].poll() is None:
                row['status'] = f"compile not finished in {ctx.clock.now() - w['t0']:.0f} s (the preflight cap)"
                w['proc'].kill()
            else:
                row['status'] = 'FAILED: ' + worker_error(w)
            notes.append(f"{n}: {row['status']}")
            continue
        row.update(r)
        if ctx.clock.now() > preflight_end - 2:
            row['status'] = 'compiled; not timed (the preflight cap)'
            continue
        open(os.path.join(w['dir'], f'{n}.go'), 'w').close()
        until = time.time() + max(5.0, min(20.0, preflight_end - ctx.clock.now() - 2))
        while time.time() < until and w['proc'].poll() is None and \
                not os.path.exists(os.path.join(w['dir'], f'{n}.alone.json')):
            time.sleep(0.05)
        a = read_json(os.path.join(w['dir'], f'{n}.alone.json'))
        if a is None:
            row['status'] = 'FAILED: ' + (worker_error(w) if w['proc'].poll() is not None
                                          else 'no alone timing in time')
            notes.append(f"{n}: {row['status']}")
            continue
        row.update(a)
        row['status'] = 'ok'
        ctx.say(f"speed {n}: compile {row['compile_s']:.1f} s, {row['ms']:.1f} ms/step alone, "
                f"peak {row['peak_mib']:,.0f} MiB")
        write_all(ctx)
    # all at once
    timed = [r['run'] for r in ctx.speed if r.get('status') == 'ok']
    go = os.path.join(next(iter(ctx.workers.values()))['dir'], 'all.go')
    if len(timed) >= 2 and ctx.clock.now() + size['shared_s'] + 3 < preflight_end + 5:
        t_start = time.time() + 0.5
        with open(go + '.tmp', 'w') as f:
            json.dump(dict(t_start=t_start, dur=size['shared_s']), f)
        os.replace(go + '.tmp', go)
        until = t_start + size['shared_s'] + 10
        while time.time() < until and not all(
                os.path.exists(os.path.join(ctx.workers[n]['dir'], f'{n}.shared.json')) or
                ctx.workers[n]['proc'].poll() is not None for n in timed):
            time.sleep(0.05)
        steps, serial_s = 0, 0.0
        for row in ctx.speed:
            s = read_json(os.path.join(ctx.workers[row['run']]['dir'], f"{row['run']}.shared.json")) \
                if row['run'] in timed else None
            if s and s['steps']:
                row['shared_ms'], row['shared_steps'] = s['ms'], s['steps']
                steps += s['steps']
                serial_s += s['steps'] * row['ms'] / 1000       # the same steps one run after another
        ctx.shared = dict(runs=len(timed), seconds=size['shared_s'], steps=steps,
                          steps_per_s=round(steps / size['shared_s'], 2),
                          gain=round(serial_s / size['shared_s'], 2) if serial_s else None)
        ctx.say(f"speed, {len(timed)} at once: {steps} steps in {size['shared_s']:g} s; one after another "
                f"they take {serial_s:.1f} s (gain x{ctx.shared['gain']}, measured)")
    else:
        if len(timed) >= 2:
            notes.append('shared timing skipped: the preflight cap')
        open(go, 'w').close()           # an empty go: the workers leave
    # the compile check
    if check is not None:
        until = max(ctx.clock.t0 + preflight_end, time.time() + 1)
        while time.time() < until and check['proc'].poll() is None:
            time.sleep(0.1)
        res = read_json(os.path.join(check['dir'], 'compile_check.check.json')) or []
        done = {r['form'] for r in res}
        ctx.compile.extend(res)
        for f in check['job']['forms']:
            if f not in done:
                ctx.compile.append(dict(form=f, status='not finished by the preflight cap' if check['proc'].poll()
                                        is None else 'FAILED: ' + worker_error(check)))
        if check['proc'].poll() is None:
            check['proc'].kill()
            notes.append('compile check: stopped at the preflight cap')
    # what they had to give is read: none may hold the GPU or the cores through the probe
    until = time.time() + 1.0
    while time.time() < until and any(w['proc'].poll() is None for w in ctx.workers.values()):
        time.sleep(0.05)
    for w in ctx.workers.values():
        if w['proc'].poll() is None:
            w['proc'].kill()
            w['proc'].wait()
    return ('partial: ' + '; '.join(notes)) if notes else ''
