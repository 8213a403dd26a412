"""lab/gpu_first.py (and its phases, lab/gpu_first_*.py), the first GPU command, on the CPU: the toy run end to end through
scripts/gpu_first.sh (six small files, no checkpoint among them, every variant named), the
planner's timeline at the real sizes and its refusal of a budget that cannot hold it, and a
phase that raises: recorded as FAILED while the later phases still run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import model  # noqa: E402
from lab import gpu_first as gf, gpu_first_base as base, studies  # noqa: E402

PAPER = [r[0] for r in studies.STUDIES['paper']['runs']]


@pytest.fixture(scope='module')
def toy(tmp_path_factory, data_dir):
    """The toy run, once, through the script (OUT as the device sets it)."""
    base = tmp_path_factory.mktemp('gpu_first')
    out, scratch = base / 'out', base / 'scratch'
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    p = subprocess.run(['bash', 'scripts/gpu_first.sh', '--device=cpu', '--toy=True', f'--data_dir={data_dir}',
                       f'--scratch={scratch}'], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    return p, out, scratch


@pytest.mark.slow
def test_the_toy_run_writes_six_small_files_and_no_checkpoint(toy):
    p, out, scratch = toy
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    files = sorted(str(f.relative_to(out)) for f in out.rglob('*'))
    assert files == sorted(base.FILES) and len(files) <= 8                        # flat, at most 8
    for f in out.iterdir():
        assert f.is_file() and f.stat().st_size < 1 << 20, f                    # small
        assert 'ckpt' not in f.name and not f.name.endswith('.pt')
    for name in ('env.json', 'preflight.json', 'probe_logs.json', 'plan.json'):
        json.loads((out / name).read_text())
    # the checkpoints stayed in the scratch folder
    assert (scratch / 'probe' / 'dot' / 'ckpt.pt').exists()


@pytest.mark.slow
def test_the_toy_report_names_every_variant_and_every_phase(toy):
    p, out, _ = toy
    md = (out / 'GPU.md').read_text()
    for name in list(model.ATTN) + [f'dot:{q}' for q in model.POS if q != 'learned'] + list(base.COMPOSITIONS):
        assert f'| {name} |' in md, name
    for run in ('dot', 'fox_mope_rel'):
        assert f'| {run} |' in md
    for phase in base.PHASES:
        assert re.search(rf'^\| {phase} \| (ok|partial) \|', md, re.M), phase
    pre = json.loads((out / 'preflight.json').read_text())
    assert pre['kernels'][0]['variant'] == 'dot' and pre['kernels'][0]['backend'] in ('math', 'flash_cpu')
    assert any(r['status'] == 'PASS' for r in pre['fused'])
    assert not [r for r in pre['fused'] if r['status'] in ('FAIL',) or r['status'].startswith('FAILED')]
    assert [r['status'] for r in pre['compile']] == ['PASS']
    assert all(r['status'] == 'ok' and r['ms'] > 0 for r in pre['speed']) and pre['shared']['steps'] > 0
    probe = json.loads((out / 'probe_logs.json').read_text())
    assert [(r['run'], r['status'], r['iters']) for r in probe['runs']] == [('dot', 'finished', 6),
                                                                            ('fox_mope_rel', 'finished', 6)]
    assert all(any(row['kind'] == 'eval' for row in r['rows']) for r in probe['runs'])
    plan = json.loads((out / 'plan.json').read_text())
    assert plan['status'] == 'ok' and plan['commands'] and '## Plan for the second command' in md
    console = (out / 'console.txt').read_text()
    assert 'gpu_first: done' in console


def test_the_planner_fits_the_real_sizes_in_the_budget(capsys):
    assert gf.main(['--plan_only=True']) == 0
    text = capsys.readouterr().out
    total = float(re.search(r'planned total: (\d+) s <= 570 s', text).group(1))
    assert total <= 570
    for phase in ('env', 'kernels', 'fused', 'compiles', 'measure', 'probe', 'final'):
        assert re.search(rf'^\s+\d+ -\s+\d+ s  {phase}\b', text, re.M), phase
    steps = int(re.search(r'6 paper runs through train.py, 6 at once, (\d+) steps each', text).group(1))
    assert steps >= base.DEFAULTS['probe_min_iters']
    assert 'assumed' in text


def test_a_budget_that_cannot_fit_is_refused_in_one_line(tmp_path, capsys):
    assert gf.main(['--plan_only=True', '--deadline_s=200']) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('error: deadline_s=200') and '\n' not in err
    # a real run with that budget starts nothing
    assert gf.main(['--deadline_s=200', f'--out={tmp_path / "out"}', f'--scratch={tmp_path / "s"}']) == 2
    assert not (tmp_path / 'out').exists()
    assert gf.main(['--nope=1']) == 2 and 'unknown config key' in capsys.readouterr().err


def test_the_script_says_what_must_travel(tmp_path):
    p = subprocess.run(['bash', 'scripts/gpu_first.sh', f'--data_dir={tmp_path}'], cwd=REPO,
                       env=dict(os.environ, OUT=str(tmp_path / 'out')), capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count('\n') == 1 and 'carry data/shakespeare_char' in p.stderr


def test_a_phase_that_raises_is_recorded_and_the_next_ones_run(tmp_path, monkeypatch, one_thread):
    def boom(ctx):
        raise RuntimeError('boom\nsecond line')
    monkeypatch.setattr(gf, 'phase_kernels', boom)
    out = tmp_path / 'out'
    rc = gf.main(['--device=cpu', '--toy=True', '--phases=env,kernels,fused,plan', '--variants=dot',
                  f'--out={out}', f'--scratch={tmp_path / "scratch"}'])
    assert rc == 0
    md = (out / 'GPU.md').read_text()
    assert re.search(r'^\| kernels \| FAILED \| .* \| RuntimeError: boom \|$', md, re.M)
    assert re.search(r'^\| fused \| ok \|', md, re.M) and '| dot | learned |' in md
    assert re.search(r'^\| plan \| (ok|partial) \|', md, re.M)
    assert re.search(r'^\| probe \| skipped \| .* not asked for', md, re.M)
    status = json.loads((out / 'env.json').read_text())['meta']['status']
    assert status['kernels']['status'] == 'FAILED' and status['fused']['status'] == 'ok'
