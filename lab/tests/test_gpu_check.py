"""lab/gpu_check.sh, the GPU check: a thin script over the project's own tools (the tests on CUDA,
bench.py, lab/precision.py). Its CPU toy mode runs every step here; its plan fits one device call."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'lab' / 'gpu_check.sh'
CALL_S = 570            # one device command, with the machine's start and the transfers beside it
KILL_S = 10             # timeout --kill-after, per step


def gpu_check(*args, out, env=None, timeout=600):
    return subprocess.run(['bash', str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, 'OUT': str(out), **(env or {})})


@pytest.mark.parametrize('plan', ['', '--speed', '--profile'])
def test_each_plan_fits_one_device_call(plan):
    """Each plan's CUDA steps (--plan prints them with their limits), with each step's kill grace, stay
    within CALL_S; in the check, lab.precision's own deadline and its grace (SIGTERM, then SIGKILL 20 s
    later) end inside its step's limit."""
    r = gpu_check(*filter(None, [plan, '--plan']), out='unused')
    assert r.returncode == 0, r.stderr
    limits = {k: int(v) for k, v in (line.split('=') for line in r.stdout.split())}
    assert limits['env'] == 20 and len(limits) >= 2, limits
    assert sum(limits.values()) + len(limits) * KILL_S <= CALL_S, limits
    if not plan:
        text = SCRIPT.read_text()
        deadline = int(re.search(r'PREC=\(--device=cuda.*--deadline_s=(\d+)', text).group(1))
        assert deadline + 20 < limits['precision'], (deadline, limits)


def test_each_bench_step_has_a_deadline_inside_its_limit():
    """Every step that runs the lab's bench passes it its own step's deadline (by), which ends GRACE_S before
    the step's limit: the bench then cuts its timing short and still writes its JSON, where the step's
    timeout would kill it and lose the file."""
    text = SCRIPT.read_text()
    steps = re.findall(r'^\s*step (\w+) \$PY -m lab\.bench (.*)$', text, re.M)
    assert sorted(name for name, _ in steps) == ['bench', 'filters', 'logit', 'profile'], steps
    for name, args in steps:
        assert f'"$(by {name})"' in args, (name, args)
    grace = int(re.search(r'^GRACE_S=(\d+)$', text, re.M).group(1))
    assert 20 <= grace and 'by() { echo "--deadline_s=$(( ${LIMIT[$1]} - GRACE_S ))"; }' in text
    for plan in ('', '--speed', '--profile'):                      # a deadline with time in it
        r = gpu_check(*filter(None, [plan, '--plan']), out='unused')
        limits = {k: int(v) for k, v in (line.split('=') for line in r.stdout.split())}
        assert all(limits[name] - grace >= 60 for name, _ in steps if name in limits), (plan, limits)


@pytest.mark.parametrize('args, message', [
    ([], 'torch sees no CUDA device'),
    (['--toyy'], 'usage: bash lab/gpu_check.sh [--speed | --profile] [--toy | --plan]'),
    (['--speed'], 'torch sees no CUDA device: this is the GPU check (bash lab/gpu_check.sh --speed --toy runs'),
    (['--toy'], 'nowhere/train.bin not found: run `python3 prepare.py` first'),
    (['--speed', '--profile'], '--speed and --profile are two plans, each one device call: pick one'),
    (['--toy', '--python=x'], 'usage: '),
])
def test_it_refuses_in_one_line_without_cuda_data_or_a_good_argument(args, message, tmp_path):
    r = gpu_check(*args, out=tmp_path / 'out', timeout=120, env={'DATA_DIR': str(tmp_path / 'nowhere')})
    assert r.returncode == 2 and r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr and not (tmp_path / 'out').exists()


@pytest.mark.parametrize('flag', ['--help', '-h'])
def test_help_prints_the_plans_and_runs_nothing(flag, tmp_path):
    r = gpu_check('--toy', flag, out=tmp_path / 'out', timeout=60)
    assert r.returncode == 0 and not r.stderr and not (tmp_path / 'out').exists(), r.stderr
    assert r.stdout.startswith('The GPU commands:') and 'bash lab/gpu_check.sh [--speed | --profile] --toy' in r.stdout
    assert 'set -uo' not in r.stdout and not any(l.startswith('#') for l in r.stdout.splitlines())


def test_a_missing_python_is_named_as_such(tmp_path):
    r = gpu_check('--toy', out=tmp_path / 'out', env={'PYTHON': str(tmp_path / 'no-python')})
    assert r.returncode == 2 and r.stderr == f"error: {tmp_path / 'no-python'} not found (set PYTHON=/path/to/python)\n"


def test_a_failed_step_fails_the_check(tmp_path, data_dir):
    """Every step run by a python that fails it (it imports torch, then exits 3): each step's line says so,
    and the script exits 1, so a device call never reports success on failure."""
    fake = tmp_path / 'py'
    fake.write_text('#!/bin/sh\ncase "$2" in "import torch"*) exec python3 "$@";; esac\nexit 3\n')
    fake.chmod(0o755)
    r = gpu_check('--profile', '--toy', out=tmp_path / 'out', env={'PYTHON': str(fake), 'DATA_DIR': str(data_dir)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert '- env: exit 3' in r.stdout and '- profile: exit 3' in r.stdout


@pytest.mark.slow
def test_its_toy_mode_runs_every_step_on_the_cpu(tmp_path, data_dir):
    out = tmp_path / 'out'
    r = gpu_check('--toy', out=out, env={'DATA_DIR': str(data_dir)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ['summary.md', 'env.txt', 'tests.txt', 'bench.txt', 'bench.json', 'precision.txt', 'precision.json'])
    summary = (out / 'summary.md').read_text()
    for step in ('env', 'tests', 'bench', 'precision'):
        assert re.search(rf'^- {step}: exit 0, \d+ s', summary, re.M), summary
    assert 'torch' in (out / 'env.txt').read_text() and ' passed' in (out / 'tests.txt').read_text()
    rows = json.loads((out / 'precision.json').read_text())['rows']
    assert [r['family'] for r in rows] == ['dot', 'ega', 'fox'] and {r['verdict'] for r in rows} == {'PASS'}
    assert json.loads((out / 'bench.json').read_text())['variants'].keys() == {'dot', 'ega'}


@pytest.mark.slow
@pytest.mark.parametrize('plan, files', [
    ('--speed', ['summary.md', 'env.txt', 'logit.txt', 'logit.json', 'filters.txt', 'filters.json']),
    ('--profile', ['summary.md', 'env.txt', 'profile.txt', 'profiles_gpu.md'])])
def test_the_speed_and_profile_plans_run_tiny_on_the_cpu(tmp_path, data_dir, plan, files):
    """bench.py compiled (inductor's C++ here), the specs of each plan's CUDA branch in small: a CUDA
    graphs variant beside dot's default compile, and the compiled step's profile."""
    out = tmp_path / 'out'
    r = gpu_check(plan, '--toy', out=out, env={'DATA_DIR': str(data_dir)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    summary = (out / 'summary.md').read_text()
    for step in [f.split('.')[0] for f in files if f.endswith('.txt')]:
        assert re.search(rf'^- {step}: exit 0, \d+ s', summary, re.M), summary
    if plan == '--speed':
        ran = json.loads((out / 'filters.json').read_text())['variants']
        assert ran.keys() == {'dot', 'causal_gauss', 'dot:learned:compile_mode=reduce-overhead'}
        assert not any(v['eager'] for v in ran.values()) and all(v['kernel'] for v in ran.values()), ran
        assert '| causal_gauss |' in summary
    else:
        text = (out / 'profiles_gpu.md').read_text()
        assert ', compiled, ' in text and text.index('\ndot: self') < text.index('\nega: self')
