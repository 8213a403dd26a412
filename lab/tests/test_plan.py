"""lab/plan.py, the GPU plan: its time model fitted to the committed GPU records, every call sized to fit a
device call by it (or marked where it cannot), results/gpu/PLAN.md as the runs give it; and the evaluation
set every committed run records, as its command gives it (lab/provenance.py, derived_eval_set)."""

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import plan, provenance, studies  # noqa: E402


def test_the_time_model_is_fitted_to_the_records_and_says_its_error():
    m = plan.fit()
    # the first command's speed phase timed dot alone at 11.2 ms/step; ega alone is its own log's median
    assert m['alone']['dot'] == pytest.approx(11.2) and 15 < m['alone']['ega'] < 25
    assert 0.05 < m['b'] < 0.5 and 1 < m['c_e'] < 4 and 30 < m['start'] < 120
    assert 0 < m['err'] < 0.25 and m['n'] >= 10
    # every record within 40% of the model; sharing the GPU beats taking turns (k runs: under k times as slow)
    assert all(0.6 < ms / mod < 1.4 for _, _, ms, _, mod in m['pts'])
    assert all(1 + m['b'] * (k - 1) < k for k in (2, 6, 14))
    # the model against a whole run: ega alone, 5000 steps and 21 evals of 50 batches, took 195 s (GPU.md)
    run = next(r for r in studies.plan('paper', overlay='') if r.label == 'ega@paper-s1337')
    s, assumed = plan.estimate(m, [run])
    assert not assumed and 195 <= s <= 195 * (1 + 3 * m['err'])           # an upper bound, not far above


def test_every_call_fits_a_device_call_by_the_model_or_the_plan_says_it_does_not():
    m = plan.fit()
    assert [c.n for c in plan.CALLS] == list(range(1, len(plan.CALLS) + 1))
    labels = [r.label for c in plan.CALLS for r in plan.call_runs(c)]
    assert len(labels) == len(set(labels))                              # no run in two calls
    every = {r.label for q in studies.PAPER_QUEUE for r in studies.plan(q, overlay='')}
    assert set(labels) <= every
    md = plan.plan_md(m)
    for c in plan.CALLS:
        s, _ = plan.estimate(m, plan.todo(c))
        row = next(x for x in md.splitlines() if x.startswith(f'| {c.n} | '))
        assert (s * (1 + m['err']) <= plan.BUDGET_S) != ('does not fit one call' in row), c.n
    # the order the evidence issue set: row 1 first, then the EGA table's rest, FourierQK last
    assert plan.CALLS[0].rows == '1' and {r.name for r in plan.call_runs(plan.CALLS[0])} == {'dot', 'ega', 'ega_paper'}
    assert '2' in plan.CALLS[1].rows and plan.CALLS[-1].runs[0][0] == 'paper_fourierqk'


def test_the_committed_plan_is_what_the_runs_and_records_give():
    assert (REPO / 'results' / 'gpu' / 'PLAN.md').read_text() == plan.plan_md(), 'run: python -m lab.plan --write=True'


def test_a_row_points_at_the_call_that_decides_it():
    from lab.claims import Cmp
    done = {'dot': {2: {}, 3: {}}, 'ega': {1337: {}}}
    assert plan.deciding_call(done, [Cmp('ega')]) == 1                  # call 1 brings ega 2, 3 and dot 1337
    assert plan.deciding_call(done, [Cmp('ega')], need=4) == 3          # seeds 4 and 5: call 3
    assert plan.deciding_call(done, [Cmp('ega_mope', 'ega', 'mope', 'dot')]) == 2
    assert plan.deciding_call(done, [Cmp('no_such_variant')]) is None


def test_every_committed_run_records_the_evaluation_set_its_command_gives():
    """A run's log records its evaluation set since 2026-12-05; the runs before have it in run.json, derived
    from their command: both must be what the command gives, or a pair across sets could pass as alike."""
    from lab.logs import read_log
    n = 0
    for base in ('runs', 'history'):
        for d in sorted((REPO / 'results' / base).iterdir()):
            if not (d / 'run.json').exists():
                continue
            rec = json.loads((d / 'run.json').read_text())
            evals = read_log(str(d / 'log.jsonl'))[0]
            logged = {r.get('eval_set') for r in evals.values()} - {None}
            recorded = logged or {rec.get('eval_set')}
            assert recorded == {provenance.derived_eval_set(rec)}, d.name
            n += 1
    assert n > 200


def test_a_command_names_only_the_repositorys_own_configs(tmp_path):
    """A config file is Python: a recorded command that names another file derives nothing (and runs nothing)."""
    evil = tmp_path / 'x.py'
    evil.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    for cmd in (['python', 'train.py', str(evil)], ['python', 'train.py', 'config/../' + os.path.relpath(evil, REPO)]):
        assert provenance.derived_eval_set(dict(cmd=cmd)) is None
    assert not (tmp_path / 'ran').exists()
    assert provenance.derived_eval_set(dict(cmd=['python', 'train.py', 'config/dot.py', 'config/cpu.py'])) == \
        '20 x 16 windows of 128 tokens, seed 20240101, splits 1003854/111540'
