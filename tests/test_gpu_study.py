"""gpu_study.py on the CPU at a tiny scale: the runs share the machine, each is estimated from its
own log after a short timed start, and what would pass the budget is stopped (it keeps its
checkpoint and resumes next time)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gpu_study  # noqa: E402
import study  # noqa: E402

TINY = """n_layer = 1
n_head = 2
n_embd = 16
block_size = 16
batch_size = 4
dropout = 0.0
max_iters = 30
warmup_iters = 2
eval_interval = 10
eval_iters = 2
log_interval = 5
device = 'cpu'
compile = False
threads = 1
data_dir = {data!r}
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch, data_dir):
    overlay = tmp_path / 'tiny.py'
    overlay.write_text(TINY.format(data=str(data_dir)))
    monkeypatch.setattr(study, 'RESULTS', str(tmp_path / 'results'))
    monkeypatch.setitem(study.STUDIES, 'paper', dict(study.STUDIES['paper'],
                                                     runs=study.STUDIES['paper']['runs'][:1]
                                                     + study.STUDIES['paper']['runs'][-1:]))
    return overlay, tmp_path / 'results'


def test_estimate_from_the_log():
    rows = [dict(kind='eval', iter=0, time=1.0), dict(kind='train', iter=10, ms=100.0),
            dict(kind='train', iter=20, ms=50.0), dict(kind='train', iter=30, ms=60.0),
            dict(kind='eval', iter=30, time=10.0)]
    assert gpu_study.estimate_left(rows, 40, 100, 30, 5) is None             # nothing past the probe yet
    # 70 steps at the median 60 ms, and two evals left at 9 s - 30 x 60 ms = 7.2 s each
    assert gpu_study.estimate_left(rows, 10, 100, 30, 5) == pytest.approx(70 * 0.06 + 2 * 7.2)
    # one eval so far: each eval left costs 3 splits x 5 batches, a third of a step each
    assert gpu_study.estimate_left(rows[:4], 10, 100, 30, 5) == pytest.approx(70 * 0.06 + 2 * 5 * 0.06)


def test_the_runs_finish_inside_a_budget_and_are_not_run_twice(tiny, capsys):
    overlay, res = tiny
    args = [f'--overlay={overlay}', '--budget_s=600', '--probe_iters=5', '--poll_s=0.2', '--parallel=2']
    assert gpu_study.main(args) == 0
    md = (res / 'paper@tiny' / 'GPU.md').read_text()
    assert md.count('| finished |') == 2 and '| dot@tiny-s1337 |' in md and 'fox_mope_rel@tiny-s1337' in md
    log = [json.loads(x) for x in (res / 'runs' / 'fox_mope_rel@tiny-s1337' / 'log.jsonl').open()]
    assert [r['iter'] for r in log if r['kind'] == 'eval'] == [0, 10, 20, 30]
    assert json.loads((res / 'runs' / 'dot@tiny-s1337' / 'run.json').read_text())['code']   # its code recorded
    assert (res / 'paper@tiny' / 'RESULTS.md').exists()                     # the study's table of them
    assert gpu_study.main(args) == 0
    assert (res / 'paper@tiny' / 'GPU.md').read_text().count('| finished before |') == 2


def test_a_run_that_would_pass_the_budget_gives_way_and_keeps_its_checkpoint(tiny, monkeypatch):
    overlay, res = tiny
    overlay.write_text(overlay.read_text().replace('max_iters = 30', 'max_iters = 100000'))   # never ends alone
    monkeypatch.setattr(gpu_study, 'estimate_left', lambda rows, it0, n, ev, ei: 1e6 if any(
        r.get('kind') == 'train' and r['iter'] > it0 for r in rows) else None)
    args = [f'--overlay={overlay}', '--budget_s=600', '--probe_iters=5', '--poll_s=0.2', '--parallel=2']
    assert gpu_study.main(args) == 0
    md = (res / 'paper@tiny' / 'GPU.md').read_text()
    assert md.count('| stopped: ') == 2 and 'gave way (it resumes next time)' in md
    for label in ('dot@tiny-s1337', 'fox_mope_rel@tiny-s1337'):
        assert (res / 'runs' / label / 'ckpt.pt').exists()
        assert study.state(next(r for r in study.plan('paper', overlay=str(overlay)) if r.label == label),
                           str(overlay))[0] == 'resume'


def test_no_budget_no_start_and_no_cuda_no_paper_scale(tiny):
    overlay, res = tiny
    assert gpu_study.main([f'--overlay={overlay}', '--budget_s=1']) == 0
    assert (res / 'paper@tiny' / 'GPU.md').read_text().count('not started: the budget is spent') == 2
    p = subprocess.run([sys.executable, 'gpu_study.py'], cwd=REPO, capture_output=True, text=True, timeout=120)
    import torch
    if not torch.cuda.is_available():
        assert p.returncode == 2 and p.stderr.startswith('error: no CUDA device') and 'Traceback' not in p.stderr
