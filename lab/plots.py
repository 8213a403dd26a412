"""
The plots of a study's table (with the optional matplotlib, imported inside plot()): val curves, final
val, the paired differences to the reference of each run's own length at the end and through training,
the study's named pairs and interactions, the long runs (lab/plots_paired.py), the learned MOPE pairs and
FourierQK periods. At most 6 series to a panel, no two of a panel alike in colour and dash, the legends
beside the data; the same code and numbers give the same bytes.
"""

import math
import os
import statistics

from lab import studies
from lab.logs import finals, learned
from lab.plots_paired import (COLORS, PER_PANEL, REF, UNIT, chunks, legend_right, length, line_band, plot_diff_curves,
                              plot_interactions, plot_long, plot_paired, plot_pairs, save, share, style)
from lab.stats import stats

__all__ = ['plot', 'plot_long']


def plot(d, done, leaking, ref=None, spec=None):
    """val_curves.png, final_val.png, the learned parameters and, against the refs (ref, then the study's
    own), paired.png and diff_curves.png; pairs.png and interactions.png where the study names them. spec:
    the study's entry of studies.STUDIES (by default that of d's name, results/<study>[@...]). False if
    skipped."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install matplotlib)")
        return False
    if not done:
        return False
    if spec is None:
        spec = studies.STUDIES.get(os.path.basename(os.path.normpath(d)).split('@')[0], {})
    refs = list(dict.fromkeys(r for r in [ref, *spec.get('refs', ())] if r))
    plot_val_curves(plt, d, done, leaking, refs)
    plot_final(plt, d, done, leaking)
    plot_learned(plt, d, done, leaking)
    plot_paired(plt, d, done, leaking, refs)
    plot_diff_curves(plt, d, done, leaking, refs)
    plot_pairs(plt, d, done, leaking, spec.get('pairs', ()))
    plot_interactions(plt, d, done, leaking, spec.get('interactions', ()))
    return True


def curve_panels(done, leaking, refs):
    """[(leak, ref or None, [variant])]: per training length, its causal variants then its leaking ones, at
    most 6 series to a panel with the ref of that length (drawn in every panel of it)."""
    out = []
    for n in dict.fromkeys(length(done, v) for v in done):
        r = next((x for x in refs if done.get(x) and length(done, x) == n), None)
        for leak in (False, True):
            vs = [v for v in done if length(done, v) == n and v != r and (v in leaking) == leak]
            out += [(leak, r, g) for g in chunks(vs, PER_PANEL - (r is not None)) or ([[]] if r and not leak else [])]
    return out


def mean_band(ax, done, v, st, label):
    """v's val loss, mean over seeds (band: min..max), iter 0 aside (it squashes the rest)."""
    cs = [dict(s['curve']) for s in done[v].values()]
    its = sorted(i for i in set.intersection(*map(set, cs)) if i > 0)
    ys = [[c[i] for c in cs] for i in its]
    line_band(ax, its, [statistics.mean(y) for y in ys], [min(y) for y in ys], [max(y) for y in ys], st, label)


def plot_val_curves(plt, d, done, leaking, refs):
    """val_curves.png: the panels of curve_panels one above the other, those of a kind on one loss scale."""
    panels = curve_panels(done, leaking, refs)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.9 * len(panels) + 0.6), squeeze=False,
                             constrained_layout=True)
    share(axes[:, 0], [leak for leak, _, _ in panels])
    for ax, (leak, r, g) in zip(axes[:, 0], panels):
        if r:
            mean_band(ax, done, r, REF, f'{r} (reference)')
        for i, v in enumerate(g):
            mean_band(ax, done, v, style(i), v)
        kind = 'LEAKING forms (no modelling result)' if leak else 'causal forms'
        ax.set(xlabel='iter', ylabel=f'val loss ({UNIT})', title=f'{kind}, {length(done, g[0] if g else r)} steps')
        legend_right(ax)
    fig.suptitle('val loss, mean over seeds (band: min..max)')
    save(plt, fig, d, 'val_curves.png')


def plot_final(plt, d, done, leaking):
    """final_val.png: final val, mean and sd over seeds; the leaking forms in a panel of their own (their losses
    would squash the causal ones' scale)."""
    st = {v: stats(finals(done, v).values()) for v in done}
    panels = [g for g in ([v for v in st if v not in leaking], [v for v in st if v in leaking]) if g]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 + 0.7 * len(st), 5), squeeze=False, constrained_layout=True,
                             gridspec_kw=dict(width_ratios=[len(g) for g in panels]))
    for ax, g in zip(axes[0], panels):
        leak = g[0] in leaking
        ax.bar(g, [st[v]['mean'] for v in g], yerr=[st[v]['sd'] or 0 for v in g], capsize=4,
               color=COLORS[1] if leak else COLORS[0])
        lo = min(st[v]['min'] for v in g) - 0.05
        ax.set_ylim(max(lo, 0), max(st[v]['max'] for v in g) + 0.05)
        ax.tick_params(axis='x', rotation=30)
        ax.set(title=('LEAKING (no modelling result)' if leak else 'causal')
               + (f'\n(y axis from {lo:.2f}, not 0)' if lo > 0 else ''))
    axes[0][0].set_ylabel(f'final val loss ({UNIT})')
    fig.suptitle('final val loss, mean and sd over seeds')
    save(plt, fig, d, 'final_val.png')


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


def plot_learned(plt, d, done, leaking=()):
    """mope_pairs.png and periods.png: one panel per variant, one colour and marker per seed."""
    plot_mope(plt, d, done, leaking)
    plot_periods(plt, d, done, leaking)


def seed_legend(fig, ax):
    """One legend for the figure's panels (each label once: the seeds, the lines of reference), beside ax."""
    seen = {}
    for a in fig.axes:
        for h, lab in zip(*a.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    legend_right(ax, list(seen.values()), list(seen))


def plot_mope(plt, d, done, leaking):
    """mope_pairs.png: every run's MOPE (period, s) against the published init, a panel per variant."""
    mope = learned(done, 'mope')
    if not mope:
        return
    vs, seeds = list(dict.fromkeys(v for v, _, _ in mope)), list(dict.fromkeys(s for _, s, _ in mope))
    fig, axes = plt.subplots(1, len(vs), figsize=(1.5 + 3.6 * len(vs), 4.2), sharex=True, sharey=True,
                             squeeze=False, constrained_layout=True)
    P = len(mope[0][2]['w'])
    w0 = [math.exp(i * math.log(0.99 * math.pi) / (P - 1)) for i in range(P)]    # the published init
    for ax, v in zip(axes[0], vs):
        ax.plot([2 * math.pi / w for w in w0], [5 / w for w in w0], 'x', color='grey', label='init (paper)')
        for seed, m in [(s, m) for u, s, m in mope if u == v]:
            st = style(seeds.index(seed))
            ax.plot([2 * math.pi / w for w in m['w']], m['s'], ls='None', marker=st['marker'], color=st['color'],
                    ms=4, alpha=0.7, label=f'seed {seed}')
        ax.set(xscale='log', yscale='log', xlabel='period 2 pi / w (tokens)', title=v + ' (LEAKS)' * (v in leaking))
    axes[0, 0].set_ylabel('width s (tokens)')
    for ax in axes[0]:
        readable_log_ticks(ax, 'x')
        readable_log_ticks(ax, 'y')
    seed_legend(fig, axes[0, -1])
    fig.suptitle('MOPE pairs: the published init (x) and every run at the end of training')
    save(plt, fig, d, 'mope_pairs.png')


def band_points(b, heads, k, n):
    """x (the layer.head, run k of n a little apart) and y (the period) of each band of a run."""
    pts = [(heads.index(h) + 0.16 * (k - (n - 1) / 2), y) for h, p in b.items()
           for y in (p if isinstance(p, list) else [p])]
    return [x for x, _ in pts], [y for _, y in pts]


def plot_periods(plt, d, done, leaking):
    """periods.png: every learned FourierQK band per layer.head, a panel per variant, against the inits and
    the paper's 49/27/10/6."""
    bands = learned(done, 'bands')
    if not bands:
        return
    vs, seeds = list(dict.fromkeys(v for v, _, _ in bands)), list(dict.fromkeys(s for _, s, _ in bands))
    heads = list(dict.fromkeys(k for _, _, b in bands for k in b))
    fig, axes = plt.subplots(len(vs), 1, figsize=(9, 2.6 * len(vs) + 0.8), sharex=True, sharey=True,
                             squeeze=False, constrained_layout=True)
    for ax, v in zip(axes[:, 0], vs):
        runs = [(s, b) for u, s, b in bands if u == v]
        for k, (seed, b) in enumerate(runs):
            st = style(seeds.index(seed))
            ax.plot(*band_points(b, heads, k, len(runs)), ls='None', marker=st['marker'], color=st['color'], ms=4,
                    alpha=0.8, label=f'seed {seed}')
        kinds = {isinstance(p, list) for _, b in runs for p in b.values()}
        hline = dict(xmin=0, xmax=1, transform=ax.get_yaxis_transform())
        if True in kinds:           # the paper's periods are those of its 4-band model
            ax.hlines((49, 27, 10, 6), color='grey', ls=':', lw=0.8, label="the paper's 49, 27, 10, 6", **hline)
            ax.hlines(MULTI_INIT, color='black', ls='--', lw=0.6, label='init, 4 bands', **hline)
        if False in kinds:
            ax.hlines([SINGLE_INIT], color='black', ls='-.', lw=0.6, label='init, 1 band', **hline)
        ax.set(yscale='log', ylabel='period (tokens)', title=v + ' (LEAKS)' * (v in leaking))
    axes[-1, 0].set_xticks(range(len(heads)), heads, rotation=90, fontsize=7)
    axes[-1, 0].set_xlabel('layer.head')
    for ax in axes[:, 0]:
        readable_log_ticks(ax, 'y')
    seed_legend(fig, axes[0, 0])
    fig.suptitle('learned FourierQK periods at the end of training')
    save(plt, fig, d, 'periods.png')
