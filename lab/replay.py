"""
Replay the first steps of a committed run and compare every logged loss.

    python -m lab.replay --run=RUN[,RUN...] [--steps=250] [--rev=REV] [--jobs=N] [--threads=1] [...]
    python -m lab.replay --run=dirty [...]      # one run of each variant whose code is untraced
    python -m lab.replay --table=True           # only results/REPLAYS.md, from the replay.json files

RUN is a run's folder name under results/runs (e.g. causal_gauss-s1337), or a folder
relative to results/ (history/conv_paper-s2: a run of a superseded form). CPU training
here is deterministic up to float32 round-off (thread counts and machines change the
order of a few sums), so re-training a run's first steps with its own command and
schedule (its run.json: configs, overrides, seed; the cosine still ends at the run's
max_iters) and comparing its logged train and eval losses shows whether the code at
REV computes what the run's code computed. Each loss may differ by 1e-5 (--tol) of
max(1, |loss|): float32 keeps about 7 digits (a 2000-step re-run stayed within 5e-7).
A run whose command names any file but config/NAME.py (a config is Python) is refused.

The replay runs in a fresh git worktree at REV (default HEAD: the last commit, never the
uncommitted state here), one process per run and stop, one thread each (2 ran many times slower).
--threads sets the replay's CPU threads: a run made with another count sums some gradients in
another order, which training amplifies; replaying with its count tells that from a change of code.
A run stopped and resumed (run.txt: 'start at iter N') is replayed stopped and resumed at the same
iters (exact: tests/test_train.py); --threads_after: the threads after the first stop (0: --threads).
It writes results/runs/RUN/replay.json and regenerates results/REPLAYS.md.
'dirty' picks, for each variant with a run recorded `<commit>+dirty` and no diff of
its change (run.json 'diffs'), that variant's seed-1337 run (else its first seed).
"""

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime

import torch

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab import cli, paths, readme
from lab.provenance import GitError, command_problem, git
from lab.logs import read_log

cpu_kernels = torch.backends.cpu.get_cpu_capability   # 'AVX2', ...: a CPU run's log header names them
COMPARED = {'train': ('loss',), 'eval': ('train', 'val', 'shuffled_val')}
DEFAULTS = dict(run='', steps=250, rev='HEAD', jobs=1, tol=1e-5, threads=1, threads_after=0, table=False)


class ReplayError(Exception):
    pass


def table_path():
    return os.path.join(paths.RESULTS, 'REPLAYS.md')


def run_dir(label):
    return os.path.join(paths.RESULTS, label) if '/' in label else os.path.join(paths.RUNS, label)


def run_json(label):
    path = os.path.join(run_dir(label), 'run.json')
    try:
        with open(path) as f:
            rec = json.load(f)
        return rec if isinstance(rec.get('cmd'), list) and int(rec['max_iters']) > 0 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def untraced(rec):
    """Whether a run's recorded code includes a dirty tree whose diff was not kept."""
    diffs = rec.get('diffs') or {}
    return any(c.endswith('+dirty') and not diffs.get(str(i)) for i, c in enumerate(rec.get('code', [])))


def pick_dirty():
    """One run per variant with untraced code: seed 1337 where it is among them, else the first."""
    by_variant = {}
    for label in sorted(os.listdir(paths.RUNS)) if os.path.isdir(paths.RUNS) else ():
        rec = run_json(label)
        if rec and untraced(rec):
            by_variant.setdefault(label.rsplit('-s', 1)[0], []).append(label)
    return [next((x for x in labels if x.endswith('-s1337')), labels[0]) for labels in by_variant.values()]


def replay_cmd(rec, steps, out_dir):
    """The run's training command (command_problem: checked), cut at `steps` with its schedule, into out_dir."""
    args = [a for a in rec['cmd'][2:] if not a.startswith(('--out_dir=', '--init_from=', '--max_iters='))]
    if not any(a.startswith('--lr_decay_iters=') for a in args):
        args.append(f"--lr_decay_iters={int(rec['max_iters'])}")   # the cosine of the full run
    return [sys.executable, 'train.py', *args, f'--max_iters={steps}', f'--out_dir={out_dir}']


def stops(label, steps):
    """The iters in 1..steps-1 where the run was stopped and resumed (its run.txt's 'start at iter N', in
    order; a start at iter 0 is a fresh run, whose output is appended to the old one's where a run is re-trained)."""
    got = []
    for n in map(int, re.findall(r'start at iter (\d+)', run_txt(label))):
        got = [] if n == 0 else got + [n]
    return sorted({n for n in got if 0 < n < steps})


def run_txt(label):
    """A run's output ('' where it has none)."""
    try:
        with open(os.path.join(run_dir(label), 'run.txt'), errors='replace') as f:
            return f.read()
    except OSError:
        return ''


def thread_counts(threads, threads_after, at):
    """The OMP threads of each segment, and how a table shows them."""
    after = threads_after or threads
    counts = [threads] + [after] * len(at)
    return counts, (threads if after == threads or not at else f'{threads} to iter {at[0]}, then {after}')


def segments(rec, steps, out_dir, at=()):
    """The replay's commands: the run's own, cut at each stop in `at` and resumed there (an eval at a cut
    adds a row the run lacks and changes no state: its windows are fixed)."""
    cmds = [replay_cmd(rec, end, out_dir) for end in [*at, steps]]
    return [c[:-2] + ['--init_from=resume'] * (i > 0) + c[-2:] for i, c in enumerate(cmds)]


def read_rows(path):
    """{(kind, iter): row} of a log.jsonl's train and eval rows (lab/logs.py: the last row of an
    iter wins)."""
    evals, trains, _ = read_log(path)
    return {**{('eval', i): r for i, r in evals.items()}, **{('train', i): r for i, r in trains.items()}}


def compare(original, replayed, steps):
    """(losses compared, the largest |difference| / max(1, |loss|), where it is, rows the replay lacks,
    the first loss that differs at all) over iters <= steps. Relative above 1: float32 keeps about 7
    digits of a loss, whatever its size. The first difference tells an init or a model that differs
    (at iter 0) from round-off that training amplifies (later, growing)."""
    n, worst, where, missing, first = 0, 0.0, None, [], None
    for (kind, it), row in sorted(original.items(), key=lambda x: (x[0][1], x[0][0])):
        if it > steps:
            continue
        other = replayed.get((kind, it))
        if other is None:
            missing.append(f'{kind}@{it}')
            continue
        for key in COMPARED[kind]:
            if isinstance(row.get(key), (int, float)):
                n += 1
                d = abs(float(other.get(key, float('nan'))) - float(row[key])) / max(1.0, abs(row[key]))
                d = d if d == d else float('inf')                   # a NaN counts as the worst
                if d > 0 and first is None:
                    first = f'{kind} {key} @ iter {it}: {d:.1e}'
                if d > worst:
                    worst, where = d, f'{kind} {key} @ iter {it}'
    return n, worst, where, missing, first


def start(label, rev_dir, steps, scratch, threads=1, threads_after=0):
    rec, at = run_json(label), stops(label, steps)
    out = os.path.join(scratch, label.replace('/', '_'))
    cmds = segments(rec, steps, out, at)
    os.makedirs(out, exist_ok=True)
    counts, shown = thread_counts(threads, threads_after, at)
    ran = set(re.findall(r'device cpu \((\w+) kernels\)', run_txt(label)))     # headers since 2026-12-03
    if ran - {cpu_kernels()}:
        print(f"{label}: the run used {', '.join(sorted(ran))} kernels, this machine {cpu_kernels()}: their "
              "float32 sums differ, so a replay here may drift by round-off", flush=True)
    if threads_after and not at:
        print(f"{label}: never stopped before iter {steps}, so --threads_after changes nothing", flush=True)
    job = dict(label=label, rec=rec, todo=cmds, counts=counts, threads=shown, at=at, out=out,
               log=open(os.path.join(out, 'replay.txt'), 'w'), t=time.time(), rev_dir=rev_dir)
    return launch(job)


def launch(job):
    """Start the job's next segment."""
    job['cmd'], n = job['todo'].pop(0), job['counts'].pop(0)     # a failed segment is the one recorded
    job['proc'] = subprocess.Popen(job['cmd'], cwd=job['rev_dir'], stdout=job['log'], stderr=subprocess.STDOUT,
                                   env=dict(os.environ, OMP_NUM_THREADS=str(n)), start_new_session=True)
    return job


def finish(job, rev, steps, tol):
    job['log'].close()
    label, rec = job['label'], job['rec']
    path = os.path.join(job['out'], 'log.jsonl')
    if job['proc'].returncode or not os.path.exists(path):
        with open(os.path.join(job['out'], 'replay.txt')) as f:
            tail = ([x.strip() for x in f if x.strip()] or ['(no output)'])[-1]
        part = f" (the part to {job['cmd'][-2][2:].replace('_', ' ')})" if job['at'] else ''
        res = dict(ok=False, error=f"exit {job['proc'].returncode}{part}: {tail}")
    else:
        n, worst, where, missing, first = compare(read_rows(os.path.join(run_dir(label), 'log.jsonl')),
                                                  read_rows(path), steps)
        res = dict(ok=bool(n) and not missing and worst <= tol, compared=n, max_rel_diff=worst, worst=where,
                   missing=missing, first_diff=first)
    res.update(run=label, run_code=rec.get('code', []), rev=rev, steps=steps, tol=tol,
               cmd=' '.join(['python', *job['cmd'][1:-1]]), seconds=round(time.time() - job['t']),
               threads=job['threads'], resumed_at=job['at'], machine=machine(),
               date=datetime.now().strftime('%Y-%m-%d'))
    path = os.path.join(run_dir(label), 'replay.json')
    every = replays(path) + [res]
    with open(path, 'w') as f:
        json.dump(every, f, indent=1)
    return res


def machine():
    """The CPU a replay ran on and the vector kernels torch picks there (its CPU capability; the environment's
    ATEN_CPU_CAPABILITY can lower it): float32 sums in the kernels differ between them."""
    try:
        with open('/proc/cpuinfo') as f:
            name = re.search(r'model name\s*:\s*(.+)', f.read())
    except OSError:
        name = None
    return f"{name.group(1).strip() if name else platform.machine() or '?'}, {cpu_kernels()}"


def replays(path):
    """The replays recorded in a replay.json, oldest first (a list; one older record is a dict)."""
    try:
        with open(path) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return []
    return got if isinstance(got, list) else [got]


def verdict(res):
    if 'error' in res:
        return f"FAILED to run ({res['error']})"
    if res['missing']:
        return f"DIFFERS: the replay lacks {', '.join(res['missing'][:3])}"
    return ("matches" if res["ok"] else "DIFFERS") + f" (largest difference {res['max_rel_diff']:.1e} of " \
        f"max(1, loss), over {res['compared']} losses; tol {res['tol']:.0e})"


def write_table():
    rows = []
    labels = [x for x in sorted(os.listdir(paths.RUNS))] if os.path.isdir(paths.RUNS) else []
    hist = os.path.join(paths.RESULTS, 'history')
    labels += [f'history/{x}' for x in sorted(os.listdir(hist))] if os.path.isdir(hist) else []
    for label in labels:
        rec = run_json(label) or {}
        now = rec.get('code', [])
        for res in replays(os.path.join(run_dir(label), 'replay.json')):
            old = not of_this_run(res, rec)
            rows.append(f"| {label} | {', '.join(res.get('run_code', [])) or '-'} | {res.get('rev', '?')} | "
                        f"{res.get('steps', '?')} | {res.get('threads', 1)} | {res.get('machine', '-')} | "
                        + (f"superseded: a replay of an earlier run; the run now is {', '.join(now)} |" if old
                           else f"{verdict(res)} |"))
    out = ['# Replays of committed runs', '',
           'Generated by `python -m lab.replay --table=True` from results/runs/*/replay.json; a replay is made by '
           '`python -m lab.replay --run=RUN --steps=250` (see lab/replay.py). Each re-trains the first steps of a '
           'committed '
           'run with its own command and schedule, from a clean git worktree at the commit named, and compares '
           'every logged train and eval loss up to that step with the committed log.jsonl. CPU training is '
           'deterministic up to float32 round-off, so a match says that commit computes what the run computed. '
           'A difference far above round-off says that the code or the arithmetic of the machine differs (a '
           'different order of the sums in one kernel, amplified by training): a replay at the run\'s own clean '
           'commit tells which.',
           'The threads column is the replay\'s CPU threads (--threads): a run made with another count sums some '
           'gradients in another order; the machine column is the replay\'s CPU and the '
           'vector kernels torch picks there (recorded since 2026-12-03), which sum in their own order too. '
           'A run stopped and resumed (its run.txt) is replayed with the same stops, each resumed from the '
           'checkpoint the replay saved there: a run may have gone on on another machine, and the threads after '
           'the first stop can differ (--threads_after).',
           '', '| run | its recorded code | replayed at | steps | threads | machine | result |', '|---' * 7 + '|']
    out += rows
    with open(table_path(), 'w') as f:
        f.write('\n'.join(out) + '\n')
    path = os.path.join(paths.RESULTS, 'README.md')
    if os.path.exists(path) and DIRTY_BLOCK[0] in open(path).read():
        readme.write_block(path, DIRTY_BLOCK, dirty_summary())
    return table_path()


DIRTY_BLOCK = ('<!-- dirty: python -m lab.replay --table=True -->', '<!-- /dirty -->')


def of_this_run(res, rec):
    """Whether a replay re-trained the run as it is now: a replay of an earlier run of the same name
    (re-trained since) says nothing about it."""
    return res.get('run_code', []) == rec.get('code', [])


def dirty_summary():
    """results/README.md's count of the runs whose code is untraced, and which variants a matching replay
    of one of their runs covers (a replay of an earlier run of the same name does not count)."""
    recs = {x: run_json(x) for x in sorted(os.listdir(paths.RUNS))} if os.path.isdir(paths.RUNS) else {}
    recs = {x: r for x, r in recs.items() if r}
    variant = lambda label: label.rsplit('-s', 1)[0]    # noqa: E731
    dirty = [x for x, r in recs.items() if untraced(r)]
    variants = sorted({variant(x) for x in dirty})
    # the runs with a matching replay of themselves as they are now
    own = {x for x, r in recs.items() if any(res.get('ok') and of_this_run(res, r)
                                             for res in replays(os.path.join(run_dir(x), 'replay.json')))}
    missing = [v for v in variants if v not in {variant(x) for x in own}]
    # a dirty state is covered where a matching replay re-trained a run of the same variant recorded at it
    states = {(variant(x), c) for x in own for c in recs[x]['code'] if c.endswith('+dirty')}
    bare = [x for x in dirty if any(c.endswith('+dirty') and (variant(x), c) not in states for c in recs[x]['code'])]
    alone = [x for x in dirty if x not in own]
    return (f"{len(dirty)} of the {len(recs)} committed runs recorded their code as `<commit>+dirty` without "
            f"their change, in {len(variants)} variants; " +
            ("each variant has a replay of one of its runs that matches (REPLAYS.md)" if not missing else
             f"a matching replay covers {len(variants) - len(missing)} of them; not yet: "
             + ', '.join(f'`{v}`' for v in missing)) +
            (f". {len(bare)} of the runs sit on a dirty state that no matching replay covers: "
             + ', '.join(f'`{x}`' for x in bare) + '.' if bare else '.') +
            (f" {len(dirty) - len(alone)} of the {len(dirty)} have a matching replay of their own" +
             (f"; not yet: {', '.join(f'`{x}`' for x in alone)}." if alone else '.')))


def options(argv):
    """(the runs named, the options) from the command line: --run=A,B, --run=dirty, or --table=True."""
    c = cli.load(DEFAULTS, argv)
    if c['threads_after'] < 0:
        raise ConfigError(f"--threads_after={c['threads_after']}: must be >= 0 (0: as --threads)")
    for key in ('steps', 'jobs', 'threads', 'tol'):
        if not c[key] > 0:
            raise ConfigError(f"--{key}={c[key]}: must be > 0")
    if c['table'] == bool(c['run']):
        raise ConfigError("name the runs to replay (--run=RUN[,RUN...] or --run=dirty) or --table=True, "
                          "one of them (--help says more)")
    return [x for x in c['run'].split(',') if x], c


def main(argv):
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, DEFAULTS))
        return 0
    try:
        labels, opts = options(argv)
        if opts['table']:
            print(f"wrote {paths.rel(write_table())}")
            return 0
        if labels == ['dirty']:
            labels = pick_dirty()
            print(f"untraced variants: {len(labels)}: {', '.join(labels) or '(none)'}")
        unknown = [x for x in labels if run_json(x) is None or not os.path.exists(os.path.join(run_dir(x), 'log.jsonl'))]
        if unknown:
            raise ReplayError(f"no run with a readable run.json and log.jsonl: {', '.join(unknown)} (runs are the "
                              f"folders of results/runs)")
        bad = [f"{x}: {command_problem(run_json(x)['cmd'])}" for x in labels if command_problem(run_json(x)['cmd'])]
        if bad:     # before any checkout: a run.json from a pack may name a file of its own as a config
            raise ReplayError(f"not replayed: {bad[0]}")
        rev = git('rev-parse', '--short', opts['rev'] + '^{commit}', cwd=paths.REPO, check=True).strip()
    except (ConfigError, ReplayError, GitError) as e:
        return cli.fail(e)
    return replay_all(labels, rev, opts)


def interrupted(signum, frame):
    raise KeyboardInterrupt


def replay_all(labels, rev, opts):
    scratch = tempfile.mkdtemp(prefix='replay-')
    wt = os.path.join(scratch, 'code')
    git('worktree', 'add', '--detach', wt, rev, cwd=paths.REPO, check=True)
    os.symlink(os.path.join(paths.REPO, 'data'), os.path.join(wt, 'data'))   # the prepared data, not in git
    queue, live, bad = list(labels), [], 0
    signal.signal(signal.SIGTERM, interrupted)          # a kill cleans up as Ctrl-C does
    print(f"replaying {len(queue)} runs at {rev} ({opts['steps']} steps, {opts['jobs']} at a time)", flush=True)
    try:
        while queue or live:
            while queue and len(live) < opts['jobs']:
                live.append(start(queue.pop(0), wt, opts['steps'], scratch, opts['threads'], opts['threads_after']))
            time.sleep(1.0)
            for job in [j for j in live if j['proc'].poll() is not None]:
                if job['proc'].returncode == 0 and job['todo']:
                    launch(job)         # the next segment, from the checkpoint the last one saved
                    continue
                live.remove(job)
                res = finish(job, rev, opts['steps'], opts['tol'])
                bad += not res['ok']
                print(f"{job['label']}: {verdict(res)} [{res['seconds']} s]", flush=True)
                write_table()
    except KeyboardInterrupt:
        for job in live:
            job['proc'].terminate()
        print("stopped: the replays not reported above left nothing behind", file=sys.stderr)
        return 130
    finally:
        subprocess.run(['git', 'worktree', 'remove', '--force', wt], cwd=paths.REPO, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"wrote {paths.rel(table_path())}: {len(labels) - bad} of {len(labels)} match")
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
