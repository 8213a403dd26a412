"""Our findings as the ledger reads them: lab/mope_rule.py (MOPE's frequencies under the published rule: the
committed runs' pairs and a run measured step by step) and lab/generation_study.py (the published leaking
forms as they generate: rows 46 and 48), each verdict by the rule it prints."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import generation_study, mope_rule  # noqa: E402


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


def runs(form, gen_minus_window, dot=1.77, window=1.73, prefix=2.3):
    """Study results of `form`: one run per seed, its generation loss the window's plus the given difference."""
    return {f'{form}-s{s}': dict(form=form, seed=s, window=window, prefix=prefix, generation=window + d, dot=dot,
                                 leaks=True, committed=window, again=window, counterpart='ega', counterpart_val=1.74,
                                 seconds={'generation': 60.0}, per_position={k: [1.0] * 128 for k in
                                                                             ('window', 'prefix', 'generation')},
                                 sample=['ROMEO: abc', 'warning: x'] if s == 1337 else None)
            for s, d in zip((1337, 2, 3), gen_minus_window)}


@pytest.mark.parametrize('diffs, verdict', [((0.40, 0.42, 0.41), 'does not hold'),
                                            ((0.001, -0.002, 0.0), 'holds'),
                                            ((0.01, -0.04, 0.05), 'not resolved')])
def test_row_46_follows_its_printed_rule(tmp_path, move_results, diffs, verdict):
    move_results(tmp_path)
    assert generation_study.row_46()[1] == 'untestable here'
    generation_study.write(dict(runs=runs('ega_paper', diffs)), [])
    text, v = generation_study.row_46()
    assert v == verdict and text.startswith('`ega_paper`, the same weights, as it generates minus its windowed val')
    assert 'with prefix statistics (context, not how it generates): +0.570' in text


@pytest.mark.parametrize('gen_minus_dot, verdict', [((0.3, 0.35, 0.32), 'holds'),
                                                     ((-0.3, -0.35, -0.32), 'does not hold: `fourier_qk`'),
                                                     ((0.3, -0.2, 0.1), 'not resolved')])
def test_row_48_follows_its_printed_rule(tmp_path, move_results, gen_minus_dot, verdict):
    """Judged on the forms with 2 seeds or more; a one-seed form is listed, never judged, whatever its number."""
    move_results(tmp_path)
    res = runs('ega_paper', (0.4, 0.41, 0.42))                     # clear above dot: 1.73 + 0.4 - 1.77
    res.update(runs('fourier_qk', [d + 0.04 for d in gen_minus_dot]))
    res.update({k: v for k, v in runs('fnet', (-1.0,)).items()})  # one seed, far below dot: not judged
    generation_study.write(dict(runs=res), [])
    text, v = generation_study.row_48()
    assert v == verdict, text
    assert '`fnet` -1.040 (1 seed)' in text and '`fourier_qk` ' in text


def test_generation_md_shows_every_form_seed_and_sample(tmp_path, move_results):
    move_results(tmp_path)
    generation_study.write(dict(runs={**runs('ega_paper', (0.4, 0.41, 0.42)), **runs('fnet', (-1.0,))}), [])
    md = (tmp_path / 'generation' / 'GENERATION.md').read_text()
    assert '| `ega_paper` | 3 | 1.3821 | 1.7300 (LEAKS) | 2.3000 | 2.1400 | 1.7700 |' in md
    assert sum(f'| ega_paper-s{s} |' in md for s in (1337, 2, 3)) == 3 and '| fnet-s1337 |' in md
    assert '### ega_paper' in md and '```\nROMEO: abc\n```' in md and 'Row 46:' in md and 'Row 48:' in md
