"""bench.py, the root's bench of nanoGPT's kind: train.py's own step timed per variant, one table (tokens/s,
ms/step, activation memory, MFU) and optional JSON; its mistakes are one-line errors. The measurement suite is
the lab's (lab/tests/test_bench.py)."""

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bench  # noqa: E402
import train  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

TINY = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=2', '--steps=2', '--warmup=1']


def rows(out):
    return {line.split(' | ')[0][2:]: line.split(' | ') for line in out.splitlines()
            if line.startswith('| ') and 'tokens/s' not in line and '---' not in line}


def test_a_tiny_bench_prints_a_row_per_variant_or_its_json(capsys):
    assert bench.main([*TINY, '--variants=dot,ega:rope,fox']) == 0
    text = capsys.readouterr().out
    assert list(rows(text)) == ['dot', 'ega:rope', 'fox'] and 'float32, compile False' in text
    assert rows(text)['dot'][3] == '100.0%'                         # the first variant is the ratio's base
    assert bench.main([*TINY, '--variants=dot,ega:rope,fox', '--as_json=True']) == 0
    run = json.loads(capsys.readouterr().out)                       # the record alone: `> file.json` keeps it
    assert run['command'].startswith('python bench.py') and list(run['variants']) == ['dot', 'ega:rope', 'fox']
    assert all(v['tps'] > 0 and v['mem'] > 0 and v['mfu'] is None for v in run['variants'].values())   # no MFU off CUDA
    assert run['code'] and run['versions'].startswith('python ')


def test_the_bench_times_train_pys_own_step(monkeypatch):
    """Each timed step is train.forward_backward then train.update (the root's one training step)."""
    seen = []
    for name in ('forward_backward', 'update'):
        real = getattr(train, name)
        monkeypatch.setattr(train, name, lambda *a, _real=real, _n=name, **k: seen.append(_n) or _real(*a, **k))
    c = dict(bench.DEFAULTS, n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=2, steps=3, warmup=1,
             variants='dot')
    bench.bench(c)
    assert seen == ['forward_backward', 'update'] * 4 and len(seen) == 2 * (3 + 1)


@pytest.mark.parametrize('args, message', [
    (['--variants=dot,nope'], "variant 'nope': attn='nope' is not one of"),
    (['--variants=ega:none:ega_nrom=window'], "'ega_nrom=window' is not key=value with a GPTConfig key"),
    (['--variants='], 'need at least one variant'),
    (['--steps=0'], 'steps >= 1'),
    (['--batch_size=0'], 'batch_size >= 1'),
    (['--dtype=float16'], 'dtype=float16 needs CUDA'),
    (['--device=tpu'], "device='tpu' is not one of"),
    (['--stepz=3'], "unknown config key 'stepz' (did you mean steps?)"),
])
def test_bad_arguments_are_one_line_errors(cli, args, message):
    r = cli('bench.py', *TINY, *args)
    assert r.returncode == 2 and r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr and r.stdout == ''


def test_saved_bytes_grows_with_the_batch():
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, dropout=0.0))
    m2, m8, m32 = (bench.saved_bytes(m, torch.zeros(b, 16, dtype=torch.long), torch.zeros(b, 16, dtype=torch.long))
                   for b in (2, 8, 32))
    assert m2 < m8 < m32 and m32 - m8 == 4 * (m8 - m2)           # the activations grow with the batch, linearly


def test_mfu_divides_by_the_gpus_peak_at_the_dtype_measured():
    assert bench.mfu_peak('NVIDIA H100 80GB HBM3', 'bfloat16') == (989.0, 'H100, dense bfloat16')
    assert bench.mfu_peak('NVIDIA H100 PCIe', 'float32')[0] == 51.0      # the longest key the name holds
    assert bench.mfu_peak('a GPU', 'bfloat16')[0] is None and bench.mfu_peak('x', 'tf32', 100.0)[0] == 100.0
