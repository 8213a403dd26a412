"""The two findings of issue 57 as the ledger reads them: lab/mope_rule.py (MOPE's frequencies under the
published rule: the committed runs' pairs and a run measured step by step) and lab/causal_eval.py (the
published EGA evaluated with causal statistics), each verdict by the rule it prints."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import causal_eval, mope_rule  # noqa: E402


def measured(frozen, pairs=64, **kw):
    return dict(pos='mope', steps=len(frozen), seed=1, pairs=pairs, frozen_per_step=frozen, log_w_drift=-0.01,
                log_w_decay_alone=-0.01, log_s_drift=-0.02, log_s_decay_alone=-0.02, **kw)


def test_the_mope_rule_row_follows_its_printed_rule():
    runs = {'mope-s1': {250: 1.0, 500: 1.0}}
    assert mope_rule.verdict({})[1] == 'untestable here'
    text, v = mope_rule.verdict(dict(committed=runs, measured=dict(mope=measured([11] + [40] * 5 + [63] * 6))))
    assert v == 'holds' and '90% or more from step 7 on' in text
    assert mope_rule.verdict(dict(committed=runs, measured=dict(mope=measured([11] + [40] * 11))))[1] == 'not resolved'
    assert mope_rule.verdict(dict(committed={'mope-s1': {250: 0.3}},
                                  measured=dict(mope=measured([11] + [63] * 11))))[1] == 'does not hold'
    assert mope_rule.on_boundary(dict(w=[1.0, 2.0], s=[5.0, 2.6])) == (1, 2)     # 5.0 on it, 5.2 off


def test_a_step_by_step_measurement_runs_at_the_study_scale(data_dir, monkeypatch):
    import train
    read = []
    get_batch = train.get_batch
    monkeypatch.setattr(train, 'get_batch', lambda r, it, micro: read.append(it) or get_batch(r, it, micro))
    m = mope_rule.measure('mope', 3, 1337, str(data_dir))
    assert read == [0, 1, 2]                    # each step its own batch, as train.py's loop reads them
    assert m['pairs'] == 64 and len(m['frozen_per_step']) == 3 and all(0 <= x <= 64 for x in m['frozen_per_step'])
    learned = mope_rule.measure('mope_learned', 3, 1337, str(data_dir))
    assert max(learned['frozen_per_step'][1:]) < min(m['frozen_per_step'][1:])   # its log w learns


def seeds(prefix_minus_window):
    return {s: dict(committed=1.73, again=1.73, window=1.73, prefix=1.73 + d, window_leaks=True,
                    prefix_leaks=False, ega=1.74, dot=1.77, eval_set='x', same_set=True)
            for s, d in zip((1337, 2, 3), prefix_minus_window)}


@pytest.mark.parametrize('diffs, verdict', [((0.58, 0.60, 0.59), 'does not hold'),
                                            ((0.001, -0.002, 0.0), 'holds'),
                                            ((0.01, -0.04, 0.05), 'not resolved')])
def test_the_causal_eval_row_follows_its_printed_rule(diffs, verdict):
    text, v = causal_eval.verdict(dict(seeds=seeds(diffs)))
    assert v == verdict and text.startswith('`ega_paper`, the same weights, prefix statistics minus window')
    assert causal_eval.verdict({})[1] == 'untestable here'


def test_causal_md_shows_every_seed_and_the_samples():
    res = dict(seeds=seeds((0.58, 0.60, 0.59)), samples={'ega_paper': (['ROMEO: abc'], 'note: x'), 'dot': (['ROMEO: d'], '')})
    md = causal_eval.report(res)
    assert md.count('\n| 1337 |') + md.count('\n| 2 |') + md.count('\n| 3 |') == 3 and '### ega_paper' in md
    assert 'Verdict: **does not hold**' in md and '```\nROMEO: abc\n```' in md
