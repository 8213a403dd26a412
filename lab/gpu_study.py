"""
The paper-scale studies on one large GPU, inside one device call (600 s at most), and their runs
brought home.

    python3 -m lab.gpu_study --call=1 --pack=$OUT/runs.tar.gz   # on the GPU: call 1 of results/gpu/PLAN.md
    python -m lab.gpu_study --ingest=runs.tar.gz      # here: the pack's finished runs into results/runs, PLAN.md anew
    python -m lab.gpu_study --pack=$OUT/runs.tar.gz   # the queue's next runs, 480 s of them
    python -m lab.gpu_study --queue=paper --seeds=2   # one study, one seed
    python -m lab.gpu_study --budget_s=1800 --call_limit_s=0   # a machine of one's own: no call limit
    python -m lab.study --study=paper --overlay= --table_only=True   # a study's table of what is in results/

A call of the GPU plan (--call=N: lab/plan.py, results/gpu/PLAN.md) runs that call's runs not yet
here, all at once (the plan's time model sized each call to fit the budget with them). Without
--call, a queue (lab/studies.py's PAPER_QUEUE by default) at the given seeds, every study's variants
seed by seed, a run two studies share once, a finished run skipped. The paper scale: 6 layers, C = 256, T = 256,
5000 steps, 50 val batches every 250 steps (train.py's defaults); bf16 autocast and torch.compile
where CUDA has them (train.py's auto settings); up to `parallel` at once
(parallel=6: small models leave a large GPU mostly idle). Each starts as lab/study.py would start it,
its log in results/runs/<name>@paper-s<seed> where the study's tables read it. A finished run is
skipped; a stopped one resumes from its checkpoint next time.

Estimates, from a run's log (train rows: iter and ms, the median of its last 50 steps; eval rows:
iter and time, seconds since its process started):
- step time: the ms of its last train row, once one is `probe_iters` steps past the iter this call
  (re)started it from (compile and warm-up behind);
- eval cost: the time between two evals its process logged less the steps between them at the step
  time logged at the second (the lower median of those intervals). The interval up to its first
  eval holds start-up and compile and is never used; until two evals are logged an eval counts as
  3 splits x eval_iters forwards at a third of a step each (train.py's guess);
- start-up (imports, setup, the eval at its start, compile): the time from its launch to its first
  logged step, less the steps logged there at the step time above. GPU.md reports it apart;
- end: an absolute time, the moment of the estimate + steps left x step time + evals left x eval
  cost, made again whenever its log has new rows. It is the end, not `now + an old estimate`, that
  is compared with the deadline.

Stopping. A run gets at most one SIGTERM, ever (train.py: stop after the step under way, save,
exit; a second signal would make it leave without saving):
- before the deadline: the last, in the study's order, of the runs whose end passes the deadline
  (its evals counted as free until two are timed); then the others measure their speed again
  without it (probe_iters/2 steps) before another is judged. From then on no run starts in this
  call: the GPU is full for the time left, and a new run would slow the others and not end (on
  2026-12-04, 14 at once with freed slots refilled left 4 of 46 runs finished);
- a run starts only with as much budget left as the quickest run finished in this call took
  (START_S before one has finished);
- at the deadline: every run still going;
- on Ctrl-C or SIGTERM to gpu_study: every run (and its hard limit comes grace_s later).
A run still alive at the hard limit, deadline + grace_s (a compile cannot be cut short), gets
SIGKILL: its checkpoint from its last eval stays, and it resumes from there next time.

One device call, at the defaults: budget_s 480 + grace_s 30 + OVERHEAD_S 60 = 570 = call_limit_s,
30 s under the call's 600 s. From main()'s start (Python's own start before it: about 1 s):
      0-480 s   the runs (torch's import, about 10 s, is inside); at 480 s the deadline's SIGTERMs
    480-510 s   grace_s: the runs save and exit; at 510 s SIGKILL for any still alive
    510 s-      GPU.md and the study's RESULTS.md (a few seconds on a CPU)
OVERHEAD_S (60 s): Python's start and the tables. A budget past call_limit_s is refused (0: no limit).
Writes results/paper/GPU.md: per run, what happened and why, its start-up, ms/step, steps and loss.

On a CPU it runs too, at whatever scale --overlay gives (the tests use a tiny one); without
--overlay it refuses to start the paper scale on a CPU, which would take hours per run.
"""

import math
import os
import signal
import sys
import time
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from runtime import versions
from lab import cli, gpu_pack, paths, plan as gpu_plan, provenance, runner, runs, studies
from lab.logs import read_log
from lab.tables import Refused, write_results

# -----------------------------------------------------------------------------
budget_s = 480.0        # wall-clock budget for the runs; the deadline is main()'s start + budget_s
grace_s = 30.0          # after the deadline's SIGTERMs, the time to save and exit; then SIGKILL
call_limit_s = 570.0    # budget_s + grace_s + OVERHEAD_S must fit (a device call: 600 s); 0: no limit
queue = ','.join(studies.PAPER_QUEUE)   # the studies whose runs are run, in this order (a shared run once)
seeds = '1337,2,3'      # each study's runs seed by seed: every variant's first seed, then the second...
overlay = ''            # '' = the paper scale; a config file for another (its name tags the runs)
probe_iters = 100       # steps after a run's (re)start before its speed is read from its log
poll_s = 1.0
call = 0                # a call of results/gpu/PLAN.md (lab/plan.py): its runs instead of queue and seeds; 0: none
parallel = 0            # runs at once (small models leave a large GPU mostly idle, so they share it); 0: a
                        # call's runs all at once, as the plan's time model sized it; 6 for a queue
allow_cpu = False       # the paper scale without CUDA: hours per run, refused unless True
pack = ''               # after the runs: this .tar.gz holds every run of the plan this call ran (its log.jsonl,
                        # run.json, run.txt and diffs; no checkpoint) and GPU.md: one file for a device call's $OUT
ingest = ''             # a pack made on another machine: its finished runs into results/runs; nothing is run
weights = ''            # a folder ($OUT): the final weights of its ega_paper runs, bf16, one file each (gpu_pack)
# -----------------------------------------------------------------------------
OVERHEAD_S = 60.0       # outside budget and grace: Python's start before main() and the tables after
START_S = 60.0          # a run starts only with this much budget left (start-up and compile take 30-60 s)


def log_rows(run):
    """A run's train and eval rows in the order of their iters (lab/logs.py: a line being
    written is skipped, and the last row of an iter wins)."""
    evals, trains, _ = read_log(os.path.join(run.dir, 'log.jsonl'))
    return sorted([*evals.values(), *trains.values()], key=lambda r: (r['iter'], r['kind'] == 'train'))


def evals_left(n, ev, it):
    """Evals after iter it, the final one at n included (as train.py's due_eval)."""
    return 0 if it >= n else n // ev - it // ev + (n % ev != 0)


def estimate(rows, begin, after, n, ev, ei):
    """What a run's log says of its time to the end, or None until its last train row is past
    iter `after`. begin: the iter its process started from (rows up to it are older; the eval at
    begin, if any, precedes compile). Returns step_s (the last train row's ms), eval_s, timed
    (eval_s measured: two evals past begin), it (the last train iter), steps_s (the steps left)
    and left (steps and evals left), all in seconds."""
    trains = [r for r in rows if r.get('kind') == 'train' and r['iter'] > begin]
    if not trains or trains[-1]['iter'] <= after:
        return None
    it, step_s = trains[-1]['iter'], trains[-1]['ms'] / 1000
    ms_at = {r['iter']: r['ms'] / 1000 for r in trains}
    evals = [r for r in rows if r.get('kind') == 'eval' and r['iter'] > begin and 'time' in r]
    costs = sorted(b['time'] - a['time'] - (b['iter'] - a['iter']) * ms_at.get(b['iter'], step_s)
                   for a, b in zip(evals, evals[1:]))
    eval_s = max(0.0, costs[(len(costs) - 1) // 2]) if costs else ei * step_s
    steps_s = (n - it) * step_s
    return dict(step_s=step_s, eval_s=eval_s, timed=bool(costs), it=it, steps_s=steps_s,
                left=steps_s + evals_left(n, ev, it) * eval_s)


def startup_s(job):
    """Seconds from a run's launch to its first step: to its first logged step, less those steps at
    its step time once measured (that first row's ms may hold compile: train.py may share a log
    interval's time among its steps)."""
    if not job['first']:
        return None
    t, it, ms = job['first']
    step_s = job['est']['step_s'] if job['est'] else ms / 1000
    return max(0.0, t - job['t0'] - (it - job['begin']) * step_s)


def start(run, ov, c):
    """Launch one run as the study's runner would (its run.json records the code); its job dict."""
    state = runs.state(run, ov)[0]
    cmd = runs.command(run, ov, state)
    os.makedirs(run.dir, exist_ok=True)
    provenance.record_start(run, ov, state, cmd)
    begin = max((r['iter'] for r in log_rows(run)), default=0)     # where this process takes over
    cfg = studies.resolve(run, ov)
    return dict(run=run, proc=runner.launch(cmd, run.dir, state == 'start', dict(os.environ)), begin=begin,
                n=studies.max_iters(run, ov), ev=int(cfg['eval_interval']), ei=int(cfg['eval_iters']))


def observe(job, rows, now, c):
    """A job's estimate and end made again when its log has new rows."""
    if len(rows) == job['seen']:
        return
    job['seen'] = len(rows)
    trains = [r for r in rows if r.get('kind') == 'train' and r['iter'] > job['begin']]
    if trains and not job['first']:
        job['first'] = (now, trains[0]['iter'], trains[0]['ms'])
    e = estimate(rows, job['begin'], job['probe'], job['n'], job['ev'], job['ei'])
    if not e:
        return
    first = job['est'] is None
    job.update(est=e, fresh=True, end=now + e['left'], floor=now + (e['left'] if e['timed'] else e['steps_s']))
    if first:
        print(f"{job['run'].label}: start-up {startup_s(job):.0f} s, {e['step_s'] * 1000:.1f} ms/step: "
              f"ends at ~{job['end'] - c.t_begin:.0f} s of the {c.budget_s:g} s budget", flush=True)


def terminate(job, why):
    """The one SIGTERM a run ever gets (a second would make train.py leave without saving)."""
    if not job['stopped']:
        job['stopped'] = why
        job['proc'].send_signal(signal.SIGTERM)
        print(f"{job['run'].label}: {why}", flush=True)


def judge(live, deadline, now, c):
    """Stop the last of the runs whose end passes the deadline, once the others' speeds are fresh;
    the others then measure again without it. Returns the job stopped, or None."""
    running = [j for j in live if not j['stopped'] and j['est']]
    late = [j for j in running if j['floor'] > deadline]
    if not late or not all(j['fresh'] for j in running):
        return
    j = late[-1]
    terminate(j, f"stopped at {now - c.t_begin:.0f} s: it would end at {j['floor'] - c.t_begin:.0f} s"
                 f"{'' if j['est']['timed'] else ' (its steps alone)'}, past the {c.budget_s:g} s budget "
                 f"(it resumes next time)")
    for o in running:
        if o is not j:
            o['fresh'], o['probe'] = False, o['est']['it'] + c.probe_iters // 2
    return j


def row(job, rows, now):
    """GPU.md's row of a job that has ended."""
    train = [r for r in rows if r.get('kind') == 'train']
    evals = [r for r in rows if r.get('kind') == 'eval']
    done = any(r['iter'] == job['n'] for r in evals)
    status = ('finished' if done else job['stopped']
              or f"failed (exit {job['proc'].returncode}): see {paths.rel(job['run'].dir)}/run.txt")
    it = max([r['iter'] for r in train], default=job['begin'])
    su = startup_s(job)
    return dict(run=job['run'].label, status=status, wall_s=round(now - job['t0'], 1),
                startup_s=None if su is None else round(su, 1), steps=it - job['begin'], iter=it,
                ms=train[-1]['ms'] if train else None, tok_s=train[-1]['tok_s'] if train else None,
                val=evals[-1]['val'] if evals else None)


def schedule(plan, ov, c, deadline, stop):
    """Run up to c.parallel at once, in order; stop what cannot end by the deadline (one SIGTERM
    each), everything at the deadline, SIGKILL at deadline + grace. Returns GPU.md's rows."""
    c.t_begin = deadline - c.budget_s
    queue = [r for r in plan if runs.state(r, ov)[0] != 'done']
    rows = [dict(run=r.label, status='finished before') for r in plan if r not in queue]
    live, hard = [], deadline + c.grace_s
    closed = ''     # why nothing more starts: a run stopped for the budget says the GPU is full for the time left
    while queue or live:
        now = time.time()
        # a run starts only with the time left that the quickest run finished in this call took (START_S
        # before one has): a slot freed too late would hold a run that slows the others and cannot end
        took = max([START_S, min([r['wall_s'] for r in rows if r['status'] == 'finished'], default=0)])
        while queue and len(live) < c.parallel and not stop and not closed and deadline - now > took:
            job = dict(start(queue.pop(0), ov, c), est=None, fresh=False, end=None, floor=None, seen=-1,
                       first=None, stopped='')
            job['t0'] = time.time()         # its launch: start() first records its code (git)
            job['probe'] = job['begin'] + c.probe_iters
            live.append(job)
            print(f"started {job['run'].label} at {job['t0'] - c.t_begin:.0f} s", flush=True)
        if not live:
            why = ('interrupted' if stop else closed or f"the budget is spent (under {took:g} s left"
                   + (': the quickest run finished here took as long)' if took > START_S else ')'))
            rows += [dict(run=r.label, status=f'not started: {why}') for r in queue]
            break
        time.sleep(max(0.0, min(c.poll_s, (deadline if now < deadline else hard) - now)))
        now = time.time()
        if stop:
            hard = min(hard, now + c.grace_s)
        for job in live:
            if stop:
                terminate(job, 'stopped: interrupted (it resumes next time)')
            observe(job, log_rows(job['run']), now, c)
        j = judge(live, deadline, now, c)
        if j and not closed:
            closed = (f"{j['run'].label} was stopped for the budget at {now - c.t_begin:.0f} s: "
                      f"no slot is refilled after that")
        for job in live if now >= deadline else []:
            end = f", it would have ended at {job['end'] - c.t_begin:.0f} s" if job['end'] else ''
            terminate(job, f"stopped at the deadline ({c.budget_s:g} s{end}; it resumes next time)")
        for job in list(live):
            killed = now >= hard and job['proc'].poll() is None
            if killed:
                job['proc'].kill()
                ev = max([r['iter'] for r in log_rows(job['run']) if r['kind'] == 'eval'], default=None)
                job['stopped'] += (f"; killed at the hard limit ({now - c.t_begin:.0f} s), still running: "
                                   f"its checkpoint from its last eval (iter {ev}) stays")
            if killed or job['proc'].poll() is not None:
                live.remove(job)
                rows.append(row(job, log_rows(job['run']), now))
                r = rows[-1]
                print(f"{r['run']}: {r['status']}; start-up {'-' if r['startup_s'] is None else r['startup_s']} s, "
                      f"{'-' if r['ms'] is None else round(r['ms'], 1)} ms/step, {r['steps']} steps (iter {r['iter']})",
                      flush=True)
    return rows


def write_md(path, rows, c):
    lines = ['# The paper-scale runs on one GPU', '',
             f"Made by `python -m lab.gpu_study --budget_s={c.budget_s:g} --grace_s={c.grace_s:g} "
             + (f"--call={c.call}" if c.call else f"--queue={c.queue} --seeds={c.seeds}")
             + (f" --overlay={c.overlay}" if c.overlay else '') + "` (the last call's runs; every run's "
             "log is in results/runs). A run stopped by the budget saved its checkpoint and resumes next "
             f"time; one killed {c.grace_s:g} s after the deadline (still compiling or saving) keeps the "
             "checkpoint of its last eval and resumes from there. Start-up: from launch to the first step "
             "(imports, setup, the eval at its start, compile), apart from ms/step; steps: this call's.", '',
             '| run | status | wall s | start-up s | steps | iter | ms/step | tok/s | last val |',
             '|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f"| {r['run']} | {r['status']} | {r.get('wall_s', '-')} | "
                     f"{'-' if r.get('startup_s') is None else r['startup_s']} | {r.get('steps', '-')} | "
                     f"{r.get('iter', '-')} | "
                     + ' | '.join('-' if r.get(k) is None else f"{r[k]:,.{p}f}"
                                  for k, p in (('ms', 1), ('tok_s', 0), ('val', 4))) + ' |')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def started(rows):
    """The labels of the runs this call started (GPU.md's rows)."""
    return {r['run'] for r in rows if not r['status'].startswith(('finished before', 'not started'))}


def the_plan(c):
    """(the queue's studies, the seeds, their runs at those seeds in the queue's order, each run once), or a
    call's (its studies, None: each study's own seeds, its runs); ConfigError where a study, a seed or a
    call is not one."""
    if c.call:
        call = gpu_plan.by_number(c.call)
        return list(dict.fromkeys(study for study, _, _ in call.runs)), None, gpu_plan.call_runs(call, c.overlay)
    names = [q for q in c.queue.split(',') if q]
    bad = [q for q in names if q not in studies.STUDIES]
    if bad or not names:
        raise ConfigError(f"queue={c.queue!r}: expected studies of lab/studies.py separated by commas, "
                          f"such as {','.join(studies.PAPER_QUEUE)}")
    try:
        seeds = [int(x) for x in c.seeds.split(',') if x]
    except ValueError:
        seeds = []
    if not seeds:
        raise ConfigError(f"seeds={c.seeds!r}: expected integers separated by commas, such as 1337,2,3")
    plan, seen = [], set()
    for q in names:
        for r in studies.plan(q, seeds=seeds, overlay=c.overlay):
            if r.label not in seen:             # a run two studies share (dot, ega) is run once
                seen.add(r.label)
                plan.append(r)
    return names, seeds, plan


def main(argv):
    t_main = time.time()
    defaults = dict(budget_s=budget_s, grace_s=grace_s, call_limit_s=call_limit_s, queue=queue, seeds=seeds,
                    call=call, overlay=overlay, probe_iters=probe_iters, poll_s=poll_s, parallel=parallel,
                    allow_cpu=allow_cpu, pack=pack, ingest=ingest, weights=weights)
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return rc
    c = SimpleNamespace(**c)
    if c.ingest:
        rc = gpu_pack.ingest_pack(c.ingest)
        if rc == 0:
            try:
                print(f"wrote {paths.rel(gpu_plan.write(quiet=True))}: the plan's status from the runs now here")
            except (OSError, StopIteration, ValueError, KeyError, ZeroDivisionError) as e:
                print(f"warning: results/gpu/PLAN.md not written ({type(e).__name__}: {e}): python -m lab.plan "
                      f"--write=True", file=sys.stderr)
        return rc
    try:
        if c.parallel < 0 or c.call < 0 or c.budget_s <= 0 or c.grace_s < 0 or not math.isfinite(c.budget_s):
            raise ConfigError(f"expected --parallel >= 0, --call >= 0, --budget_s > 0 and --grace_s >= 0 (got "
                              f"{c.parallel}, {c.call}, {c.budget_s:g}, {c.grace_s:g})")
        names, seed_list, plan = the_plan(c)
        c.parallel = c.parallel or (max(1, len([r for r in plan if runs.state(r, c.overlay)[0] != 'done']))
                                    if c.call else 6)
        if c.pack:
            paths.check_output_file(c.pack, 'pack')        # before the runs, not after
    except ConfigError as e:
        return cli.fail(e)
    if c.call_limit_s and c.budget_s + c.grace_s + OVERHEAD_S > c.call_limit_s:
        return cli.fail(f"budget_s {c.budget_s:g} + grace_s {c.grace_s:g} + {OVERHEAD_S:g} s of start-up and tables "
                        f"= {c.budget_s + c.grace_s + OVERHEAD_S:g} s, over call_limit_s {c.call_limit_s:g} (a device "
                        f"call is 600 s; --call_limit_s=0 where nothing limits it)")
    if c.overlay and not os.path.isfile(os.path.join(paths.REPO, c.overlay)):     # as lab.study checks it
        return cli.fail(f"--overlay={c.overlay}: expected an existing file (or --overlay= for none)")
    import torch
    if not c.overlay and not torch.cuda.is_available() and not c.allow_cpu:
        return cli.fail("no CUDA device: the paper scale takes hours per run on a CPU (--allow_cpu=True to "
                        "start it anyway, or --overlay=config/cpu.py for the CPU study scale)")
    deadline = t_main + c.budget_s
    ov = c.overlay
    what = f"call {c.call} of results/gpu/PLAN.md" if c.call else f"{', '.join(names)}; seeds {c.seeds}"
    print(f"{versions()}; {len(plan)} runs planned ({what}), {c.parallel} at once", flush=True)
    out = studies.results_dir(names[0], dict(overlay=ov, seeds=None))
    os.makedirs(out, exist_ok=True)
    stop = []
    old = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rows = schedule(plan, ov, c, deadline, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    md = os.path.join(out, 'GPU.md')
    write_md(md, rows, c)
    if c.pack:
        gpu_pack.write_pack(c.pack, [r for r in plan if r.label in started(rows)], md,
                            ' '.join(['python', '-m', 'lab.gpu_study', *argv]))
    if c.weights:
        gpu_pack.keep_weights([r for r in plan if r.label in started(rows)], c.weights)
    rc = 0
    for q in names:             # each study's table of what it has finished (RESULTS.md), beside GPU.md
        try:
            write_results(q, studies.plan(q, seeds=seed_list, overlay=ov),
                          dict(overlay=ov, seeds=None, jobs=1, dry_run=False, table_only=True),
                          [f'--study={q}', f'--overlay={ov}'])
        except Refused as e:            # the table there holds more: kept
            rc = cli.fail(e, 1)
    print(f"wrote {paths.rel(md)} and the studies' RESULTS.md ({time.time() - t_main:.0f} s in all)")
    return 128 + stop[0] if stop else rc


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
