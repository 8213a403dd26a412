"""bench.py: its arguments go through the typed configurator (one-line errors, exit 2)
and a tiny run prints one table row per variant."""

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import train  # noqa: E402
from lab import bench_tables  # noqa: E402

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
    (['--deadline_s=-1'], "need deadline_s >= 0 (0: no limit), got -1"),
    (['--dtype=half'], "dtype='half' is not one of: auto, float32, bfloat16, float16"),
    (['--profile=dot', '--dtype=half'], "dtype='half' is not one of: auto, float32, bfloat16, float16"),
    (['--tf32=True'], "tf32=True is for float32 on CUDA, not float32 on cpu"),
    (['--dtype=bfloat16', '--tf32=True'], "tf32=True is for float32 on CUDA, not bfloat16 on cpu"),
    (['--profile=dot', '--compile=True', '--warmup=0'], "--profile with --compile=True compiles in the warm-up"),
    (['--profile=dot:learned:compile_mode=reduce-overhead'], "compile_mode=reduce-overhead needs --compile=True"),
])
def test_bad_arguments_are_one_line_errors(cli, args, message):
    r = cli('bench.py', *TINY, *args)            # tests/conftest.py: a process forked from one with torch
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr and r.stdout == ''


@pytest.mark.slow
def test_tiny_bench_prints_a_row_per_variant():
    r = run(*TINY, '--variants=dot,ega:rope,ega:none:ega_norm=window')
    assert r.returncode == 0, r.stderr
    assert ', compile=False, float32, median of ' in r.stdout and '| MFU (float32) |' in r.stdout   # auto, CPU
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


def test_the_bench_times_train_pys_own_step(monkeypatch):
    """bench.py's step is train.py's: its micro-step and its update (clipped at train.py's grad_clip), once
    each per variant and round; and a bench step moves the weights as train.py's step function does."""
    sys.path.insert(0, str(REPO))
    import bench
    calls = []
    for name in ('forward_backward', 'update'):
        real = getattr(train, name)
        monkeypatch.setattr(train, name, lambda *a, _n=name, _f=real: calls.append((_n, a[-1])) or _f(*a))
    from configurator import load_config
    c = load_config(bench.DEFAULTS, [*TINY, '--variants=dot,ega', '--device=cpu'])
    bench.bench(c)
    rounds = c['warmup'] + c['steps']
    assert [n for n, _ in calls].count('forward_backward') == 2 * rounds
    assert [a for n, a in calls if n == 'update'] == [train.grad_clip] * (2 * rounds)
    # the same start, one step each way: bench's and train.py's halves by hand agree to the bit
    from model import GPT, GPTConfig
    x = torch.randint(65, (2, 16))
    states = []
    for how in ('bench', 'train'):
        torch.manual_seed(0)
        m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=65, attn='ega'))
        opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')
        sc = torch.amp.GradScaler('cpu', enabled=False)
        if how == 'bench':
            bench.train_step(dict(model=m, plain=m, opt=opt, scaler=sc), x, x, contextlib.nullcontext)
        else:
            train.forward_backward(m, x, x, contextlib.nullcontext(), sc)
            train.update(m, opt, sc, train.grad_clip)
        states.append(m.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


@pytest.mark.slow
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


@pytest.mark.slow
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
@pytest.mark.slow
def test_authors_py_checks_our_published_ega_against_theirs_in_float64(tmp_path, change, code):
    path = tmp_path / 'gpt_phase4_memfix.py'
    path.write_text(AUTHORS_STAND_IN.replace(*change) if change else AUTHORS_STAND_IN)
    r = subprocess.run([sys.executable, '-m', 'lab.authors', f'--script={path}'], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    assert 'ega (ega_norm=window) against their EGA1Attention, float64' in r.stdout
    diff = float(r.stdout.split('largest difference ')[1].split()[0])
    assert (diff < 1e-12) == (code == 0)


def beside_theirs(path, *args):
    """bench.py's run with the authors' models beside ours, as lab/authors.py drives it."""
    return subprocess.run([sys.executable, '-m', 'lab.authors', f'--script={path}', '--bench=True', *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_authors_models_are_benched_beside_ours_without_running_their_script(tmp_path):
    path = tmp_path / 'gpt_phase4_memfix.py'
    path.write_text(AUTHORS_STAND_IN)
    out = tmp_path / 'b.json'
    r = beside_theirs(path, *TINY, '--variants=dot,ega,ega:none', f'--out={out}')
    assert r.returncode == 0, r.stderr
    rows = [l.split(' | ')[0][2:] for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l]
    assert rows == ['dot', 'ega', 'ega:none', 'authors:dot', 'authors:ega']
    # ours over theirs, for each of ours that has a counterpart
    ratios = [l.split(' against ') for l in r.stdout.splitlines() if ' against authors:' in l]
    assert [(ours, theirs.split(':')[1]) for ours, theirs in ratios] == [
        ('dot', 'dot'), ('ega', 'ega'), ('ega:none', 'ega')]
    # the command written reruns this run: lab.authors's, with bench.py's keys after its own
    assert json.loads(out.read_text())['command'] == ' '.join(
        ['python -m lab.authors', f'--script={path}', '--bench=True', *TINY, '--variants=dot,ega,ega:none', f'--out={out}'])


@pytest.mark.parametrize('text, message', [
    (None, 'No such file or directory'),
    ('def f(:\n', 'is not Python: invalid syntax (line 1)'),
    (AUTHORS_STAND_IN.replace('EGA1Attention', 'EGAAttention'), 'defines no EGA1Attention: it should be their'),
])
@pytest.mark.slow
def test_a_wrong_authors_script_is_a_one_line_error(tmp_path, text, message):
    path = tmp_path / 'theirs.py'
    if text is not None:
        path.write_text(text)
    r = beside_theirs(path, *TINY, '--variants=ega')
    assert r.returncode == 2 and r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
    assert message in r.stderr


@pytest.fixture
def dynamo_limits():
    """compile_model raises dynamo's limits where torch.compile has no isolate_recompiles (as these
    stand-ins): put them back after the test, by setattr. Not monkeypatch: torch's config keeps its
    values outside the module's __dict__, and pytest >= 9.2's undo then deletes the key, after which
    every compile of the session fails (tests/conftest.py's dynamo_config_kept names such a test)."""
    cfg = torch._dynamo.config
    saved = {key: getattr(cfg, key) for key in ('recompile_limit', 'accumulated_recompile_limit')}
    yield
    for key, value in saved.items():
        setattr(cfg, key, value)


@pytest.mark.parametrize('spec, mode', [('dot', 'default'), ('dot:learned:compile_mode=reduce-overhead', 'reduce-overhead'),
                                        ('ega:mope:compile_mode=max-autotune-no-cudagraphs', 'max-autotune-no-cudagraphs')])
def test_a_variant_compile_mode_reaches_torch_compile(monkeypatch, dynamo_limits, spec, mode):
    """A spec's compile_mode (bench.variant_mode) is the mode its model is compiled with, on both of
    compile_model's ways (a torch.compile with isolate_recompiles, and one without); it is no GPTConfig
    field. Stand-ins for torch.compile record the call."""
    import bench
    from model import GPT, GPTConfig
    seen = []

    def isolating(f, mode='default', isolate_recompiles=False):
        seen.append(('isolated', mode))
        return f
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8))
    bench.variant_config(spec, bench.DEFAULTS)
    for stand_in in (isolating, lambda f, **kw: seen.append(('distinct', kw['mode'])) or f):
        monkeypatch.setattr(torch, 'compile', stand_in)
        bench.compile_model(model, 2, 1, bench.variant_mode(spec, True))
    assert seen == [('isolated', mode), ('distinct', mode)]


@pytest.mark.parametrize('shift, code', [(0.0, 0), (1e-3, 1)])
def test_a_compiled_bench_checks_each_compiled_loss_against_eager(monkeypatch, capsys, dynamo_limits, shift,
                                                                  code):
    # torch.compile stood in for by a wrapper that shifts the loss and counts itself as one
    # compiled graph (a real compile: test_train.py, and the eager backend below)
    sys.path.insert(0, str(REPO))
    import bench
    from torch._dynamo.utils import counters

    class Shifted(torch.nn.Module):
        def __init__(self, m, **compile_kw):     # torch.compile's stand-in: mode= and the rest unused
            super().__init__()
            self.m, self.ran = m, False

        def forward(self, x, y):
            if not self.ran:
                counters['stats']['unique_graphs'] += 1
                self.ran = True
            logits, loss = self.m(x, y)
            return logits, loss + shift
    monkeypatch.setattr(bench.torch, 'compile', Shifted)
    assert bench.main([*TINY, '--variants=dot,ega', '--compile=True']) == code
    out, err = capsys.readouterr()
    assert "compiled against eager, the first step's loss: largest difference" in out
    assert 'distinct caches): 2 graphs, 0 graph breaks, 0 recompile-limit hits; 2 of 2 variants compiled' in out
    if code:
        assert err.startswith('error: compiled and eager losses differ beyond 0.0001: dot by 0.001, ega by 0.001')
    else:
        assert err == ''


@pytest.mark.slow
def test_profile_prints_where_a_step_spends_its_time(tmp_path):
    r = run(*TINY, '--profile=causal_morlet', '--top=4')
    assert r.returncode == 0 and r.stderr == '', r.stderr         # the profiler's USDT lines are dropped
    assert r.stdout.startswith('causal_morlet: self CPU time per training step, top 4 ops of ')
    rows = [l for l in r.stdout.splitlines() if l.startswith('| ') and not l.startswith(('| op |', '|---'))]
    assert len(rows) == 4
    shares = [float(l.rstrip(' |').rsplit('| ', 1)[1].rstrip('%')) for l in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.0
    assert run(*TINY, '--profile=nope').returncode == 2


def test_a_compiled_profile_profiles_the_compiled_step(monkeypatch, dynamo_limits):
    """--profile with --compile=True: the model is compiled (compile_model, with the spec's mode) before
    the warm-up, and the profiled steps call the compiled step. Dynamo's eager backend stands in for
    inductor (seconds, not a C++ build); the call and its graph are what is checked."""
    import functools

    import bench
    from torch._dynamo.utils import counters
    real, modes = torch.compile, []

    def compile_eager(f, mode='default', **kw):
        modes.append(mode)
        return functools.partial(real, backend='eager')(f, **kw)
    monkeypatch.setattr(torch, 'compile', compile_eager)
    torch._dynamo.reset()
    counters.clear()
    c = {**bench.DEFAULTS, **bench.QUICK, 'compile': True, 'top': 3,
         'profile': 'ega:learned:compile_mode=max-autotune-no-cudagraphs'}
    text = bench.profile_table(c)
    assert modes == ['max-autotune-no-cudagraphs'] and counters['stats']['unique_graphs'] >= 1
    assert text.startswith('ega:learned:compile_mode=max-autotune-no-cudagraphs: self CPU time per training step')
    torch._dynamo.reset()


def test_the_cuda_table_judges_each_goal_and_each_mode(tmp_path, monkeypatch):
    """docs/speed.md's CUDA table from `gpu_check.sh --speed`'s two runs (here made up, in a temporary
    tree): ms per step, each ratio to dot against its run's goal (90% logit-level, 85% filters), a
    compile_mode variant against its own default compile, dot against 6 ms; README's table gains a
    CUDA column; a run off CUDA, or at another size, is refused in one line naming the command."""
    from configurator import ConfigError
    from lab import paths
    monkeypatch.setattr(paths, 'REPO', str(tmp_path))
    assert bench_tables.cuda_runs() == {} and 'No CUDA run is committed yet' in bench_tables.cuda_table({})
    B, T = 64, 256
    size = dict(device='cuda', compile=True, n_layer=6, n_head=8, n_embd=256, block_size=T, batch_size=B,
                dropout=0.1)

    def fake(tps, **cfg):
        return dict(command='python bench.py ...', date='2026-12-05', time='10:00', code='abc1234', torch='2.11.0',
                    versions='python 3.12.3, torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200', config={**size, **cfg},
                    variants={k: dict(tps=v, mem=2 ** 30, mfu=0.05, eager=False, kernel='flash') for k, v in tps.items()})
    dot = B * T / 5.5e-3                                        # 5.5 ms a step
    (tmp_path / 'results' / 'bench').mkdir(parents=True)
    (tmp_path / bench_tables.CUDA_RUNS['logit']).write_text(json.dumps(fake(
        {'dot': dot, 'ega': 0.901 * dot, 'fox': 0.899 * dot, 'dot:learned:compile_mode=reduce-overhead': 1.3 * dot,
         'ega:mope:compile_mode=reduce-overhead': dot})))
    runs = bench_tables.cuda_runs()
    table = bench_tables.cuda_table(runs)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines() if r.startswith('| ') and '---' not in r}
    assert rows['dot'][1:5] == ['5.5', f'{dot:,.0f}', '100.0%', '-'] and rows['dot'][-1] == 'flash |'
    assert rows['ega'][3:5] == ['90.1%', 'met'] and rows['fox'][3:5] == ['89.9%', '**not met**']
    assert rows['dot:learned:compile_mode=reduce-overhead'][3:5] == ['130.0%', '1.30x its default compile']
    assert rows['ega:mope:compile_mode=reduce-overhead'][4] == '-'        # no ega:mope in the run
    assert "dot 5.5 ms a step against the goal of 6 ms: met" in table and 'NVIDIA H200; dropout 0.1)' in table
    assert 'Not committed: results/bench/cuda_filters.json' in table
    eager = dict(command='python bench.py', date='2026-12-01', torch='2.13.0+cpu', threads=2,
                 variants={k: dict(tps=100.0, mem=1, params=1) for k in ('dot', 'ega', 'causal_gauss')})
    readme = bench_tables.readme_table(eager, eager, cuda=runs)
    head, *lines = [r for r in readme.splitlines() if r.startswith('| ')]
    assert 'CUDA, paper size: vs dot' in head and all(r.count('|') == head.count('|') for r in lines)
    assert [r.split(' | ')[-2] for r in lines] == ['100.0%', '90.1%', '-']
    assert 'CUDA' not in bench_tables.readme_table(eager, eager)
    (tmp_path / bench_tables.CUDA_RUNS['filters']).write_text(json.dumps(fake({'dot': dot}, batch_size=16)))
    with pytest.raises(ConfigError, match="cuda_filters.json is not a compiled CUDA run with dot at the paper's size and"):
        bench_tables.cuda_runs()
    (tmp_path / bench_tables.CUDA_RUNS['filters']).write_text(json.dumps(fake({'dot': dot, 'causal_gauss': 0.86 * dot})))
    assert '| causal_gauss | ' in bench_tables.cuda_table(bench_tables.cuda_runs())
    cut = 'not benched, by deadline_s=175: causal_morlet (a first step took up to 41 s)'
    (tmp_path / bench_tables.CUDA_RUNS['filters']).write_text(json.dumps(fake(
        {'dot': dot, 'causal_gauss': 0.86 * dot}, cut=cut, steps_run=20, warmup_run=5)))
    assert f'Its deadline cut it ({cut}): the median of 20 timed steps after 5 warm-up.' in \
        bench_tables.cuda_table(bench_tables.cuda_runs())
    assert bench_tables.default_compile('dot:mope:compile_mode=reduce-overhead') == 'dot:mope'
    assert bench_tables.default_compile('ega:learned:ega_norm=window:compile_mode=reduce-overhead') == \
        'ega:learned:ega_norm=window'
    assert bench_tables.default_compile('ega:learned:ega_norm=window') is None


def test_kernels_names_the_attention_op_each_step_calls(tmp_path):
    """--kernels=True: the fused kernel (CPU flash) for dot and EGA, SDPA's math fallback for mope_rel's
    learned T x T bias on the CPU, none for conv_paper's written-out map; and the JSON keeps it."""
    out = tmp_path / 'k.json'
    r = run(*TINY, '--variants=dot,ega,dot:mope_rel,conv_paper', '--kernels=True', f'--out={out}')
    assert r.returncode == 0, r.stderr
    got = {k: v['kernel'] for k, v in json.loads(out.read_text())['variants'].items()}
    assert got == {'dot': 'flash', 'ega': 'flash', 'dot:mope_rel': 'math', 'conv_paper': 'none'}, got
    assert '| attention |' in r.stdout and '| math |' in r.stdout


@pytest.mark.slow
def test_kernels_of_a_compiled_bench_name_the_math_fallback():
    """Compiled, inductor writes SDPA's math fallback out as plain ops: --kernels reads the eager
    model's step, where mope_rel's learned bias still shows the fallback (it said none before)."""
    r = run(*TINY, '--variants=dot,dot:mope_rel', '--compile=True', '--kernels=True')
    assert r.returncode == 0, r.stderr
    rows = {l.split(' | ')[0][2:]: l.split(' | ')[-1] for l in r.stdout.splitlines() if l.startswith('| dot')}
    assert rows == {'dot': 'flash |', 'dot:mope_rel': 'math |'}, rows


def test_readme_table_sets_each_ratio_beside_its_goal():
    sys.path.insert(0, str(REPO))

    def fake(cmd, tps):
        return dict(command=cmd, date='2026-12-01', torch='2.13.0+cpu', threads=2,
                    variants={k: dict(tps=v, mem=2 ** 20, params=10) for k, v in tps.items()})
    eager = fake('python bench.py', {'dot': 1000.0, 'ega': 949.6, 'fox': 949.4, 'ega_fox': 921.0})
    compiled = fake('python bench.py --compile=True', {'dot': 500.0, 'ega': 1899.2})
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in bench_tables.readme_table(eager, compiled).splitlines()
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
    table = bench_tables.readme_table(eager, compiled, again)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines()
            if r.startswith('| ') and not r.startswith('| variant')}
    assert rows['ega'][2:5] == ['95.0%', '90.0%, 94.0%', '95%: **not met**']     # median 94.0%
    assert rows['fox'][2:5] == ['94.9%', '98.0%, 96.0%', '95%: met']             # median 96.0%
    assert rows['ega_fox'][2:5] == ['92.1%', '91.0%', '92%: **not met**']       # median of 2: 91.55%
    assert 'each goal judged on the median over the 3 runs' in table
    assert 'first loss against its eager one' not in bench_tables.readme_table(eager, compiled)
    compiled['variants']['dot']['compile_diff'], compiled['variants']['ega']['compile_diff'] = 2e-7, 5e-7
    assert ("Each compiled model's first loss against its eager one: largest difference 5e-07 (ega), "
            "of 2 variants.") in bench_tables.readme_table(eager, compiled)


def test_readme_without_the_right_runs_is_a_one_line_error(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO))
    import json
    import bench
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'none.json'))
    with pytest.raises(bench.ConfigError, match='none.json is missing: python bench.py --steps=60'):
        bench_tables.write_readme()
    (tmp_path / 'bad.json').write_text('{"variants": ')
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'bad.json'))
    with pytest.raises(bench.ConfigError, match='bad.json is not JSON'):
        bench_tables.write_readme()
    compiled = json.loads((REPO / bench_tables.COMPILED).read_text())
    (tmp_path / 'swapped.json').write_text(json.dumps(compiled))   # a compiled run as the eager one
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'swapped.json'))
    with pytest.raises(bench.ConfigError, match='swapped.json is not an eager run with dot'):
        bench_tables.write_readme()
    small = dict(compiled, config=dict(compiled['config'], compile=False, block_size=64))
    (tmp_path / 'small.json').write_text(json.dumps(small))
    monkeypatch.setattr(bench_tables, 'EAGER', str(tmp_path / 'small.json'))
    with pytest.raises(bench.ConfigError, match='were run at different scales'):
        bench_tables.write_readme()


def test_readme_names_every_variant_a_committed_run_lacks(tmp_path, monkeypatch):
    """A run of some variants (`--variants=dot,ega --out=results/bench/cpu.json`), or runs made before a
    variant was registered (the README's recipe adds one): the table has the rows the eager run holds,
    and a line under it names every registered variant a run lacks and the command that benches them."""
    sys.path.insert(0, str(REPO))
    import json
    import bench
    wrote = []
    monkeypatch.setattr(bench_tables, 'write_block', lambda *a, **k: wrote.append(a))
    committed = {key: json.loads((REPO / getattr(bench_tables, key)).read_text()) for key in ('EAGER', 'COMPILED')}
    for key, which in (('EAGER', 'the eager'), ('COMPILED', 'the compiled')):
        run = dict(committed[key], variants={k: v for k, v in committed[key]['variants'].items() if k in ('dot', 'ega')})
        (tmp_path / f'{key}.json').write_text(json.dumps(run))
        lacking = [v for v in bench.all_variants() if v not in run['variants']]
        with monkeypatch.context() as m:
            m.setattr(bench_tables, key, str(tmp_path / f'{key}.json'))
            wrote.clear()
            bench_tables.write_readme()
            table = wrote[0][2]
            assert f"**Not in {which} run**: {', '.join(lacking)} (registered since, or left out): `python bench.py" \
                in table and f"--out={tmp_path / key}.json` adds them." in table
            rows = 2 if key == 'EAGER' else len(committed['EAGER']['variants'])
            assert table.count('\n| ') == 1 + rows
    wrote.clear()
    bench_tables.write_readme()                # the committed runs: a line only for what they lack (none, here)
    lacking = [v for v in bench.all_variants() if v not in committed['EAGER']['variants']]
    assert ('**Not in the eager run**' in wrote[0][2]) == bool(lacking)
    assert wrote[0][2].count('\n| ') == 1 + len(committed['EAGER']['variants'])


def test_a_deadline_times_what_it_can_and_keeps_the_rest_of_its_time_for_the_end():
    """out_of_time: the first round (on CUDA, the compiles) is not a round's cost; the warm-up is cut
    first, then the timing, never before one timed round; no deadline, no cut. no_time_to_start: a
    variant's first step is skipped when one as long as the longest so far would eat into FINISH_S."""
    import bench
    import time

    def at(elapsed, rounds, warm, deadline=100.0):
        c = dict(deadline_s=deadline, steps=20, warmup=5)
        return bench.out_of_time(c, time.monotonic() - elapsed, rounds, warm), c.get('cut')
    assert bench.FINISH_ROUNDS == 4 and bench.FINISH_S == 10.0
    assert at(85, [80.0], 5) == (5, None)                          # the compile round is not the cost
    assert at(75, [70.0, 2.0], 5) == (5, None)                     # 25 s left: enough for 2 * 5 + 10
    assert at(85, [80.0, 2.0], 5) == (2, 'warm-up cut at 2 of 5 by deadline_s=100')
    assert at(99, [95.0, 2.0], 2) == (2, None)                     # the warm-up done: one round timed
    assert at(99, [95.0, 2.0, 2.0], 2) == (None, 'timing cut at 1 of 20 steps by deadline_s=100')
    assert at(99, [95.0, 2.0, 2.0], 2, deadline=0.0) == (2, None)
    assert at(999, [2.0] * 25, 5) == (5, None)                     # every round ran
    c = dict(deadline_s=100.0, steps=20, warmup=5)                 # CUDA graphs: warm up, record, replay
    assert bench.out_of_time(c, time.monotonic() - 99, [95.0], 5, least=2) == 5 and 'cut' not in c
    assert bench.out_of_time(c, time.monotonic() - 99, [95.0, 2.0], 5, least=2) == 2
    c = dict(deadline_s=100.0)
    assert not bench.no_time_to_start(c, time.monotonic() - 95, [])
    assert bench.no_time_to_start(c, time.monotonic() - 35, [30.0])     # 65 s left < 2 x 30 + 10
    assert not bench.no_time_to_start(c, time.monotonic() - 25, [30.0])
    assert not bench.no_time_to_start(dict(deadline_s=0.0), time.monotonic() - 1e6, [30.0])


def test_a_bench_stopped_by_sigterm_writes_what_it_measured(tmp_path, monkeypatch):
    """A SIGTERM (the GPU command's step limit, 10 s before its SIGKILL) stops a bench as a deadline
    would, at once: the step under way ends, the variants not started are not benched, the warm-up is
    cut, one round is timed, no kernel pass, and the JSON is written; SIGTERM's handler is restored."""
    import signal
    import bench
    real, calls = bench.train_step, []

    def step(r, x, y, amp):
        calls.append(r['plain'])
        if len(calls) == 2:                                        # the second variant's first step
            os.kill(os.getpid(), signal.SIGTERM)
        return real(r, x, y, amp)
    monkeypatch.setattr(bench, 'train_step', step)
    out, before = tmp_path / 'b.json', signal.getsignal(signal.SIGTERM)
    assert bench.main([*TINY, '--warmup=3', '--steps=5', '--variants=dot,ega,fox', '--kernels=True',
                       f'--out={out}']) == 0
    run = json.loads(out.read_text())
    assert run['variants'].keys() == {'dot', 'ega'} and run['config']['dropped'] == ['fox']
    assert run['config']['cut'].startswith('not benched, by SIGTERM: fox (a first step took up to ')
    assert run['config']['cut'].endswith('; warm-up cut at 1 of 3 by SIGTERM; timing cut at 1 of 5 steps by '
                                         'SIGTERM; no kernel or memory pass (SIGTERM)')
    assert all('kernel' not in v for v in run['variants'].values()) and len(calls) == 4
    assert signal.getsignal(signal.SIGTERM) == before and not bench.STOP['term']


def test_a_bench_out_of_time_still_writes_what_it_measured(tmp_path, monkeypatch, capsys):
    """With no time left (FINISH_S over the deadline): the reference's first step runs, the variants after
    it are not benched, the warm-up is cut at the first round and one step is timed; the header and the
    JSON say what was cut. With time to spare, a deadline changes nothing."""
    import bench
    monkeypatch.setattr(bench, 'FINISH_S', 1e6)
    out = tmp_path / 'b.json'
    assert bench.main([*TINY, '--warmup=3', '--steps=5', '--variants=dot,ega,fox', '--deadline_s=1',
                       f'--out={out}']) == 0
    cut = (r'not benched, by deadline_s=1: ega, fox \(a first step took up to \d+ s\); warm-up cut at 1 of 3 by '
           r'deadline_s=1; timing cut at 1 of 5 steps by deadline_s=1')
    assert re.search(rf'median of 1 steps after 1 warm-up \({cut}\)', capsys.readouterr().out)
    run = json.loads(out.read_text())
    assert run['variants'].keys() == {'dot'} and re.fullmatch(cut, run['config']['cut'])
    assert run['config']['dropped'] == ['ega', 'fox'] and run['config']['steps_run'] == 1
    monkeypatch.setattr(bench, 'FINISH_S', 10.0)
    assert bench.main([*TINY, '--variants=dot,ega', '--deadline_s=600', f'--out={out}']) == 0
    run = json.loads(out.read_text())['config']
    assert 'cut' not in run and (run['steps_run'], run['warmup_run']) == (2, 1)


def test_a_profile_writes_each_variant_as_it_ends(tmp_path, monkeypatch):
    """--profile with --out rewrites the file after each variant: a crash keeps the tables done and the
    file names those still to come; a deadline skips the variants it has no time for and says so."""
    import bench
    out = tmp_path / 'p.md'
    real = bench.profile_table

    def crash_on_ega(c):
        if c['profile'] == 'ega':
            raise RuntimeError('CUDA error: an illegal memory access')
        return real(c)
    monkeypatch.setattr(bench, 'profile_table', crash_on_ega)
    with pytest.raises(RuntimeError, match='illegal memory access'):
        bench.main([*TINY, '--profile=dot,ega,fox', '--top=2', f'--out={out}'])
    text = out.read_text()
    assert '\ndot: self CPU time' in text and 'ega: self' not in text
    assert text.endswith('Not profiled yet (the command was still running): ega, fox.\n')
    monkeypatch.setattr(bench, 'profile_table', real)
    monkeypatch.setattr(bench, 'FINISH_S', 1e6)
    assert bench.main([*TINY, '--profile=dot,ega,fox', '--top=2', '--deadline_s=1', f'--out={out}']) == 0
    text = out.read_text()
    assert '\ndot: self CPU time' in text and 'ega: self' not in text and 'Not profiled yet' not in text
    assert '\nNot profiled, by deadline_s=1: ega, fox (a variant took up to ' in text


@pytest.mark.slow
def test_profiles_of_several_variants_are_written_as_markdown(tmp_path):
    out = tmp_path / 'profiles.md'
    r = run(*TINY, '--profile=dot,ega', '--top=3', f'--out={out}')
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith('# Where each step') and '--profile=dot,ega' in text
    assert text.index('\ndot: self CPU time') < text.index('\nega: self CPU time')
    bad = run(*TINY, '--profile=dot,nope', f'--out={tmp_path / "x.md"}')     # checked before any work
    assert bad.returncode == 2 and bad.stdout == '' and not (tmp_path / 'x.md').exists()


@pytest.mark.slow
def test_under_bf16_fox_saves_no_t_by_t_bias():
    """FoX under bf16 autocast: its float32 key logit -c_j keeps the attention call in float32
    (attend), so it saves no (B, nh, T, T) tensor per layer, as in float32 (it once did: a float32
    forget bias through the math path)."""
    def mem(dtype):
        r = run('--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=256', '--batch_size=2', '--steps=1',
                '--warmup=0', '--variants=dot,fox', f'--dtype={dtype}')
        assert r.returncode == 0, r.stderr
        rows = {l.split(' | ')[0][2:]: float(l.split(' | ')[3]) for l in r.stdout.splitlines()
                if l.startswith('| ') and 'tokens/s' not in l and '---' not in l}
        return rows['fox'] - rows['dot']
    B, nh, T = 2, 2, 256
    assert mem('bfloat16') < B * nh * T * T * 2 / 2 ** 20 / 2      # not even half a 16-bit T x T tensor


def test_readme_throughput_table_is_the_committed_runs():
    sys.path.insert(0, str(REPO))
    text = (REPO / 'results' / 'README.md').read_text()
    a, b = text.index(bench_tables.THROUGHPUT[0]) + len(bench_tables.THROUGHPUT[0]), text.index(bench_tables.THROUGHPUT[1])
    assert text[a:b].strip() == bench_tables.readme_table(*bench_tables.readme_runs()), \
        "results/README.md's throughput table is not what the committed runs give: python -m lab.bench_tables --write=True"


# The compiled bench: dynamo keeps a function's compiled graphs in one cache of 8 (recompile_limit),
# and every variant runs GPT.forward, so bench.py ran every variant from the ninth eager, silently.
# A subprocess (dynamo's caches and counters fresh) with torch.compile on dynamo's eager backend:
# the limit is dynamo's whatever the backend, and inductor's C++ builds would take minutes here.
# 'distinct' hides isolate_recompiles from bench.py, as a torch without it (< 2.13) would.
COMPILE_DRIVER = """
import functools, importlib.util, json, sys
import torch
sys.path.insert(0, sys.argv[1])
real = torch.compile
if sys.argv[3] == 'distinct':
    torch.compile = lambda model, **kw: real(model, backend='eager', **kw)
else:
    torch.compile = functools.partial(real, backend='eager')
spec = importlib.util.spec_from_file_location('bench_under_test', sys.argv[2])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
rc = bench.main(sys.argv[4:])
from torch._dynamo.utils import counters
print('dynamo: ' + json.dumps({k: dict(counters[k]) for k in ('stats', 'unimplemented', 'graph_break')}))
sys.exit(rc)
"""
# nine variants with a forward of their own (one past the limit of 8), and scale_init, whose forward
# is dot's: a shared cache would serve it dot's graph, and it would compile none of its own
TEN = ['dot', 'ega', 'fox', 'fnet', 'dot:sin', 'dot:mope', 'dot:rope', 'dot:alibi', 'dot:none', 'scale_init']


@pytest.mark.slow
@pytest.mark.parametrize('cache', ['isolated', 'distinct'])
def test_a_compiled_bench_compiles_every_variant(tmp_path, cache):
    """Ten variants, past the limit: each compiles graphs of its own, none hits the limit, and the
    counts are printed and written. BENCH_PY=path runs this against another bench.py (the one before
    the fix, `git show COMMIT:bench.py > /tmp/old/bench.py`, fails: dynamo hits the limit)."""
    bench_py = os.environ.get('BENCH_PY', str(REPO / 'bench.py'))
    out = tmp_path / 'compiled.json'
    r = subprocess.run([sys.executable, '-c', COMPILE_DRIVER, str(REPO), bench_py, cache, '--quick=True',
                        '--compile=True', f"--variants={','.join(TEN)}", f'--out={out}'],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert 'hit config.recompile_limit' not in r.stderr, r.stderr[-2500:]         # dynamo's own warning
    dynamo = json.loads(r.stdout.split('dynamo: ')[1])
    assert not [k for k in dynamo['unimplemented'] if 'limit' in k.lower()], dynamo['unimplemented']
    assert r.returncode == 0 and r.stderr.count('error') == 0, r.stderr[-2500:]
    run = json.loads(out.read_text())
    assert run['config']['compile_cache'] == cache and list(run['variants']) == TEN
    for name, v in run['variants'].items():
        assert v['graphs'] >= 1 and v['limit_hits'] == 0 and v['eager'] is False, (name, v)
    assert sum(v['graphs'] for v in run['variants'].values()) == dynamo['stats']['unique_graphs']
    rows = [l.split(' | ') for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l]
    assert [(row[0][2:], int(row[6])) for row in rows] == [(n, run['variants'][n]['graphs']) for n in TEN]
    assert f'{len(TEN)} of {len(TEN)} variants compiled' in r.stdout


def test_a_compiled_bench_with_dropout_says_it_skips_the_loss_check(monkeypatch, capsys, dynamo_limits):
    """--dropout=0.1: every model trains with it (the paper's), and the compiled-vs-eager first loss is
    not compared (the two draw different dropout masks), which the output says."""
    sys.path.insert(0, str(REPO))
    import bench
    real = torch.compile
    monkeypatch.setattr(bench.torch, 'compile', lambda model, **kw: real(model, backend='eager', **kw))
    assert bench.variant_config('ega', {**bench.DEFAULTS, 'dropout': 0.1}).dropout == 0.1
    with pytest.raises(bench.ConfigError, match="attn_impl=flex takes no dropout"):      # before any work
        bench.check_impl('dot:learned:attn_impl=flex', 'flex', 'cuda', 0.1)
    assert bench.main([*TINY, '--variants=dot,ega', '--compile=True', '--dropout=0.1']) == 0
    assert "the first step's loss: not checked at dropout=0.1 (the two draw different masks)" in capsys.readouterr().out


@pytest.mark.parametrize('how, why', [('limit', 'recompile limit hit'), ('nothing', 'no graph compiled')])
def test_a_variant_that_ran_eager_fails_a_compiled_bench(monkeypatch, capsys, tmp_path, dynamo_limits, how,
                                                          why):
    """A compiled run whose variants ran eager: dynamo's limit hit at the first compile (a limit of
    0), or a torch.compile that compiles nothing. One error line, exit 1, and the JSON says so."""
    sys.path.insert(0, str(REPO))
    import bench
    fake = (functools.partial(torch.compile, backend='eager', recompile_limit=0) if how == 'limit'
            else lambda model, **kw: model)
    monkeypatch.setattr(bench.torch, 'compile', fake)
    out = tmp_path / 'compiled.json'
    assert bench.main([*TINY, '--variants=dot,ega', '--compile=True', f'--out={out}']) == 1
    stdout, err = capsys.readouterr()
    assert [l for l in err.splitlines() if l.startswith('error')] == [
        f"error: 2 of 2 variants ran eager under --compile=True: dot ({why}), ega ({why})"]
    assert '0 of 2 variants compiled' in stdout
    run = json.loads(out.read_text())
    assert [v['eager'] for v in run['variants'].values()] == [True, True]
    note, heading, eager = bench_tables.compiled_note(run)
    assert '**Not every variant compiled**: dot, ega ran eager' in note and eager == {'dot', 'ega'}


def test_readme_table_says_whether_every_variant_compiled():
    sys.path.insert(0, str(REPO))

    def fake(cmd, tps, **counts):
        return dict(command=cmd, date='2026-12-01', torch='2.13.0+cpu', threads=2,
                    variants={k: dict(tps=v, mem=2 ** 20, params=10, **counts.get(k, {})) for k, v in tps.items()})
    eager = fake('python bench.py', {'dot': 1000.0, 'ega': 950.0})
    ok = dict(graphs=1, graph_breaks=0, limit_hits=0)
    compiled = fake('python bench.py --compile=True', {'dot': 1200.0, 'ega': 1140.0},
                    dot=ok, ega=dict(graphs=3, graph_breaks=2, limit_hits=0))
    table = bench_tables.readme_table(eager, compiled)
    assert 'Every one of the 2 variants compiled (4 graphs, 2 graph breaks, no recompile-limit hit).' in table
    assert '| compiled (every variant), tokens/s |' in table and '(eager)' not in table
    compiled['variants']['ega'].update(limit_hits=1)
    table = bench_tables.readme_table(eager, compiled)
    rows = {r.split(' | ')[0][2:]: r.split(' | ') for r in table.splitlines() if r.startswith('| ega')}
    assert '**Not every variant compiled**: ega ran eager' in table
    assert rows['ega'][6:8] == ['1,140 (eager)', '1.20x']
    assert '| compiled (1 ran eager), tokens/s |' in table
    # a run without the counts (the committed one, made before they were kept): not verified
    compiled = json.loads((REPO / bench_tables.COMPILED).read_text())
    for v in compiled['variants'].values():
        for key in ('graphs', 'graph_breaks', 'limit_hits', 'eager'):
            v.pop(key, None)
    table = bench_tables.readme_table(json.loads((REPO / bench_tables.EAGER).read_text()), compiled)
    assert '**The compiled column is not verified per variant**' in table
    assert '| compiled (not verified), tokens/s |' in table


def test_dtype_auto_is_bf16_on_cuda_and_the_mfu_peak_is_the_precision_measured(monkeypatch):
    sys.path.insert(0, str(REPO))
    import bench
    assert bench.resolve_dtype('auto', 'cpu') == 'float32' and bench.resolve_dtype('bfloat16', 'cpu') == 'bfloat16'
    monkeypatch.setattr(bench.torch.cuda, 'is_bf16_supported', lambda *a, **k: True)
    assert bench.resolve_dtype('auto', 'cuda:1') == 'bfloat16'
    assert bench.resolve_dtype('float32', 'cuda') == 'float32'
    monkeypatch.setattr(bench.torch.cuda, 'is_bf16_supported', lambda *a, **k: False)
    assert bench.resolve_dtype('auto', 'cuda') == 'float16'                         # as train.py's auto
    assert [bench.precision(dict(dtype=d, tf32=t)) for d, t in
            (('float32', False), ('float32', True), ('bfloat16', False))] == ['float32', 'tf32', 'bfloat16']
    peak = bench.mfu_peak
    assert peak('NVIDIA H100 80GB HBM3', 'bfloat16')[0] == 989.0
    assert peak('NVIDIA H100 80GB HBM3', 'tf32')[0] == 495.0
    assert peak('NVIDIA H100 80GB HBM3', 'float32')[0] == 67.0
    assert peak('NVIDIA H100 PCIe', 'bfloat16')[0] == 756.0                       # the longest key in the name
    assert peak('NVIDIA L40S', 'bfloat16')[0] == 362.0 and peak('NVIDIA A100-SXM4-80GB', 'float16')[0] == 312.0
    assert peak('NVIDIA H200', 'float32') == (67.0, 'H200, dense float32')
    assert peak('NVIDIA GeForce RTX 4090', 'bfloat16')[0] is None
    assert peak('NVIDIA GeForce RTX 4090', 'tf32', 165.0)[0] == 165.0


def test_fused_adamw_on_any_cuda_device_and_the_cpu():
    """configure_optimizers (which bench passes its device, 'cuda:0' say) takes fused AdamW on every
    CUDA device, not only the name 'cuda', and on the CPU (constructing one needs no GPU)."""
    from model import GPT, GPTConfig
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, dropout=0.0))
    fused = {str(d): m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), d).defaults.get('fused')
             for d in ('cuda', 'cuda:0', torch.device('cuda', 1), 'cpu', 'mps')}
    assert fused == {'cuda': True, 'cuda:0': True, 'cuda:1': True, 'cpu': True, 'mps': None}


def test_profile_ranks_by_device_time_on_cuda():
    sys.path.insert(0, str(REPO))
    import bench
    from torch.profiler import profile as torch_profile
    with torch_profile() as prof:
        torch.ones(4) @ torch.ones(4)
    real = list(prof.key_averages())                    # this torch's field for device time
    assert bench.time_key(real, cuda=True) == ('self_device_time_total', 'CUDA')
    assert bench.time_key(real, cuda=False) == ('self_cpu_time_total', 'CPU')
    old = [SimpleNamespace(self_cpu_time_total=1, self_cuda_time_total=2)]   # a torch before 2.4
    assert bench.time_key(old, cuda=True) == ('self_cuda_time_total', 'CUDA')
    assert bench.time_key([SimpleNamespace(self_cpu_time_total=1)], cuda=True) == ('self_cpu_time_total', 'CPU')
    # on CUDA the kernels alone are summed: the CPU op that launched one, and an annotation around it,
    # carry its device time again (the GPU's busy time was counted twice and more)
    on = {d: next(e.device_type for e in real) if d == 'CPU' else SimpleNamespace(name=d) for d in ('CPU', 'CUDA')}
    assert on['CPU'].name == 'CPU'                      # the profiler's enum, as bench reads it
    kernel = SimpleNamespace(key='sm90_gemm', device_type=on['CUDA'], is_user_annotation=False)
    op = SimpleNamespace(key='aten::mm', device_type=on['CPU'], is_user_annotation=False)
    note = SimpleNamespace(key='## Call CompiledFxGraph ##', device_type=on['CUDA'], is_user_annotation=True)
    assert bench.device_events([op, kernel, note], cuda=True) == [kernel]
    assert bench.device_events([op, kernel, note], cuda=False) == [op, kernel, note]


def test_cuda_memory_is_measured_with_each_variant_alone(monkeypatch):
    """The CUDA memory pass, with the GPU stood in for: each variant's step runs with only its own
    model and optimizer on the device, and its peak is read right after it."""
    sys.path.insert(0, str(REPO))
    import bench
    park, unpark, train_step = bench.park, bench.unpark, bench.train_step
    runs = {n: {'name': n} for n in ('dot', 'ega', 'fox')}
    on_gpu, seen = set(runs), []
    monkeypatch.setattr(bench, 'park', lambda r: on_gpu.discard(r['name']) or ['moved'])
    monkeypatch.setattr(bench, 'unpark', lambda r, dev, moved: moved == ['moved'] and on_gpu.add(r['name']))
    monkeypatch.setattr(bench, 'train_step', lambda r, x, y, amp: seen.append((r['name'], set(on_gpu))))
    for f in ('empty_cache', 'synchronize', 'reset_peak_memory_stats'):
        monkeypatch.setattr(bench.torch.cuda, f, lambda *a: None)
    monkeypatch.setattr(bench.torch.cuda, 'max_memory_allocated', lambda dev: 100 * len(seen))
    bench.memory_alone(dict(device='cuda:1', compile=False), runs, None, None, None)
    assert seen == [(n, {n}) for n in runs] and on_gpu == set()
    assert [r['mem'] for r in runs.values()] == [100, 200, 300]
    # park and unpark themselves (CPU to CPU here): the optimizer keeps the model's parameters
    from model import GPT, GPTConfig
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, dropout=0.0))
    r = dict(plain=m, model=m, opt=m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu'),
             scaler=torch.amp.GradScaler('cpu', enabled=False))
    x = torch.zeros(2, 16, dtype=torch.long)
    train_step(r, x, x, bench.contextlib.nullcontext)
    moved = park(r)
    unpark(r, 'cpu', moved)
    train_step(r, x, x, bench.contextlib.nullcontext)
    assert moved == []
    assert {id(p) for g in r['opt'].param_groups for p in g['params']} == {id(p) for p in m.parameters()}


def test_a_variant_can_name_its_attention_path(monkeypatch):
    """`dot:learned:attn_impl=plain` benches dot through the written-out path (the bound of every form
    that needs the T x T weights); a path that is not one of model.IMPLS is a one-line error."""
    import bench
    from configurator import ConfigError, load_config
    seen = []
    set_impl = bench.GPT.set_impl
    monkeypatch.setattr(bench.GPT, 'set_impl', lambda self, impl: seen.append(impl) or set_impl(self, impl))
    bench.bench(load_config(bench.DEFAULTS, [*TINY, '--variants=dot,dot:learned:attn_impl=plain']))
    assert seen == ['auto', 'plain']
    with pytest.raises(ConfigError, match="attn_impl='fast' is not one of"):
        bench.variant_impl('dot:learned:attn_impl=fast')


def test_the_paper_size_compiled_table_is_the_committed_runs():
    """docs/speed.md's table of the compiled logit-level forms at the paper's size is what the committed
    runs give, and each is a compiled run at that size."""
    sys.path.insert(0, str(REPO))
    runs, plain = bench_tables.paper_runs()
    assert len(runs) == 3
    for r in runs + [plain]:
        cfg = r['config']
        assert (cfg['compile'], cfg['n_layer'], cfg['n_head'], cfg['n_embd'], cfg['block_size'], cfg['batch_size']) \
            == (True, 6, 8, 256, 256, 16), r['command']
    assert plain['variants']['dot:learned:attn_impl=plain']
    text = (REPO / 'docs' / 'speed.md').read_text()
    a, b = text.index(bench_tables.PAPER_BLOCK[0]) + len(bench_tables.PAPER_BLOCK[0]), text.index(bench_tables.PAPER_BLOCK[1])
    assert text[a:b].strip() == bench_tables.paper_table(runs, plain), \
        "docs/speed.md's paper-size table is not what the committed runs give: python -m lab.bench_tables --write=True"


@pytest.mark.parametrize('code, diff', [('abc1234+dirty', 'diff --git a/model.py b/model.py\n'), ('abc1234', '')])
def test_a_written_bench_records_its_code_and_any_uncommitted_change(tmp_path, monkeypatch, code, diff):
    sys.path.insert(0, str(REPO))
    import json
    import bench
    monkeypatch.setattr(bench, 'git_commit', lambda with_diff=False: (code, diff) if with_diff else code)
    out = tmp_path / 'b.json'
    assert bench.main([*TINY, '--variants=dot', f'--out={out}']) == 0
    run = json.loads(out.read_text())
    assert run['code'] == code and run.get('diff', '') == diff


def test_the_authors_comparison_is_the_committed_runs():
    """docs/speed.md's comparison with the authors' EGA is what the committed runs give (three at each scale)."""
    sys.path.insert(0, str(REPO))
    text = (REPO / 'docs' / 'speed.md').read_text()
    a, b = text.index(bench_tables.AUTHORS_BLOCK[0]) + len(bench_tables.AUTHORS_BLOCK[0]), text.index(bench_tables.AUTHORS_BLOCK[1])
    table = bench_tables.authors_table()
    assert text[a:b].strip() == table, "docs/speed.md's authors table is stale: python -m lab.bench_tables --write=True"
    assert [row.count('.json') for row in table.splitlines()[2:]] == [3, 3]


def test_the_paper_and_authors_tables_compute_their_ratios_medians_and_verdicts(tmp_path, monkeypatch):
    """paper_table and authors_table on made-up runs with known tokens/s: each ratio to dot, the median
    of the runs, the goal met or not as the median says, the bound; a run at another size is refused."""
    sys.path.insert(0, str(REPO))
    import json
    from configurator import ConfigError
    cfg = dict(compile=True, n_layer=6, n_head=8, n_embd=256, block_size=256, batch_size=16, precision='float32')

    def run(**tps):
        return dict(command='python bench.py', date='2026-12-02', time='12:00', code='abc1234', torch='t', threads=2,
                    config=cfg, variants={k: dict(tps=v, mem=2 ** 20) for k, v in tps.items()})
    runs = [run(dot=100, ega=96, fox=90), run(dot=100, ega=94, fox=99), run(dot=200, ega=190, fox=180)]
    table = bench_tables.paper_table(runs, run(dot=100, **{'dot:learned:attn_impl=plain': 87}))
    rows = {line.split(' | ')[0][2:]: line.split(' | ') for line in table.splitlines() if line.startswith('| ')}
    assert rows['ega'][2:5] == ['96.0%, 94.0%, 95.0%', '95.0%', 'met']          # median 95.0 >= 95
    assert rows['fox'][2:5] == ['90.0%, 99.0%, 90.0%', '90.0%', '**not met**']
    assert rows['dot:learned:attn_impl=plain'][2] == '87.0%'
    (tmp_path / 'a').mkdir()
    for i, r in enumerate([run(dot=150, ega=140, **{'authors:dot': 100, 'authors:ega': 100}),
                           run(dot=150, ega=130, **{'authors:dot': 120, 'authors:ega': 100}),
                           run(dot=160, ega=150, **{'authors:dot': 100, 'authors:ega': 100})]):
        (tmp_path / ('a.json' if i == 0 else f'a_repeats/{i}.json')).parent.mkdir(exist_ok=True)
        (tmp_path / ('a.json' if i == 0 else f'a_repeats/{i}.json')).write_text(json.dumps(r))
    monkeypatch.setattr(bench_tables.paths, 'REPO', str(tmp_path))
    monkeypatch.setattr(bench_tables, 'AUTHORS_RUNS', {'here': 'a'})
    monkeypatch.setattr(bench_tables, 'AUTHORS_GOALS', {'here': 1.4})
    cells = bench_tables.authors_table().splitlines()[2].rstrip(' |').split(' | ')
    assert cells[2:7] == ['1.40x, 1.30x, 1.50x', '1.40x', '1.4x: met', '1.50x', '1.50x']
    monkeypatch.setattr(bench_tables, 'AUTHORS_GOALS', {'here': 1.45})
    assert '1.45x: **not met**' in bench_tables.authors_table()
    bad = run(dot=150, ega=140, **{'authors:dot': 100, 'authors:ega': 100})
    bad['config'] = dict(cfg, n_layer=4)
    (tmp_path / 'a_repeats' / '2.json').write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match='of different sizes'):
        bench_tables.authors_table()


def test_the_dynamo_guard_sees_a_key_deleted_and_a_value_moved():
    # conftest.py's dynamo_config_kept fails a test that leaves torch._dynamo.config changed: what a
    # monkeypatch undo of pytest >= 9.2 does to recompile_limit (the guard's own test: it can fail)
    from conftest import dynamo_config_changes
    cfg = torch._dynamo.config
    before = cfg.get_config_copy()
    limit = cfg.recompile_limit
    try:
        delattr(cfg, 'recompile_limit')
        cfg.accumulated_recompile_limit = before['accumulated_recompile_limit'] + 1
        changes = dynamo_config_changes(before, cfg)
    finally:
        cfg.load_config(before)
    assert changes == 'keys gone: recompile_limit; values changed: accumulated_recompile_limit'
    assert cfg.recompile_limit == limit and dynamo_config_changes(before, cfg) == ''


def test_the_dynamo_limits_fixture_leaves_the_config_readable(dynamo_limits):
    # the stand-in tests above raise the limits; the fixture's teardown, and the guard after it, hold
    torch._dynamo.config.recompile_limit += 5
    assert torch._dynamo.config.recompile_limit >= 5
