"""bench.py: its arguments go through the typed configurator (one-line errors, exit 2)
and a tiny run prints one table row per variant."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
TINY = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=2',
        '--steps=2', '--warmup=1']


def run(*args):
    return subprocess.run([sys.executable, 'bench.py', *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize('args, message', [
    (['--variants=dot,nope'], "variant 'nope': attn='nope' is not one of: dot, ega"),
    (['--variants=ega:wavelet'], "variant 'ega:wavelet': pos='wavelet' is not one of"),
    (['--variants=ega:none:ega_norm=global'], "ega_norm='global' is not one of: prefix, window, none"),
    (['--variants=ega:none:ega_nrom=window'], "'ega_nrom=window' is not key=value with a GPTConfig key"),
    (['--variants=ega:none:ega_alpha=big'], "ega_alpha='big': expected a float"),
    (['--stepz=3'], "unknown config key 'stepz' (did you mean steps?)"),
    (['--steps=0'], "steps >= 1"),
    (['--batch_size=0'], "batch_size >= 1"),
    (['--dtype=half'], "dtype='half' is not one of: float32, bfloat16, float16"),
    (['--profile=dot', '--dtype=half'], "dtype='half' is not one of: float32, bfloat16, float16"),
    (['--profile=dot', '--compile=True'], "--profile runs eager: drop --compile=True"),
])
def test_bad_arguments_are_one_line_errors(args, message):
    r = run(*TINY, *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr and r.stdout == ''


def test_tiny_bench_prints_a_row_per_variant():
    r = run(*TINY, '--variants=dot,ega:rope,ega:none:ega_norm=window')
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l]
    assert [l.split(' | ')[0][2:] for l in rows] == ['dot', 'ega:rope', 'ega:none:ega_norm=window']
    assert rows[0].split(' | ')[2] == '100.0%'


def test_a_long_bench_prints_progress(monkeypatch, capsys):
    sys.path.insert(0, str(REPO))
    import bench
    monkeypatch.setattr(bench, 'PROGRESS_S', 0.0)               # every round counts as long
    from configurator import load_config
    c = load_config(bench.DEFAULTS, [*TINY, '--variants=dot,ega+fox', '--device=cpu'])
    bench.bench(c)
    err = capsys.readouterr().err
    assert 'round 1 of 3 (2 variants each)' in err and 'round 2 of 3' in err


def test_quick_covers_every_registered_variant():
    # what CI runs: every attention variant and every positional encoding trains a step
    sys.path.insert(0, str(REPO))
    import bench
    import model
    r = run('--quick=True')
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l]
    names = [l.split(' | ')[0][2:] for l in rows]
    assert names == bench.all_variants()
    assert set(model.ATTN) <= set(names) and {f'dot:{p}' for p in model.POS if p != 'learned'} <= set(names)
    for l in rows:
        cells = l.strip('| ').split(' | ')
        assert float(cells[1].replace(',', '')) > 0 and float(cells[3].replace(',', '')) > 0   # tokens/s, MiB


def test_saved_bytes_grows_with_the_batch():
    sys.path.insert(0, str(REPO))
    import torch
    import bench
    from model import GPT, GPTConfig
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, dropout=0.0))
    m2, m8, m32 = (bench.saved_bytes(m, torch.zeros(b, 16, dtype=torch.long), torch.zeros(b, 16, dtype=torch.long))
                   for b in (2, 8, 32))
    assert m2 < m8 < m32 and m32 - m8 == 4 * (m8 - m2)           # the activations grow with the batch, linearly


def test_against_another_reference_and_it_is_benched():
    r = run(*TINY, '--variants=ega', '--against=fox')
    assert r.returncode == 0, r.stderr
    rows = {l.split(' | ')[0][2:]: l for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l}
    assert '| vs fox |' in r.stdout and set(rows) == {'ega', 'fox'}
    assert ' | 100.0% | ' in rows['fox'] and ' | 100.0% | ' not in rows['ega']


# a stand-in for the authors' training script (not carried here): the names their script
# defines and reads, their EGA-1 as the EGA paper states it (one module per head: a gate
# on z-scores over the window, after the softmax, rows renormalised), and top-level
# statements that must never run (their script downloads data and trains)
AUTHORS_STAND_IN = """
import requests
raise SystemExit('the script body ran')


class DotProductAttention(nn.Module):
    def __init__(self, hs):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(N_EMBED, hs, bias=False) for _ in range(3))

    def weights(self, x):
        s = self.query(x) @ self.key(x).transpose(-2, -1) / math.sqrt(self.key.out_features)
        return s.masked_fill(torch.ones_like(s).triu(1) > 0, float('-inf')).softmax(-1)

    def forward(self, x):
        return self.weights(x) @ self.value(x)


class EGA1Attention(DotProductAttention):
    def __init__(self, hs):
        super().__init__(hs)
        self.proj = nn.Linear(N_EMBED, 1)
        self.alpha, self.tau = nn.Parameter(torch.tensor([2.0])), nn.Parameter(torch.zeros(1))

    def forward(self, x):
        e = self.proj(x).transpose(-2, -1)
        z = (e - e.mean(-1, keepdim=True)) / e.std(-1, keepdim=True, correction=0).clamp(min=1e-8)
        a = self.weights(x) * torch.sigmoid(self.alpha * (z - self.tau))
        return a / a.sum(-1, keepdim=True) @ self.value(x)


class GPT(nn.Module):
    def __init__(self, attn_class):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, N_EMBED)
        self.heads = nn.ModuleList([attn_class(N_EMBED // N_HEAD) for _ in range(N_HEAD)])
        self.out = nn.Linear(N_EMBED, VOCAB)

    def forward(self, idx, targets=None):
        logits = self.out(torch.cat([h(self.emb(idx)) for h in self.heads], -1))
        return logits, F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
"""


@pytest.mark.parametrize('change, code', [(None, 0), (('z - self.tau', 'z + self.tau'), 1),
                                          (('a / a.sum(-1, keepdim=True)', 'a'), 1)])
def test_authors_py_checks_our_published_ega_against_theirs_in_float64(tmp_path, change, code):
    path = tmp_path / 'gpt_phase4_memfix.py'
    path.write_text(AUTHORS_STAND_IN.replace(*change) if change else AUTHORS_STAND_IN)
    r = subprocess.run([sys.executable, 'authors.py', str(path)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    assert 'ega (ega_norm=window) against their EGA1Attention, float64' in r.stdout
    diff = float(r.stdout.split('largest difference ')[1].split()[0])
    assert (diff < 1e-12) == (code == 0)


def test_the_authors_models_are_benched_beside_ours_without_running_their_script(tmp_path):
    path = tmp_path / 'gpt_phase4_memfix.py'
    path.write_text(AUTHORS_STAND_IN)
    r = run(*TINY, '--variants=dot,ega,ega:none', f'--authors={path}')
    assert r.returncode == 0, r.stderr
    rows = [l.split(' | ')[0][2:] for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l]
    assert rows == ['dot', 'ega', 'ega:none', 'authors:dot', 'authors:ega']
    # ours over theirs, for each of ours that has a counterpart
    ratios = [l.split(' against ') for l in r.stdout.splitlines() if ' against authors:' in l]
    assert [(ours, theirs.split(':')[1]) for ours, theirs in ratios] == [
        ('dot', 'dot'), ('ega', 'ega'), ('ega:none', 'ega')]


@pytest.mark.parametrize('text, message', [
    (None, 'No such file or directory'),
    ('def f(:\n', 'is not Python: invalid syntax (line 1)'),
    (AUTHORS_STAND_IN.replace('EGA1Attention', 'EGAAttention'), 'defines no EGA1Attention: it should be their'),
])
def test_a_wrong_authors_script_is_a_one_line_error(tmp_path, text, message):
    path = tmp_path / 'theirs.py'
    if text is not None:
        path.write_text(text)
    r = run(*TINY, '--variants=ega', f'--authors={path}')
    assert r.returncode == 2 and r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr


@pytest.mark.parametrize('shift, code', [(0.0, 0), (1e-3, 1)])
def test_a_compiled_bench_checks_each_compiled_loss_against_eager(monkeypatch, capsys, shift, code):
    # torch.compile stood in for by a wrapper that shifts the loss (a real compile: test_train.py)
    sys.path.insert(0, str(REPO))
    import bench

    class Shifted(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x, y):
            logits, loss = self.m(x, y)
            return logits, loss + shift
    monkeypatch.setattr(bench.torch, 'compile', Shifted)
    assert bench.main([*TINY, '--variants=dot,ega', '--compile=True']) == code
    out, err = capsys.readouterr()
    assert "compiled against eager, the first step's loss: largest difference" in out
    if code:
        assert err.startswith('error: compiled and eager losses differ beyond 0.0001: dot by 0.001, ega by 0.001')
    else:
        assert err == ''


def test_profile_prints_where_a_step_spends_its_time(tmp_path):
    r = run(*TINY, '--profile=causal_morlet', '--top=4')
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('causal_morlet: self CPU time per training step, top 4 ops of ')
    rows = [l for l in r.stdout.splitlines() if l.startswith('| ') and not l.startswith(('| op |', '|---'))]
    assert len(rows) == 4
    shares = [float(l.rstrip(' |').rsplit('| ', 1)[1].rstrip('%')) for l in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.0
    assert run(*TINY, '--profile=nope').returncode == 2


def test_readme_table_sets_each_ratio_beside_its_goal():
    sys.path.insert(0, str(REPO))
    import bench

    def fake(cmd, tps):
        return dict(command=cmd, date='2026-12-01', torch='2.13.0+cpu', threads=2,
                    variants={k: dict(tps=v, mem=2 ** 20, params=10) for k, v in tps.items()})
    eager = fake('python bench.py', {'dot': 1000.0, 'ega': 949.6, 'fox': 949.4, 'ega_fox': 921.0})
    compiled = fake('python bench.py --compile=True', {'dot': 500.0, 'ega': 1899.2})
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in bench.readme_table(eager, compiled).splitlines()
            if r.startswith('| ') and not r.startswith('| variant')}
    assert rows['dot'][2:5] == ['100.0%', '-', '-']                            # no goal of its own
    assert rows['ega'][2:5] == ['95.0%', '-', '95%: met']                 # as the ratio shows it
    assert rows['fox'][2:5] == ['94.9%', '-', '95%: **not met**']
    assert rows['ega_fox'][2:5] == ['92.1%', '-', '92%: met']
    assert rows['dot'][6:8] == ['500', '0.50x'] and rows['ega'][6:8] == ['1,899', '2.00x']
    assert rows['fox'][6:8] == ['-', '-']                                      # not in the compiled run
    # repeated runs: their ratios beside, and each goal judged on the median over all the runs
    again = [fake('python bench.py', {'dot': 2000.0, 'ega': 1800.0, 'fox': 1960.0}),
             fake('python bench.py', {'dot': 1000.0, 'ega': 940.0, 'fox': 960.0, 'ega_fox': 910.0})]
    table = bench.readme_table(eager, compiled, again)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines()
            if r.startswith('| ') and not r.startswith('| variant')}
    assert rows['ega'][2:5] == ['95.0%', '90.0%, 94.0%', '95%: **not met**']     # median 94.0%
    assert rows['fox'][2:5] == ['94.9%', '98.0%, 96.0%', '95%: met']             # median 96.0%
    assert rows['ega_fox'][2:5] == ['92.1%', '91.0%', '92%: **not met**']       # median of 2: 91.55%
    assert 'each goal judged on the median over the 3 runs' in table
    assert 'first loss against its eager one' not in bench.readme_table(eager, compiled)
    compiled['variants']['dot']['compile_diff'], compiled['variants']['ega']['compile_diff'] = 2e-7, 5e-7
    assert ("Each compiled model's first loss against its eager one: largest difference 5e-07 (ega), "
            "of 2 variants.") in bench.readme_table(eager, compiled)


def test_readme_without_the_right_runs_is_a_one_line_error(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO))
    import json
    import bench
    monkeypatch.setattr(bench, 'EAGER', str(tmp_path / 'none.json'))
    with pytest.raises(bench.ConfigError, match='none.json is missing: python bench.py --steps=60'):
        bench.write_readme()
    (tmp_path / 'bad.json').write_text('{"variants": ')
    monkeypatch.setattr(bench, 'EAGER', str(tmp_path / 'bad.json'))
    with pytest.raises(bench.ConfigError, match='bad.json is not JSON'):
        bench.write_readme()
    compiled = json.loads((REPO / bench.COMPILED).read_text())
    (tmp_path / 'swapped.json').write_text(json.dumps(compiled))   # a compiled run as the eager one
    monkeypatch.setattr(bench, 'EAGER', str(tmp_path / 'swapped.json'))
    with pytest.raises(bench.ConfigError, match='swapped.json is not an eager run with dot'):
        bench.write_readme()
    small = dict(compiled, config=dict(compiled['config'], compile=False, block_size=64))
    (tmp_path / 'small.json').write_text(json.dumps(small))
    monkeypatch.setattr(bench, 'EAGER', str(tmp_path / 'small.json'))
    with pytest.raises(bench.ConfigError, match='were run at different scales'):
        bench.write_readme()


def test_readme_is_written_only_from_runs_of_every_variant(tmp_path, monkeypatch):
    """A run of some variants (`--variants=dot,ega --out=results/bench/cpu.json`) as the eager, the
    compiled or a repeated run: one line saying what it lacks, and README is not touched."""
    sys.path.insert(0, str(REPO))
    import json
    import bench
    import study
    wrote = []
    monkeypatch.setattr(study, 'write_block', lambda *a, **k: wrote.append(a))
    for key in ('EAGER', 'COMPILED'):
        run = json.loads((REPO / getattr(bench, key)).read_text())
        run['variants'] = {k: v for k, v in run['variants'].items() if k in ('dot', 'ega')}
        (tmp_path / f'{key}.json').write_text(json.dumps(run))
        with monkeypatch.context() as m:
            m.setattr(bench, key, str(tmp_path / f'{key}.json'))
            with pytest.raises(bench.ConfigError, match=rf"{key}.json lacks 31 of the 33 variants the table needs "
                               r"\(fox, ega_fox, fourier_qk, multi_fourier_qk, \.\.\.\): python bench.py"):
                bench.write_readme()
    (tmp_path / 'repeats').mkdir()
    run = json.loads((REPO / bench.EAGER).read_text())
    del run['variants']['fnet']
    (tmp_path / 'repeats' / '1.json').write_text(json.dumps(run))
    monkeypatch.setattr(bench, 'REPEATS', str(tmp_path / 'repeats'))
    with pytest.raises(bench.ConfigError, match=r"1.json lacks 1 of the 33 variants the table needs \(fnet\)"):
        bench.write_readme()
    assert wrote == []
    run['variants']['fnet'] = {'tps': 1.0, 'mem': 1, 'params': 1}    # complete again: written
    (tmp_path / 'repeats' / '1.json').write_text(json.dumps(run))
    bench.write_readme()
    assert len(wrote) == 1 and wrote[0][2].count('\n| ') == 1 + len(bench.all_variants())


def test_profiles_of_several_variants_are_written_as_markdown(tmp_path):
    out = tmp_path / 'profiles.md'
    r = run(*TINY, '--profile=dot,ega', '--top=3', f'--out={out}')
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith('# Where each step') and '--profile=dot,ega' in text
    assert text.index('\ndot: self CPU time') < text.index('\nega: self CPU time')
    bad = run(*TINY, '--profile=dot,nope', f'--out={tmp_path / "x.md"}')     # checked before any work
    assert bad.returncode == 2 and bad.stdout == '' and not (tmp_path / 'x.md').exists()


def test_under_bf16_fox_saves_its_t_by_t_bias():
    """FoX's known exception: in 16 bits its forget bias is a (B, nh, T, T) float32 tensor per
    layer, sent through the math path; in float32 it rides the fused kernel's extra channel."""
    def mem(dtype):
        r = run('--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=256', '--batch_size=2', '--steps=1',
                '--warmup=0', '--variants=dot,fox', f'--dtype={dtype}')
        assert r.returncode == 0, r.stderr
        rows = {l.split(' | ')[0][2:]: float(l.split(' | ')[3]) for l in r.stdout.splitlines()
                if l.startswith('| ') and 'tokens/s' not in l and '---' not in l}
        return rows['fox'] - rows['dot']
    B, nh, T = 2, 2, 256
    assert mem('bfloat16') - mem('float32') > B * nh * T * T * 2 / 2 ** 20   # at least one 16-bit T x T


def test_readme_throughput_table_is_the_committed_runs():
    sys.path.insert(0, str(REPO))
    import bench
    text = (REPO / 'README.md').read_text()
    a, b = text.index(bench.THROUGHPUT[0]) + len(bench.THROUGHPUT[0]), text.index(bench.THROUGHPUT[1])
    assert text[a:b].strip() == bench.readme_table(*bench.readme_runs())
