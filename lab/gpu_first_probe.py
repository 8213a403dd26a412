"""
The first GPU command's phase 3, the probe: the paper study's runs through train.py itself, all at
once on the one GPU, as many steps as the measured step time and compile time leave room for.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from lab.gpu_first_base import DEFAULTS, PAPER_EVAL_INTERVAL, REPO, TOY_TRAIN, paper_runs
from lab.gpu_first_report import write_all


# ----------------------------------------------------------------------------- 3. probe


def probe_inputs(ctx, runs):
    """The numbers the probe's length comes from, each 'measured' or 'assumed': per run the step time
    with all P runs on the GPU, and its start (python, audit, eval-graph and training-graph compiles)."""
    A, c = ctx.assumed, ctx.c
    P = c.probe_parallel or len(runs)
    by = {r['run']: r for r in ctx.speed if r.get('status') == 'ok'}
    shared_n = ctx.shared.get('runs') or 0
    out_ = {}
    for name, *_ in runs:
        r = by.get(name)
        src = []
        if r and r.get('shared_ms') and shared_n:
            # measured with shared_n at once; P at once: linear in the count (time slicing)
            step = r['shared_ms'] / 1000 * P / shared_n
            src.append(f"step: measured {r['shared_ms']:.1f} ms with {shared_n} at once, x {P}/{shared_n}")
        elif r:
            step = r['ms'] / 1000 * P / A['share_gain']
            src.append(f"step: measured {r['ms']:.1f} ms alone, x {P} runs / gain {A['share_gain']} (assumed)")
        else:
            ms = max([x['ms'] for x in by.values()], default=A['step_ms'])
            step = ms / 1000 * P / A['share_gain']
            src.append(f"step: {'the slowest measured' if by else 'assumed'} {ms:.1f} ms alone, x {P} runs")
        comp = r['compile_s'] if r and 'compile_s' in r else max([x['compile_s'] for x in by.values()],
                                                                  default=A['compile_s'])
        src.append(f"compile: {'measured' if r else ('slowest measured' if by else 'assumed')} {comp:.0f} s, "
                   f"+ {A['eval_compile_frac']:.0%} for the eval graph (assumed)")
        start = A['train_start_s'] + comp * (1 + A['eval_compile_frac'])
        src.append(f"start: {A['train_start_s']:.0f} s (assumed) + the compiles")
        out_[name] = dict(step_s=step, start_s=start, how=src)
    return out_, P


def eval_every(N, c):
    """The probe's eval interval: --probe_eval_interval, else the paper's 250 from 1000 steps on (the val
    curve on the paper's grid), else a quarter of the run (toy: half)."""
    if c.probe_eval_interval:
        return c.probe_eval_interval
    if N >= 1000:
        return PAPER_EVAL_INTERVAL
    return max(1, N // (2 if c.toy else 4))


def size_probe(left, inputs, K, c, A):
    """Steps N of each probe run in `left` seconds: the slowest run's start, N steps and its evals (each
    3 K forward passes of a third of a step, and a checkpoint), in 90% of the time less the grace for
    stopping. Returns (N, seconds the slowest needs)."""
    step = max(v['step_s'] for v in inputs.values())
    start = max(v['start_s'] for v in inputs.values())
    usable = 0.9 * (left - A['stop_grace_s'])

    def need(n):
        return start + n * step + (n // eval_every(n, c) + 2) * (K * step + 0.5)
    n = max(0, min(c.probe_max_iters, int((usable - start) / step) if step > 0 else c.probe_max_iters))
    while n > 0 and need(n) > usable:
        n -= 1
    if not c.toy and n > 20:
        n -= n % 20
    return n, need(n)


def phase_probe(ctx):
    c, size, A = ctx.c, ctx.size, ctx.assumed
    runs = paper_runs(c.probe_runs or ('dot,fox_mope_rel' if c.toy else ''))
    K = c.probe_eval_iters if not (c.toy and c.probe_eval_iters == DEFAULTS['probe_eval_iters']) else 2
    left = ctx.clock.left() - c.final_s
    inputs, P = probe_inputs(ctx, runs)
    P = min(P, len(runs))
    if c.probe_iters:
        N, need = c.probe_iters, None
        how = f'--probe_iters={c.probe_iters}'
    else:
        N, need = size_probe(left, inputs, K, c, A)
        how = 'sized from the preflight'
        if c.toy:
            N, need, how = min(max(N, 4), 6), None, 'toy: 4 to 6 steps'
    ctx.probe['sizing'] = dict(N=N, how=how, parallel=P, left_s=round(left), planned_s=round(need) if need else None,
                               inputs={k: dict(step_ms=round(v['step_s'] * 1000, 1), start_s=round(v['start_s']),
                                               how=v['how']) for k, v in inputs.items()})
    if N < (c.probe_min_iters if not c.toy and not c.probe_iters else 1):
        return f"skipped: {N} steps fit in the {left:.0f} s left (at least {c.probe_min_iters} wanted)"
    E = eval_every(N, c)
    L = size['log_interval']
    cores = ctx.env.get('usable_cores') or os.cpu_count() or 2
    pdir = os.path.join(c.scratch, 'probe')
    os.makedirs(pdir, exist_ok=True)
    data = os.path.abspath(c.data_dir)
    ctx.probe['runs'] = []
    queue = []
    for run in runs:
        name, files, overrides, seed_ = run
        cmd = ([sys.executable, 'train.py', *files, *overrides, f'--seed={seed_}',
                f'--out_dir={os.path.join(pdir, name)}', f'--data_dir={data}', f'--max_iters={N}',
                f'--lr_decay_iters={c.probe_decay_iters}', f'--eval_interval={E}', f'--eval_iters={K}',
                f'--log_interval={L}', '--overwrite=True', f'--threads={size["threads"]}', f'--device={ctx.dev}']
               + (TOY_TRAIN if c.toy else []))
        rec = dict(run=name, cmd=' '.join(['python3'] + cmd[1:]), status='not started', lines=[])
        ctx.probe['runs'].append(rec)
        queue.append((rec, cmd))
    ctx.say(f"probe: {len(runs)} runs of {N} steps, {P} at once, eval every {E} on {K} batches "
            f"({ctx.probe['sizing']['planned_s'] or '?'} s planned, {left:.0f} s left)")
    env = dict(os.environ, PYTHONUNBUFFERED='1', TORCHINDUCTOR_COMPILE_THREADS=str(max(2, cores // max(P, 1))))
    stop_at = ctx.clock.budget - c.final_s
    live = []
    while queue or live:
        while queue and len(live) < P and ctx.clock.now() < stop_at - 30:
            rec, cmd = queue.pop(0)
            launch_run(ctx, rec, cmd, env)
            live.append(rec)
        if not live:
            for rec, _ in queue:
                rec['status'] = 'not started: no time left'
            break
        time.sleep(0.25)
        now = ctx.clock.now()
        for rec in list(live):
            p = rec['proc']
            if p.poll() is None and now >= stop_at and not rec.get('stopping'):
                rec['stopping'] = now
                p.send_signal(signal.SIGTERM)       # train.py saves its checkpoint and stops
                ctx.say(f"probe {rec['run']}: stopped at the deadline (SIGTERM)")
            if p.poll() is None and rec.get('stopping') and now - rec['stopping'] > A['stop_grace_s']:
                p.kill()
            if p.poll() is not None:
                rec['reader'].join(timeout=2)
                finish_run(ctx, rec, pdir)
                live.remove(rec)
                ctx.say(f"probe {rec['run']}: {rec['status']}")
                write_all(ctx)
    bad = [r for r in ctx.probe['runs'] if r['status'] != 'finished']
    return f"partial: {len(bad)} of {len(runs)} not finished" if bad else ''


def launch_run(ctx, rec, cmd, env):
    rec['started_s'] = round(ctx.clock.now(), 1)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True, bufsize=1)
    ctx.children.append(proc)
    rec['proc'] = proc
    rec['status'] = 'running'

    def read():
        for line in proc.stdout:
            line = line.rstrip()
            if not line or 'USDT' in line:
                continue
            t = round(ctx.clock.now(), 1)
            rec['lines'].append([t, line])
            if line.startswith('eval iter 0:') and 'first_eval_s' not in rec:
                rec['first_eval_s'] = t
            elif line.startswith('iter ') and 'first_iter_s' not in rec:
                rec['first_iter_s'] = t
            if line.startswith(('eval iter', 'error', 'done', 'Traceback', 'caught signal')) or 'Error' in line:
                ctx.say(f"  {rec['run']}: {line[:200]}")
    rec['reader'] = threading.Thread(target=read, daemon=True)
    rec['reader'].start()


def finish_run(ctx, rec, pdir):
    """A probe run that has ended: its status, log rows, and the times the plan needs."""
    p = rec.pop('proc')
    rec.pop('reader', None)
    rec['ended_s'] = round(ctx.clock.now(), 1)
    rec['returncode'] = p.returncode
    rows = []
    try:
        with open(os.path.join(pdir, rec['run'], 'log.jsonl')) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    rec['rows'] = rows
    trains = [r for r in rows if r.get('kind') == 'train']
    evals = [r for r in rows if r.get('kind') == 'eval']
    rec['iters'] = max([r['iter'] for r in trains], default=0)
    N = int(next((a.split('=')[1] for a in rec['cmd'].split() if a.startswith('--max_iters=')), 0))
    if evals and evals[-1]['iter'] == N and p.returncode == 0:
        rec['status'] = 'finished'
    elif rec.get('stopping'):
        rec['status'] = f"stopped at the deadline at iter {rec['iters']}"
    else:
        last = next((ln for _, ln in reversed(rec['lines']) if ln.startswith('error') or 'Error' in ln),
                    rec['lines'][-1][1] if rec['lines'] else '')
        rec['status'] = f"FAILED (exit {p.returncode}): {last[:200]}"
    steady = [r['ms'] for r in trains if r['iter'] >= 60] or [r['ms'] for r in trains]
    rec['ms'] = round(statistics.median(steady), 2) if steady else None
    if 'first_iter_s' in rec and rec['ms']:
        L = ctx.size['log_interval']
        rec['start_s'] = round(rec['first_iter_s'] - rec['started_s'] - L * rec['ms'] / 1000, 1)
    if len(evals) >= 3 and rec['ms']:
        # a steady eval: the time between two later evals less their steps
        gaps = [(b['time'] - a['time']) - (b['iter'] - a['iter']) * rec['ms'] / 1000
                for a, b in zip(evals[1:], evals[2:])]
        rec['eval_s'] = round(max(0.0, statistics.median(gaps)), 2)
        rec['eval_iters'] = int(next((a.split('=')[1] for a in rec['cmd'].split() if a.startswith('--eval_iters=')), 0))
    rec['val'] = [[r['iter'], round(r['val'], 4)] for r in evals]
    rec['last_loss'] = trains[-1]['loss'] if trains else None
    rec['tail'] = [ln for _, ln in rec['lines'][-40:]]
    keep = [ln for ln in rec['lines'] if not ln[1].startswith('iter ')][:40]
    rec['lines'] = keep     # the start-up, eval and end lines, with their times
