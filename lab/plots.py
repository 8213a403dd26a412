"""
The plots of a study's table (with the optional matplotlib, imported inside plot()): val curves,
final val, the paired differences to the study's reference at the end and through training, the
long runs, the learned MOPE pairs and FourierQK periods. The same code and numbers give the same
bytes.
"""

import math
import os
import statistics

from lab.logs import at_iter, finals, learned
from lab.stats import paired, stats


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
