"""
The study's runner: its jobs (train.py runs and the phase-randomised evaluations of lab/phase.py,
each `python ...` from the repository, its output in its run.txt) launched in their own
sessions, `jobs` at a time, new results first; RESULTS.md rewritten as each ends. Ctrl-C or
SIGTERM sends each run one SIGTERM (it saves a checkpoint and stops; the next call resumes it);
a second one makes them leave at once.
"""

import os
import signal
import subprocess
import sys
import time

from train import fmt_time
from lab import cli, paths
from lab.logs import read_log, summarize
from lab.provenance import record_start
from lab.runs import command, next_mode, state
from lab.studies import max_iters, resolve
from lab.tables import Refused, write_results

JOBS = ('start', 'resume', 'retrain', 'phase')   # the states that launch a process
POLL_S = 1.0


def launch(cmd, out_dir, fresh, env):
    """Start a run, its output to out_dir/run.txt, in its own session: a Ctrl-C reaches the study only."""
    with open(os.path.join(out_dir, 'run.txt'), 'w' if fresh else 'a') as f:
        return subprocess.Popen([sys.executable, *cmd[1:]], cwd=paths.REPO, stdout=f, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def last_line(path):
    with open(path) as f:
        return ([line.strip() for line in f if line.strip()] or [''])[-1]


def announce(study, runs, states, opts):
    """The plan in a line (and with --dry_run, each run's state and command); the job queue: new
    results first, a re-training only serves extra evaluations (sorted is stable)."""
    overlay = opts['overlay']
    n = {k: sum(st == k for _, st, _ in states) for k in ('done', 'phase', 'retrain', 'resume', 'start', 'missing')}
    again = f"{n['retrain']} to train again for their later evaluations, " if n['retrain'] else ''
    print(f"study {study}: {len(runs)} runs: {n['done']} finished, {n['resume']} to resume, {n['start']} to start, "
          f"{again}{n['missing']} cannot run; {n['phase']} phase-randomised evaluations to run; "
          f"{opts['jobs']} at a time")
    for r, st, detail in states:
        if opts['dry_run'] or st == 'missing':
            cmd = f"\n        {' '.join(command(r, overlay, st))}" if st in JOBS else ''
            print(f"{'skip' if st == 'done' else st:7s} {r.label}: {detail}{cmd}")
    return sorted(((r, st) for r, st, _ in states if st in JOBS), key=lambda x: x[1] == 'retrain')


def job_ended(job, queue, signals, overlay, when, left):
    """Say how a job ended and queue its run's next phase evaluation; True if it failed."""
    r, rc, took = job['run'], job['proc'].returncode, fmt_time(time.time() - job['t'])
    s = summarize(*read_log(os.path.join(r.dir, 'log.jsonl')), max_iters(r, overlay))
    if job['st'] == 'phase' and job['mode'] in s.get('phase', {}):
        kept, rnd = s['phase'][job['mode']]
        print(f"[{when}] done the {job['mode']} phase evaluation of {r.label}: val {kept:.4f} with its phases, "
              f"{rnd:.4f} with random ones | {left}", flush=True)
    elif job['st'] != 'phase' and s['done']:
        print(f"[{when}] done {r.label} in {took}: final val {s['final']:.4f}{' LEAKS' if s['leaks'] else ''} | "
              f"{left}", flush=True)
    elif signals:
        print(f"stopped {r.label} after {took} (exit {rc}): it resumes next time | {left}", flush=True)
        return False
    else:
        print(f"FAILED {r.label} after {took} (exit {rc}): {last_line(os.path.join(r.dir, 'run.txt'))} | {left}",
              flush=True)
        return True
    if state(r, overlay)[0] == 'phase':     # another mode to evaluate
        queue.insert(0, (r, 'phase'))
    return False


def start_job(r, st, overlay, env):
    """Launch one job (its run.json records the training command and the code, but for a phase
    evaluation, which keeps them); its dict for the loop."""
    mode = next_mode(r, overlay) if st == 'phase' else None
    cmd = command(r, overlay, st, mode)
    os.makedirs(r.dir, exist_ok=True)
    if st != 'phase':
        record_start(r, overlay, st, cmd)
    return dict(run=r, st=st, mode=mode, proc=launch(cmd, r.dir, st in ('start', 'retrain'), env), t=time.time(),
                sent=0)


def run_study(study, runs, opts, argv):
    overlay, jobs, t0 = opts['overlay'], opts['jobs'], time.time()
    queue = announce(study, runs, [(r, *state(r, overlay)) for r in runs], opts)
    if opts['dry_run']:
        return 0
    data = [os.path.join(paths.REPO, resolve(r, overlay)['data_dir'], 'train.bin') for r, _ in queue[:1]]
    if data and not os.path.exists(data[0]):
        return cli.fail(f"{paths.rel(data[0])} not found: run `python prepare.py` first")
    os.makedirs(paths.RESULTS, exist_ok=True)
    with open(os.path.join(paths.RESULTS, '.gitignore'), 'w') as f:
        f.write('*.pt\n*.tmp\n')
    env = dict(os.environ, **({'OMP_NUM_THREADS': '1'} if jobs > 1 else {}))
    signals, live, failed = [], [], 0

    def forward():                  # each run gets one SIGTERM per signal the study got
        for job in live:
            for _ in range(len(signals) - job['sent']):
                job['sent'] += 1
                job['proc'].send_signal(signal.SIGTERM)

    def on_signal(signum, frame):
        signals.append(signum)
        forward()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while (queue and not signals) or live:
            while queue and len(live) < jobs and not signals:
                r, st = queue.pop(0)
                live.append(start_job(r, st, overlay, env))
                forward()
                print(f"[{fmt_time(time.time() - t0)}] {st} {r.label} | {len(live)} running, {len(queue)} waiting",
                      flush=True)
            time.sleep(POLL_S)
            for job in [j for j in live if j['proc'].poll() is not None]:
                live.remove(job)
                left = f"{len(live) + len(queue)} left, elapsed {fmt_time(time.time() - t0)}"
                failed += job_ended(job, queue, signals, overlay, fmt_time(time.time() - t0), left)
                if not signals:
                    try:
                        write_results(study, runs, opts, argv)
                    except Refused as e:        # a run trained again: the table waits for it
                        print(f"table not written: {e}", flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for job in live:            # left only by an error in this loop: the runs save and stop too
            job['proc'].send_signal(signal.SIGTERM)
            job['proc'].wait()
    try:
        path = write_results(study, runs, opts, argv)
        if path:
            print(f"wrote {paths.rel(path)}")
    except Refused as e:
        cli.fail(e, 1)
        failed += 1
    return 128 + signals[0] if signals else 1 if failed else 0
