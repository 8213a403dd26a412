"""
The GPU plan, results/gpu/PLAN.md: the paper-scale runs still to make, one row per device call, in the
order of what each decides; each call's runs, its seconds by a time model calibrated on the committed
GPU records (with the model's error), the question it settles, and its status, read from the runs here.

    python -m lab.plan                          # print the plan
    python -m lab.plan --write=True             # write results/gpu/PLAN.md (an ingest does it too)
    python3 -m lab.gpu_study --call=1 --pack=$OUT/runs.tar.gz   # on the GPU: the runs of call 1 not yet here
    python -m lab.gpu_study --ingest=runs.tar.gz                # here: its runs in, PLAN.md's status anew

The time model. On one GPU, k small runs at once each take a step in their time alone times
1 + b (k - 1): they share the GPU, and sharing beats taking turns (b < 1). An eval of B batches costs
c_e B steps. A call of k runs then takes its start-up plus the slowest run's
(steps + evals x B x c_e) x ms_alone x (1 + b (k - 1)): every run is counted at k, though the
quicker ones end first (an upper bound). fit() reads b, c_e, the start-up and each variant's time
alone from the committed records (RECORDS); a variant never timed on a GPU is taken as LIKE says,
marked assumed. The error is the spread of the step times the model gives the records, and a
call fits when its seconds times (1 + error) stay inside lab/gpu_study.py's budget.
"""

import math
import os
import statistics
import sys
from typing import NamedTuple

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab import cli, gpu_pack, paths, studies
from lab.logs import read_log
from lab.runs import recorded_eval_set, state
from lab.studies import S3, resolve

BUDGET_S = 480.0        # lab/gpu_study.py's budget_s: a call's runs must end inside it


class Call(NamedTuple):
    n: int
    runs: tuple         # ((study, (variant, ...), (seed, ...)), ...)
    question: str       # what the call settles
    rows: str           # the ledger rows it decides


CALLS = (
    Call(1, (('paper', ('dot', 'ega', 'ega_paper'), S3),),
         "Is EGA's published gain the gate's or the leak's, at the paper's scale? `ega - dot` and the leak "
         "`ega_paper - ega` at 3 seeds, one evaluation set, today's code", '1'),
    Call(2, (('paper', ('mope', 'ega_mope', 'ega_mope_paper'), S3),),
         "The rest of the EGA table at 3 seeds: MOPE alone, EGA + MOPE, their interaction, the published "
         "combination's leak", '2, 3, 4, 40'),
    Call(3, (('paper', ('dot', 'ega', 'ega_paper'), (4, 5)),),
         "Row 1 at 5 seeds: is `ega - dot` inside +-0.02 (equivalence)?", '1'),
    Call(4, (('paper', ('mope', 'ega_mope'), (4, 5)), ('paper_mope', ('mope_nodecay', 'mope_sin'), (1337,))),
         "Rows 2 to 4 at 5 seeds; is row 5's collapse to character scale the rule's and the decay's (MOPE "
         "without decay on log w, log s; from a wide init), first seed", '2, 3, 4, 5'),
    Call(5, (('paper_rivals', ('fox', 'ega_fox'), (1337, 2)),),
         "The forget gate where the papers measured: does `fox` beat dot by the published EGA's claimed "
         "0.092, and does EGA's gate add to it? (2 seeds)", '19, 20'),
    Call(6, (('paper_rivals', ('fox', 'ega_fox'), (3,)), ('paper_mope', ('mope_nodecay', 'mope_sin'), (2,))),
         "The forget gate's third seed; MOPE without decay and from a wide init, second seed", '19, 20, 5'),
    Call(7, (('paper_rivals', ('fox_mope_rel',), S3),), "The locality study's best combination", '28'),
    Call(8, (('paper_ablations', ('scale_init', 'scale_init_normal'), S3),),
         "The per-head scale init, and its two changes apart", '7'),
    Call(9, (('paper_ablations', ('conv', 'conv_paper'), (1337, 2)),),
         "Lag attention, published and causal (3 seeds see about 0.02; the paper's effect: 0.007)", '6'),
    Call(10, (('paper_ablations', ('conv', 'conv_paper'), (3,)), ('paper_reviews', ('dot_8000',), S3)),
         "Lag attention's third seed; dot given EGA's GPU time (8000 steps: EGA's step is about 1.6x dot's)",
         '6, 1'),
    *(Call(11 + i, (('paper_ablations', (v,), S3),), q, rows) for i, (v, q, rows) in enumerate((
        ('ega_morlet', "The Morlet filter-bank gate, learned", '10, 40'),
        ('ega_morlet_fixed', "The Morlet filter-bank gate, fixed", '10'),
        ('flux', "Spectral flux on the Morlet gate (the paper's effect: 0.012, under what 3 seeds see)", '8'),
        ('phase', "Phase coherence on the Morlet gate (the paper's effect: 0.007)", '9'),
        ('daub', "The Daubechies gate against the learned ones", '10')))),
    Call(16, (('paper_reviews', ('dot_drop0', 'ega_drop0', 'ega_paper_drop0'), (1337, 2)),),
         "Scale or regime: row 1 without dropout, as the study scale trains (2 seeds)", '1'),
    Call(17, (('paper_reviews', ('dot_drop0', 'ega_drop0', 'ega_paper_drop0'), (3,)),),
         "Row 1 without dropout, third seed", '1'),
    *(Call(18 + i, (('paper_reviews', ('corpus_dot', 'corpus_ega', 'corpus_ega_paper'), (seed,)),),
           f"Row 1 on the 16M-character corpus, seed {seed} (carry data/corpus_char too)", '1')
      for i, seed in enumerate(S3)),
    Call(21, (('paper_reviews', ('dot_t1024', 'ega_t1024'), (1337,)),),
         "Row 1 at four times the window (T = 1024, the same tokens a step), one seed", '1'),
    Call(22, (('paper_reviews', ('ega_paper_t1024',), (1337,)),),
         "The published EGA's leak at T = 1024: does it grow with the window?", '1'),
    *(Call(23 + i, (('paper_fourierqk', ('fourier_qk', 'random_qk'), (seed,)),),
           f"FourierQK's table, seed {seed} (each form LEAKS: its verdict rests on the exact audit; this sizes "
           "the leak)", '11, 36') for i, seed in enumerate(S3)),
    Call(26, (('paper_fourierqk', ('causal_gauss',), (1337, 2)),), "The causal Gaussian filter against dot", '13'),
    Call(27, (('paper_fourierqk', ('causal_gauss',), (3,)), ('paper_fourierqk', ('causal_mexhat',), (1337,))),
         "The causal Gaussian filter's third seed; the Mexican hat's first", '13'),
    *(Call(28 + i, (('paper_fourierqk', ('causal_mexhat',), (seed,)),), f"The causal Mexican hat, seed {seed}", '13')
      for i, seed in enumerate((2, 3))),
    *(Call(30 + 3 * j + i, (('paper_fourierqk', (v,), (seed,)),), f"{q}, seed {seed}", rows)
      for j, (v, q, rows) in enumerate((('multi_fourier_qk', "MultiFourier-QK's leak", '11, 15'),
                                        ('causal_morlet', 'The causal Morlet filter against dot', '13'),
                                        ('fourier_qk_causal', "FourierQK's causal form against dot", '13')))
      for i, seed in enumerate(S3)),
)

# ----------------------------------------------------------------------------- the committed records
# (what, path under results/, runs at once): the step times the model is fitted to. k: the speed phase's
# runs that ran (its table); 6 for the EGA paper's probe (its GPU.md); 14 for the queue's call 1 (--parallel=14,
# results/gpu/2026-12-04-queue/README.md: a stopped run's slot was refilled until the last minute)
RECORDS = (
    ("the first GPU command's speed phase: each alone, then all at once", 'gpu/2026-12-04/first-command/GPU.md', None),
    ("the EGA paper's 6 runs at once (20 val batches)", 'history', 6),
    ("the queue's call 1: 14 at once", 'gpu/2026-12-04-queue/call-1/GPU.md', 14),
    ("the queue's call 2: ega alone", 'runs/ega@paper-s1337', 1),
)
# a variant with no GPU record is taken as one that has (the same step, bar a cheap part), times a factor
LIKE = {'mope_nodecay': ('mope', 1.0), 'mope_sin': ('mope', 1.0), 'scale_init': ('dot', 1.0),
        'scale_init_normal': ('dot', 1.0), 'ega_morlet': ('ega', 1.5), 'ega_morlet_fixed': ('ega', 1.5),
        'flux': ('ega', 1.5), 'phase': ('ega', 1.5), 'daub': ('ega', 1.5), 'dot_8000': ('dot', 1.0),
        'dot_drop0': ('dot', 1.0), 'ega_drop0': ('ega', 1.0), 'ega_paper_drop0': ('ega_paper', 1.0),
        'corpus_dot': ('dot', 1.0), 'corpus_ega': ('ega', 1.0), 'corpus_ega_paper': ('ega_paper', 1.0),
        'dot_t1024': ('dot', 2.0), 'ega_t1024': ('ega', 2.0), 'ega_paper_t1024': ('ega_paper', 2.0)}


def md_rows(path, head):
    """The rows of the markdown table in `path` whose header starts with `head`: [{column: cell}]."""
    with open(path) as f:
        lines = f.read().splitlines()
    i = next(i for i, x in enumerate(lines) if x.startswith(head))
    cols = [c.strip() for c in lines[i].strip('|').split('|')]
    out = []
    for x in lines[i + 2:]:
        if not x.startswith('|'):
            break
        out.append(dict(zip(cols, (c.strip() for c in x.strip('|').split('|')))))
    return out


def number(x):
    try:
        return float(x.replace(',', ''))
    except ValueError:
        return None


def log_times(run_dir):
    """A finished run's median step ms and its eval cost (the lower median over its evals after the first
    interval, which holds the compile, of the time between two evals less the steps between them)."""
    evals, trains, _ = read_log(os.path.join(run_dir, 'log.jsonl'))
    ms = statistics.median(r['ms'] for r in trains.values() if 'ms' in r)
    ev = [evals[i] for i in sorted(evals) if 'time' in evals[i]][1:]
    costs = sorted(b['time'] - a['time'] - (b['iter'] - a['iter']) * ms / 1000 for a, b in zip(ev, ev[1:]))
    return ms, costs[(len(costs) - 1) // 2] if costs else None


def points():
    """[(variant, k, ms/step, source)] from RECORDS, and [(eval seconds / (batches x step s))] from the logs."""
    res, pts, evals = paths.RESULTS, [], []
    (speed_s, speed, _), (hist_s, hist, k_hist), (call_s, call, k_call), (alone_s, alone, _) = RECORDS
    ran = [r for r in md_rows(os.path.join(res, speed), '| run | status | compile s') if r['status'] == 'ok']
    for r in ran:
        pts += [(r['run'], 1, number(r['ms/step alone']), speed_s),
                (r['run'], len(ran), number(r['ms/step all at once']), speed_s)]
    hist = os.path.join(res, hist)
    for d in sorted(os.listdir(hist)) if os.path.isdir(hist) else ():
        if d.endswith('@paper-s1337'):
            ms, e = log_times(os.path.join(hist, d))
            pts.append((d.split('@')[0], k_hist, ms, hist_s))
            evals.append(e / (20 * ms / 1000))
    for r in md_rows(os.path.join(res, call), '| run | status | wall s'):
        if (number(r['steps']) or 0) >= 100 and number(r['ms/step']):     # its ms read past the compile
            pts.append((r['run'].split('@')[0], k_call, number(r['ms/step']), call_s))
    ms, e = log_times(os.path.join(res, alone))
    pts.append((alone.split('/')[1].split('@')[0], 1, ms, alone_s))
    evals.append(e / (50 * ms / 1000))
    return pts, evals


def fit():
    """The model from the records: b, c_e, start-up s, {variant: ms alone}, the error (the RMS of the log
    of measured over modelled step time, as a fraction), and the points with their modelled ms; None where
    the records are not here (a results folder of a test's)."""
    try:
        pts, evals = points()
    except (OSError, StopIteration):
        return None
    alone = {v: ms for v, k, ms, _ in pts if k == 1}
    shared = [(v, k, ms) for v, k, ms, _ in pts if k > 1 and v in alone]

    def sq(b):
        return sum(math.log(ms / (alone[v] * (1 + b * (k - 1)))) ** 2 for v, k, ms in shared)
    b = min((i / 1000 for i in range(1001)), key=sq)
    for v in {v for v, k, _, _ in pts if v not in alone}:
        xs = [math.log(ms / (1 + b * (k - 1))) for w, k, ms, _ in pts if w == v]
        alone[v] = math.exp(sum(xs) / len(xs))
    err = math.exp(math.sqrt(sq(b) / len(shared))) - 1
    rows = md_rows(os.path.join(paths.RESULTS, RECORDS[2][1]), '| run | status | wall s')
    start = max(number(r['start-up s']) for r in rows if number(r['start-up s']) is not None)
    return dict(b=b, c_e=statistics.median(evals), start=start, alone=alone, err=err, n=len(shared),
                pts=[(v, k, ms, src, alone[v] * (1 + b * (k - 1))) for v, k, ms, src in pts])


def ms_alone(model, v):
    """(ms a step alone, how it is known: 'measured' or 'assumed: as X x f')."""
    if v in model['alone']:
        return model['alone'][v], 'measured'
    base, f = LIKE.get(v, ('ega', 2.0))
    return model['alone'][base] * f, f"assumed: {base}'s x {f:g}"

# ----------------------------------------------------------------------------- the calls


def call_runs(call, overlay=''):
    """A call's runs (lab/studies.py's Run, at the paper scale or the overlay's), in its order, each once."""
    out = []
    for study, names, seeds in call.runs:
        out += [r for r in studies.plan(study, seeds=seeds, overlay=overlay)
                if r.name in names and r.label not in {x.label for x in out}]
    return out


def by_number(n):
    call = next((c for c in CALLS if c.n == n), None)
    if call is None:
        raise ConfigError(f"call={n}: results/gpu/PLAN.md has calls 1 to {CALLS[-1].n}")
    return call


def todo(call, overlay=''):
    """The runs of a call not finished here."""
    return [r for r in call_runs(call, overlay) if state(r, overlay)[0] != 'done']


def estimate(model, runs, overlay=''):
    """(seconds, whether any step time is assumed) of `runs` all at once, by the model."""
    if not runs or model is None:
        return 0.0, False
    k, worst, assumed = len(runs), 0.0, False
    for r in runs:
        c = resolve(r, overlay)
        ms, how = ms_alone(model, r.name)
        assumed |= how != 'measured'
        n, ev = int(c['max_iters']), int(c['eval_interval'])
        evals = n // ev + 1 + (n % ev != 0)
        worst = max(worst, (n + evals * int(c['eval_iters']) * model['c_e']) * ms * (1 + model['b'] * (k - 1)) / 1000)
    return model['start'] + worst, assumed


def status(call):
    """'done: DATE, code CODE, N runs' | 'partial: N of M finished' | 'pending', from the runs here."""
    runs = call_runs(call)
    done = [r for r in runs if state(r, '')[0] == 'done']
    if len(done) < len(runs):
        return f"partial: {len(done)} of {len(runs)} finished" if done else 'pending'
    recs = [provenance_record(r) for r in done]
    dates = sorted({str(x.get('started', '?'))[:10] for x in recs})
    codes = sorted({c for x in recs for c in x.get('code', [])})
    sets = {recorded_eval_set(r.dir) for r in done}
    return (f"done: {', '.join(dates)}, code {', '.join(codes)}, {len(done)} runs finished"
            + ('' if len(sets) == 1 else ' (on more than one evaluation set)'))


def provenance_record(run):
    import json
    try:
        with open(os.path.join(run.dir, 'run.json')) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# a name of the study scale's ledger rows that the paper scale trains under another name
ALIAS = {'history/scale_init': 'scale_init_normal'}


def deciding_call(done, cmps, need=2):
    """The first call of the plan after which every comparison of `cmps` (the ledger's: sides a, b, c, d)
    would have `need` seeds with every side finished, the calls before it counted as made; None if none.
    done: {variant: {seed: summary}} at the paper scale; a call all of whose runs are there is made."""
    have = {(ALIAS.get(v, v), seed) for v in done for seed in done[v]}
    for c in CALLS:
        runs = {(r.name, r.seed) for r in call_runs(c)}
        if runs <= have:
            continue
        have |= runs
        if all(len(paired_seeds(have, cmp)) >= need for cmp in cmps):
            return c.n
    return None


def paired_seeds(have, cmp):
    sides = [ALIAS.get(v, v) for v in (cmp.a, cmp.b, cmp.c, cmp.d) if v]
    return {seed for v, seed in have if v == sides[0] and all((w, seed) in have for w in sides)}


def command(call):
    extra = ',data/corpus_char' if any(s == 'paper_reviews' and any(n.startswith('corpus') for n in names)
                                       for s, names, _ in call.runs) else ''
    keep = any(r.name in gpu_pack.KEEP_WEIGHTS for r in todo(call))
    return (f"`python3 -m lab.gpu_study --call={call.n} --pack=$OUT/runs.tar.gz" + (' --weights=$OUT' * keep) + "`, carry "
            f"`data/shakespeare_char{extra}`, timeout_s 595")


def plan_md(model=None):
    fitted = model or fit()
    model = fitted or dict(n=0, b=math.nan, c_e=math.nan, start=math.nan, err=math.nan, pts=[])  # no records
    out = ['# The GPU plan', '',
           'Generated by `python -m lab.plan --write=True` (and by every `python -m lab.gpu_study --ingest`): the '
           "paper-scale runs still to make, one row per device call, in the order of what each decides. A call "
           "runs on the GPU as `python3 -m lab.gpu_study --call=N --pack=$OUT/runs.tar.gz` (its runs not yet here, "
           "all at once, inside the 480 s budget), then here `python -m lab.gpu_study --ingest=runs.tar.gz`, "
           '`python -m lab.study --study=paper --overlay= --table_only=True` (and each study of the call), '
           '`python -m lab.status --write=True`, `python -m lab.ledger --write=True`. Every run reads the paper '
           "scale's one evaluation set (50 x 64 windows of 256 tokens, train.py's); a run made on another is "
           'no pair for these (lab/logs.py, alike).', '',
           f"Seconds: by the time model of lab/plan.py (its docstring), fitted to {model['n']} step times of "
           f"{len(RECORDS)} committed GPU records: b = {model['b']:.3f} (k runs at once: each step x "
           f"1 + b (k - 1)), an eval of B batches = {model['c_e']:.2f} B steps, start-up {model['start']:.0f} s "
           f"(the slowest recorded). Error: the step times it gives the records are off by {model['err']:.0%} "
           "(RMS, log scale); a call fits if its seconds x (1 + error) stay inside 480 s. An assumed step "
           '(a variant never timed on a GPU) is marked.', '',
           '| call | runs to make (of the call) | seconds (model) | question it settles | ledger rows | command | status |',
           '|---|---|---|---|---|---|---|']
    for c in CALLS:
        runs, left = call_runs(c), todo(c)
        s, assumed = estimate(fitted, left)
        names = ', '.join(f"`{r.label}`" for r in left) or '-'
        secs = '-' if not left or not s else f"{s:.0f} +- {s * model['err']:.0f}" + (' (assumed steps)' if assumed else '')
        over = s * (1 + model['err']) > BUDGET_S
        st = status(c) + ('; does not fit one call by the model: waits for a faster step (the speed issue) or a '
                          'longer lease' if left and over else '')
        out.append(f"| {c.n} | {names} ({len(left)} of {len(runs)}) | {secs} | {c.question} | {c.rows} | "
                   f"{command(c)} | {st} |")
    out += ['', '## The model against its records', '', '| variant | runs at once | ms/step measured | modelled | record |',
            '|---|---|---|---|---|']
    out += [f"| {v} | {k} | {ms:.1f} | {m:.1f} | {src} |" for v, k, ms, src, m in model['pts']]
    return '\n'.join(out) + '\n'


def write(quiet=False):
    path = os.path.join(paths.RESULTS, 'gpu', 'PLAN.md')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(plan_md())
    if not quiet:
        print(f"wrote {paths.rel(path)}")
    return path


def main(argv):
    c, rc = cli.parse(__doc__, dict(write=False), argv)
    if c is None:
        return rc
    if c['write']:
        write()
    else:
        print(plan_md(), end='')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
