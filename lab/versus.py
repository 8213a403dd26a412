"""
Is my change better than dot? A variant trained against its base at the CPU study scale, seed by seed, and
judged by the ledger's rule, the audit first.

    python -m lab.versus --attn=fox+dconv                 # 3 seeds against dot: results/versus/fox+dconv/
    python -m lab.versus --attn=ega --pos=rope --seeds=1337,2 --jobs=2
    python -m lab.versus --attn=ega --against=ega         # an edit of ega, against dot and the committed ega

1. The audit (causality.audit at the study's window): a form that sees the future stops here, with the audit's
   line; --leaks=True trains it anyway, every loss marked LEAKS, judged on its generation loss (lab/generation.py).
2. The base at each seed: the committed run (results/runs/BASE-sS) is reused only where the code here still
   trains it: its first --replay_steps steps, trained again here, match its log within 1e-5 (lab/replay.py's
   comparison); else the base is trained here too. --against=NAME checks the committed NAME runs alike and sets
   the variant beside them, saying whether the code here is theirs.
3. The variant at each seed (`python train.py config/cpu.py --attn=... --pos=... --seed=S`), and the bases not
   reused, into OUT/runs, resumably: a finished run is kept, a cut one resumed. A line as each run starts and
   ends, every 30 s each live run's iter and ETA, a summary at the end. Ctrl-C stops every run cleanly (each
   saves); the same command goes on.
4. Pairs variant and base by seed where both read one evaluation set (their logs', else run.json's); the verdict:
   the ledger's rule for a direction (RULE), with the smallest effect these seeds can see.
5. Writes OUT/REPORT.md (the table, the rule and verdict, time per step against the base, each run's command and
   code) and OUT/paired.png (with the optional matplotlib). It never writes results/runs, a study or the ledger.
At the CPU study scale a run takes about 9 minutes alone on 2 cores; --jobs=2 runs two at once, one core each.
"""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from causality import audit
from configurator import ConfigError
from lab import cli, paths
from lab.logs import read_log
from lab.provenance import code_and_diff, command_problem
from lab.replay import compare, read_rows, replay_cmd
from lab.runs import recorded_eval_set
from lab.rules import by_rule
from lab.stats import paired
from model import GPTConfig
from train import LEAK_MARK, fmt_time

PROGRESS_S, STEPS = 30.0, 2000  # seconds between progress lines; the CPU study scale's steps (config/cpu.py)
TOL = 1e-5                      # lab/replay.py's: float32 keeps about 7 digits of a loss
# tiny models for the tests (--toy=True): the same machinery, a second a run
TOY = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=2', '--eval_iters=2',
       '--eval_interval=4', '--log_interval=2', '--max_iters=8', '--warmup_iters=1', '--lr_decay_iters=8']
RULE = ("the variant beats its base if the paired 95% interval of its final val minus the base's (the same seeds, "
        "one evaluation set) lies below 0, and is worse if it lies above 0; else no difference is seen, and the "
        "interval's half-width is the smallest effect these seeds could have seen (the ledger's rule for a "
        "direction, lab/rules.py)")
WORDS = {'reproduced': 'beats {base}', 'contradicted': 'is worse than {base}',
         'not distinguishable from zero': 'no difference from {base} seen'}


def verdict(diffs, base='dot'):
    """(the verdict's words, the paired interval or None) of {seed: variant - base} by RULE."""
    p = paired(diffs, dict.fromkeys(diffs, 0.0))
    v = by_rule('sign', p, -1)
    return WORDS.get(v, v).format(base=base), p


def final(run_dir):
    """(final iter, its val, its eval set, the median ms/step) of a run's log; Nones where it has no eval."""
    evals, trains, _ = read_log(os.path.join(run_dir, 'log.jsonl'))
    if not evals:
        return None, None, None, None
    it = max(evals)
    ms = [r['ms'] for r in trains.values() if isinstance(r.get('ms'), (int, float))]
    return it, evals[it].get('val'), recorded_eval_set(run_dir, evals[it]), statistics.median(ms) if ms else None


def committed(name, seed):
    """(the committed run's folder, its run.json), or (None, why not) where none may be replayed here."""
    d = os.path.join(paths.RUNS, f'{name}-s{seed}')
    try:
        with open(os.path.join(d, 'run.json')) as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None, 'no committed run'
    why = command_problem(rec.get('cmd')) if isinstance(rec, dict) else 'its run.json is not a record'
    return (None, why) if why else (d, rec)


class Job:
    """One process: a training run ('train') or a committed run's first steps trained again ('replay')."""

    def __init__(self, kind, label, cmd, out, want):
        self.kind, self.label, self.cmd, self.out, self.want = kind, label, cmd, out, want
        self.proc, self.t = None, 0.0

    def start(self, env):
        os.makedirs(self.out, exist_ok=True)
        resume = self.kind == 'train' and os.path.exists(os.path.join(self.out, 'ckpt.pt'))
        cmd = self.cmd + ['--init_from=resume' if resume else '--overwrite=True']
        print(f"{'resume' if resume else 'start'} {self.kind} {self.label}", flush=True)
        with open(os.path.join(self.out, 'command.txt'), 'w') as f:     # what the report names
            f.write(' '.join(['python', *self.cmd[1:]]) + '\n')
        self.t = time.time()
        with open(os.path.join(self.out, 'run.txt'), 'a' if resume else 'w') as f:
            self.proc = subprocess.Popen(cmd, cwd=paths.REPO, stdout=f, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def progress(self):
        _, trains, _ = read_log(os.path.join(self.out, 'log.jsonl'))
        it = max(trains, default=0)
        ms = trains[it].get('ms', 0.0) if trains else 0.0
        return f"{self.label} iter {it}/{self.want}" + (f", eta {fmt_time(ms / 1e3 * (self.want - it))}" if ms else '')

    def tail(self):
        with open(os.path.join(self.out, 'run.txt'), errors='replace') as f:
            return ([x.strip() for x in f if x.strip()] or ['(no output)'])[-1]


def run_jobs(jobs, n, env):
    """Runs the jobs, n at a time, with progress; returns (the jobs that failed, the signal that stopped them)."""
    live, failed, signals, t0, shown = [], [], [], time.time(), time.time()

    def on_signal(signum, frame):
        signals.append(signum)
        for j in live:
            j.proc.send_signal(signal.SIGTERM)          # a run saves and stops; the same command resumes it

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while (jobs and not signals) or live:
            while jobs and len(live) < n and not signals:
                live.append(jobs.pop(0))
                live[-1].start(env)
            time.sleep(0.2)
            if time.time() - shown > PROGRESS_S and live:
                shown = time.time()
                print(f"[{fmt_time(shown - t0)}] " + '; '.join(j.progress() for j in live), flush=True)
            for j in [j for j in live if j.proc.poll() is not None]:
                live.remove(j)
                took, done = fmt_time(time.time() - j.t), final(j.out)
                if signals:
                    print(f"stopped {j.label} after {took}: the same command goes on", flush=True)
                elif j.proc.returncode or done[0] != j.want:
                    failed.append(j)
                    print(f"FAILED {j.label} after {took} (exit {j.proc.returncode}): {j.tail()}", flush=True)
                elif j.kind == 'train':
                    print(f"done {j.label} in {took}: final val {done[1]:.4f}", flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return failed, signals[0] if signals else 0


def options(argv):
    defaults = dict(attn='', pos='learned', seeds='1337,2,3', base='dot', against='', jobs=1, out_dir='',
                    leaks=False, replay_steps=250, toy=False, data_dir='')
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return None, rc
    try:
        if not c['attn']:
            raise ConfigError('name the variant: --attn=NAME (and --pos=NAME)')
        if c['attn'] == c['base'] and c['pos'] == 'learned':
            raise ConfigError(f"the variant is its base ({c['base']}): name another --attn, --pos or --base")
        try:
            cfg = GPTConfig(attn=c['attn'], pos=c['pos'])
            for other in filter(None, (c['base'], c['against'])):
                GPTConfig(attn=other)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        try:
            c['seeds'] = [int(s) for s in c['seeds'].split(',') if s.strip()]
        except ValueError:
            raise ConfigError(f"--seeds={c['seeds']}: seeds are integers, e.g. 1337,2,3") from None
        if not c['seeds'] or len(set(c['seeds'])) < len(c['seeds']) or min(c['seeds']) < 0:
            raise ConfigError(f"--seeds={','.join(map(str, c['seeds']))}: distinct seeds >= 0, e.g. 1337,2,3")
        if c['jobs'] < 1 or c['replay_steps'] < 1:
            raise ConfigError(f"need jobs >= 1 and replay_steps >= 1, got {c['jobs']} and {c['replay_steps']}")
    except ConfigError as e:
        return None, cli.fail(e)
    c['name'] = c['attn'] + ('' if c['pos'] == 'learned' else f"@{c['pos']}")
    c['out'] = os.path.abspath(os.path.expanduser(c['out_dir'] or os.path.join(paths.RESULTS, 'versus', c['name'])))
    c['extra'] = (TOY if c['toy'] else []) + ([f"--data_dir={c['data_dir']}"] if c['data_dir'] else [])
    c['want'] = 8 if c['toy'] else STEPS
    T = 16 if c['toy'] else 128
    c['audit'] = audit(replace(cfg, block_size=T), T=T)     # the study's window: its verdict there
    return c, None


def train_cmd(c, name, seed, out):
    """A run's command: the base's as the committed runs have it (config/NAME.py config/cpu.py), the variant's
    through the overlay alone."""
    own = name == c['base'] and os.path.exists(os.path.join(paths.REPO, 'config', f'{name}.py'))
    what = [f'config/{name}.py', 'config/cpu.py'] if own else \
        ['config/cpu.py', f'--attn={name}', *([f"--pos={c['pos']}"] if name == c['attn'] else [])]
    return [sys.executable, 'train.py', *what, f'--seed={seed}', *c['extra'], f'--out_dir={out}']


def yardsticks(c):
    """{(name, seed): [how, folder, why]} for the base and --against at each seed, and the replays that decide:
    a finished base in OUT from an earlier call is kept; a committed run is replayed; else the base is trained."""
    src, jobs = {}, []
    for who in dict.fromkeys(filter(None, (c['base'], c['against']))):
        for s in c['seeds']:
            here = os.path.join(c['out'], 'runs', f'{who}-s{s}')
            if who == c['base'] and final(here)[0] == c['want']:
                src[(who, s)] = ['trained here', here, 'finished by an earlier call of this command']
                continue
            d, rec = committed(who, s)
            if d is not None and final(d)[0] != c['want']:
                d, rec = None, f"its committed run is not finished at iter {c['want']}"
            if d is None:
                src[(who, s)] = ['train' if who == c['base'] else 'none', None, rec]
                continue
            out, n = os.path.join(c['out'], 'replays', f'{who}-s{s}'), min(c['replay_steps'], c['want'])
            jobs.append(Job('replay', f'{who}-s{s}', replay_cmd(rec, n, out), out, n))
            src[(who, s)] = ['replay', d, '']
    return src, jobs


def judge_replays(src, jobs, failed):
    """Each replayed run reused where its first steps, trained again here, match its log to TOL."""
    for j in jobs:
        who, s = j.label.rsplit('-s', 1)
        entry = src[(who, int(s))]
        if j in failed:
            entry[:] = ['train' if entry[0] == 'replay' else entry[0], None, f'its replay failed: {j.tail()}']
            continue
        n, worst, where, missing, first = compare(read_rows(os.path.join(entry[1], 'log.jsonl')),
                                                  read_rows(os.path.join(j.out, 'log.jsonl')), j.want)
        if n and not missing and worst <= TOL:
            entry[0], entry[2] = 'reused', f"its first {j.want} steps trained again here match its log to {worst:.0e}"
        else:
            why = f"the replay lacks {missing[0]}" if missing else f"{where} differs by {worst:.1e} (first: {first})"
            entry[:] = ['train', entry[1], f"the code here trains it otherwise: {why}"]
        print(f"{j.label}: {'reused' if entry[0] == 'reused' else 'not reused'}: {entry[2]}", flush=True)


def read_runs(c, src):
    """{seed: {'variant': (val, eval set, ms), base: ..., against: ...}} of the finished runs."""
    out = {}
    for s in c['seeds']:
        row = {'variant': final(os.path.join(c['out'], 'runs', f"{c['name']}-s{s}"))[1:]}
        for (who, seed), (how, d, _) in src.items():
            if seed == s and d and how in ('reused', 'trained here', 'trained', 'differs'):
                row[who] = final(d)[1:]
        out[s] = row
    return out


def generation(c):
    """{seed: generation loss} of the variant's checkpoints (a leaking form's real loss; lab/generation.py)."""
    from lab.generation import evaluate
    return {s: evaluate(os.path.join(c['out'], 'runs', f"{c['name']}-s{s}", 'ckpt.pt'), out=print)['generation']
            for s in c['seeds'] if os.path.exists(os.path.join(c['out'], 'runs', f"{c['name']}-s{s}", 'ckpt.pt'))}


def compared(c, rows, who, gen=None):
    """{seed: variant - who} where both finished on one evaluation set, and {seed: why not} elsewhere."""
    diffs, why = {}, {}
    for s, r in rows.items():
        v, b = r.get('variant'), r.get(who)
        if not v or v[0] is None:
            why[s] = 'the variant has not finished'
        elif not b or b[0] is None:
            why[s] = f'{who} has no finished run'
        elif v[1] != b[1]:
            why[s] = f'other evaluation sets ({v[1]} against {b[1]})'
        else:
            diffs[s] = (gen[s] if gen else v[0]) - b[0]
    return diffs, why


def report(c, src, rows, timed_alike, gen):
    """REPORT.md's text: the verdict by RULE against the base (and --against), each seed, time per step, how
    each yardstick was had, every run's command and code."""
    mark = LEAK_MARK if not c['audit'].causal else ''
    lines = [f"# `{c['name']}` against `{c['base']}`", '',
             f"Made by `python -m lab.versus {' '.join(c['argv'])}` on {time.strftime('%Y-%m-%d')}, on the CPU: "
             + ('tiny models (--toy=True), 8 steps' if c['toy'] else 'the CPU study scale (4 x 4 x 128, T = 128, '
                '2000 steps, 20 fixed val batches)') + f", seeds {', '.join(map(str, c['seeds']))}; the code here "
             f"{c['code']}" + (' (its change against the commit: code.diff)' if c['diff'] else '') +
             f". Audit: {c['audit']}.{mark}", '', f"Rule: {RULE}.", '']
    for who in filter(None, dict.fromkeys((c['base'], c['against']))):
        diffs, why = compared(c, rows, who, gen)
        words, p = verdict(diffs, who) if diffs else ('not judged: no paired seed', None)
        iv = '' if p is None else (f"{p['mean']:+.4f}" + (f" (95% interval {p['mean'] - p['half']:+.4f}..{p['mean'] + p['half']:+.4f}; "
                                   f"the smallest effect {len(diffs)} seeds can see: {p['half']:.4f})" if p['half'] else ' (1 seed: no interval)'))
        what = 'generation loss (as sample.py generates)' if gen else 'final val'
        lines += [f"**{c['name']} {words}** ({what} minus `{who}`'s: {iv or '-'}).", '',
                  '| seed | variant | ' + who + ' | difference | how ' + who + ' was had |', '|---|---|---|---|---|']
        for s in c['seeds']:
            v, b, how = rows[s].get('variant'), rows[s].get(who), src.get((who, s), ['-', None, ''])
            cell = lambda x: f"{x[0]:.4f}" if x and x[0] is not None else '-'    # noqa: E731
            vcell = cell(v) + (' (LEAKS)' if mark else '') + (f", generation {gen[s]:.4f}" if gen and s in gen else '')
            lines.append(f"| {s} | {vcell} | {cell(b)} | {f'{diffs[s]:+.4f}' if s in diffs else why.get(s, '-')} | "
                         f"{how[0]}: {how[2]} |")
        lines.append('')
    ms = [(r['variant'][2], r[c['base']][2]) for r in rows.values() if r.get('variant') and r.get(c['base'])
          and r['variant'][2] and r[c['base']][2]]
    if ms:
        ratio = statistics.median(a / b for a, b in ms)
        lines += [f"Time per step: the variant's median ms/step is {ratio:.2f} x the base's (median over {len(ms)} "
                  f"seeds, from the runs' logs)" + ('' if timed_alike else ': **not timed alike** (the runs shared the '
                                                    'machine with others, or the base is a committed run timed '
                                                    'elsewhere), so this says little') + '.', '']
    lines += ['## Runs', '', 'Trained here (OUT/runs), each with its command and the code its log opens with:', '']
    here = os.path.join(c['out'], 'runs')
    for name in sorted(os.listdir(here)) if os.path.isdir(here) else []:
        cmd, code = (read_text(os.path.join(here, name, f)) for f in ('command.txt', 'run.txt'))
        code = re.search(r'^code (.*)$', code, re.M)
        lines.append(f"- `{name}`: `{cmd.strip() or '?'}`, code {code.group(1) if code else '?'}")
    reused = [f"`{paths.rel(d)}`" for how, d, _ in src.values() if how == 'reused']
    if reused:
        lines += ['', f"Reused, committed: {', '.join(reused)} (their commands and code: each folder's run.json)."]
    return '\n'.join(lines).rstrip() + '\n'


def read_text(path):
    try:
        with open(path, errors='replace') as f:
            return f.read(4000)
    except OSError:
        return ''


def plot(c, rows, gen):
    """OUT/paired.png: each seed's difference against the base (and --against), the mean and its 95% interval."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from lab.plots_paired import forest_fig
    panels = [(f"{c['name']} minus {who}", not c['audit'].causal, [(c['name'], compared(c, rows, who, gen)[0])])
              for who in filter(None, dict.fromkeys((c['base'], c['against'])))]
    forest_fig(plt, c['out'], 'paired.png', [p for p in panels if p[2][0][1]],
               'final val difference (nats per token)' if not gen else 'generation loss difference (nats per token)',
               f"{c['name']} against its yardsticks, paired by seed")
    return os.path.exists(os.path.join(c['out'], 'paired.png'))


def main(argv):
    c, rc = options(argv)
    if c is None:
        return rc
    c['argv'] = argv
    print(f"{c['name']}: audit {c['audit']}", flush=True)
    if not c['audit'].causal and not c['leaks']:
        return cli.fail(f"attn={c['attn']} pos={c['pos']} LEAKS (audit: {c['audit']}): its losses would be no "
                        f"modelling result, so nothing is trained (--leaks=True trains it anyway, every loss marked "
                        f"LEAKS, judged on its generation loss)")
    os.makedirs(os.path.join(c['out'], 'runs'), exist_ok=True)
    c['code'], c['diff'] = code_and_diff()         # an edit in place is the variant: its diff is kept
    if c['diff']:
        with open(os.path.join(c['out'], 'code.diff'), 'w') as f:
            f.write(c['diff'])
    env = dict(os.environ, **({'OMP_NUM_THREADS': '1'} if c['jobs'] > 1 else {}))
    t0 = time.time()
    src, replays = yardsticks(c)
    failed, sig = run_jobs(list(replays), c['jobs'], env)
    if sig:
        return 128 + sig
    judge_replays(src, replays, failed)
    jobs = []
    for s in c['seeds']:
        out = os.path.join(c['out'], 'runs', f"{c['name']}-s{s}")
        if final(out)[0] != c['want']:
            jobs.append(Job('train', f"{c['name']}-s{s}", train_cmd(c, c['attn'], s, out), out, c['want']))
        if src[(c['base'], s)][0] == 'train':
            out = os.path.join(c['out'], 'runs', f"{c['base']}-s{s}")
            jobs.append(Job('train', f"{c['base']}-s{s}", train_cmd(c, c['base'], s, out), out, c['want']))
            src[(c['base'], s)][:2] = ['trained', out]
    kept = len(c['seeds']) + len(src) - len(jobs) - sum(e[0] == 'none' for e in src.values())
    print(f"{len(jobs)} runs to train ({c['jobs']} at a time), {kept} kept or reused", flush=True)
    n = len(jobs)
    failed, sig = run_jobs(jobs, c['jobs'], env)
    if sig:
        return 128 + sig
    rows = read_runs(c, src)
    gen = generation(c) if not c['audit'].causal else None
    timed_alike = c['jobs'] == 1 and all(e[0] in ('trained', 'trained here') for (w, _), e in src.items()
                                         if w == c['base'])
    text = report(c, src, rows, timed_alike, gen)
    with open(os.path.join(c['out'], 'REPORT.md'), 'w') as f:
        f.write(text)
    drawn = plot(c, rows, gen)
    print('\n'.join(x for x in text.splitlines() if x.startswith(('**', 'Time per step'))))
    print(f"{n - len(failed)} of {n} runs trained in {fmt_time(time.time() - t0)}; wrote "
          f"{paths.rel(os.path.join(c['out'], 'REPORT.md'))}{' and paired.png' if drawn else ''}")
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
