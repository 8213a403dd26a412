"""
The drawing helpers of the study plots (a style per series of a panel that no other series of it shares,
at most 6 series to a panel, the legend beside the data, PNGs whose bytes the figure alone sets) and the
paired plots: each variant minus the reference of its own training length (paired.png at the end,
diff_curves.png through training, long.png for the long runs), a study's named pairs (pairs.png) and its
interactions ab - a - b + base (interactions.png): the difference of each seed, the mean and its 95%
interval. matplotlib comes in as `plt` from lab/plots.py (imported there only, and only when plotting).
"""

import os

from lab.logs import alike, at_iter, finals
from lab.stats import paired

# Okabe and Ito's colours (apart in the common colour blindnesses too), each with a dash and a marker of its own
COLORS = ('#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9')
DASHES = ('-', '--', '-.', ':', (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
MARKS = 'os^Dvp'
PER_PANEL = 6                                            # series in one panel, at most
REF = dict(color='black', ls='-', marker='None')         # a panel's reference, beside its series
UNIT = 'nats per token'


def style(i):
    """The i-th series of a panel: the first 6 differ in colour, dash and marker; past 6 the dash shifts with
    the round, so that no two of the first 36 share both colour and dash."""
    return dict(color=COLORS[i % 6], ls=DASHES[(i + i // 6) % 6], marker=MARKS[i % 6])


def chunks(xs, k=PER_PANEL):
    """xs in order, cut into the fewest runs of at most k, of near-equal length."""
    n = -(-len(xs) // k)
    return [xs[i * len(xs) // n:(i + 1) * len(xs) // n] for i in range(n)]


def legend_right(ax, handles=None, labels=None):
    """The legend beside the axes, to their right: never over the data."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=8, loc='upper left', bbox_to_anchor=(1.01, 1), borderaxespad=0)


def share(axes, keys, axis='y'):
    """Axes of the same key on one scale (the first of each key leads)."""
    first = {}
    for ax, k in zip(axes, keys):
        if k in first:
            getattr(ax, 'share' + axis)(first[k])
        first.setdefault(k, ax)


def save(plt, fig, d, name):
    """The PNG, without matplotlib's Software entry: the same figure gives the same bytes."""
    fig.savefig(os.path.join(d, name), dpi=120, bbox_inches='tight', metadata={'Software': None})
    plt.close(fig)


def length(done, v):
    """A variant's training length: the last eval iter of its finished runs (None without one)."""
    return max((x['curve'][-1][0] for x in done.get(v, {}).values() if x['curve']), default=None)


def ref_of(done, v, refs):
    """The first of refs with finished runs as long as v's: a run is compared only with one of its length."""
    return next((r for r in refs if done.get(r) and length(done, r) == length(done, v)), None)


def by_ref(done, leaking, refs, leak=False):
    """[(ref, [variant])]: the causal variants (the leaking ones with leak=True) under the ref of their length."""
    out = {}
    for v in done:
        r = ref_of(done, v, refs)
        if r and v != r and (v in leaking) == leak:
            out.setdefault(r, []).append(v)
    return list(out.items())


def diffs(done, a, b):
    """{seed: final val of a - that of b} over the seeds both have, evaluated alike (logs.alike)."""
    two = alike(done, a, b)[0]
    return {s: two[a][s]['final'] - two[b][s]['final'] for s in sorted(two[a])}


def line_band(ax, xs, ys, lo, hi, st, label):
    ax.plot(xs, ys, label=label, lw=1.4, ms=3.5, **st)
    if lo is not None:
        ax.fill_between(xs, lo, hi, color=st['color'], alpha=0.12, lw=0)


def diff_curve(done, v, ref):
    """The eval iters (0 aside), the paired v - ref at each and the number of seeds both have."""
    done = alike(done, v, ref)[0]
    seeds = list(done[v])
    if not seeds:
        return [], [], 0
    its = sorted(set.intersection(*(set(dict(done[v][s]['curve'])) & set(dict(done[ref][s]['curve']))
                                    for s in seeds)) - {0})
    return its, [paired(at_iter(done, v, it), at_iter(done, ref, it)) for it in its], len(seeds)


def seeds_label(v, n):
    return f"{v} ({n} seed{'s' * (n != 1)})"


def curves(ax, done, pairs, styles):
    """pairs [(variant, ref)]: each variant minus its ref through training (mean; band: the 95% interval)."""
    for (v, r), st in zip(pairs, styles):
        its, ps, n = diff_curve(done, v, r)
        if its:
            full = all(p['half'] is not None for p in ps)
            line_band(ax, its, [p['mean'] for p in ps], [p['mean'] - p['half'] for p in ps] if full else None,
                      [p['mean'] + p['half'] for p in ps] if full else None, st, seeds_label(v, n))
    ax.axhline(0, color='grey', lw=0.8)


def plot_diff_curves(plt, d, done, leaking, refs):
    """diff_curves.png: each causal variant minus the ref of its length at every eval, paired by seed, at most
    6 to a panel, every panel on one loss scale."""
    panels = [(r, g) for r, vs in by_ref(done, leaking, refs) for g in chunks(vs)]
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.9 * len(panels) + 0.6), sharey=True, squeeze=False,
                             constrained_layout=True)
    for ax, (r, g) in zip(axes[:, 0], panels):
        curves(ax, done, [(v, r) for v in g], map(style, range(len(g))))
        ax.set(xlabel='iter', ylabel=f'minus {r} ({UNIT})', title=f'causal forms minus {r} ({length(done, r)} steps)')
        legend_right(ax)
    fig.suptitle('val loss difference through training, paired by seed: mean, band: 95% interval')
    save(plt, fig, d, 'diff_curves.png')


def forest(ax, rows, color):
    """rows [(label, {seed: difference})], top down: each seed's difference (open circles, below the row), the
    mean and its 95% interval (none for one seed); 0 marked."""
    ys = list(range(len(rows)))[::-1]
    ps = [paired(x, dict.fromkeys(x, 0.0)) for _, x in rows]
    ax.plot([v for _, x in rows for v in x.values()], [y - 0.2 for y, (_, x) in zip(ys, rows) for _ in x], 'o',
            color='grey', mfc='none', ms=4, label='each seed')
    ax.errorbar([p['mean'] for p in ps], ys, xerr=[p['half'] or 0 for p in ps], fmt='o', capsize=3, color=color,
                label='mean, 95% interval')
    ax.axvline(0, color='grey', lw=0.8)
    ax.set_yticks(ys, [seeds_label(lab, p['n']) for (lab, _), p in zip(rows, ps)], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.4)


def forest_fig(plt, d, name, panels, xlabel, title):
    """panels [(title, leak, rows)] one above the other (the empty ones left out), the causal ones on one x
    scale, the leaking ones (red) on their own: their differences would squash the causal ones."""
    panels = [p for p in panels if p[2]]
    if not panels:
        return
    hs = [max(len(rows), 2) + 1.6 for _, _, rows in panels]
    w = max(8, 5.5 + 0.07 * max(len(lab) for _, _, rows in panels for lab, _ in rows))     # room for the labels
    fig, axes = plt.subplots(len(panels), 1, figsize=(w, 0.33 * sum(hs) + 0.5), squeeze=False,
                             constrained_layout=True, gridspec_kw=dict(height_ratios=hs))
    share(axes[:, 0], [leak for _, leak, _ in panels], 'x')
    for ax, (t, leak, rows) in zip(axes[:, 0], panels):
        forest(ax, rows, COLORS[1] if leak else COLORS[0])
        ax.set(xlabel=xlabel, title=t)
    legend_right(axes[0, 0])
    fig.suptitle(title)
    save(plt, fig, d, name)


def plot_paired(plt, d, done, leaking, refs):
    """paired.png: each variant's final val minus that of the ref of its length, paired by seed."""
    forest_fig(plt, d, 'paired.png', [
        (f"{'LEAKING' if leak else 'causal'} forms minus {r} ({length(done, r)} steps)", leak,
         [(v, x) for v in vs for x in [diffs(done, v, r)] if x])
        for leak in (False, True) for r, vs in by_ref(done, leaking, refs, leak)],
        f'final val loss difference ({UNIT})', 'final val minus the reference of the same length, paired by seed')


def plot_ledger(d, rows, k=12):
    """ledger.png: the comparison that decides each ledger row, per seed, its mean and 95% interval; rows
    [(label, {seed: difference}, leaks)], the causal ones in panels of k on one x scale, the leaking ones
    on their own. False without matplotlib (an optional extra) or rows."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    def title(leak, part):
        first, last = part[0][0].split(':')[0], part[-1][0].split(':')[0]
        return (f"{'LEAKING comparisons: a change in a leak' if leak else 'causal comparisons'}, "
                + (f'row {first}' if first == last else f'rows {first} to {last}'))
    panels = [(title(leak, part), leak, part)
              for leak in (False, True) for part in chunks([(lab, x) for lab, x, lk in rows if lk == leak], k)]
    if not panels:
        return False
    forest_fig(plt, d, 'ledger.png', panels, f'difference in final val loss ({UNIT})',
               "the comparison that decides each row of results/LEDGER.md, paired by seed")
    return True


def plot_pairs(plt, d, done, leaking, pairs):
    """pairs.png: a study's named pairs (variant, base) of the same length, variant minus base per seed."""
    rows = {False: [], True: []}
    for v, b in pairs:
        x = diffs(done, v, b) if length(done, v) == length(done, b) else {}
        if x:
            rows[v in leaking or b in leaking].append((f'{v} minus {b}', x))
    forest_fig(plt, d, 'pairs.png', [('causal pairs', False, rows[False]),
                                     ('LEAKING pairs: a change in the leak, not in modelling', True, rows[True])],
               f'final val loss, variant minus base ({UNIT})', 'each variant minus its base, paired by seed')


def plot_interactions(plt, d, done, leaking, interactions):
    """interactions.png: per seed ab - a - b + base (below 0: the pair gains more than its parts add)."""
    rows = {False: [], True: []}
    for vs in interactions:
        f = [finals(alike(done, *vs)[0], v) for v in vs]
        seeds = sorted(set.intersection(*map(set, f))) if len({length(done, v) for v in vs}) == 1 else []
        if seeds:
            rows[any(v in leaking for v in vs)].append((f'{vs[0]} = {vs[1]} + {vs[2]} over {vs[3]}',
                                                        {s: f[0][s] - f[1][s] - f[2][s] + f[3][s] for s in seeds}))
    forest_fig(plt, d, 'interactions.png', [('causal combinations', False, rows[False]),
                                            ('LEAKING combinations', True, rows[True])],
               f'ab - a - b + base, final val loss ({UNIT})',
               'do the two mechanisms add? ab - a - b + base per seed (below 0: more than the sum)')


def plot_long(d, done, pairs):
    """long.png (studies long, recency): each variant minus dot through training, paired by seed (mean; band:
    the 95% interval), the short runs above, the long ones below, on one loss scale."""
    import matplotlib.pyplot as plt
    if not pairs or not any(done.get(v) for v in pairs):
        return
    (base, short), rest = next(iter(pairs.items())), list(pairs.items())[1:]
    fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharey=True, squeeze=False, constrained_layout=True)
    for ax, col, ref in ((axes[0, 0], 1, short), (axes[1, 0], 0, base)):
        got = [(i, n[col]) for i, n in enumerate(rest) if done.get(n[col]) and done.get(ref)
               and length(done, n[col]) == length(done, ref)]
        curves(ax, done, [(v, ref) for _, v in got], [style(i) for i, _ in got])
        n = length(done, ref)
        ax.set(xlabel='iter', ylabel=f'minus {ref} ({UNIT})',
               title=f'variant minus {ref}' + (f', {n} steps' if n else ''))
        legend_right(ax)
    fig.suptitle('val loss difference through training, paired by seed: mean, band: 95% interval')
    save(plt, fig, d, 'long.png')
