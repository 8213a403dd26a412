"""The study plots are readable (issue 34): at most 6 series to a panel, no two of a panel alike in colour
and line style, every legend beside the data; paired plots pair a run only with a reference of its own
length; the named pairs and interactions drawn per seed; the same numbers give the same bytes."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

pytest.importorskip('matplotlib')          # an optional extra (requirements-plots.txt)

from lab import plots, plots_paired, studies, study  # noqa: E402
from lab.tests.test_study import fake_run, ov, res  # noqa: E402,F401  (res: a fixture)

NINE = ['v%d' % i for i in range(9)]
EVAL_SET = '2 x 4 windows of 16 tokens, seed 20240101, splits 900/100'   # one set: every pair is alike


def run(final, n=500, every=250):
    """A finished run's summary as lab/logs.py makes it: val falling to `final` at iter n."""
    curve = [(i, final + (n - i) / n) for i in range(0, n + 1, every)]
    return dict(done=True, curve=curve, final=final, best=final, gap=None, tok_s=None, leaks=False, phase={},
                mope=None, bands=None, eval_set=EVAL_SET)


def variant(final, n=500, seeds=(1, 2, 3)):
    return {s: run(final + 0.01 * s * (1 + final), n) for s in seeds}


@pytest.fixture
def drawn(monkeypatch):
    """{png name: its figure}, drawn as saved (the figures stay readable after pyplot lets them go)."""
    figs, real = {}, plots_paired.save

    def save(plt, fig, d, name):
        figs[name] = fig
        real(plt, fig, d, name)
    monkeypatch.setattr(plots_paired, 'save', save)
    monkeypatch.setattr(plots, 'save', save)
    return figs


def series(ax):
    """The lines of an axes that its legend names (the grey 0 line and the error bars' own lines aside)."""
    return [ln for ln in ax.lines if not ln.get_label().startswith('_')]


def apart(a, b):
    return a.x0 >= b.x1 or a.x1 <= b.x0 or a.y0 >= b.y1 or a.y1 <= b.y0


def check_readable(fig):
    """At most 6 series an axes, no two of one alike in colour and line style, every legend off every axes."""
    from matplotlib.colors import to_hex
    fig.canvas.draw()
    for ax in fig.axes:
        keys = [(to_hex(ln.get_color()), ln.get_linestyle()) for ln in series(ax)]
        assert len(keys) <= 6, (ax.get_title(), keys)
        assert len(set(keys)) == len(keys), (ax.get_title(), keys)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    for lg in legends:
        box = lg.get_window_extent()
        for ax in fig.axes:
            assert apart(box, ax.get_window_extent()), (ax.get_title(), box, ax.get_window_extent())
    return legends


def labels(fig):
    return [ln.get_label() for ax in fig.axes for ln in series(ax)]


def test_style_never_repeats_colour_and_dash_in_a_panel():
    keys = [(s['color'], str(s['ls'])) for s in map(plots_paired.style, range(36))]
    assert len(set(keys)) == 36 and len({k[0] for k in keys[:6]}) == 6
    assert plots_paired.chunks(list(range(16))) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15]]
    assert plots_paired.chunks(list(range(6))) == [list(range(6))] and plots_paired.chunks([]) == []


def test_many_variants_are_split_into_readable_panels(tmp_path, drawn):
    done = {'dot': variant(1.8), **{v: variant(1.6 + 0.02 * i) for i, v in enumerate(NINE)},
            'leak_a': variant(0.5), 'leak_b': variant(0.2)}
    assert plots.plot(str(tmp_path), done, {'leak_a', 'leak_b'}, 'dot', spec=dict(refs=['dot']))
    assert {'val_curves.png', 'final_val.png', 'paired.png', 'diff_curves.png'} <= set(drawn)
    for name, fig in drawn.items():
        assert check_readable(fig) or name == 'final_val.png', name        # every plot of series has a legend
    val = drawn['val_curves.png']
    assert len(val.axes) == 3 and set(NINE + ['leak_a', 'leak_b']) <= set(labels(val))   # 5 + 4 causal, 2 leaking
    assert all('dot (reference)' in [ln.get_label() for ln in series(ax)] for ax in val.axes)
    diff = drawn['diff_curves.png']
    assert len(diff.axes) == 2 and sorted(x.split(' (')[0] for x in labels(diff)) == NINE     # the causal ones only
    for p in tmp_path.glob('*.png'):
        assert b'Software' not in p.read_bytes()


def test_paired_plots_pair_a_run_only_with_a_reference_of_its_length(tmp_path, drawn):
    done = {'dot': variant(1.8), 'fox': variant(1.6), 'dot_long': variant(1.5, 1000), 'fox_long': variant(1.45, 1000)}
    assert plots_paired.by_ref(done, set(), ['dot_long', 'dot']) == [('dot', ['fox']), ('dot_long', ['fox_long'])]
    assert plots_paired.ref_of(done, 'fox', ['dot_long']) is None        # no reference as long: not compared
    plots.plot(str(tmp_path), done, set(), 'dot_long', spec=dict(refs=['dot_long', 'dot']))
    paired = drawn['paired.png']
    check_readable(paired)
    got = {}
    for ax in paired.axes:
        ticks = [t.get_text().split(' (')[0] for t in ax.get_yticklabels()]
        got[ax.get_title()] = dict(zip(ticks[::-1], ax.containers[0].lines[0].get_xdata()[::-1]))
    assert got == {'causal forms minus dot (500 steps)': pytest.approx({'fox': -0.2 - 0.02 * 0.2}),
                   'causal forms minus dot_long (1000 steps)': pytest.approx({'fox_long': -0.05 - 0.02 * 0.05})}
    for ax in drawn['diff_curves.png'].axes:
        (line,) = series(ax)
        assert line.get_xdata()[-1] == (1000 if 'dot_long' in ax.get_title() else 500)
        assert line.get_label().startswith('fox_long' if 'dot_long' in ax.get_title() else 'fox ')
    plots.plot_long(str(tmp_path), done, {'dot_long': 'dot', 'fox_long': 'fox', 'dot': 'fox_long'})
    check_readable(drawn['long.png'])
    top, bottom = drawn['long.png'].axes
    assert [ln.get_label() for ln in series(top)] == ['fox (3 seeds)']            # 'fox_long' against dot: left out
    assert [ln.get_label() for ln in series(bottom)] == ['fox_long (3 seeds)']


def test_pairs_and_interactions_are_drawn_per_seed(tmp_path, drawn):
    """decay's (variant, base) pairs and an interaction ab - a - b + base: each seed, the mean, its interval;
    a pair of runs of two lengths is not drawn."""
    done = {'dot': variant(1.8), 'a': variant(1.7), 'b': variant(1.75), 'ab': variant(1.6),
            'a_all': variant(1.72), 'b_long': variant(1.7, 1000)}
    spec = dict(refs=[], pairs=[('a_all', 'a'), ('b_long', 'b')], interactions=[('ab', 'a', 'b', 'dot')])
    plots.plot(str(tmp_path), done, set(), None, spec=spec)
    assert 'paired.png' not in drawn and 'diff_curves.png' not in drawn        # no refs
    f = {v: {s: x['final'] for s, x in done[v].items()} for v in done}
    for name, label, want in (('pairs.png', 'a_all minus a', {s: f['a_all'][s] - f['a'][s] for s in (1, 2, 3)}),
                              ('interactions.png', 'ab = a + b over dot',
                               {s: f['ab'][s] - f['a'][s] - f['b'][s] + f['dot'][s] for s in (1, 2, 3)})):
        check_readable(drawn[name])
        (ax,) = drawn[name].axes
        assert [t.get_text() for t in ax.get_yticklabels()] == [f'{label} (3 seeds)']
        (seeds,) = series(ax)
        assert sorted(seeds.get_xdata()) == pytest.approx(sorted(want.values()))
        assert ax.containers[0].lines[0].get_xdata()[0] == pytest.approx(sum(want.values()) / 3)
        assert (tmp_path / name).exists()


def test_study_plots_are_byte_identical_and_linked(res, monkeypatch):  # noqa: F811 (res: the fixture)
    names = ['dot'] + NINE
    monkeypatch.setitem(studies.STUDIES, 'p', dict(
        runs=[(v, ['config/dot.py'], [], (1, 2)) for v in names], refs=['dot'], causal={},
        pairs=[('v1', 'v0')], interactions=[('v3', 'v1', 'v2', 'dot')]))
    for i, v in enumerate(names):
        for s in (1, 2):
            fake_run(res, f'{v}-s{s}', {0: 4.0, 250: 2.0 + i / 50, 500: 1.8 - i / 100 + s / 200})
    argv = ['--study=p', '--table_only=True', f'--overlay={ov(res)}']
    assert study.main(argv) == 0
    first = {p.name: p.read_bytes() for p in (res / 'p').glob('*.png')}
    assert {'val_curves.png', 'diff_curves.png', 'paired.png', 'pairs.png', 'interactions.png'} <= set(first)
    md = (res / 'p' / 'RESULTS.md').read_text()
    assert '[each variant against its base](pairs.png), [interactions](interactions.png), ' in md
    assert study.main(argv) == 0
    assert {p.name: p.read_bytes() for p in (res / 'p').glob('*.png')} == first


def test_the_ledger_plot_draws_each_deciding_comparison_per_seed(tmp_path, drawn, monkeypatch):
    """lab.ledger.deciding picks the first comparison of a paired row, every one of rule 'all', and none of
    another rule; a leaking or re-phased side goes to its own panels; ledger.png draws them k to a panel."""
    from lab import ledger
    from lab.claims import Claim, Cmp
    done = {v: variant(x) for v, x in (('dot', 1.8), ('a', 1.6), ('b', 1.7), ('fox', 1.5), ('leak', 0.4))}
    for s, x in done['a'].items():
        x['phase'] = {'random': (x['final'], x['final'] + 2.0)}
    rows = [Claim(n='1', claim='a helps', paper='-0.1', rule='effect', effect=-0.1, cmps=(Cmp('a'), Cmp('b'))),
            Claim(n='2', claim='nothing beats fox', paper='-', rule='all', cmps=(Cmp('a', 'fox'), Cmp('b', 'fox'))),
            Claim(n='3', claim='a leak', paper='-', rule='leak', cmps=(Cmp('leak'),)),
            Claim(n='4', claim='leak helps', paper='-', rule='sign', effect=-1, cmps=(Cmp('leak'),)),
            Claim(n='5', claim='re-phased a', paper='-', rule='sign', effect=1, cmps=(Cmp('a@random', 'a'),))]
    monkeypatch.setattr(ledger, 'CLAIMS', rows)
    got = ledger.deciding(done, {'leak'})
    assert [(lab, leak) for lab, _, leak in got] == [
        ('1: a', False), ('2: a - fox', False), ('2: b - fox', False), ('4: leak', True),
        ('5: a@random - a', True)]
    assert got[0][1] == pytest.approx({s: done['a'][s]['final'] - done['dot'][s]['final'] for s in (1, 2, 3)})
    assert got[4][1] == pytest.approx({1: 2.0, 2: 2.0, 3: 2.0})
    assert plots_paired.plot_ledger(str(tmp_path), got, k=2)
    fig = drawn['ledger.png']
    check_readable(fig)
    assert [ax.get_title() for ax in fig.axes] == ['causal comparisons, row 1', 'causal comparisons, row 2',
                                                    'LEAKING comparisons: a change in a leak, rows 4 to 5']
    assert not plots_paired.plot_ledger(str(tmp_path), [])
