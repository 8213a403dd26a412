"""
The paper-scale comparison in one go on one large GPU, inside a wall-clock budget.

    python gpu_study.py                           # study 'paper' at the paper scale, 9 minutes
    python gpu_study.py --budget_s=1800 --seed=2  # another seed, a longer budget
    python study.py paper --overlay= --table_only=True   # the table of what it left in results/

The runs of study.py's 'paper' study (dot, ega, ega_mope, fox, causal_gauss and the best
combination of the locality study), one after another at the paper scale (6 layers, C = 256,
T = 256, 5000 steps; bf16 autocast and torch.compile where CUDA has them: train.py's auto
settings). Each starts as study.py would start it, its log in results/runs/<name>@paper-s<seed>
where the study's tables read it. After `probe_iters` steps its time to the end is estimated
from its own logged ms/iter and its first eval; a run that would end after the budget is
stopped then (SIGTERM: it saves its checkpoint, and the next call, or `python study.py paper
--overlay=`, resumes it), and so is everything after it that cannot start in time. A finished
run is skipped. Writes results/paper/GPU.md: per run, what happened, its speed and its loss.

On a CPU it runs too, at whatever scale --overlay gives (the tests use a tiny one); without
--overlay it refuses to start the paper scale on a CPU, which would take hours per run.
"""

import os
import signal
import sys
import time
from types import SimpleNamespace

import study as st
from configurator import ConfigError, describe, load_config

# -----------------------------------------------------------------------------
budget_s = 540.0        # wall-clock budget for all the runs (9 minutes: under 10 with start-up)
seed = 1337
overlay = ''            # '' = the paper scale; a config file for another (its name tags the runs)
probe_iters = 100       # steps after which a run's time to the end is estimated
poll_s = 1.0
parallel = 6            # runs at once: small models leave a large GPU mostly idle, so they share it
allow_cpu = False       # the paper scale without CUDA: hours per run, refused unless True
# -----------------------------------------------------------------------------
STUDY = 'paper'


def log_rows(run):
    """A run's train and eval rows in the order of their iters (study.read_log: a line being
    written is skipped, and the last row of an iter wins)."""
    evals, trains, _ = st.read_log(os.path.join(run.dir, 'log.jsonl'))
    return sorted([*evals.values(), *trains.values()], key=lambda r: (r['iter'], r['kind'] == 'train'))


def estimate_left(rows, it0, max_iters, eval_interval, eval_iters):
    """Seconds a run still needs, from its log: the median ms/iter of its train rows after iter it0
    (compile and warm-up excluded) times the steps left, plus the evals left at the time the last
    eval took (before a second eval: 3 splits x eval_iters forwards, each about a third of a
    step); None until a train row past it0 exists."""
    ms = [r['ms'] for r in rows if r.get('kind') == 'train' and r['iter'] > it0]
    if not ms:
        return None
    step_s = sorted(ms)[len(ms) // 2] / 1000        # the median, as train.py reports it
    it = max(r['iter'] for r in rows if r.get('kind') == 'train')
    evals = [r for r in rows if r.get('kind') == 'eval']
    eval_s = eval_iters * step_s
    if len(evals) >= 2:
        eval_s = max(0.0, (evals[-1]['time'] - evals[-2]['time']) - (evals[-1]['iter'] - evals[-2]['iter']) * step_s)
    evals_left = max_iters // eval_interval - it // eval_interval
    return (max_iters - it) * step_s + evals_left * eval_s


def start(run, ov, c):
    """Launch one run as study.py would (its run.json records the code); its job dict."""
    state = st.state(run, ov)[0]
    cmd = st.command(run, ov, state)
    os.makedirs(run.dir, exist_ok=True)
    st.record_start(run, ov, state, cmd)
    evals = [r['iter'] for r in log_rows(run) if r['kind'] == 'eval']
    cfg = st.resolve(run, ov)
    return dict(run=run, proc=st.launch(cmd, run.dir, state == 'start', dict(os.environ)), t0=time.time(),
                n=st.max_iters(run, ov), ev=int(cfg['eval_interval']), ei=int(cfg['eval_iters']), est=None,
                stopped='', after=max(evals, default=0) + c.probe_iters)


def row(job):
    """GPU.md's row of a job that has ended."""
    rows = log_rows(job['run'])
    train = [r for r in rows if r.get('kind') == 'train']
    evals = [r for r in rows if r.get('kind') == 'eval']
    done = any(r['iter'] == job['n'] for r in evals)
    status = ('finished' if done else job['stopped']
              or f"failed (exit {job['proc'].returncode}): see {st.rel(job['run'].dir)}/run.txt")
    return dict(run=job['run'].label, status=status, wall_s=round(time.time() - job['t0'], 1),
                ms=train[-1]['ms'] if train else None, tok_s=train[-1]['tok_s'] if train else None,
                iter=max([r['iter'] for r in train], default=0), val=evals[-1]['val'] if evals else None)


def schedule(runs, ov, c, deadline, stop):
    """Run up to c.parallel at once, in order. Once every live run has an estimate, while one would
    end after the deadline, the live run of lowest priority (the last in the study's order) is
    stopped, and the others measure their speed again without it. Returns GPU.md's rows."""
    queue = [r for r in runs if st.state(r, ov)[0] != 'done']
    rows = [dict(run=r.label, status='finished before') for r in runs if r not in queue]
    live = []
    while queue or live:
        while queue and len(live) < c.parallel and not stop and deadline - time.time() > 30:
            live.append(start(queue.pop(0), ov, c))
            print(f"started {live[-1]['run'].label}", flush=True)
        if not live:
            why = 'interrupted' if stop else 'the budget is spent'
            rows += [dict(run=r.label, status=f'not started: {why}') for r in queue]
            break
        time.sleep(c.poll_s)
        for job in [j for j in live if stop and not j['stopped']]:     # each saves its checkpoint and stops
            job['stopped'] = 'stopped: interrupted (it resumes next time)'
            job['proc'].send_signal(signal.SIGTERM)
        for job in live:
            if job['est'] is None and not job['stopped']:
                job['est'] = estimate_left(log_rows(job['run']), job['after'], job['n'], job['ev'], job['ei'])
        running = [j for j in live if not j['stopped']]
        late = [j for j in running if j['est'] is not None and time.time() + j['est'] > deadline]
        if late and all(j['est'] is not None for j in running):
            last = running[-1]
            last['stopped'] = (f"stopped: {late[0]['run'].label} needed {late[0]['est']:.0f} s more, past the "
                               f"budget; {last['run'].label} gave way (it resumes next time)")
            last['proc'].send_signal(signal.SIGTERM)
            for j in running[:-1]:      # the others measure again, without it
                it = max([r['iter'] for r in log_rows(j['run']) if r['kind'] == 'train'], default=0)
                j['est'], j['after'] = None, it + c.probe_iters // 2
        for job in [j for j in live if j['proc'].poll() is None and time.time() > deadline + 60]:
            job['stopped'] = job['stopped'] or 'stopped: past the budget'     # an estimate far off
            job['proc'].send_signal(signal.SIGTERM)
        for job in [j for j in live if j['proc'].poll() is not None]:
            live.remove(job)
            rows.append(row(job))
            print(f"{rows[-1]['run']}: {rows[-1]['status']}", flush=True)
    return rows


def write_md(path, rows, c):
    lines = ['# The paper-scale runs on one GPU', '',
             f"Made by `python gpu_study.py --budget_s={c.budget_s:g} --seed={c.seed}"
             + (f" --overlay={c.overlay}" if c.overlay else '') + "` (the last call's runs; every run's "
             "log is in results/runs). A run stopped by the budget keeps its checkpoint and resumes next time.", '',
             '| run | status | wall s | iters | ms/iter | tok/s | last val |', '|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f"| {r['run']} | {r['status']} | {r.get('wall_s', '-')} | {r.get('iter', '-')} | "
                     + ' | '.join('-' if r.get(k) is None else f"{r[k]:,.{p}f}"
                                  for k, p in (('ms', 1), ('tok_s', 0), ('val', 4))) + ' |')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def main(argv):
    defaults = dict(budget_s=budget_s, seed=seed, overlay=overlay, probe_iters=probe_iters, poll_s=poll_s,
                    parallel=parallel, allow_cpu=allow_cpu)
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(defaults))
        return 0
    try:
        c = SimpleNamespace(**load_config(defaults, argv))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch
    if not c.overlay and not torch.cuda.is_available() and not c.allow_cpu:
        print("error: no CUDA device: the paper scale takes hours per run on a CPU (--allow_cpu=True to "
              "start it anyway, or --overlay=config/cpu.py for the CPU study scale)", file=sys.stderr)
        return 2
    deadline = time.time() + c.budget_s
    ov = c.overlay
    runs = st.plan(STUDY, seeds=[c.seed], overlay=ov)
    out = st.results_dir(STUDY, dict(overlay=ov, seeds=None))
    os.makedirs(out, exist_ok=True)
    stop = []
    old = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rows = schedule(runs, ov, c, deadline, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    write_md(os.path.join(out, 'GPU.md'), rows, c)
    try:
        st.write_results(STUDY, runs, dict(overlay=ov, seeds=None, jobs=1, dry_run=False, table_only=True),
                         [STUDY, f'--overlay={ov}'])
    except st.Refused as e:         # the table there holds more: GPU.md is written, RESULTS.md kept
        print(f"wrote {st.rel(os.path.join(out, 'GPU.md'))}; error: {e}", file=sys.stderr)
        return 128 + stop[0] if stop else 1
    print(f"wrote {st.rel(os.path.join(out, 'GPU.md'))} and its RESULTS.md")
    return 128 + stop[0] if stop else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
