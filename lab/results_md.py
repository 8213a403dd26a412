"""
RESULTS.md as text: the causal variants' table and their paired differences to each reference,
the leaking variants apart (sized against their causal counterparts), the study's named pairs,
interactions, the long runs, the phase-randomised evaluations, the learned MOPE pairs and
FourierQK periods, and what is pending. Nothing here reads a file: the numbers come in.
"""

import math
import statistics

from lab import studies
from lab.logs import alike, at_iter, finals, learned
from lab.runs import phase_missing
from lab.stats import paired, stats


def ms(st):
    return f"{st['mean']:.4f}" + (f" ({st['sd']:.4f})" if st['sd'] is not None else '')


def table(done, names, timed=True):
    """The variants' final and best val over seeds; tok/s only where the runs were timed alike (timed)."""
    out = ['| variant | seeds | final val, mean (sd) | min..max | best val, mean (sd) | min..max | shuffled-val gap '
           '| audit |' + ' tok/s |' * timed, '|---|---|---|---|---|---|---|---|' + '---|' * timed]
    for v in names:
        f, b = stats(s['final'] for s in done[v].values()), stats(s['best'] for s in done[v].values())
        gaps = [s['gap'] for s in done[v].values() if s['gap'] is not None]
        toks = [s['tok_s'] for s in done[v].values() if s['tok_s']]
        out.append(f"| {v} | {f['n']} | {ms(f)} | {f['min']:.4f}..{f['max']:.4f} | {ms(b)} | {b['min']:.4f}.."
                   f"{b['max']:.4f} | {f'{statistics.mean(gaps):+.3f}' if gaps else '-'} | "
                   f"{'**LEAKS**' if any(s['leaks'] for s in done[v].values()) else 'causal'} |"
                   + (f" {f'{statistics.mean(toks):,.0f}' if toks else '-'} |" if timed else ''))
    return out


def pair(done, a, b, get=finals):
    """The paired difference a - b (stats.paired) of a value `get` gives, over the seeds at which both were
    evaluated alike (logs.alike): two runs read on other val windows are no pair."""
    two = alike(done, a, b)[0]
    return paired(get(two, a), get(two, b))


def evaluation(done):
    """The head's line on what the finished runs were evaluated on: each evaluation set with its runs."""
    by = {}
    for v in done:
        for seed, x in sorted(done[v].items(), key=lambda x: str(x[0])):
            by.setdefault(x.get('eval_set') or 'a set not recorded', []).append(f"{v} s{seed}")
    if len(by) == 1:
        return f"every finished run read {next(iter(by))}"
    return '; '.join(f"{k} ({', '.join(runs)})" for k, runs in by.items()) + ': runs on two sets are not paired'


def diff_cells(p):
    """'seeds | mean | 95% interval' of a paired difference (None: none paired)."""
    if p is None:
        return '0 | - | -'
    iv = 'n/a (1 seed)' if p['half'] is None else f"{p['mean'] - p['half']:+.4f}..{p['mean'] + p['half']:+.4f}"
    return f"{p['n']} | {p['mean']:+.4f} | {iv}"


def results_md(study, info, done, leaking, head):
    """RESULTS.md. head: command, scale, machine, run_cmd, run_code."""
    causal = [v for v in done if done[v] and v not in leaking]
    timed = studies.STUDIES[study].get('overlay') != ''   # the paper scale: GPU runs, several at once
    leaky = [v for v in done if done[v] and v in leaking]
    out = [f"# Study `{study}`", '', f"- command: `{head['command']}`",
           f"- code: the runs': {head.get('run_code') or 'not recorded'} (each run's in its run.json; "
           "results/REPLAYS.md: the replays)",
           f"- scale: {head['scale']}", f"- evaluation: {evaluation(done)} (logs.alike: a pair is two runs of one "
           "seed on one set)", f"- machine: {head['machine']}",
           f"- each run: `{head['run_cmd']}` (its exact command is in its run.json, its output in run.txt)",
           "- plots (with matplotlib): " + ("[paired differences](paired.png) and [through training](diff_curves.png) "
                                            "to the study's reference, " if studies.STUDIES[study]['refs'] else '')
           + ("[each variant against its base](pairs.png), " if pairs_md(study, done) else '')
           + ("[interactions](interactions.png), " if interaction_md(study, done) else '')
           + "[val curves](val_curves.png), [final val](final_val.png)", '',
           "final val: the val loss at max_iters (mean over the fixed val batches); best val: the lowest eval; gap: "
           "shuffled val - val at the final eval; " + ("tok/s: the median of a run's logged training tok/s, mean "
                                                       "over seeds. " if timed else
                                                       "no tok/s: these runs shared the GPU with a varying number of "
                                                       "others, so their step times compare nothing (bench.py times "
                                                       "variants alike). ")
           + "A paired difference is the mean of per-seed differences over the seeds both have, with the 95% "
           "interval mean +- t(0.975, n-1) sd/sqrt(n).", '', '## Causal variants', '']
    out += table(done, causal, timed) if causal else ['(no finished causal run yet)']
    for ref in [r for r in studies.STUDIES[study]['refs'] if r in causal]:
        sd = stats(finals(done, ref).values())['sd']
        out += ['', f"### Final val, paired difference to `{ref}` (sd of {ref} over seeds: "
                f"{'n/a' if sd is None else f'{sd:.4f}'})", '',
                "| variant | seeds | mean diff | 95% interval | interval clear of 0? |",
                '|---|---|---|---|---|']
        for v, p in [(v, pair(done, v, ref)) for v in causal if v != ref]:
            if p:
                lo, hi = (None, None) if p['half'] is None else (p['mean'] - p['half'], p['mean'] + p['half'])
                clear = 'n/a (one seed)' if lo is None else 'below' if hi < 0 else 'above' if lo > 0 else 'no'
                out.append(f"| {v} | {diff_cells(p)} | {clear} |")
    if leaky:
        out += ['', '## Leaking variants: not a modelling result', '', "The start-up audit found that these models "
                "see future tokens: their loss is not a language-modelling result, shown only to size the leak.", '']
        out += table(done, leaky, timed) + ['', '| variant | causal counterpart | seeds | leak size (variant - counterpart) '
                                     '| 95% interval |', '|---|---|---|---|---|']
        for v in leaky:
            c = studies.STUDIES[study]['causal'].get(v)
            p = c and pair(done, v, c)
            out.append(f"| {v} | {c or '(none set)'} | {diff_cells(p)} |")
    out += pairs_md(study, done) + interaction_md(study, done) + long_md(study, done) + phase_md(study, done)
    out += learned_md(done)
    pending = [f"- {r.label}: {detail}" for r, st, detail, s in info
               if st != 'done' or (s and s['done'] and phase_missing(r, s['phase']))]
    return '\n'.join(out + ['', '## Pending', ''] + (pending or ['(none)'])) + '\n'


def interaction_md(study, done):
    """Whether two mechanisms add: per seed (ab - base) - (a - base) - (b - base) = ab - a - b + base."""
    rows = []
    for ab, a, b, base in studies.STUDIES[study].get('interactions', ()):
        f = [finals(alike(done, ab, a, b, base)[0], v) for v in (ab, a, b, base)]
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


def long_md(study, done):
    """Study long: each variant minus dot, paired by seed, at iters 2000, 4000 and 6000 of the long runs and
    at the end of the 2000-step ones; and the last 2000 steps' change of that difference (still shrinking?)."""
    pairs = studies.STUDIES[study].get('long', {})
    base, short = next(iter(pairs.items()), (None, None))
    rows = []
    for lv, sv in list(pairs.items())[1:]:
        cells = [pair(done, sv, short)]
        cells += [pair(done, lv, base, lambda d, v: at_iter(d, v, it)) for it in (2000, 4000, 6000)]
        two = alike(done, lv, base)[0]
        d6, d4 = at_iter(two, lv, 6000), at_iter(two, lv, 4000)
        b6, b4 = at_iter(two, base, 6000), at_iter(two, base, 4000)
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
    """The phase-randomised evaluations of a study's trained checkpoints: each against its own phases and
    against the first ref, paired over seeds."""
    ph = {(v, m): {seed: x['phase'][m] for seed, x in done[v].items() if m in x.get('phase', {})}
          for v in studies.STUDIES[study].get('phase', ()) if v in done for m in studies.phase_modes(study)}
    if not any(ph.values()):
        return []
    ref = studies.STUDIES[study]['refs'][0]
    out = ['', '## Phase-randomised evaluation', '', "Each trained checkpoint evaluated again on the same val "
           "batches with the phases of rfft(q) and rfft(k) over the window replaced (`python -m lab.phase "
           "--out_dir=RUN --qk_phase=MODE`; before 2026-12-02, `train.py --eval_only=True --qk_phase=MODE`): "
           "`random_shared`, the authors' main mode, draws one phase per sequence, head and bin, the same for q "
           "and k, amplitudes kept; `random`, their stress test, draws every channel of q and of k independently; "
           "`amplitude` drops the phases. A bilateral form is re-phased inside its filter; any other model after "
           "it computes q and k. The re-phasing reads the whole window, so every re-phased model leaks: the "
           "columns measure how much the trained model relies on the phases, not language modelling.", '',
           f"| variant | mode | seeds | val, own phases | val, re-phased | re-phased - own: mean, 95% interval | "
           f"re-phased - {ref}: mean, 95% interval |", '|---|---|---|---|---|---|---|']
    for (v, m), d in ph.items():
        if d:
            own = paired({k: x[1] for k, x in d.items()}, {k: x[0] for k, x in d.items()})
            p = paired({k: x[1] for k, x in d.items() if k in alike(done, v, ref)[0][v]}, finals(done, ref))
            cells = ['no paired seeds' if not q else f"{q['mean']:+.4f} (1 seed)" if q['half'] is None else
                     '{1} ({2})'.format(*diff_cells(q).split(' | ')) for q in (own, p)]
            out.append(f"| {v} | {m} | {len(d)} | {ms(stats(x[0] for x in d.values()))} | "
                       f"{ms(stats(x[1] for x in d.values()))} | {cells[0]} | {cells[1]} |")
    return out


def pairs_md(study, done):
    """A study's named pairs (variant, its base), paired over the seeds both have."""
    rows = [f"| {v} | {b} | {diff_cells(p)} |" for v, b in studies.STUDIES[study].get('pairs', ())
            for p in [pair(done, v, b)] if p]
    if not rows:
        return []
    return ['', '### Each variant against its base', '', 'Final val of the variant minus that of its base, paired '
            'over seeds. For a leaking pair this sizes a change in the leak, not in language modelling.', '',
            '| variant | base | seeds | mean diff | 95% interval |', '|---|---|---|---|---|'] + rows


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
