"""
Does dot attention learn the recency the locality priors impose, only later? The answers of
study recency (and study corpus), from the runs' logs:

- what each model attends to through training: the attention statistics train.py logs at every
  eval (mean distance E[i - j], row entropy, weight on the 1, 4, 16 nearest keys, weight by lag),
  averaged over layers and heads;
- sample efficiency: the step at which a prior first reaches dot's final val loss, paired by seed
  (the committed 6000-step runs of study long, and the 2000-step runs), and its ratio to dot's steps;
- the data limit: the priors against dot on the larger corpus (lab/corpus.py), where 6000 steps are
  under one pass, beside TinyShakespeare's 6000-step runs (about 12 passes).

    python -m lab.recency              # results/recency/RECENCY.md, recency.json and the plots

The verdict rules are printed beside the numbers (RULES).
"""

import json
import os
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import cli, paths
from lab.logs import read_log
from lab.runs import recorded_eval_set
from lab.stats import paired

PRIORS = ('fox', 'causal_gauss', 'fourier_qk_causal', 'fox_mope_rel', 'alibi')
COLOURS = dict(zip(('dot',) + PRIORS, ('black', 'tab:orange', 'tab:green', 'tab:purple', 'tab:red', 'tab:blue')))
STEPS = (250, 2000, 6000)       # the heat maps' steps
SEEDS = (1337, 2, 3)
# the rules that decide the rows (printed beside them in RECENCY.md)
RULES = {
    'profile': "dot learns the prior's recency profile if, on every seed, its mean attention distance at the "
               "end is within 20% of the prior's (|d_dot - d_prior| <= 0.2 d_prior); it does not if the gap "
               "is over 50% on every seed; otherwise not resolved",
    'efficiency': "the prior's advantage is sample efficiency if every seed reaches dot's final val loss "
                  "before dot does (ratio < 1) while the final difference's 95% interval lies within +-0.02 "
                  "(the equivalence margin: the smallest effect of interest); it is not if that interval lies "
                  "below -0.02 (a better end point) or a seed never reaches dot's loss; otherwise not resolved "
                  "(an interval holding 0 but wider than the margin cannot tell the two apart)",
    'corpus': "the gains last on a corpus that does not repeat if, at 6000 steps on it, the prior's final val "
              "minus dot's (paired over seeds) has a 95% interval below 0; they do not if the interval holds 0 "
              "and lies within +-0.02; otherwise (or with fewer than 2 seeds) not resolved",
    'moonshot': "a causal variant reaches dot's final loss in at most half of dot's steps on every seed and is "
                "still ahead at the end on every seed",
}


def load(name, seed):
    evals, _, _ = read_log(os.path.join(paths.RUNS, f'{name}-s{seed}', 'log.jsonl'))
    return evals


def alike_runs(a, b, seed):
    """Whether two runs (name, evals) of a seed read one evaluation set at their last eval (logs.alike)."""
    sets = {recorded_eval_set(os.path.join(paths.RUNS, f'{name}-s{seed}'), ev[max(ev)]) for name, ev in (a, b)}
    return len(sets) == 1 and None not in sets


def mean_stat(row, key):
    """A statistic over layers and heads (a list of lists per layer), or None."""
    v = row.get(key)
    if not v:
        return None
    flat = [x for layer in v for x in (layer if isinstance(layer, list) else [layer])]
    return sum(flat) / len(flat)


def lag_profile(row):
    """The mean weight at each lag, over layers (attn_lag is per layer, over heads)."""
    per = row.get('attn_lag')
    if not per:
        return None
    return [sum(layer[i] for layer in per) / len(per) for i in range(len(per[0]))]


def reach_step(evals, target):
    """The first eval step whose val is at or below target; None if none is."""
    return next((i for i in sorted(evals) if evals[i]['val'] <= target), None)


def efficiency(prior, base='dot', suffix='_long'):
    """Per seed: the step at which the prior first reaches base's final val (same seed, same
    length), base's own steps, and the final difference prior - base."""
    out = {}
    for s in SEEDS:
        a, b = load(prior + suffix, s), load(base + suffix, s)
        if not a or not b or max(a) != max(b) or not alike_runs((prior + suffix, a), (base + suffix, b), s):
            continue
        n = max(b)
        out[s] = dict(step=reach_step(a, b[n]['val']), steps=n, diff=a[n]['val'] - b[n]['val'])
    return out


def efficiency_verdict(e):
    if len(e) < 2:
        return 'not resolved (fewer than 2 seeds)'
    p = paired({s: x['diff'] for s, x in e.items()}, {s: 0.0 for s in e})
    lo, hi = p['mean'] - p['half'], p['mean'] + p['half']
    faster = all(x['step'] is not None and x['step'] < x['steps'] for x in e.values())
    if faster and lo >= -0.02 and hi <= 0.02:
        return 'holds'
    if hi < -0.02:
        return 'does not hold (a better end point)'
    if any(x['step'] is None for x in e.values()):
        return "does not hold (a seed never reaches dot's loss)"
    return 'not resolved'


def profiles(name, seeds=SEEDS):
    """{seed: {step: (distance, entropy, near1, near4, near16)}} from a run's attention statistics."""
    out = {}
    for s in seeds:
        ev = load(name, s)
        rows = {i: r for i, r in ev.items() if r.get('attn_dist')}
        if rows:
            out[s] = {i: tuple(mean_stat(r, k) for k in ('attn_dist', 'attn_entropy', 'attn_near1',
                                                          'attn_near4', 'attn_near16')) for i, r in rows.items()}
    return out


def profile_verdict(dot, prior):
    """The 'profile' rule on the seeds both have, at their common last step."""
    gaps = []
    for s in set(dot) & set(prior):
        n = max(set(dot[s]) & set(prior[s]))
        gaps.append(abs(dot[s][n][0] - prior[s][n][0]) / prior[s][n][0])
    if not gaps:
        return 'not resolved (no runs with statistics yet)', gaps
    if all(g <= 0.2 for g in gaps):
        return 'holds', gaps
    if all(g > 0.5 for g in gaps):
        return 'does not hold', gaps
    return 'not resolved', gaps


def corpus_diffs(prior, base='dot'):
    """Per seed on the larger corpus (study corpus, 6000 steps): the prior's final val minus dot's,
    the step the prior first reaches dot's final val, and both runs' train - val gaps at the end."""
    out = {}
    for s in SEEDS:
        a, b = load('corpus_' + prior, s), load('corpus_' + base, s)
        if not a or not b or max(a) != max(b) or not alike_runs(('corpus_' + prior, a), ('corpus_' + base, b), s):
            continue
        n = max(b)
        out[s] = dict(diff=a[n]['val'] - b[n]['val'], step=reach_step(a, b[n]['val']), steps=n,
                      gap=a[n]['train'] - a[n]['val'], base_gap=b[n]['train'] - b[n]['val'])
    return out


def corpus_verdict(c):
    if len(c) < 2:
        return f'not resolved ({len(c)} seed{"s" if len(c) != 1 else ""})'
    p = paired({s: x['diff'] for s, x in c.items()}, {s: 0.0 for s in c})
    lo, hi = p['mean'] - p['half'], p['mean'] + p['half']
    if hi < 0:
        return 'holds'
    if lo <= 0 <= hi and lo >= -0.02 and hi <= 0.02:
        return 'does not hold'
    return 'not resolved'


def fmt(x, p=3):
    return '-' if x is None else f'{x:.{p}f}'


def heat(names, step):
    """{name: lag profile at step} from seed 1337's runs with statistics (the _long run at 6000)."""
    out = {}
    for n in names:
        ev = load(n + ('_stats_long' if step > 2000 else '_stats'), 1337)
        if step in ev and lag_profile(ev[step]):
            out[n] = lag_profile(ev[step])
    return out


def plot(d, curves, eff, heats):
    """recency.png: mean attention distance and row entropy through training, dot beside each prior
    (seed 1337, 2000 and 6000 steps); lag_heat.png: the weight by lag per variant at the steps of
    STEPS; efficiency.png: the step each prior first reaches dot's final val, per seed."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, k, label in ((axes[0], 0, 'mean attention distance E[i - j] (tokens)'), (axes[1], 1, 'row entropy (nats)')):
        for n, c in curves.items():
            xs = sorted(c)
            base = n[:-5] if n.endswith('_long') else n       # a variant's 6000-step run: its colour, dashed
            ax.plot(xs, [c[i][k] for i in xs], label=n, color=COLOURS[base], ls='--' if n != base else '-')
        ax.set_xlabel('step')
        if k == 0:
            ax.set_yscale('log')
        ax.set_title(label, fontsize=10)
    axes[1].legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    fig.savefig(os.path.join(d, 'recency.png'), dpi=110)
    plt.close(fig)
    if heats:
        # one row per variant in every panel (blank where a step has no run yet), the names once, on the left
        names = [n for n in ('dot',) + PRIORS if any(n in h for h in heats.values())]
        lags = min(64, *(len(v) for h in heats.values() for v in h.values()))
        fig, axes = plt.subplots(1, len(heats), figsize=(3.6 * len(heats) + 2.2, 3.6), squeeze=False,
                                 sharey=True, layout='constrained')
        for ax, (step, h) in zip(axes[0], heats.items()):
            img = [[max(h[n][i], 1e-6) if n in h else float('nan') for i in range(lags)] for n in names]
            im = ax.imshow(img, aspect='auto', norm=matplotlib.colors.LogNorm(vmin=1e-4, vmax=1), cmap='viridis')
            ax.set_xlabel('lag i - j (tokens)')
            ax.set_title(f'step {step}', fontsize=10)
        axes[0][0].set_yticks(range(len(names)), names, fontsize=8)
        fig.suptitle('mean attention weight by lag (seed 1337; blank: no run with statistics yet)', fontsize=10)
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
        fig.savefig(os.path.join(d, 'lag_heat.png'), dpi=110)
        plt.close(fig)
    if eff:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        names = list(eff)
        for x, n in enumerate(names):
            ys = [v['step'] / v['steps'] for v in eff[n].values() if v['step'] is not None]
            if ys:
                ax.bar(x, sum(ys) / len(ys), color='tab:blue', alpha=0.5)
                ax.scatter([x] * len(ys), ys, color='k', s=12, zorder=3)
        ax.axhline(1.0, color='grey', lw=1, ls='--')
        ax.axhline(0.5, color='tab:red', lw=1, ls=':')
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel("steps to dot's final val / dot's steps")
        ax.set_title('sample efficiency, 6000-step runs (bar: mean; dots: seeds)', fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(d, 'efficiency.png'), dpi=110)
        plt.close(fig)
    return True


def report():
    """RECENCY.md's text and recency.json's numbers."""
    eff = {p: efficiency(p) for p in PRIORS if efficiency(p)}
    prof = {n: profiles(n + '_stats') for n in ('dot',) + PRIORS}
    prof_long = {n: profiles(n + '_stats_long', (1337,)) for n in ('dot',) + PRIORS}
    lines = ['# Does dot attention learn the recency the priors impose?', '',
             'Made by `python -m lab.recency` from the runs of `python -m lab.study --study=recency` (the long '
             "study's variants, ALiBi and dot without positions, with train.py's attention statistics) and "
             "study long's committed 6000-step runs; CPU study scale (config/cpu.py: 4 layers, 4 heads, C = 128, "
             'T = 128, batch 16), char-level TinyShakespeare. 6000 steps are about 12 passes over the '
             'training text. Every model here is causal.', '',
             '## Sample efficiency', '', f"Rule: {RULES['efficiency']}.", '',
             "| prior | seeds | step reaching dot's final val, per seed | ratio to dot's steps (mean) | "
             'final prior - dot (95% interval) | verdict |', '|---|---|---|---|---|---|']
    rows = {}
    for p, e in eff.items():
        steps = ', '.join(f"{s}: {x['step'] if x['step'] is not None else 'never'}" for s, x in sorted(e.items()))
        ratios = [x['step'] / x['steps'] for x in e.values() if x['step'] is not None]
        d = paired({s: x['diff'] for s, x in e.items()}, {s: 0.0 for s in e})
        cell = f"{d['mean']:+.3f}" + (f" ({d['mean'] - d['half']:+.3f}..{d['mean'] + d['half']:+.3f})" if d['half'] else '')
        v = efficiency_verdict(e)
        rows[p] = dict(seeds=len(e), per_seed=e, ratio=sum(ratios) / len(ratios) if ratios else None, diff=d, verdict=v)
        lines.append(f"| `{p}` | {len(e)} | {steps} | {fmt(rows[p]['ratio'], 2)} | {cell} | **{v}** |")
    moon = [p for p, e in eff.items() if e and all(x['step'] is not None and x['step'] <= x['steps'] / 2
                                                   and x['diff'] < 0 for x in e.values())]
    closest = min(rows, key=lambda p: rows[p]['ratio'] or 9, default=None)     # the smallest mean ratio
    lines += ['', f"The moonshot ({RULES['moonshot']}): " + (', '.join(f'`{p}`' for p in moon) if moon else
              'no variant here' + (f"; the closest is `{closest}` (mean ratio {rows[closest]['ratio']:.2f})"
                                   if closest and rows[closest]['ratio'] is not None else '')) + '.', '',
              '## What the models attend to', '', f"Rule: {RULES['profile']}.", '',
              '| variant | seeds | mean distance at the end (tokens) | entropy (nats) | weight on the nearest 1 / 4 / 16 '
              "keys | gap to dot's distance, relative, per seed | dot learns its profile? |", '|---|---|---|---|---|---|---|']
    prows = {}
    for n, pr in prof.items():
        if not pr:
            continue
        ends = [v[max(v)] for v in pr.values()]
        mean = [sum(e[k] for e in ends) / len(ends) for k in range(5)]
        verdict, gaps = ('-', []) if n == 'dot' else profile_verdict(prof['dot'], pr)
        prows[n] = dict(seeds=len(pr), end=mean, verdict=verdict, gaps=gaps)
        lines.append(f"| `{n}` | {len(pr)} | {mean[0]:.2f} | {mean[1]:.2f} | {mean[2]:.2f} / {mean[3]:.2f} / {mean[4]:.2f} | "
                     f"{', '.join(f'{g:.0%}' for g in gaps) or '-'} | {verdict if n != 'dot' else '(the reference)'} |")
    lines += ['', "At 6000 steps (seed 1337 only: study recency's `_stats_long` runs), the same rule:", '',
              "| variant | dot's distance then | the variant's | gap | dot learns its profile? |", '|---|---|---|---|---|']
    for n, pr in prof_long.items():
        if n != 'dot' and pr and prof_long['dot']:
            verdict, gaps = profile_verdict(prof_long['dot'], pr)
            prows[n + '_long'] = dict(seeds=len(pr), end=list(pr[1337][max(pr[1337])]), verdict=verdict, gaps=gaps)
            d0 = prof_long['dot'][1337][max(prof_long['dot'][1337])][0]
            lines.append(f"| `{n}` | {d0:.2f} | {pr[1337][max(pr[1337])][0]:.2f} | {gaps[0]:.0%} | {verdict} |")
    crow = {}
    for p in PRIORS:
        c = corpus_diffs(p)
        if c:
            crow[p] = dict(per_seed=c, verdict=corpus_verdict(c))
    lines += ['', '## The data limit: a corpus that does not repeat', '',
              'Study corpus: the same scale and schedule (6000 steps, warmup 300) on the larger public-domain corpus of '
              'lab/corpus.py (16.1M characters, char-level; 6000 steps x 16 x 128 tokens = 12.3M, under one pass), '
              "against TinyShakespeare's 6000-step runs of study long (about 12 passes).", '',
              f"Rule: {RULES['corpus']}.", '',
              "| prior | seeds | final prior - dot on the corpus, per seed | on TinyShakespeare, same seed | "
              "step reaching dot's final val | train - val gap, prior / dot | verdict |", '|---|---|---|---|---|---|---|']
    for p, r in crow.items():
        ts = efficiency(p)
        per = ', '.join(f"{s}: {x['diff']:+.3f}" for s, x in sorted(r['per_seed'].items()))
        tss = ', '.join(f"{s}: {ts[s]['diff']:+.3f}" for s in sorted(r['per_seed']) if s in ts) or '-'
        steps = ', '.join(f"{s}: {x['step'] if x['step'] is not None else 'never'}" for s, x in sorted(r['per_seed'].items()))
        gaps = ', '.join(f"{x['gap']:+.3f} / {x['base_gap']:+.3f}" for _, x in sorted(r['per_seed'].items()))
        lines.append(f"| `{p}` | {len(r['per_seed'])} | {per} | {tss} | {steps} | {gaps} | **{r['verdict']}** |")
    if not crow:
        lines.append('| (no finished corpus runs yet: `python -m lab.study --study=corpus`) | | | | | | |')
    lines += ['', 'Plots: `recency.png` (distance and entropy through training), `lag_heat.png` (weight by lag at '
              f'steps {", ".join(map(str, STEPS))}), `efficiency.png`.']
    curves = {n: pr[1337] for n, pr in prof.items() if 1337 in pr and n in ('dot', 'fox', 'causal_gauss', 'fox_mope_rel')}
    curves.update({n + '_long': pr[1337] for n, pr in prof_long.items() if 1337 in pr and n in ('dot', 'fox')})
    heats = {s: h for s in STEPS if (h := heat(('dot',) + PRIORS, s))}
    data = dict(efficiency=rows, profile=prows, corpus=crow, moonshot=moon, closest=closest, rules=RULES)
    return '\n'.join(lines) + '\n', data, (curves, eff, heats)


def main(argv):
    defaults = {'out': 'results/recency'}                      # in the repository
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return rc
    c['out'] = paths.at_repo(c['out'], defaults['out'])
    text, data, (curves, eff, heats) = report()
    os.makedirs(c['out'], exist_ok=True)
    with open(os.path.join(c['out'], 'RECENCY.md'), 'w') as f:
        f.write(text)
    with open(os.path.join(c['out'], 'recency.json'), 'w') as f:
        json.dump(data, f, indent=1, sort_keys=True)
    plot(c['out'], curves, eff, heats)
    print(text)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
