"""lab/recency.py: each verdict rule on logs made up here (every branch of each rule reached), the
committed RECENCY.md is what the committed runs give, and the ledger's rows 32 to 35 take their
verdicts from it."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import paths, recency, verdicts  # noqa: E402
from lab.ledger import CLAIMS  # noqa: E402


def write_run(runs, label, vals, stats=None):
    """A log.jsonl with an eval row per {step: val} (train = val + 0.1), and attention statistics."""
    d = runs / label
    d.mkdir(parents=True)
    with open(d / 'log.jsonl', 'w') as f:
        for it, v in sorted(vals.items()):
            row = dict(kind='eval', iter=it, train=v - 0.1, val=v, eval_set='one set')     # every run alike
            if stats is not None:
                row.update(attn_dist=[[stats, stats]], attn_entropy=[[1.0, 1.0]], attn_near1=[[0.3, 0.3]],
                           attn_near4=[[0.6, 0.6]], attn_near16=[[0.9, 0.9]], attn_lag=[[0.5, 0.3, 0.2]])
            f.write(json.dumps(row) + '\n')


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, 'RUNS', str(tmp_path))
    return tmp_path


def curve(end, reach_at=None, n=6000, every=500):
    """val from 3.0 down to end; with reach_at, the val crosses 1.5 (dot's end here) at that step."""
    out = {}
    for i in range(0, n + 1, every):
        if reach_at is None:
            out[i] = 3.0 - (3.0 - end) * i / n
        else:
            out[i] = 1.5 + 0.001 * (reach_at - i) if i < reach_at else min(1.5, end + 1e-4 * (n - i) / n)
    out[n] = end
    return out


@pytest.mark.parametrize('ends, reach, verdict', [
    ((1.495, 1.5, 1.505), 3000, 'holds'),                                 # faster, ends inside the margin
    ((1.44, 1.45, 1.46), 3000, 'does not hold (a better end point)'),     # clear below -0.02
    ((1.5, 1.5, 1.5), None, "does not hold (a seed never reaches dot's loss)"),
    ((1.46, 1.5, 1.52), 3000, 'not resolved'),                            # interval holds 0, wider than the margin
])
def test_the_efficiency_rule(runs, ends, reach, verdict):
    for s, end in zip(recency.SEEDS, ends):
        write_run(runs, f'dot_long-s{s}', curve(1.5))
        write_run(runs, f'fox_long-s{s}', curve(end, reach) if reach else curve(end + 0.01))
    e = recency.efficiency('fox')
    assert sorted(e) == sorted(recency.SEEDS)
    if reach:
        assert all(x['step'] == reach for x in e.values())
    assert recency.efficiency_verdict(e) == verdict
    assert recency.efficiency_verdict({1337: e[1337]}).startswith('not resolved')     # one seed decides nothing


def test_the_profile_rule():
    dot = {s: {2000: (5.0,)} for s in recency.SEEDS}
    assert recency.profile_verdict(dot, {s: {2000: (4.5,)} for s in recency.SEEDS})[0] == 'holds'     # 11%
    assert recency.profile_verdict(dot, {s: {2000: (1.0,)} for s in recency.SEEDS})[0] == 'does not hold'
    mixed = {1337: {2000: (4.5,)}, 2: {2000: (1.0,)}}
    verdict, gaps = recency.profile_verdict(dot, mixed)
    assert verdict == 'not resolved' and sorted(round(g, 3) for g in gaps) == [0.111, 4.0]


def test_the_corpus_rule(runs):
    for s, d in zip(recency.SEEDS, (-0.05, -0.06, -0.04)):
        write_run(runs, f'corpus_dot-s{s}', curve(1.5))
        write_run(runs, f'corpus_fox-s{s}', curve(1.5 + d, 3000))
    c = recency.corpus_diffs('fox')
    assert [round(c[s]['diff'], 3) for s in recency.SEEDS] == [-0.05, -0.06, -0.04]
    assert recency.corpus_verdict(c) == 'holds'
    tight = {s: dict(x, diff=d) for (s, x), d in zip(c.items(), (-0.002, 0.0, 0.002))}
    wide = {s: dict(x, diff=d) for (s, x), d in zip(c.items(), (-0.01, 0.0, 0.01))}     # half-width 0.025
    assert recency.corpus_verdict(tight) == 'does not hold' and recency.corpus_verdict(wide) == 'not resolved'
    assert recency.corpus_verdict({1337: c[1337]}) == 'not resolved (1 seed)'


def test_the_statistics_are_read_per_run(runs):
    write_run(runs, 'dot_stats-s1337', {0: 4.0, 2000: 1.6}, stats=7.0)
    p = recency.profiles('dot_stats')
    assert p == {1337: {0: (7.0, 1.0, 0.3, 0.6, 0.9), 2000: (7.0, 1.0, 0.3, 0.6, 0.9)}}
    assert recency.heat(['dot'], 2000) == {'dot': [0.5, 0.3, 0.2]}


def test_recency_md_is_what_the_committed_runs_give():
    text, data, _ = recency.report()
    assert text == (REPO / 'results' / 'recency' / 'RECENCY.md').read_text(), 'run: python -m lab.recency'
    committed = json.loads((REPO / 'results' / 'recency' / 'recency.json').read_text())
    assert json.loads(json.dumps(data, sort_keys=True)) == committed


@pytest.mark.parametrize('verdict', ['holds', 'does not hold', 'not resolved'])
def test_rows_32_to_35_take_the_verdict_of_the_deciding_prior(monkeypatch, verdict):
    r = dict(seeds=3, gaps=[0.1], verdict=verdict, per_seed={'2': dict(diff=-0.01)}, ratio=0.4,
             diff=dict(mean=-0.01, half=0.005))
    other = dict(r, verdict='the other')
    res = dict(profile={verdicts.DECIDES: r, 'alibi': other}, efficiency={verdicts.DECIDES: r, 'alibi': other},
               corpus={verdicts.DECIDES: r}, moonshot=[verdicts.DECIDES] if verdict == 'holds' else [],
               closest=verdicts.DECIDES, rules=recency.RULES)
    monkeypatch.setattr(verdicts, 'recency_results', lambda: res)
    rows = {c.n: c for c in CLAIMS}
    for n in ('32', '33', '34'):
        text, v = verdicts.ROWS[rows[n].rule](None, None, rows[n])
        assert v == f'{verdict}: `{verdicts.DECIDES}`' and 'Rule: ' in text, (n, v)
    v = verdicts.ROWS[rows['35'].rule](None, None, rows['35'])[1]
    assert v == (f'holds: `{verdicts.DECIDES}`' if verdict == 'holds' else 'does not hold')
    monkeypatch.setattr(verdicts, 'recency_results', dict)
    assert verdicts.ROWS[rows['32'].rule](None, None, rows['32'])[1].startswith('not resolved (no runs yet')


def test_every_threshold_of_the_verdicts_is_in_the_ledgers_header():
    """The rows of their own kind decide by constants of lab/verdicts.py: each must be printed."""
    from lab import ledger
    head = ledger.header()
    for value in (f'{verdicts.WORD} characters', f'{1 - verdicts.SAME:.0%}', f'{verdicts.NOISE_X:g}x',
                  f'factor of {verdicts.FACTOR:g}', f'{verdicts.PARAMS:.1%}', f'-{verdicts.MARGIN:g}'):
        assert value in head, value
    rows = {c.n.rstrip('abcdefgh') for c in CLAIMS}      # 22 is rows 22a to 22d
    for key in verdicts.THRESHOLDS:
        if key[0].isdigit():
            assert key in rows, key
    # each rule of its own kind names rows that use it
    assert {c.n for c in CLAIMS if c.rule == 'all'} == {'28'} and "rule 'all': row 28" in head
