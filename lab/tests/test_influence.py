"""lab/influence.py: the influence map from the command line, for a config or a checkpoint."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import prepare  # noqa: E402
import train  # noqa: E402
from configurator import load_config  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, '-m', 'lab.influence', *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_configs_causal_and_leaking():
    r = run('config/ega.py')
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('config/ega.py: causal; largest influence of a later position 0.0e+00')
    r = run('config/ega_paper.py')
    assert r.returncode == 0 and r.stdout.startswith('config/ega_paper.py: LEAKS'), r.stdout
    assert 'later position 0.0e+00' not in r.stdout


def test_side_by_side_png(tmp_path):
    png = tmp_path / 'map.png'
    r = run('--side_by_side=dot,ega_paper', f'--png={png}')
    if importlib.util.find_spec('matplotlib') is None:          # the optional extra: one clear line
        assert r.returncode == 2 and 'pip install -r requirements-plots.txt' in r.stderr
        return
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith('dot: causal; largest influence of a later position 0.0e+00')
    assert lines[1].startswith('ega_paper: LEAKS') and lines[2] == f'wrote {png}'
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_checkpoint(tmp_path, shakespeare):
    data = tmp_path / 'data'
    prepare.prepare(input_path=str(shakespeare), out_dir=str(data))
    cfg = load_config(train.DEFAULTS, ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16',
                                       '--batch_size=2', '--eval_iters=1', '--max_iters=1', '--device=cpu',
                                       '--compile=False', '--attn=ega', '--ega_norm=window',
                                       f'--data_dir={data}', f'--out_dir={tmp_path / "run"}'], train.CHOICES)
    train.train(cfg)
    r = run(f'--ckpt={tmp_path / "run" / "ckpt.pt"}', '--T=12')
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f'{tmp_path / "run" / "ckpt.pt"}: LEAKS') and 'T=12' in r.stdout


@pytest.mark.parametrize('args, message', [
    (['--Tx=3'], "unknown config key 'Tx' (did you mean T?)"),
    (['--ckpt=/no/such/ckpt.pt'], "/no/such/ckpt.pt does not exist: no checkpoint there"),
    (['--attn=nope'], "attn='nope' is not one of"),
    (['--T=-1'], 'T must be >= 1'), (['--T=999'], "is longer than attn=dot pos=learned's block size 256"),
    (['--png=/no/such/folder/map.png'], 'the folder /no/such/folder does not exist'),
])
def test_errors_are_one_line(cli, args, message):
    r = cli('lab.influence', *args)
    assert r.returncode == 2 and r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr
