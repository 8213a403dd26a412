"""lab/bench.py (python -m lab.bench), the measurement suite: its arguments go through the typed configurator
(one-line errors, exit 2) and a tiny run prints one table row per variant; moved from tests/test_bench.py with
bench.py's suite (its assertions unchanged)."""

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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import train  # noqa: E402
from lab import bench_tables  # noqa: E402

TINY = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=2',
        '--steps=2', '--warmup=1']


def run(*args):
    return subprocess.run([sys.executable, '-m', 'lab.bench', *args], cwd=REPO, capture_output=True, text=True,
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
    r = cli('lab.bench', *TINY, *args)            # tests/conftest.py: a process forked from one with torch
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
    from lab import bench
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
    from lab import bench
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
    from lab import bench
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


@pytest.mark.slow
def test_against_another_reference_and_it_is_benched():
    r = run(*TINY, '--variants=ega', '--against=fox')
    assert r.returncode == 0, r.stderr
    rows = {l.split(' | ')[0][2:]: l for l in r.stdout.splitlines() if l.startswith('| ') and 'tokens/s' not in l}
    assert '| vs fox |' in r.stdout and set(rows) == {'ega', 'fox'}
    assert ' | 100.0% | ' in rows['fox'] and ' | 100.0% | ' not in rows['ega']


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
    from lab import bench
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
    from lab import bench
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

    from lab import bench
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


def test_a_deadline_times_what_it_can_and_keeps_the_rest_of_its_time_for_the_end():
    """out_of_time: the first round (on CUDA, the compiles) is not a round's cost; the warm-up is cut
    first, then the timing, never before one timed round; no deadline, no cut. no_time_to_start: a
    variant's first step is skipped when one as long as the longest so far would eat into FINISH_S."""
    from lab import bench
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
    from lab import bench
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
    from lab import bench
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
    from lab import bench
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
    bench_py = os.environ.get('BENCH_PY', str(REPO / 'lab' / 'bench.py'))
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
    from lab import bench
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
    from lab import bench
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


def test_dtype_auto_is_bf16_on_cuda_and_the_mfu_peak_is_the_precision_measured(monkeypatch):
    sys.path.insert(0, str(REPO))
    from lab import bench, bench_parts
    assert bench_parts.resolve_dtype('auto', 'cpu') == 'float32' and bench_parts.resolve_dtype('bfloat16', 'cpu') == 'bfloat16'
    monkeypatch.setattr(bench.torch.cuda, 'is_bf16_supported', lambda *a, **k: True)
    assert bench_parts.resolve_dtype('auto', 'cuda:1') == 'bfloat16'
    assert bench_parts.resolve_dtype('float32', 'cuda') == 'float32'
    monkeypatch.setattr(bench.torch.cuda, 'is_bf16_supported', lambda *a, **k: False)
    assert bench_parts.resolve_dtype('auto', 'cuda') == 'float16'                         # as train.py's auto
    assert [bench_parts.precision(dict(dtype=d, tf32=t)) for d, t in
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
    from lab import bench_parts as bench
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
    from lab import bench
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
    train_step(r, x, x, contextlib.nullcontext)
    moved = park(r)
    unpark(r, 'cpu', moved)
    train_step(r, x, x, contextlib.nullcontext)
    assert moved == []
    assert {id(p) for g in r['opt'].param_groups for p in g['params']} == {id(p) for p in m.parameters()}


def test_a_variant_can_name_its_attention_path(monkeypatch):
    """`dot:learned:attn_impl=plain` benches dot through the written-out path (the bound of every form
    that needs the T x T weights); a path that is not one of model.IMPLS is a one-line error."""
    from lab import bench
    from configurator import ConfigError, load_config
    seen = []
    set_impl = bench.GPT.set_impl
    monkeypatch.setattr(bench.GPT, 'set_impl', lambda self, impl: seen.append(impl) or set_impl(self, impl))
    bench.bench(load_config(bench.DEFAULTS, [*TINY, '--variants=dot,dot:learned:attn_impl=plain']))
    assert seen == ['auto', 'plain']
    with pytest.raises(ConfigError, match="attn_impl='fast' is not one of"):
        bench.variant_impl('dot:learned:attn_impl=fast')


@pytest.mark.parametrize('code, diff', [('abc1234+dirty', 'diff --git a/model.py b/model.py\n'), ('abc1234', '')])
def test_a_written_bench_records_its_code_and_any_uncommitted_change(tmp_path, monkeypatch, code, diff):
    sys.path.insert(0, str(REPO))
    import json
    from lab import bench
    monkeypatch.setattr(bench, 'code_and_diff', lambda: (code, diff))
    out = tmp_path / 'b.json'
    assert bench.main([*TINY, '--variants=dot', f'--out={out}']) == 0
    run = json.loads(out.read_text())
    assert run['code'] == code and run.get('diff', '') == diff


def test_the_dynamo_guard_sees_a_key_deleted_and_a_value_moved():
    # conftest.py's dynamo_config_kept fails a test that leaves torch._dynamo.config changed: what a
    # monkeypatch undo of pytest >= 9.2 does to recompile_limit (the guard's own test: it can fail)
    from tests.conftest import dynamo_config_changes
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
