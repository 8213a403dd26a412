"""
A study: a named grid of configs x seeds at the CPU study scale, run resumably and
summarised in results/<study>/RESULTS.md (and plots, with matplotlib: val curves, final
val, and where the runs learned them the MOPE pairs and the FourierQK periods).

    python study.py ega_mope [--seeds=1337,2,3] [--overlay=config/cpu.py] [--jobs=2]
    python study.py ega_mope --dry_run=True      # what would happen: skip / resume / start
    python study.py ega_mope --table_only=True   # only RESULTS.md and the plots
    python study.py ega_mope --table_only=True --replace=True   # even where the table would hold less
    python study.py replay RUN --steps=250       # re-train a committed run's first steps (replay.py)

A run is `python train.py CONFIGS OVERLAY [OVERRIDES] --seed=S --out_dir=results/runs/<run>-s<S>`
(its output in run.txt, its command and max_iters in run.json). Finished runs (an eval at
max_iters in log.jsonl) are skipped, those with a ckpt.pt resume, others start afresh.
A study can name variants whose finished checkpoints get more evaluations with random q, k
phases, one per mode of PHASE_MODES (`python -m lab.phase`, logged as eval_only rows).
A table never silently replaces the existing one with less (fewer seeds of a variant, a run counted at
fewer steps, another scale): it says why in one line and writes nothing, unless --replace=True.
--seeds replaces every run's seeds; --overlay= (empty) runs without one; with --jobs > 1
each run gets OMP_NUM_THREADS=1. Ctrl-C or SIGTERM sends each run one SIGTERM (it saves
a checkpoint and stops; the next call resumes it); a second one makes them leave at once.
"""

import ast
import functools
import json
import math
import os
import pickle
import re
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from importlib import metadata
from typing import NamedTuple

S5, S3 = (1337, 2, 3, 4, 5), (1337, 2, 3)
LONG = ('dot', 'fox', 'causal_gauss', 'fourier_qk_causal')     # study long's variants, dot first
# the locality study's best combination, which studies long and paper carry beside the single priors:
# the lowest mean final val among its combinations with 3 seeds (set by hand from results/locality/RESULTS.md;
# 2026-12-01: fox_mope_rel, then ega_fox and fox_dconv, none clear of fox beyond the seed spread)
BEST = ('fox_mope_rel', ['config/fox.py'], ['--pos=mope_rel'])
STUDIES = {
    # runs: (run name, config files, extra --key=value, seeds); refs: what every causal variant
    # is compared with, paired over seeds; causal: each leaking variant's causal counterpart
    'ega_mope': dict(
        runs=[('dot', ['config/dot.py'], [], S5), ('ega', ['config/ega.py'], [], S5),
              ('mope', ['config/mope.py'], [], S5), ('ega_mope', ['config/ega_mope.py'], [], S5),
              ('ega_paper', ['config/ega_paper.py'], [], S3),
              ('ega_mope_paper', ['config/ega_mope_paper.py'], [], S3)],
        refs=['dot'], causal={'ega_paper': 'ega', 'ega_mope_paper': 'ega_mope'},
        # (both, one, other, neither): does the pair add? ab - a - b + base, per seed
        interactions=[('ega_mope', 'ega', 'mope', 'dot')]),
    'gates': dict(
        runs=[(name + suffix, [f'config/{name}.py'], ov, S5)      # the configs' own pos is 'learned'
              for name in ('dot', 'ega', 'fox', 'ega_fox') for suffix, ov in (('', []), ('_nopos', ['--pos=none']))],
        refs=['dot', 'fox', 'dot_nopos', 'fox_nopos'], causal={},
        interactions=[('ega_fox', 'ega', 'fox', 'dot'), ('ega_fox_nopos', 'ega_nopos', 'fox_nopos', 'dot_nopos')]),
    # flux and phase sit on the Morlet gate: measured against dot and against ega_morlet (the gate
    # alone); the structured priors (daub, ega_morlet_fixed) against the learned gates ega, ega_morlet
    'ablations': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in
              ('dot', 'conv', 'conv_paper', 'scale_init', 'ega_morlet', 'flux', 'phase', 'daub', 'mope_rel',
               'ega', 'ega_morlet_fixed')],
        refs=['dot', 'ega', 'ega_morlet'], causal={}),
    # the leaking forms are measured against their causal relative, or against dot where they
    # have none (random_qk, qk_orthogonal, qk_gaussian, fnet); phase: the trained checkpoints whose q, k
    # spectra are re-phased at random in more evaluations (lab/phase.py, each of PHASE_MODES)
    'fourierqk': dict(
        runs=[(name, [f'config/{name}.py'], [], S3) for name in
              ('dot', 'fourier_qk_causal', 'causal_gauss', 'causal_morlet', 'fourier_qk', 'multi_fourier_qk',
               'random_qk', 'qk_orthogonal', 'fnet', 'morlet_xcorr', 'causal_mexhat', 'mexhat_qk', 'qk_gaussian')],
        refs=['dot'], phase=['fourier_qk', 'multi_fourier_qk'],
        causal={'fourier_qk': 'fourier_qk_causal', 'multi_fourier_qk': 'fourier_qk_causal',
                'morlet_xcorr': 'causal_morlet', 'mexhat_qk': 'causal_mexhat', 'random_qk': 'dot',
                'qk_orthogonal': 'dot', 'qk_gaussian': 'dot', 'fnet': 'dot'}),
    # the authors' weight-decay recipe (train.py --decay_all=True: every parameter decayed) against ours
    # (matrices and MOPE's pairs), on the variants whose gates, pairs and bands it reaches; each pair
    # (with, without) is compared over the same seeds
    'decay': dict(
        runs=[(name + suffix, [f'config/{name}.py'], ov, S3)
              for name in ('ega', 'ega_mope', 'fourier_qk_causal', 'multi_fourier_qk')
              for suffix, ov in (('', []), ('_decay_all', ['--decay_all=True']))],
        refs=[], causal={'multi_fourier_qk': 'fourier_qk_causal', 'multi_fourier_qk_decay_all': 'fourier_qk_causal'},
        pairs=[(f'{name}_decay_all', name) for name in ('ega', 'ega_mope', 'fourier_qk_causal', 'multi_fourier_qk')]),
    # beyond the papers: is it all locality? Primer's learned short filter of q, k, v (dconv) and ALiBi's
    # fixed recency (with and without the learned table) against dot and the forget gate, and the gate
    # composed with each causal locality prior: does the filter add to the gate (ab - a - b + base < 0)?
    'locality': dict(
        runs=[('dot', ['config/dot.py'], [], S3), ('fox', ['config/fox.py'], [], S3),
              ('dconv', ['config/dconv.py'], [], S3),
              ('fox_causal_gauss', ['config/causal_gauss.py'], ['--attn=fox+causal_gauss'], S3),
              ('alibi', ['config/alibi.py'], [], S3),
              ('fox_dconv', ['config/dconv.py'], ['--attn=fox+dconv'], S3),
              ('fox_fourier_qk_causal', ['config/fourier_qk_causal.py'], ['--attn=fox+fourier_qk_causal'], S3),
              ('fox_mope_rel', ['config/fox.py'], ['--pos=mope_rel'], S3),
              ('alibi_learned', ['config/alibi_learned.py'], [], S3),
              ('causal_gauss', ['config/causal_gauss.py'], [], S3),
              ('fourier_qk_causal', ['config/fourier_qk_causal.py'], [], S3),
              ('mope_rel', ['config/mope_rel.py'], [], S3), ('ega', ['config/ega.py'], [], S3),
              ('ega_fox', ['config/ega_fox.py'], [], S3),
              ('dot_nopos', ['config/dot.py'], ['--pos=none'], S3),
              ('fox_nopos', ['config/fox.py'], ['--pos=none'], S3),
              ('rope', ['config/rope.py'], [], S3)],
        refs=['dot', 'fox'], causal={},
        # the runs whose positions allow windows longer than the trained one: longctx.py evaluates their
        # checkpoints at T = 128, 256, 512 (a finished run without its ckpt.pt is trained again for it)
        context=['dot_nopos', 'fox_nopos', 'rope', 'alibi', 'mope_rel', 'fox_mope_rel'],
        interactions=[(f'fox_{b}', 'fox', b, 'dot') for b in ('causal_gauss', 'dconv', 'fourier_qk_causal', 'mope_rel')]
        + [('ega_fox', 'ega', 'fox', 'dot')]),
    # do the gains last? the strongest causal priors trained three times as long (6000 steps, warmup and cosine
    # stretched to match), beside their 2000-step runs: the difference to dot through training at both lengths
    'long': dict(
        runs=[(name + suffix, cf, ov + extra, S3)
              for name, cf, extra in [(n, [f'config/{n}.py'], []) for n in LONG] + [BEST]
              for suffix, ov in (('_long', ['--max_iters=6000', '--warmup_iters=300']), ('', []))],
        refs=['dot_long', 'dot'], causal={}, long={name + '_long': name for name in LONG + (BEST[0],)}),
    # does dot attention learn the recency the priors impose, only later? the long study's variants, ALiBi
    # and dot without positions trained again with the attention statistics logged at every eval (train.py's
    # attention_stats): 2000 steps x 3 seeds and 6000 steps, seed 1337 first; arithmetic as at their commits
    'recency': dict(
        runs=[(name + '_stats' + suffix, cf, ov + extra, seeds)
              for suffix, extra, seeds in (('', [], S3), ('_long', ['--max_iters=6000', '--warmup_iters=300'], (1337,)))
              for name, cf, ov in [(n, [f'config/{n}.py'], []) for n in LONG]
              + [BEST, ('alibi', ['config/alibi.py'], []), ('dot_nopos', ['config/dot.py'], ['--pos=none'])]],
        refs=['dot_stats_long', 'dot_stats'], causal={},
        long={name + '_stats_long': name + '_stats' for name in LONG + (BEST[0], 'alibi', 'dot_nopos')}),
    # the data limit: 6000 steps are 12 passes over TinyShakespeare but under one over the larger public-domain
    # corpus of lab/corpus.py (16.1M characters; python -m lab.corpus, then prepare.py --input=data/corpus_txt
    # --out_dir=data/corpus_char): do the locality priors' gains last where the text does not repeat?
    'corpus': dict(
        runs=[('corpus_' + name, [f'config/{name}.py'],
               ['--data_dir=data/corpus_char', '--max_iters=6000', '--warmup_iters=300'], S3)
              for name in ('dot', 'fox', 'causal_gauss')],
        refs=['corpus_dot'], causal={}),
    # the paper scale on one GPU (gpu_study.py: all at once, inside a wall-clock budget; `--overlay=` for the
    # paper scale): the published comparison and the locality study's causal priors, one seed
    'paper': dict(
        runs=[(name, [f'config/{name}.py'], [], (1337,)) for name in ('dot', 'ega', 'ega_mope', 'fox', 'causal_gauss')]
        + [(*BEST, (1337,))],
        refs=['dot'], causal={}),
    # GPT-2 BPE tokens (python prepare.py --tokenizer=gpt2 writes data/shakespeare). A run takes
    # 45 to 55 minutes on 2 cores (the 50,257-way output layer), so the runs that test the claim,
    # dot and the causal spectral filters, come first: a study cut short has answered it first
    'bpe': dict(
        runs=[('bpe_' + name, [f'config/{name}.py'], ['--data_dir=data/shakespeare'], S3)
              for name in ('dot', 'fourier_qk_causal', 'causal_morlet', 'ega')],
        refs=['bpe_dot'], causal={}),
}
JOBS = ('start', 'resume', 'retrain', 'phase')   # the states that launch train.py
PHASE_MODES = ('random_shared', 'random')   # the authors' main mode (q and k share each bin's phase), their stress test
HERE = os.path.dirname(os.path.abspath(__file__))   # the repository: runs start here
RESULTS = os.path.join(HERE, 'results')
POLL_S = 1.0
DEFAULT_OVERLAY = 'config/cpu.py'   # the CPU study scale: runs and tables without a scale tag
FLAGS = "--seeds=S1,S2 --overlay=FILE --jobs=N --dry_run=True --table_only=True --replace=True"


class StudyError(Exception):
    pass


class Refused(StudyError):
    """A writer would replace a committed table or block with one that holds less (--replace=True overrides)."""


class Run(NamedTuple):
    study: str
    name: str
    seed: object
    configs: tuple
    overrides: tuple
    scale: str = ''         # '' at the default overlay; else a tag of the overlay: a run at another scale is another run
    label = property(lambda r: f"{r.name}{'@' + r.scale if r.scale else ''}-s{r.seed}")
    # one pool of runs for every study: a run that two studies share (dot, ega) is trained once
    dir = property(lambda r: os.path.join(RESULTS, 'runs', r.label))


def scale_tag(overlay):
    """'' for the default overlay (the CPU study scale); 'paper' without one; else the overlay's name."""
    if overlay == DEFAULT_OVERLAY:
        return ''
    return os.path.splitext(os.path.basename(overlay))[0] if overlay else 'paper'


def plan(study, seeds=None, overlay=None):
    """The runs of a study, seed by seed: every variant's first seed, then the second..."""
    tag = scale_tag(DEFAULT_OVERLAY if overlay is None else overlay)
    runs = [(i, Run(study, name, s, tuple(cf), tuple(ov), tag))
            for name, cf, ov, own in STUDIES[study]['runs'] for i, s in enumerate(seeds or own)]
    return [r for _, r in sorted(runs, key=lambda x: x[0])]


def results_dir(study, opts):
    """results/<study> for the study as specified (its seeds, the default overlay); another seed set
    or scale writes beside it, never over the committed table."""
    tag = scale_tag(opts['overlay'])
    seeds = 'seeds-' + '-'.join(map(str, opts['seeds'])) if opts['seeds'] else ''
    return os.path.join(RESULTS, '@'.join([study] + [t for t in (tag, seeds) if t]))


def rel(path):
    p = os.path.relpath(path, HERE)
    return path if p.startswith('..') else p


def command(run, overlay, st='start', mode=None):
    """The command of a job: 'start' a run, 'resume' it, 'retrain' it, or its 'phase'-randomised
    evaluation in `mode` (by default the first mode it lacks)."""
    held = st in ('start', 'retrain') and any(os.path.exists(os.path.join(run.dir, f)) for f in ('log.jsonl', 'ckpt.pt'))
    if st == 'phase':           # an evaluation of the run's own checkpoint (lab/phase.py)
        return ['python', '-m', 'lab.phase', f'--out_dir={rel(run.dir)}',
                f'--qk_phase={mode or next_mode(run, overlay)}']
    return (['python', 'train.py', *run.configs, *([overlay] if overlay else []), *run.overrides,
             f'--seed={run.seed}', f'--out_dir={rel(run.dir)}']
            + (['--init_from=resume'] if st == 'resume' else [])
            + (['--overwrite=True'] if held else []))   # a start afresh replaces what an interrupted start left


@functools.lru_cache(maxsize=None)
def train_defaults():
    """The literal top-level assignments of train.py (its hyperparameters), read without torch."""
    out = {}
    with open(os.path.join(HERE, 'train.py')) as f:
        for node in ast.parse(f.read()).body:
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (AttributeError, IndexError, ValueError, TypeError, SyntaxError):
                pass            # not a `name = literal`
    return out


def resolve(run, overlay):
    """The config as train.py will see it: its defaults, the config files, then --key=value."""
    ns = dict(train_defaults())
    for path in run.configs + ((overlay,) if overlay else ()):
        with open(os.path.join(HERE, path)) as f:
            exec(compile(f.read(), path, 'exec'), ns)
    for k, _, v in (o[2:].partition('=') for o in run.overrides):
        try:
            ns[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            ns[k] = v
    return ns


def max_iters(run, overlay):
    """From run.json (what the run was started with), else from the config."""
    try:
        with open(os.path.join(run.dir, 'run.json')) as f:
            return int(json.load(f)['max_iters'])
    except (OSError, ValueError, KeyError, TypeError):
        return int(resolve(run, overlay)['max_iters'])

# ----------------------------------------------------------------------------- logs and maths


def read_log(path):
    """The eval and train rows of a log.jsonl by iter (the last row of an iter wins), and the
    eval_only rows (evaluations of the finished checkpoint: the phase ablation) in order."""
    rows, extra = {'eval': {}, 'train': {}}, []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue            # a line cut by a kill
                if not isinstance(r, dict) or not isinstance(r.get('iter'), int):
                    continue
                if r.get('kind') in rows:
                    rows[r['kind']][r['iter']] = r
                elif r.get('kind') == 'eval_only':
                    extra.append(r)
    return rows['eval'], rows['train'], extra


def phased(extra, n):
    """{mode: (val with the phases kept, val re-phased)} from the eval_only rows at iter n."""
    return {r['qk_phase']['mode']: (r['val'], r['qk_phase']['val']) for r in extra
            if r['iter'] == n and isinstance(r.get('qk_phase'), dict) and num(r.get('val'))
            and num(r['qk_phase'].get('val'))}


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def summarize(evals, trains, extra, n):
    """A run's numbers; final, best, gap, tok_s, the learned MOPE pairs and FourierQK bands,
    and the phase ablation only when done (it has the eval at iter n)."""
    curve = sorted((i, r['val']) for i, r in evals.items() if i <= n and num(r.get('val')))
    rows = [*evals.values(), *trains.values()]
    s = dict(done=n in evals and num(evals[n].get('val')), last=max(evals, default=None), curve=curve,
             leaks=any(r.get('leaks') is True for r in rows))
    if not s['done']:
        return s
    e = evals[n]
    tok = [r['tok_s'] for r in trains.values() if num(r.get('tok_s'))]
    gap = e.get('gap')
    if gap is None and num(e.get('shuffled_val')):
        gap = e['shuffled_val'] - e['val']
    s.update(final=e['val'], best=min(v for _, v in curve), gap=gap if num(gap) else None,
             tok_s=statistics.median(tok) if tok else None, phase=phased(extra, n))
    # learned parameters at the end: the final eval's, else an evaluation of the final checkpoint
    # (runs older than the mope field), the latest first
    sources = [e] + [x for x in reversed(extra) if x['iter'] == n]
    for key in ('mope', 'bands'):
        s[key] = next((r[key] for r in sources if r.get(key)), None)
    return s


def stats(xs):
    xs = list(xs)
    return dict(n=len(xs), mean=statistics.mean(xs), sd=statistics.stdev(xs) if len(xs) > 1 else None,
                min=min(xs), max=max(xs))


def t_within(t, df):
    """P(|T| <= t) for Student's t with an integer df, in closed form (Abramowitz and Stegun
    26.7.3, 26.7.4): with th = atan(t / sqrt(df)), c = cos th, the odd df give
    (2/pi) (th + sin th (c + 2/3 c^3 + 2 4/(3 5) c^5 + ...)) and the even ones
    sin th (1 + 1/2 c^2 + 1 3/(2 4) c^4 + ...), df - 2 powers of c at most."""
    th = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(th) ** 2, 1.0, 0.0
    if df % 2:
        term, k = math.cos(th), 1
        while k <= df - 2:
            total += term
            term *= c2 * (k + 1) / (k + 2)
            k += 2
        return 2 / math.pi * (th + math.sin(th) * total) if df > 1 else 2 * th / math.pi
    k = 0
    while k <= df - 2:
        total += term
        term *= c2 * (k + 1) / (k + 2)
        k += 2
    return math.sin(th) * total


def t95(df):
    """The two-sided 95% quantile of Student's t with df degrees of freedom, exactly (to 1e-12):
    the t with P(|T| <= t) = 0.95, by bisection on t_within."""
    lo, hi = 0.0, 100.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_within(mid, df) < 0.95 else (lo, mid)
    return (lo + hi) / 2


def paired(a, b):
    """a - b over the seeds both have ({seed: value}): n, mean, sd, min, max and the 95% half-width."""
    d = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if not d:
        return None
    st = stats(d)
    st['half'] = None if st['sd'] is None else t95(len(d) - 1) * st['sd'] / math.sqrt(len(d))
    return st

# ----------------------------------------------------------------------------- RESULTS.md


def phase_missing(run, phases):
    """The phase modes a finished run of a phase variant still lacks an evaluation in ([] if none)."""
    return [m for m in PHASE_MODES if m not in phases] if run.name in STUDIES[run.study].get('phase', ()) else []


def next_mode(run, overlay):
    """The first phase mode a finished run still lacks an evaluation in (the first mode if none)."""
    extra = read_log(os.path.join(run.dir, 'log.jsonl'))[2]
    return (phase_missing(run, phased(extra, max_iters(run, overlay))) or PHASE_MODES)[0]


def context_missing(run):
    """Whether a finished run of a study's `context` list still lacks its longctx.py evaluation."""
    if run.name not in STUDIES[run.study].get('context', ()):
        return False
    try:
        with open(os.path.join(RESULTS, run.study, 'context.json')) as f:
            return run.label not in json.load(f)
    except (OSError, ValueError):
        return True


def state(run, overlay):
    """('missing' | 'done' | 'phase' | 'retrain' | 'resume' | 'start', a line for people)."""
    missing = [f for f in run.configs if not os.path.exists(os.path.join(HERE, f))]
    if missing:
        return 'missing', f"{', '.join(missing)} does not exist (yet): not run"
    try:
        n = max_iters(run, overlay)
    except Exception as e:
        return 'missing', f"config error, not run: {type(e).__name__}: {e}"
    evals, _, extra = read_log(os.path.join(run.dir, 'log.jsonl'))
    if n in evals:
        phase, context = phase_missing(run, phased(extra, n)), context_missing(run)
        if not phase and not context:
            return 'done', f"finished ({n} iters)"
        if os.path.exists(os.path.join(run.dir, 'ckpt.pt')):
            if phase:
                return 'phase', f"finished ({n} iters); its phase-randomised evaluation is to run"
            return 'done', f"finished ({n} iters); its longer contexts are to evaluate: python longctx.py"
        # CPU training is deterministic: the same run again (its log replaced by one equal to round-off)
        # leaves the checkpoint that the later evaluations need
        return 'retrain', f"finished ({n} iters), but no ckpt.pt for its later evaluations: trained again"
    if os.path.exists(os.path.join(run.dir, 'ckpt.pt')):
        return 'resume', f"not finished, last eval at iter {max(evals, default='-')} of {n}; ckpt.pt: resumes"
    return 'start', f"no checkpoint, last eval at iter {max(evals)}: starts afresh" if evals else 'not started'


def collect(runs, overlay):
    """[(run, state, detail, summary or None)], {variant: {seed: summary of a finished run}}, leaking
    variants."""
    info, done, leaking = [], {}, set()
    for r in runs:
        st, detail = state(r, overlay)
        s = None
        if st != 'missing':
            s = summarize(*read_log(os.path.join(r.dir, 'log.jsonl')), max_iters(r, overlay))
        info.append((r, st, detail, s))
        done.setdefault(r.name, {})
        if s and s['done']:
            done[r.name][r.seed] = s
        if s and s['leaks']:
            leaking.add(r.name)
    return info, done, leaking


def ms(st):
    return f"{st['mean']:.4f}" + (f" ({st['sd']:.4f})" if st['sd'] is not None else '')


def table(done, names):
    out = ['| variant | seeds | final val, mean (sd) | min..max | best val, mean (sd) | min..max | shuffled-val gap '
           '| audit | tok/s |', '|---|---|---|---|---|---|---|---|---|']
    for v in names:
        f, b = stats(s['final'] for s in done[v].values()), stats(s['best'] for s in done[v].values())
        gaps = [s['gap'] for s in done[v].values() if s['gap'] is not None]
        toks = [s['tok_s'] for s in done[v].values() if s['tok_s']]
        out.append(f"| {v} | {f['n']} | {ms(f)} | {f['min']:.4f}..{f['max']:.4f} | {ms(b)} | {b['min']:.4f}.."
                   f"{b['max']:.4f} | {f'{statistics.mean(gaps):+.3f}' if gaps else '-'} | "
                   f"{'**LEAKS**' if any(s['leaks'] for s in done[v].values()) else 'causal'} | "
                   f"{f'{statistics.mean(toks):,.0f}' if toks else '-'} |")
    return out


def diff_cells(p):
    iv = 'n/a (1 seed)' if p['half'] is None else f"{p['mean'] - p['half']:+.4f}..{p['mean'] + p['half']:+.4f}"
    return f"{p['n']} | {p['mean']:+.4f} | {iv}"


def finals(done, v):
    return {s: x['final'] for s, x in done.get(v, {}).items()}


def results_md(study, info, done, leaking, head):
    """RESULTS.md. head: command, scale, machine, run_cmd, run_code."""
    causal = [v for v in done if done[v] and v not in leaking]
    leaky = [v for v in done if done[v] and v in leaking]
    out = [f"# Study `{study}`", '', f"- command: `{head['command']}`",
           f"- code: the runs': {head.get('run_code') or 'not recorded'} (each run's in its run.json; "
           "results/REPLAYS.md: the replays)",
           f"- scale: {head['scale']}", f"- machine: {head['machine']}",
           f"- each run: `{head['run_cmd']}` (its exact command is in its run.json, its output in run.txt)",
           "- plots (with matplotlib): " + ("[paired differences](paired.png) and [through training](diff_curves.png) "
                                            "to the study's reference, " if STUDIES[study]['refs'] else '')
           + "[val curves](val_curves.png), [final val](final_val.png)", '',
           "final val: the val loss at max_iters (mean over the fixed val batches); best val: the lowest eval; gap: "
           "shuffled val - val at the final eval; tok/s: the median of a run's logged training tok/s, mean over "
           "seeds. A paired difference is the mean of per-seed differences over the seeds both have, with the 95% "
           "interval mean +- t(0.975, n-1) sd/sqrt(n).", '', '## Causal variants', '']
    out += table(done, causal) if causal else ['(no finished causal run yet)']
    for ref in [r for r in STUDIES[study]['refs'] if r in causal]:
        sd = stats(finals(done, ref).values())['sd']
        out += ['', f"### Final val, paired difference to `{ref}` (sd of {ref} over seeds: "
                f"{'n/a' if sd is None else f'{sd:.4f}'})", '',
                f"| variant | seeds | mean diff | 95% interval | abs(mean diff) > sd of {ref}? |",
                '|---|---|---|---|---|']
        for v, p in [(v, paired(finals(done, v), finals(done, ref))) for v in causal if v != ref]:
            if p:
                big = 'n/a' if sd is None else 'yes' if abs(p['mean']) > sd else 'no'
                out.append(f"| {v} | {diff_cells(p)} | {big} |")
    if leaky:
        out += ['', '## Leaking variants: not a modelling result', '', "The start-up audit found that these models "
                "see future tokens: their loss is not a language-modelling result, shown only to size the leak.", '']
        out += table(done, leaky) + ['', '| variant | causal counterpart | seeds | leak size (variant - counterpart) '
                                     '| 95% interval |', '|---|---|---|---|---|']
        for v in leaky:
            c = STUDIES[study]['causal'].get(v)
            p = c and paired(finals(done, v), finals(done, c))
            out.append(f"| {v} | {c or '(none set)'} | {diff_cells(p) if p else 'no paired seeds | - | -'} |")
    out += pairs_md(study, done) + interaction_md(study, done) + long_md(study, done) + phase_md(study, done)
    out += learned_md(done)
    pending = [f"- {r.label}: {detail}" for r, st, detail, s in info
               if st != 'done' or (s and s['done'] and phase_missing(r, s['phase']))]
    return '\n'.join(out + ['', '## Pending', ''] + (pending or ['(none)'])) + '\n'


def interaction_md(study, done):
    """Whether two mechanisms add: per seed (ab - base) - (a - base) - (b - base) = ab - a - b + base."""
    rows = []
    for ab, a, b, base in STUDIES[study].get('interactions', ()):
        f = [finals(done, v) for v in (ab, a, b, base)]
        seeds = sorted(set.intersection(*(set(x) for x in f)))
        if seeds:
            p = paired({s: f[0][s] - f[1][s] - f[2][s] for s in seeds}, {s: -f[3][s] for s in seeds})
            rows.append(f"| {ab} = {a} + {b} over {base} | {diff_cells(p)} |")
    if not rows:
        return []
    return ['', '### Do the two mechanisms add?', '', "Per seed, the final val change of the combination minus the "
            "sum of the single changes: (ab - base) - (a - base) - (b - base) = ab - a - b + base. Below 0: the "
            "combination gains more than the sum of its parts (the paper's \"superadditive\"); 0: they add; above "
            "0: they overlap or interfere.", '', '| combination | seeds | interaction | 95% interval |',
            '|---|---|---|---|'] + rows


def at_iter(done, v, it):
    """{seed: val at eval iter it} of a variant's finished runs that logged it."""
    return {s: dict(x['curve'])[it] for s, x in done.get(v, {}).items() if it in dict(x['curve'])}


def long_md(study, done):
    """Study long: each variant minus dot, paired by seed, at iters 2000, 4000 and 6000 of the long runs and
    at the end of the 2000-step ones; and the last 2000 steps' change of that difference (still shrinking?)."""
    pairs = STUDIES[study].get('long', {})
    base, short = next(iter(pairs.items()), (None, None))
    rows = []
    for lv, sv in list(pairs.items())[1:]:
        cells = [paired(finals(done, sv), finals(done, short))]
        cells += [paired(at_iter(done, lv, it), at_iter(done, base, it)) for it in (2000, 4000, 6000)]
        d6, d4 = at_iter(done, lv, 6000), at_iter(done, lv, 4000)
        b6, b4 = at_iter(done, base, 6000), at_iter(done, base, 4000)
        seeds = set(d6) & set(d4) & set(b6) & set(b4)
        cells.append(paired({s: d6[s] - b6[s] for s in seeds}, {s: d4[s] - b4[s] for s in seeds}))
        rows.append(f"| {sv} | " + ' | '.join(f"{p['mean']:+.4f} ({p['n']})" + (
            f" {p['mean'] - p['half']:+.4f}..{p['mean'] + p['half']:+.4f}" if p['half'] is not None else '')
            if p else '-' for p in cells) + ' |')
    if not rows:
        return []
    return ['', f'## Do the gains last? Each variant minus `{short}`', '', "Paired by seed (seeds in brackets, "
            "then the 95% interval). The 2000-step runs end their cosine at 2000; the long ones (6000 steps, "
            "warmup 300) pass 2000 and 4000 mid-schedule. The last column is the change of the difference over "
            "the long runs' last 2000 steps: near 0, the gain has settled; above 0, it is still shrinking.", '',
            '| variant | 2000-step runs, final | long, iter 2000 | long, iter 4000 | long, iter 6000 | '
            '6000 minus 4000 |', '|---|---|---|---|---|---|'] + rows


def phase_md(study, done):
    """The phase-randomised evaluations of the trained FourierQK checkpoints, against the first ref."""
    ph = {(v, m): {seed: x['phase'][m] for seed, x in done[v].items() if m in x.get('phase', {})}
          for v in STUDIES[study].get('phase', ()) if v in done for m in PHASE_MODES}
    if not any(ph.values()):
        return []
    ref = STUDIES[study]['refs'][0]
    out = ['', '## Phase-randomised evaluation', '', "Each trained checkpoint evaluated again on the same val "
           "batches with the phases of rfft(q) and rfft(k) replaced by random ones, amplitudes kept (`python -m "
           "lab.phase --out_dir=RUN --qk_phase=MODE`; before 2026-12-02, `train.py --eval_only=True --qk_phase=MODE`): "
           "`random_shared`, the authors' main mode, draws "
           "one phase per sequence, head and bin, the same for q and k; `random`, their stress test, draws every "
           f"channel of q and of k independently. Against `{ref}`'s final val on the same seeds. These models "
           "leak: the columns measure how much of the leak the phases carry, not language modelling.", '',
           f"| variant | mode | seeds | val, own phases | val, random phases | random - {ref} | 95% interval |",
           '|---|---|---|---|---|---|---|']
    for (v, m), d in ph.items():
        if d:
            p = paired({k: x[1] for k, x in d.items()}, finals(done, ref))
            iv = 'no paired seeds | -' if not p else diff_cells(p).split(' | ', 1)[1]
            out.append(f"| {v} | {m} | {len(d)} | {ms(stats(x[0] for x in d.values()))} | "
                       f"{ms(stats(x[1] for x in d.values()))} | {iv} |")
    return out


def pairs_md(study, done):
    """A study's named pairs (variant, its base), paired over the seeds both have."""
    rows = [f"| {v} | {b} | {diff_cells(p)} |" for v, b in STUDIES[study].get('pairs', ())
            for p in [paired(finals(done, v), finals(done, b))] if p]
    if not rows:
        return []
    return ['', '### Each variant against its base', '', 'Final val of the variant minus that of its base, paired '
            'over seeds. For a leaking pair this sizes a change in the leak, not in language modelling.', '',
            '| variant | base | seeds | mean diff | 95% interval |', '|---|---|---|---|---|'] + rows


def learned(done, key):
    """[(variant, seed, the run's final 'mope' or 'bands')] over the finished runs that have one."""
    return [(v, seed, x[key]) for v in done for seed, x in sorted(done[v].items()) if x.get(key)]


def fmt_periods(p):
    return '/'.join(f'{x:.1f}' for x in p) if isinstance(p, list) else f'{p:.1f}'


def learned_md(done):
    """The learned MOPE pairs and FourierQK periods at the end of each finished run."""
    out = []
    mope = learned(done, 'mope')
    if mope:
        out += ['', '## Learned MOPE pairs at the end of training', '', "Each pair's period 2 pi / w and width s "
                "in tokens, as the model uses them (after the clamps and the w s >= 5 rule). The paper reads four "
                "clusters into them (character, word, clause, sentence scales). Plot: [mope_pairs.png](mope_pairs.png).", '',
                '| variant | seed | pairs | period min / median / max | s min / median / max | pairs on w s = 5 |',
                '|---|---|---|---|---|---|']
        for v, seed, m in mope:
            per, ss = sorted(2 * math.pi / w for w in m['w']), sorted(m['s'])
            on = sum(abs(w * x - 5.0) < 0.01 for w, x in zip(m['w'], m['s']))
            out.append(f"| {v} | {seed} | {len(per)} | {per[0]:.1f} / {statistics.median(per):.1f} / {per[-1]:.1f} "
                       f"| {ss[0]:.1f} / {statistics.median(ss):.1f} / {ss[-1]:.1f} | {on} |")
    bands = learned(done, 'bands')
    if bands:
        out += ['', '## Learned FourierQK periods at the end of training', '', "Per layer.head, the period T / f* "
                "in tokens of each learned band (the paper: about 49, 27, 10 and 6 tokens for the four bands). "
                "Plot: [periods.png](periods.png).", '', '| variant | seed | periods, layer.head: tokens |', '|---|---|---|']
        out += [f"| {v} | {seed} | {'; '.join(f'{k}: {fmt_periods(p)}' for k, p in b.items())} |"
                for v, seed, b in bands]
    return out


def run_record(run):
    """A run's run.json as a dict ({} where there is none or it cannot be read)."""
    try:
        with open(os.path.join(run.dir, 'run.json')) as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def run_codes(run):
    """The git versions a run was started and resumed with (from its run.json)."""
    return list(run_record(run).get('code', []))


def git(*a):
    return subprocess.run(['git', *a], cwd=HERE, capture_output=True, text=True, timeout=30).stdout


def git_commit(with_diff=False):
    """'<commit>' or '<commit>+dirty' (the results themselves do not make the tree dirty); with_diff:
    (that, the change against the commit as a patch, untracked files included, or '' when clean)."""
    try:
        skip = [] if os.path.isabs(rel(RESULTS)) else [f':(exclude){rel(RESULTS)}']
        dirty = git('status', '--porcelain', '--', '.', *skip).strip()
        code = (git('rev-parse', '--short', 'HEAD').strip() or 'unknown') + ('+dirty' if dirty else '')
        if not with_diff:
            return code
        diff = git('diff', 'HEAD', '--binary', '--', '.', *skip) if dirty else ''
        for path in git('ls-files', '--others', '--exclude-standard', '--', '.', *skip).split('\n') if dirty else ():
            if path:    # an untracked file, as a patch that creates it
                diff += git('diff', '--no-index', '--binary', '--', os.devnull, path)
        return code, diff
    except (OSError, subprocess.SubprocessError):
        return ('unknown', '') if with_diff else 'unknown'


def record_start(run, overlay, st, cmd):
    """run.json: the training command, max_iters, the data (its data_dir, and from its meta.pkl the tokenizer
    and vocabulary: the tables' scale line), and every code the run has seen; for a dirty tree, the diff
    against its commit in code-<k>.diff beside it (k: that code's place in the list)."""
    old = run_record(run) if st in ('resume', 'phase') else {}
    code, diff = git_commit(with_diff=True)
    codes, diffs = list(old.get('code', [])) + [code], dict(old.get('diffs', {}))
    if diff:
        name = f'code-{len(codes) - 1}.diff'
        with open(os.path.join(run.dir, name), 'w') as f:
            f.write(diff)
        diffs[str(len(codes) - 1)] = name
    data_dir = resolve(run, overlay)['data_dir']
    data = old.get('data') or dict(data_dir=data_dir, **(meta_record(data_dir) or {}))   # what the tables name
    with open(os.path.join(run.dir, 'run.json'), 'w') as f:
        json.dump(dict(cmd=cmd, max_iters=max_iters(run, overlay), code=codes, diffs=diffs, data=data,
                       started=datetime.now().isoformat(timespec='seconds')), f, indent=1)


# what prepare.py writes from TinyShakespeare (the text it pins by its SHA256) into its default folders: the
# vocabulary follows from the text and the tokenizer, so a table names it without data/ being prepared
PREPARED = {'data/shakespeare_char': dict(tokenizer='char', vocab_size=65),
            'data/shakespeare': dict(tokenizer='gpt2', vocab_size=50257)}


def meta_record(data_dir):
    """{tokenizer, vocab_size} from data_dir's meta.pkl (prepare.py's), or None: what a run starts with."""
    try:
        with open(os.path.join(HERE, data_dir, 'meta.pkl'), 'rb') as f:
            meta = pickle.load(f)
        rec = dict(tokenizer=meta.get('tokenizer', 'char'), vocab_size=meta['vocab_size'])
    except Exception:   # a garbled meta.pkl raises almost anything
        return None
    return rec if isinstance(rec['tokenizer'], str) and isinstance(rec['vocab_size'], int) else None


def tokens(data_dir, runs=()):
    """data_dir and its tokenizer and vocabulary as the runs recorded them (run.json 'data', written at their
    start), else as prepare.py writes its default folders (PREPARED); else the path alone. data/ itself is
    never read: a table regenerates the same on a fresh clone, where data/ is not prepared."""
    recorded = [r['data'] for r in map(run_record, runs) if isinstance(r.get('data'), dict)
                and r['data'].get('data_dir') == data_dir and 'vocab_size' in r['data']]
    rec = recorded[0] if recorded else PREPARED.get(os.path.relpath(os.path.join(HERE, data_dir), HERE))
    try:
        return f"{data_dir} ({rec['tokenizer']} tokens, vocab {rec['vocab_size']:,})"
    except (TypeError, KeyError, ValueError):
        return data_dir


def scale(runs, overlay):
    """The scale line of a table: the first run's config (resolved from the config files) and its data."""
    for r in runs:
        try:
            c = resolve(r, overlay)
        except Exception:
            continue
        gas = c.get('gradient_accumulation_steps', 1)
        return (f"{c['n_layer']} layers, {c['n_head']} heads, C = {c['n_embd']}, T = {c['block_size']}, batch "
                f"{c['batch_size']}{f' x {gas} micro-steps' if gas > 1 else ''}, {c['max_iters']} steps, eval "
                f"every {c['eval_interval']} on {c['eval_iters']} val batches, data "
                f"{tokens(c['data_dir'], [x for x in runs if x.name == r.name])} ({overlay or 'no overlay'})")
    return 'unknown (no config could be read)'


def committed(text):
    """What a RESULTS.md holds: {variant: seeds} from its main tables (the causal variants' and the leaking
    ones'), and its scale line (None where it has none)."""
    seeds, scale_line, rows = {}, None, False
    for line in text.splitlines():
        if line.startswith('- scale: ') and scale_line is None:
            scale_line = line[len('- scale: '):]
        elif line.startswith('| variant | seeds | final val'):
            rows = True
        elif rows and line.startswith('| ') and not line.startswith('|---'):
            cells = [c.strip() for c in line.strip('|').split('|')]
            if len(cells) > 1 and cells[1].isdigit():
                seeds[cells[0]] = int(cells[1])
        elif not line.startswith('|---'):
            rows = False
    return seeds, scale_line


def why_short(info, v, overlay):
    """Why variant v has fewer finished runs than it might: its runs that are not finished, in words."""
    out = []
    for r, st, detail, s in info:
        if r.name != v or (s and s['done']):
            continue
        if st == 'missing':
            out.append(f"{r.label}: {detail}")
        elif s and s['last'] is not None:
            out.append(f"{r.label} stops at iter {s['last']} of {max_iters(r, overlay)}")
        else:
            out.append(f"{r.label} not started")
    return ', '.join(out) or f"{v} is not in the study's runs"


def less_than(name, text, info, done, overlay, scale_line):
    """Why a table of these runs would hold less than the committed RESULTS.md `text` (at `name`); '' if it
    would not. Less is: another scale (its scale line differs: the model, the batch, the steps, the evals,
    the data or the overlay); fewer steps (a run counted as finished at fewer iterations than its config now
    asks for: its run.json's max_iters below the config's); fewer seeds (a variant of the committed tables
    with fewer finished runs in this one; a variant gone counts 0). More seeds or more variants are not less."""
    seeds, old_scale = committed(text)
    if old_scale is not None and old_scale != scale_line:
        was, now = old_scale.split(', '), scale_line.split(', ')
        return (f"{name} has the scale '{', '.join(x for x in was if x not in now)}'; this table would have "
                f"'{', '.join(x for x in now if x not in was)}'. Pass --replace=True to replace it (another "
                f"scale or seed set is written beside it: --overlay, --seeds)")
    for r, st, detail, s in info:
        if s and s['done']:
            try:
                asked = int(resolve(r, overlay)['max_iters'])
            except Exception:
                continue
            if max_iters(r, overlay) < asked:
                return (f"{name}: this table would count {r.label} as finished at iter {max_iters(r, overlay)}, "
                        f"where its config asks for {asked} (its run.json's max_iters). Train it again, or pass "
                        f"--replace=True")
    short = [(v, n, len(done.get(v, {}))) for v, n in seeds.items() if len(done.get(v, {})) < n]
    if not short:
        return ''
    v, n, m = short[0]
    also = f"; also fewer of {', '.join(f'{x} ({b} of {a})' for x, a, b in short[1:])}" if short[1:] else ''
    return (f"{name} has {n} seeds of {v}; this table would have {m} ({why_short(info, v, overlay)}){also}. "
            f"Finish the run{'s' * (n - m > 1 or bool(also))}, or pass --replace=True")


def write_results(study, runs, opts, argv):
    """RESULTS.md and the plots in results_dir; the same bytes when the runs are the same (no date, no
    commit of the table's own). A table without one finished run never replaces an existing one; one that
    holds less than the existing one (less_than) raises Refused, nothing written, unless opts['replace']."""
    overlay, d = opts['overlay'], results_dir(study, opts)
    info, done, leaking = collect(runs, overlay)
    path = os.path.join(d, 'RESULTS.md')
    if not any(done.values()) and os.path.exists(path):
        print(f"no finished run: {rel(path)} left as it was")
        return path
    try:
        torch_v = metadata.version('torch')
    except metadata.PackageNotFoundError:
        torch_v = 'not installed'
    head = dict(command=' '.join(['python', 'study.py', *argv]), scale=scale(runs, overlay),
                machine=f"{os.cpu_count()} CPUs, torch {torch_v} (where the table was made; each run's own "
                        f"output is its run.txt)",
                run_cmd=' '.join(command(Run(study, 'RUN', 'S', ('CONFIGS',), ('[OVERRIDES]',)), overlay)),
                run_code=', '.join(sorted({c for r in runs for c in run_codes(r)})))
    if os.path.exists(path) and not opts.get('replace'):
        with open(path) as f:
            why = less_than(rel(path), f.read(), info, done, overlay, head['scale'])
        if why:
            raise Refused(why)
    os.makedirs(d, exist_ok=True)
    with open(path, 'w') as f:
        f.write(results_md(study, info, done, leaking, head))
    if plot(d, {v: s for v, s in done.items() if s}, leaking, (STUDIES[study]['refs'] or [None])[0]):
        plot_long(d, done, STUDIES[study].get('long', {}))
    return path


def plot(d, done, leaking, ref=None):
    """val_curves.png (mean over seeds, band min..max), final_val.png (mean, sd bars) and, against
    the study's reference, paired.png and diff_curves.png (plot_paired); False if skipped."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install matplotlib)")
        return False
    if not done:
        return False
    unit = 'nats per token'
    fig, ax = plt.subplots(figsize=(8, 5))
    for v, sums in done.items():
        curves = [dict(s['curve']) for s in sums.values()]
        iters = sorted(i for i in set.intersection(*map(set, curves)) if i > 0)     # iter 0 squashes the rest
        ys = [[c[i] for c in curves] for i in iters]
        line, = ax.plot(iters, [statistics.mean(y) for y in ys], '--' if v in leaking else '-',
                        label=v + (' (LEAKS)' if v in leaking else ''))
        ax.fill_between(iters, [min(y) for y in ys], [max(y) for y in ys], color=line.get_color(), alpha=0.2)
    ax.set(xlabel='iter', ylabel=f'val loss ({unit})', title='val loss, mean over seeds (band: min..max)'
           + ('; dashed: LEAKS' if leaking & set(done) else ''))
    ax.legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.01, 1))      # beside the data, not over it
    fig.savefig(os.path.join(d, 'val_curves.png'), dpi=120, bbox_inches='tight')
    plt.close(fig)
    # the leaking forms in a panel of their own: their losses would squash the causal ones' scale
    st = {v: stats(finals(done, v).values()) for v in done}
    panels = [g for g in ([v for v in st if v not in leaking], [v for v in st if v in leaking]) if g]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 + 0.7 * len(st), 5), squeeze=False, constrained_layout=True,
                             gridspec_kw=dict(width_ratios=[len(g) for g in panels]))
    for ax, g in zip(axes[0], panels):
        leak = g[0] in leaking
        ax.bar(g, [st[v]['mean'] for v in g], yerr=[st[v]['sd'] or 0 for v in g], capsize=4,
               color='tab:red' if leak else 'tab:blue')
        lo = min(st[v]['min'] for v in g) - 0.05
        ax.set_ylim(max(lo, 0), max(st[v]['max'] for v in g) + 0.05)
        ax.tick_params(axis='x', rotation=30)
        ax.set(title=('LEAKING (no modelling result)' if leak else 'causal')
               + (f'\n(y axis from {lo:.2f}, not 0)' if lo > 0 else ''))
    axes[0][0].set_ylabel(f'final val loss ({unit})')
    fig.suptitle('final val loss, mean and sd over seeds')
    fig.savefig(os.path.join(d, 'final_val.png'), dpi=120, bbox_inches='tight')
    plt.close(fig)
    plot_learned(plt, d, done)
    if ref in done:
        plot_paired(plt, d, done, leaking, ref)
    return True


def plot_paired(plt, d, done, leaking, ref):
    """paired.png: each variant's final val minus ref's, paired by seed: the mean and its 95%
    interval, 0 marked; the leaking forms in a panel of their own, so that their large
    differences do not squash the causal ones. diff_curves.png: the causal variants' paired
    difference at every eval step (mean, band: the 95% interval)."""
    unit = 'nats per token'
    rows = [(v, paired(finals(done, v), finals(done, ref))) for v in done if v != ref]
    panels = [(t, [(v, p) for v, p in rows if p and (v in leaking) == leak])
              for t, leak in ((f'causal forms minus {ref}', False), (f'LEAKING forms minus {ref}', True))]
    panels = [(t, g) for t, g in panels if g]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 0.45 * max(len(g) for _, g in panels) + 1.6),
                             squeeze=False, constrained_layout=True)
    for ax, (title, g) in zip(axes[0], panels):
        ys = list(range(len(g)))[::-1]
        ax.errorbar([p['mean'] for _, p in g], ys, xerr=[p['half'] or 0 for _, p in g], fmt='o', capsize=3,
                    color='tab:red' if 'LEAKING' in title else 'tab:blue')
        ax.axvline(0, color='grey', lw=0.8)
        ax.set_yticks(ys, [f"{v} ({p['n']} seeds)" for v, p in g], fontsize=8)
        ax.set(xlabel=f'final val loss minus {ref} ({unit})', title=title + ': mean, 95% interval')
    fig.savefig(os.path.join(d, 'paired.png'), dpi=120, bbox_inches='tight')
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 5))
    for v in [v for v, p in rows if p and v not in leaking]:
        curves = {s: dict(x['curve']) for s, x in done[v].items() if s in done[ref]}
        refc = {s: dict(done[ref][s]['curve']) for s in curves}
        iters = sorted(i for i in set.intersection(*(set(c) & set(refc[s]) for s, c in curves.items())) if i > 0)
        ps = [paired({s: c[i] for s, c in curves.items()}, {s: r[i] for s, r in refc.items()}) for i in iters]
        line, = ax.plot(iters, [p['mean'] for p in ps], label=v)
        if all(p['half'] is not None for p in ps):
            ax.fill_between(iters, [p['mean'] - p['half'] for p in ps], [p['mean'] + p['half'] for p in ps],
                            color=line.get_color(), alpha=0.15)
    ax.axhline(0, color='grey', lw=0.8)
    ax.set(xlabel='iter', ylabel=f'val loss minus {ref} ({unit})',
           title=f'causal forms minus {ref} through training, paired by seed (band: 95% interval)')
    ax.legend(fontsize=8, loc='best')
    fig.savefig(os.path.join(d, 'diff_curves.png'), dpi=120, bbox_inches='tight')
    plt.close(fig)


MULTI_INIT = (50, 26, 10, 5)    # multi_fourier_qk's initial periods (model.MULTI_PERIODS)
SINGLE_INIT = 32                # fourier_qk's initial period at the CPU scale (T = 128, bin 4)


def readable_log_ticks(ax, which):
    """Plain numbers (2, 5, 10, 20, ...) on a log axis, not powers of ten."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter
    axis = ax.xaxis if which == 'x' else ax.yaxis
    lo, hi = ax.get_xlim() if which == 'x' else ax.get_ylim()
    ticks = [m * 10 ** e for e in range(-2, 5) for m in (1, 2, 3, 5) if lo <= m * 10 ** e <= hi]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(ScalarFormatter())
    axis.set_minor_formatter(NullFormatter())


def plot_long(d, done, pairs):
    """long.png (study long): each variant minus dot through training, paired by seed (mean; band: the 95%
    interval), the 2000-step runs and the 6000-step ones side by side on one loss scale."""
    import matplotlib.pyplot as plt
    if not pairs or not any(done.get(v) for v in pairs):
        return
    (base, short), rest = next(iter(pairs.items())), list(pairs.items())[1:]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True, constrained_layout=True)
    for ax, col, ref, title in ((axes[0], 1, short, '2000 steps'), (axes[1], 0, base, '6000 steps')):
        for i, names in enumerate(rest):
            v = names[col]
            seeds = [s for s in done.get(v, {}) if s in done.get(ref, {})]
            if not seeds:
                continue
            its = sorted(set.intersection(*(set(dict(done[v][s]['curve'])) & set(dict(done[ref][s]['curve']))
                                            for s in seeds)) - {0})
            ps = [paired(at_iter(done, v, it), at_iter(done, ref, it)) for it in its]
            n = len(seeds)
            ax.plot(its, [p['mean'] for p in ps], '.-', color=f'C{i}', label=f"{names[1]} ({n} seed{'s' * (n > 1)})")
            if all(p['half'] is not None for p in ps):
                ax.fill_between(its, [p['mean'] - p['half'] for p in ps], [p['mean'] + p['half'] for p in ps],
                                color=f'C{i}', alpha=0.15)
        ax.axhline(0, color='grey', lw=0.8)
        ax.set(xlabel='iter', title=f'{title}: variant minus {ref}')
        if ax.get_legend_handles_labels()[0]:                   # a panel with no pair yet has no legend
            ax.legend(fontsize=8)
    axes[0].set_ylabel('val loss difference (nats per token)')
    fig.savefig(os.path.join(d, 'long.png'), dpi=120)
    plt.close(fig)


def plot_learned(plt, d, done):
    """mope_pairs.png: every run's MOPE (period, s) against the published init; periods.png: every
    learned FourierQK band per layer.head against the paper's 49/27/10/6."""
    marks = 'osD^v<>'
    mope = learned(done, 'mope')
    if mope:
        fig, ax = plt.subplots(figsize=(7, 5))
        P = len(mope[0][2]['w'])
        w0 = [math.exp(i * math.log(0.99 * math.pi) / (P - 1)) for i in range(P)]    # the published init
        ax.plot([2 * math.pi / w for w in w0], [5 / w for w in w0], 'x', color='grey', label='init (paper)')
        colors = {v: f'C{i}' for i, v in enumerate(dict.fromkeys(v for v, _, _ in mope))}
        for j, (v, seed, m) in enumerate(mope):
            ax.plot([2 * math.pi / w for w in m['w']], m['s'], marks[j % len(marks)], color=colors[v], ms=4,
                    alpha=0.6, label=f'{v} s{seed}')
        ax.set(xscale='log', yscale='log', xlabel='period 2 pi / w (tokens)', ylabel='width s (tokens)',
               title='MOPE pairs: the published init (x) and every run at the end of training')
        readable_log_ticks(ax, 'x')
        readable_log_ticks(ax, 'y')
        ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1))
        fig.savefig(os.path.join(d, 'mope_pairs.png'), dpi=120, bbox_inches='tight')
        plt.close(fig)
    bands = learned(done, 'bands')
    if bands:
        fig, ax = plt.subplots(figsize=(9, 5))
        heads = list(dict.fromkeys(k for _, _, b in bands for k in b))
        colors = {v: f'C{i}' for i, v in enumerate(dict.fromkeys(v for v, _, _ in bands))}
        for j, (v, seed, b) in enumerate(bands):
            xs, ys = [], []
            for k, p in b.items():
                for y in (p if isinstance(p, list) else [p]):
                    xs.append(heads.index(k) + 0.1 * (j % 7) - 0.3)
                    ys.append(y)
            ax.plot(xs, ys, marks[j % len(marks)], color=colors[v], ms=4, alpha=0.7, label=f'{v} s{seed}')
        multi = any(isinstance(p, list) for _, _, b in bands for p in b.values())
        for y in (49, 27, 10, 6) if multi else ():      # the paper's periods are those of its 4-band model
            ax.axhline(y, color='grey', ls=':', lw=0.8)
        for y in MULTI_INIT if multi else ():             # where the 4 bands start
            ax.axhline(y, color='black', ls='--', lw=0.6)
        if any(not isinstance(p, list) for _, _, b in bands for p in b.values()):
            ax.axhline(SINGLE_INIT, color='black', ls='-.', lw=0.6)
        ax.set_xticks(range(len(heads)), heads, rotation=90, fontsize=7)
        ax.set(yscale='log', xlabel='layer.head', ylabel='period at the end of training (tokens)',
               title='learned FourierQK periods; init: dashed (4 bands), dash-dot (1 band)'
               + ("; dotted: the paper's 49, 27, 10, 6" if multi else ''))
        readable_log_ticks(ax, 'y')
        ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1))
        fig.savefig(os.path.join(d, 'periods.png'), dpi=120, bbox_inches='tight')
        plt.close(fig)

# ----------------------------------------------------------------------------- the runner


def launch(cmd, out_dir, fresh, env):
    """Start a run, its output to out_dir/run.txt, in its own session: a Ctrl-C reaches study.py only."""
    with open(os.path.join(out_dir, 'run.txt'), 'w' if fresh else 'a') as f:
        return subprocess.Popen([sys.executable, *cmd[1:]], cwd=HERE, stdout=f, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


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
    data = [os.path.join(HERE, resolve(r, overlay)['data_dir'], 'train.bin') for r, _ in queue[:1]]
    if data and not os.path.exists(data[0]):
        print(f"error: {rel(data[0])} not found: run `python prepare.py` first", file=sys.stderr)
        return 2
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, '.gitignore'), 'w') as f:
        f.write('*.pt\n*.tmp\n')
    env = dict(os.environ, **({'OMP_NUM_THREADS': '1'} if jobs > 1 else {}))
    signals, live, failed = [], [], 0

    def forward():                  # each run gets one SIGTERM per signal study.py got
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
        print(f"wrote {rel(write_results(study, runs, opts, argv))}")
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        failed += 1
    return 128 + signals[0] if signals else 1 if failed else 0


def parse(argv):
    if not argv or argv[0] not in STUDIES:
        raise StudyError((f"unknown study {argv[0]!r}" if argv and not argv[0].startswith('-') else
                          f"usage: python study.py STUDY [{FLAGS}]") + f"; studies: {', '.join(STUDIES)}")
    opts = dict(seeds=None, overlay=DEFAULT_OVERLAY, jobs=2, dry_run=False, table_only=False, replace=False)
    for a in argv[1:]:
        key, eq, v = a[2:].partition('=')
        if not a.startswith('--') or key not in opts or not eq:
            raise StudyError(f"bad argument {a!r}; flags: {FLAGS}")
        if key == 'seeds':
            ok = all(x.strip().isdigit() for x in v.split(','))    # seeds are >= 0 (train.py's range)
            opts[key] = list(dict.fromkeys(int(x) for x in v.split(','))) if ok else None
        elif key == 'jobs':
            opts[key] = int(v) if v.isdigit() and int(v) >= 1 else None
        elif key == 'overlay':
            opts[key] = v if not v or os.path.isfile(os.path.join(HERE, v)) else None
        else:
            opts[key] = {'true': True, 'false': False}.get(v.lower())
        if opts[key] is None:
            raise StudyError(f"--{key}={v}: expected " + dict(seeds='integers >= 0, comma-separated', jobs='an integer '
                             '>= 1', overlay='an existing file').get(key, 'True or False'))
    return argv[0], opts


STATUS = ('<!-- status: python study.py status --write=True -->', '<!-- /status -->')


def status_md():
    """Every study's finished runs (an eval at max_iters in its committed log) and phase evaluations,
    at the default scale and seeds: the README's status table."""
    out = ['| study | runs finished / planned | phase evaluations | results |', '|---|---|---|---|']
    for study in STUDIES:
        runs = plan(study)
        sums = [summarize(*read_log(os.path.join(r.dir, 'log.jsonl')), max_iters(r, DEFAULT_OVERLAY)) for r in runs]
        done = [r for r, s in zip(runs, sums) if s['done']]
        want = [(r, m) for r in runs if r.name in STUDIES[study].get('phase', ()) for m in PHASE_MODES]
        have = sum(m in s.get('phase', {}) for r, s in zip(runs, sums) if s['done'] for m in PHASE_MODES
                   if r.name in STUDIES[study].get('phase', ()))
        out.append(f"| `{study}` | {len(done)} / {len(runs)}{': complete' if len(done) == len(runs) else ''} | "
                   f"{f'{have} / {len(want)}' if want else '-'} | [results/{study}/RESULTS.md](results/{study}/RESULTS.md) |")
    return '\n'.join(out)


def read_block(path, markers):
    """(the file's text, where its block starts, where it ends): what stands between the two marker lines."""
    with open(path) as f:
        text = f.read()
    a, b = text.find(markers[0]), text.find(markers[1])
    if a < 0 or b < a:
        raise StudyError(f"{os.path.basename(path)} has no {markers[0]} ... {markers[1]} block")
    return text, a + len(markers[0]), b


def write_block(path, markers, text, less=None):
    """Replace what stands between the two marker lines of a file (README's generated tables). less: given
    the block there now and the new one, why the new one holds less ('' if it does not); a reason raises
    Refused and nothing is written."""
    old, a, b = read_block(path, markers)
    why = less(old[a:b].strip('\n'), text) if less else ''
    if why:
        raise Refused(why)
    with open(path, 'w') as f:
        f.write(old[:a] + '\n' + text + '\n' + old[b:])


def bool_flags(argv, keys):
    """{key: bool} from --key=True|False arguments, each key one of keys; None for anything else."""
    out = dict.fromkeys(keys, False)
    for a in argv:
        key, eq, v = a[2:].partition('=')
        if not a.startswith('--') or key not in keys or not eq or v.lower() not in ('true', 'false'):
            return None
        out[key] = v.lower() == 'true'
    return out


def status_counts(block):
    """{study: (finished runs, phase evaluations)} from a status table."""
    out = {}
    for line in block.splitlines():
        m = re.match(r"\| `([^`]+)` \| (\d+) / \d+[^|]*\| (?:(\d+) / \d+|-) \|", line)
        if m:
            out[m[1]] = (int(m[2]), int(m[3] or 0))
    return out


def status_less(old, new):
    """Why the status table `new` holds less than `old`, the one in README ('' if it does not). Less is a
    study with fewer finished runs, or fewer phase evaluations, than the old table gives it (a study gone
    from the table counts 0); more planned runs with as many finished are not less."""
    now = status_counts(new)
    for study, (runs, phase) in status_counts(old).items():
        runs2, phase2 = now.get(study, (0, 0))
        for what, a, b in (('finished runs', runs, runs2), ('phase evaluations', phase, phase2)):
            if b < a:
                return (f"README.md's status table has {a} {what} of {study}; this one would have {b}. Finish "
                        f"the runs (python study.py {study} --dry_run=True says which), or pass --replace=True")
    return ''


def status(argv):
    """python study.py status [--write=True [--replace=True]]: print the table, or write it between README's
    markers; not over a table with more finished runs (status_less) unless --replace=True."""
    opts = bool_flags(argv, ('write', 'replace'))
    if opts is None or (opts['replace'] and not opts['write']):
        print("error: usage: python study.py status [--write=True [--replace=True]]", file=sys.stderr)
        return 2
    table = status_md()
    if not opts['write']:
        print(table)
        return 0
    try:
        write_block(os.path.join(HERE, 'README.md'), STATUS, table, None if opts['replace'] else status_less)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print('wrote the status table in README.md')
    return 0


def main(argv):
    if argv and argv[0] == 'status':
        return status(argv[1:])
    if argv and argv[0] == 'replay':
        import replay
        return replay.main(argv[1:])
    if argv and argv[0] == 'ledger':
        import ledger
        return ledger.main(argv[1:])
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + f"\n\nstudies: {', '.join(STUDIES)}")
        return 0
    try:
        study, opts = parse(argv)
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    runs = plan(study, opts['seeds'], opts['overlay'])
    if opts['table_only']:
        try:
            print(f"wrote {rel(write_results(study, runs, opts, argv))}")
        except Refused as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    return run_study(study, runs, opts, argv)


if __name__ == '__main__':
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:         # `python study.py ... --dry_run=True | head`: no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
