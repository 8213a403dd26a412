"""train.py, sample.py and configurator.py: config errors, checkpoints, resume,
failure handling, DDP, compile, and the whole pipeline end to end (tiny, CPU)."""

import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sample  # noqa: E402
import runtime  # noqa: E402
import causality  # noqa: E402
import train  # noqa: E402
from configurator import ConfigError, load_config  # noqa: E402
from model import GPT, GPTConfig, morlet_rule  # noqa: E402

TINY = ['--n_layer=2', '--n_head=2', '--n_embd=32', '--block_size=32', '--batch_size=4',
        '--eval_iters=2', '--eval_interval=5', '--log_interval=1', '--max_iters=10',
        '--warmup_iters=2', '--lr_decay_iters=10', '--learning_rate=1e-3', '--min_lr=1e-4',
        '--dropout=0.1', '--device=cpu', '--compile=False']


def tiny(data_dir, out_dir, *extra):
    return load_config(train.DEFAULTS, TINY + [f'--data_dir={data_dir}', f'--out_dir={out_dir}', *extra],
                       train.CHOICES)


def records(out_dir, kind):
    lines = (Path(out_dir) / 'log.jsonl').read_text().splitlines()
    return [r for r in map(json.loads, lines) if r['kind'] == kind]


def run(script, *args, **kw):
    return subprocess.run([sys.executable, script, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=kw.pop('timeout', 300), **kw)


def one_line_error(err):
    return err.startswith('error: ') and err.count('\n') == 1 and 'Traceback' not in err


class Live:
    """A subprocess whose stdout is read as it comes, to send it signals at the right moment."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, *args], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines, self.out = queue.Queue(), []
        self.reader = threading.Thread(target=lambda: [self.lines.put(l) for l in self.proc.stdout], daemon=True)
        self.reader.start()

    def wait_for(self, text, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and not self.reader.is_alive() and self.lines.empty():
                    break
                continue
            self.out.append(line)
            if text in line:
                return
        self.proc.kill()
        pytest.fail(f"no {text!r} in stdout:\n{''.join(self.out)}\nstderr:\n{self.proc.stderr.read()}")

    def finish(self, timeout=60):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {timeout}s later:\n{''.join(self.out)}")
        self.reader.join(10)
        while not self.lines.empty():
            self.out.append(self.lines.get())
        return self.proc.returncode, ''.join(self.out), self.proc.stderr.read()

# ---------------------------------------------------------------------------- config


@pytest.mark.parametrize('args, message', [
    (['--n_layers=3'], "unknown config key 'n_layers' (did you mean n_layer?)"),
    (['--n_layer=3.5'], "--n_layer='3.5': expected an int"),
    (['--learning_rate=fast'], "expected a float"),
    (['--decay_lr=maybe'], "expected a bool"),
    (['--attn=zzz'], "--attn='zzz' is not one of: dot, ega"),      # no registered name near it
    (['--pos=wavelet'], "not one of: learned, sin, mope, mope_learned, rope, alibi, none"),
    (['--ega_norm=global'], "not one of: prefix, window, none"),
    (['--max_iters'], "--max_iters needs a value"),
    (['config/no_such_file.py'], "cannot read config file config/no_such_file.py"),
])
def test_config_errors(args, message):
    with pytest.raises(ConfigError) as e:
        load_config(train.DEFAULTS, args, train.CHOICES)
    assert message in str(e.value)


@pytest.mark.parametrize('source, message', [
    ("lerning_rate = 1e-3\n", "unknown name 'lerning_rate' (did you mean learning_rate?)"),
    ("n_layer = 'six'\n", "n_layer='six': expected int, got str"),
    ("n_layer = 6.0\n", "expected an int, got float"),
    ("attn = 'egaa'\n", "attn='egaa': did you mean ega? (one of: dot, ega"),
    ("attn = 'fox+causl_gauss'\n", "attn='fox+causl_gauss': did you mean causal_gauss"),
    ("n_layer = = 2\n", ":1: syntax error"),
    ("n_layer = undefined_name\n", "NameError"),
])
def test_config_file_errors(tmp_path, source, message):
    path = tmp_path / 'bad.py'
    path.write_text(source)
    with pytest.raises(ConfigError) as e:
        load_config(train.DEFAULTS, [str(path)], train.CHOICES)
    assert message in str(e.value)


def test_config_types_accepted(tmp_path):
    path = tmp_path / 'ok.py'
    path.write_text("import math\nlearning_rate = 1\nn_layer = 3\nout_dir = out_dir + '-x'\n")
    cfg = load_config(train.DEFAULTS, [str(path), '--decay_lr=0', '--compile=true', '--bias=False',
                                       '--min_lr=2'], train.CHOICES)
    assert cfg['learning_rate'] == 1.0 and isinstance(cfg['learning_rate'], float)
    assert (cfg['n_layer'], cfg['out_dir'], cfg['decay_lr'], cfg['compile'], cfg['bias']) == \
        (3, 'out-x', False, True, False)
    assert cfg['min_lr'] == 2.0 and isinstance(cfg['min_lr'], float)
    assert load_config(train.DEFAULTS, ['--compile=auto'], train.CHOICES)['compile'] == 'auto'


def test_every_config_file_loads(tmp_path):
    leaky = {'ega_paper.py', 'ega_mope_paper.py',
             'ega_morlet_paper.py', 'flux_paper.py', 'phase_paper.py', 'daub_paper.py'}   # EGA ablations
    leaky |= {f'{n}.py' for n in ('fourier_qk', 'fourier_qk_narrow', 'fourier_qk_wide', 'multi_fourier_qk',
                                  'random_qk', 'mexhat_qk', 'dc_gauss_qk', 'nyquist_qk', 'morlet_xcorr', 'qk_orthogonal',
                                  'qk_gaussian', 'fnet')}                                # FourierQK family
    files = sorted(p.name for p in (REPO / 'config').glob('*.py'))
    assert {'dot.py', 'ega.py', 'mope.py', 'ega_mope.py', 'sin.py', 'rope.py', 'alibi.py', 'cpu.py'} \
        | leaky <= set(files)
    for name in files:
        cfg = load_config(train.DEFAULTS, [str(REPO / 'config' / name)], train.CHOICES)
        # its out_dir in a folder of the test's: the user's own out-*/ runs make no difference
        runtime.check_run(train.SimpleNamespace(**dict(cfg, out_dir=str(tmp_path / cfg['out_dir']))))
        assert train.model_config(train.SimpleNamespace(**cfg)).leaks == (name in leaky), name
    cpu = load_config(train.DEFAULTS, [str(REPO / 'config' / 'ega_mope.py'), str(REPO / 'config' / 'cpu.py')],
                      train.CHOICES)
    assert (cpu['attn'], cpu['pos'], cpu['n_layer'], cpu['n_head'], cpu['n_embd'], cpu['block_size'],
            cpu['batch_size'], cpu['dropout'], cpu['max_iters'], cpu['eval_iters'], cpu['device'],
            cpu['compile'], cpu['out_dir']) == \
        ('ega', 'mope', 4, 4, 128, 128, 16, 0.0, 2000, 20, 'cpu', False, 'out-ega_mope-cpu')


@pytest.mark.parametrize('script', ['train.py', 'bench.py', 'sample.py'])
def test_the_config_keys_are_the_config_block_alone(script):
    """DEFAULTS takes every public bool, int, float or str global: the keys are exactly the names the
    script's config block (between its first two dashed lines) assigns, and train.py's GPTConfig
    fields; an imported name (train.py's HERE once) is no key (`--help` listed --HERE='/path')."""
    import ast
    import importlib
    text = (REPO / script).read_text()
    marks = [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith('# ' + '-' * 20)][:2]
    block = {t.id for node in ast.parse(text).body if isinstance(node, (ast.Assign, ast.AnnAssign))
             and marks[0] < node.lineno < marks[1]
             for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    module = importlib.import_module(script[:-3])
    extra = {f.name for f in fields(module.GPTConfig)} - {'vocab_size'} if script == 'train.py' else set()
    assert set(module.DEFAULTS) == block | extra, set(module.DEFAULTS) ^ (block | extra)


def test_defaults_are_the_paper_scale():
    d = train.DEFAULTS
    assert (d['n_layer'], d['n_head'], d['n_embd'], d['block_size'], d['batch_size'], d['dropout'],
            d['learning_rate'], d['beta2'], d['weight_decay'], d['max_iters'], d['grad_clip'],
            d['attn'], d['pos']) == (6, 8, 256, 256, 64, 0.1, 3e-4, 0.95, 0.1, 5000, 1.0, 'dot', 'learned')
    # the model's own defaults agree with train.py's
    for f in ('n_layer', 'n_head', 'n_embd', 'block_size', 'dropout', 'attn', 'pos'):
        assert getattr(GPTConfig(), f) == d[f], f


def test_a_finished_run_is_never_replaced_silently(cli, data_dir, tmp_path):
    """A scratch start into an out_dir that holds a run is refused in one line naming the two ways
    on; --overwrite=True replaces it; --init_from=resume and eval_only go on as before."""
    out = tmp_path / 'out'
    args = [*TINY, f'--data_dir={data_dir}', f'--out_dir={out}', '--max_iters=4']
    assert cli('train.py', *args).returncode == 0
    log = (out / 'log.jsonl').read_text()
    r = cli('train.py', *args)
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and r.stdout == ''
    assert 'holds a run (ckpt.pt and log.jsonl): continue it with --init_from=resume, or replace it with ' \
        '--overwrite=True' in r.stderr
    assert (out / 'log.jsonl').read_text() == log               # untouched
    (out / 'ckpt.pt').unlink()                                  # a log alone is a run too
    assert 'holds a run (log.jsonl)' in cli('train.py', *args).stderr
    assert cli('train.py', *args, '--overwrite=True').returncode == 0


@pytest.mark.parametrize('args, message', [
    (['--seed=-1'], 'seed must be in [0, 2^32 - 64), got -1'),
    (['--seed=99999999999'], 'seed must be in [0, 2^32 - 64)'),
    (['--beta2=1.5'], 'beta2 must be in [0, 1), got 1.5'),
    (['--beta1=-0.1'], 'beta1 must be in [0, 1)'),
    (['--learning_rate=nan'], 'learning_rate=nan: expected a finite number'),
    (['--weight_decay=-1'], 'weight_decay must be >= 0, got -1.0'),
    (['--grad_clip=-1'], 'grad_clip must be >= 0 (0 turns clipping off)'),
    (['--out_dir='], 'out_dir is empty'),
    (['--threads=-1'], 'threads must be in [0, '),
    (['--threads=100000'], 'threads must be in [0, '),
    (['--max_iters=50', '--warmup_iters=100'], 'max_iters (50) is shorter than warmup_iters (100)'),
])
def test_bad_values_are_one_line_errors(args, message):
    """Values that used to end in a traceback (or were accepted silently), checked before anything
    is allocated."""
    with pytest.raises(ConfigError) as e:          # from the configurator (nan), else from check_run
        cfg = load_config(train.DEFAULTS, ['--device=cpu', *args], train.CHOICES)
        runtime.check_run(train.SimpleNamespace(**cfg))
    assert message in str(e.value) and '\n' not in str(e.value)


def test_unusable_out_dir_or_device_is_one_line(cli, data_dir, tmp_path):
    (tmp_path / 'a_file').write_text('')
    cases = [([f'--out_dir={tmp_path / "a_file" / "x"}'], 'cannot create the out_dir')]
    mps = getattr(torch.backends, 'mps', None)
    cases += [] if mps and mps.is_available() else [(['--device=mps'], 'device=mps but MPS is not available')]
    cases += [] if torch.cuda.is_available() else [(['--device=cuda'], 'device=cuda but CUDA is not available')]
    for args, message in cases:
        r = cli('train.py', *TINY, f'--data_dir={data_dir}', f'--out_dir={tmp_path / "o"}', *args)
        assert r.returncode in (1, 2) and one_line_error(r.stderr) and message in r.stderr, r.stderr


@pytest.mark.slow
def test_threads_option_sets_and_shows_the_count(data_dir, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='2')                 # torch's choice would be 2
    for n in (1, 3):
        r = run('train.py', *TINY, f'--data_dir={data_dir}', f'--out_dir={tmp_path / str(n)}', '--max_iters=1',
                f'--threads={n}', env=env)
        assert r.returncode == 0 and f'1 process(es) of {n} thread(s)' in r.stdout, r.stderr
        assert f'device cpu ({torch.backends.cpu.get_cpu_capability()} kernels)' in r.stdout
    # the header names the kernels torch picked, which the environment can lower (replays read it)
    r = run('train.py', *TINY, f'--data_dir={data_dir}', f'--out_dir={tmp_path / "k"}', '--max_iters=1',
            env=dict(env, ATEN_CPU_CAPABILITY='default'))
    assert r.returncode == 0 and 'device cpu (DEFAULT kernels)' in r.stdout, r.stderr


def test_cli_config_error_exits_2_before_allocating(cli, tmp_path):
    out = tmp_path / 'out'
    for args in (['--n_layers=3'], ['--attn=nope'], [f'--out_dir={out}', '--n_head=3'],
                 ['--attn=causal_gauss+fourier_qk_causal'], ['--attn=fox+causl_gauss']):
        r = cli('train.py', f'--out_dir={out}', *args)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith('error: ') and r.stderr.count('\n') == 1, r.stderr
        assert r.stdout == '' and not out.exists()
    assert cli('train.py', '--help').returncode == 0

# ---------------------------------------------------------------------------- training


def test_checkpoint_round_trip(data_dir, tmp_path):
    summary = train.train(tiny(data_dir, tmp_path, '--max_iters=5'))
    ck = torch.load(tmp_path / 'ckpt.pt', map_location='cpu', weights_only=True)
    assert {'model', 'optimizer', 'scaler', 'model_args', 'iter_num', 'best_val_loss', 'config', 'rng',
            'audit', 'data'} <= set(ck)
    assert ck['iter_num'] == 5 and ck['audit']['causal'] is True
    assert not any(k.startswith('_orig_mod.') for k in ck['model'])
    assert set(ck['rng']) == {'python', 'numpy', 'torch', 'cuda'}
    model = GPT(GPTConfig(**ck['model_args']))
    model.load_state_dict(ck['model'])
    trained = summary['model'].state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())
    evals = records(tmp_path, 'eval')
    assert [r['iter'] for r in evals] == [0, 5]
    assert all(abs(r['gap'] - (r['shuffled_val'] - r['val'])) < 1e-9 for r in evals)
    assert ck['best_val_loss'] == min(r['val'] for r in evals)


def test_resume_is_exact(data_dir, tmp_path):
    # dropout is on, so the RNG state must travel in the checkpoint too
    train.train(tiny(data_dir, tmp_path / 'straight'))
    train.train(tiny(data_dir, tmp_path / 'split', '--max_iters=5'))
    train.train(tiny(data_dir, tmp_path / 'split', '--init_from=resume'))
    straight, split = records(tmp_path / 'straight', 'train'), records(tmp_path / 'split', 'train')
    assert [r['iter'] for r in split] == list(range(1, 11))
    assert [r['loss'] for r in split] == [r['loss'] for r in straight]
    assert records(tmp_path / 'split', 'eval')[-1]['val'] == records(tmp_path / 'straight', 'eval')[-1]['val']
    # a different seed really changes the losses, so the equality above means something
    train.train(tiny(data_dir, tmp_path / 'other', '--seed=7'))
    assert [r['loss'] for r in records(tmp_path / 'other', 'train')] != [r['loss'] for r in straight]


def test_resume_rejects_a_different_model(data_dir, tmp_path):
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'))
    with pytest.raises(ConfigError, match="attn='ega' \\(checkpoint: 'dot'\\)"):
        train.train(tiny(data_dir, tmp_path, '--init_from=resume', '--attn=ega'))


# the names (and order) checkpoints had before the attention's parts were modules, written out
# here, not taken from lab.convert's OLD_NAMES, so that a wrong rule there cannot agree with itself
def old_names(sd):
    out = {}
    for k, v in sd.items():
        for new, old in (('.attn.gates.ega.', '.attn.'), ('.attn.gates.fox.', '.attn.'), ('.attn.qk.', '.attn.spectral.'),
                         ('transformer.pos.log', 'transformer.pos.mope.log')):
            k = k.replace(new, old)
        out[k] = v
    # EGA's alpha and tau were the attention's own parameters: listed before its Linear layers
    own = [k for k in out if k.endswith(('.attn.alpha', '.attn.tau'))]
    keys = [k for k in out if k not in own]
    for k in own:
        keys.insert(keys.index(k.rsplit('.', 1)[0] + '.c_attn.weight'), k)
    return {k: out[k] for k in keys}


@pytest.mark.parametrize('attn,pos', [('fourier_qk', 'mope'), ('ega', 'learned')])
def test_a_checkpoint_with_the_old_names_loads_and_resumes(data_dir, tmp_path, attn, pos):
    """Converted (lab.convert: every checkpoint with the old names is of before 2026-12-05, numpy's RNG state
    an array), its weights load under today's names, and it resumes exactly."""
    more = (f'--attn={attn}', f'--pos={pos}')
    train.train(tiny(data_dir, tmp_path / 'straight', '--max_iters=4', *more))
    train.train(tiny(data_dir, tmp_path, '--max_iters=2', *more))
    path = tmp_path / 'ckpt.pt'
    ck = torch.load(path, weights_only=True)
    old = old_names(ck['model'])
    assert set(old) != set(ck['model'])                         # some names really are the old ones
    loaded, _ = runtime.load_checkpoint(str(path))
    kind, key, *rest = ck['rng']['numpy']
    torch.save(dict(ck, model=old, rng=dict(ck['rng'], numpy=(kind, np.asarray(key, dtype=np.uint32), *rest))), path)
    with pytest.raises(ConfigError, match='python -m lab.convert'):
        runtime.load_checkpoint(str(path))
    from lab import convert
    assert convert.main([f'--ckpt={path}']) == 0
    upgraded, _ = runtime.load_checkpoint(str(path))
    assert set(upgraded['model']) == set(loaded['model'])       # today's names, every one
    assert all(torch.equal(upgraded['model'][k], v) for k, v in loaded['model'].items())
    train.train(tiny(data_dir, tmp_path, *more, '--init_from=resume', '--max_iters=4'))
    loss = [r['loss'] for r in records(tmp_path, 'train')]
    assert loss == [r['loss'] for r in records(tmp_path / 'straight', 'train')]      # exactly


@pytest.mark.parametrize('recorded', [True, False])
def test_an_optimizer_state_in_another_order_is_refused_but_evaluates(data_dir, tmp_path, recorded):
    """A checkpoint whose optimizer state lists the parameters in another order (EGA's alpha and tau
    came before c_attn's weight until this code): its weights evaluate, a resume is refused in one
    line. Told by the names a checkpoint records, or, in an older one without them, by the shapes."""
    more = ('--attn=ega', '--max_iters=2')
    train.train(tiny(data_dir, tmp_path, *more))
    path = tmp_path / 'ckpt.pt'
    ck = torch.load(path, weights_only=True)
    names = ck['param_names']
    state, groups = ck['optimizer']['state'], ck['optimizer']['param_groups']
    # the same state laid out as the earlier code would: alpha and tau ahead of their layer's weights
    ega = [i for i, n in enumerate(names) if n.endswith(('.alpha', '.tau'))]
    no_decay = groups[1]['params']
    reordered = ega + [i for i in no_decay if i not in ega]
    perm = {new: old for new, old in zip(no_decay, reordered)}
    ck['optimizer']['state'] = {i: state[perm.get(i, i)] for i in state}
    if recorded:
        ck['param_names'] = [names[perm.get(i, i)] for i in range(len(names))]
    else:
        del ck['param_names']
    torch.save(ck, path)
    with pytest.raises(ConfigError, match="lists its parameters in another order"):
        train.train(tiny(data_dir, tmp_path, '--attn=ega', '--init_from=resume', '--max_iters=4'))
    assert train.train(tiny(data_dir, tmp_path, '--attn=ega', '--init_from=resume', '--eval_only=True',
                            '--max_iters=2'))['iter'] == 2


def test_nan_stops_and_keeps_the_checkpoint(data_dir, tmp_path, monkeypatch):
    class Poisoned(GPT):
        calls = 0

        def forward(self, idx, targets=None):
            logits, loss = super().forward(idx, targets)
            if self.training:
                Poisoned.calls += 1
                if Poisoned.calls >= 5:      # the 5th training step
                    loss = loss * float('nan')
            return logits, loss

    monkeypatch.setattr(train, 'GPT', Poisoned)
    with pytest.raises(train.TrainError, match=r'non-finite training loss \(nan\) at iter 4'):
        train.train(tiny(data_dir, tmp_path, '--eval_interval=3'))
    ck = torch.load(tmp_path / 'ckpt.pt', map_location='cpu', weights_only=True)
    assert ck['iter_num'] == 3
    assert all(torch.isfinite(v).all() for v in ck['model'].values())


def start_run(args, out):
    """train.py in a process of its own, returned once its log holds a training step (or after 120 s)."""
    proc = subprocess.Popen([sys.executable, 'train.py', *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log, deadline = out / 'log.jsonl', time.time() + 120
    while time.time() < deadline and not (log.exists() and '"kind": "train"' in log.read_text()):
        time.sleep(0.1)
    return proc


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint(data_dir, tmp_path):
    out = tmp_path / 'out'
    args = TINY + [f'--data_dir={data_dir}', f'--out_dir={out}', '--max_iters=100000',
                   '--lr_decay_iters=100000', '--eval_interval=100000']
    proc = start_run(args, out)
    # one run per out_dir: a second one is refused in one line while the first holds run.lock
    second = run('train.py', *args, '--init_from=resume')
    assert second.returncode == 2 and one_line_error(second.stderr), second.stderr
    assert f'is in use by another run (pid {proc.pid} ' in second.stderr
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert not (out / 'run.lock').exists()                      # released at exit
    ck = torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)
    assert ck['iter_num'] >= 1
    assert f"at iter {ck['iter_num']} (signal {int(signal.SIGTERM)})" in stdout
    # a resume that would end before the checkpoint's iteration is refused
    with pytest.raises(ConfigError, match=f"is at iter {ck['iter_num']}, past max_iters=0"):
        train.train(tiny(data_dir, out, '--init_from=resume', '--max_iters=0', '--lr_decay_iters=100000'))
    # a lock left by a killed run (its process gone) is stale: the run continues from the checkpoint
    (out / 'run.lock').write_text(f"{proc.pid} {socket.gethostname()}\n")
    resumed = train.train(tiny(data_dir, out, '--init_from=resume', f"--max_iters={ck['iter_num'] + 2}",
                               '--lr_decay_iters=100000'))
    assert resumed['iter'] == ck['iter_num'] + 2
    assert not (out / 'run.lock').exists()


def test_a_resume_holds_out_dir_before_it_reads_the_checkpoint(data_dir, tmp_path, monkeypatch):
    """The order that keeps a resume from reading a checkpoint another run is about to replace: run.lock
    is this process's when train.py reads ckpt.pt (a resume that read first, then waited out a run that
    was ending, trained over that run's last steps)."""
    train.train(tiny(data_dir, tmp_path, '--max_iters=2'))
    seen = []
    real = runtime.load_checkpoint

    def reading(path):
        seen.append((tmp_path / 'run.lock').read_text().split() if (tmp_path / 'run.lock').exists() else None)
        return real(path)
    monkeypatch.setattr(runtime, 'load_checkpoint', reading)
    train.train(tiny(data_dir, tmp_path, '--init_from=resume', '--max_iters=3'))
    assert seen == [[str(os.getpid()), socket.gethostname()]]


@pytest.mark.slow
def test_nothing_started_during_a_run_reads_or_replaces_it(data_dir, tmp_path, cli):
    """While a run lives in out_dir, a resume, an overwrite and an eval of it are each refused in one
    line, before they read anything there (train.setup takes run.lock first: a resume that read the
    checkpoint first, then waited out the run, trained over its last steps); the run ends as it would
    have alone: every step logged once, every eval, the checkpoint at its last step."""
    out = tmp_path / 'out'
    args = TINY + [f'--data_dir={data_dir}', f'--out_dir={out}', '--max_iters=400', '--lr_decay_iters=400',
                   '--eval_interval=100', '--log_interval=1']
    proc = start_run(args, out)
    tries = [('--init_from=resume', '--max_iters=500', '--lr_decay_iters=500'), ('--overwrite=True',),
             ('--init_from=resume', '--eval_only=True')]
    for extra in tries:
        r = cli('train.py', *args, *extra)
        assert r.returncode == 2 and one_line_error(r.stderr), (extra, r.stderr)
        assert f'is in use by another run (pid {proc.pid} ' in r.stderr, (extra, r.stderr)
    assert proc.poll() is None, "the run ended before every try: make it longer"
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert [r['iter'] for r in records(out, 'train')] == list(range(1, 401))
    assert [r['iter'] for r in records(out, 'eval')] == [0, 100, 200, 300, 400]
    assert not records(out, 'eval_only')
    assert torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)['iter_num'] == 400


def test_leaking_model_is_marked(data_dir, tmp_path, capsys):
    summary = train.train(tiny(data_dir, tmp_path, '--attn=ega', '--ega_norm=window', '--max_iters=2'))
    out = capsys.readouterr().out
    assert not summary['audit'].causal
    assert 'audit: LEAKS' in out
    lines = [l for l in out.splitlines() if l.startswith(('eval iter', 'iter ', 'done:'))]
    assert lines and all('LEAKS' in l for l in lines)
    assert all(r['leaks'] for r in records(tmp_path, 'eval') + records(tmp_path, 'train'))
    r = run('sample.py', f'--out_dir={tmp_path}', '--max_new_tokens=5', '--num_samples=1')
    assert r.returncode == 0 and 'LEAKS' in r.stderr and 'samples mean nothing' in r.stderr


def test_causal_model_is_not_marked(data_dir, tmp_path, capsys):
    train.train(tiny(data_dir, tmp_path, '--attn=ega', '--pos=mope', '--max_iters=2'))
    out = capsys.readouterr().out
    assert 'audit: causal' in out and 'LEAKS' not in out

# ---------------------------------------------------------------------------- end to end


def test_end_to_end(tmp_path, shakespeare):
    data = tmp_path / 'data'
    r = run('prepare.py', f"--input={shakespeare}", f'--out_dir={data}')
    assert r.returncode == 0, r.stderr
    r = run('train.py', 'config/ega_mope.py', *TINY, f'--data_dir={data}', f'--out_dir={tmp_path / "run"}',
            '--max_iters=20', '--lr_decay_iters=20', '--log_interval=5', '--eval_interval=10',
            '--learning_rate=3e-3')
    assert r.returncode == 0, r.stderr
    assert 'attn=ega pos=mope' in r.stdout and 'audit: causal' in r.stdout
    assert 'tok/s' in r.stdout and 'eta' in r.stdout and 'done: best val' in r.stdout
    evals = records(tmp_path / 'run', 'eval')
    assert [e['iter'] for e in evals] == [0, 10, 20]
    assert evals[-1]['val'] < evals[0]['val'] - 0.3     # 20 steps do learn something
    r = run('sample.py', f'--out_dir={tmp_path / "run"}', '--start=ROMEO:', '--num_samples=2',
            '--max_new_tokens=40', '--seed=3')
    assert r.returncode == 0, r.stderr
    samples = r.stdout.split('---------------\n')[:2]
    vocab = set(json.loads((data / 'meta.json').read_text())['itos'])
    assert len(samples) == 2 and all(s.startswith('ROMEO:') and len(s) == len('ROMEO:') + 40 + 1
                                     for s in samples)
    assert set(''.join(samples)) <= vocab
    again = run('sample.py', f'--out_dir={tmp_path / "run"}', '--start=ROMEO:', '--num_samples=2',
                '--max_new_tokens=40', '--seed=3')
    assert again.stdout == r.stdout                      # seeded


def test_sample_errors(cli, data_dir, tmp_path):
    r = cli('sample.py', f'--out_dir={tmp_path / "none"}')
    assert r.returncode == 2 and 'no checkpoint' in r.stderr
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'))
    other = tmp_path / 'meta.json'
    other.write_text(json.dumps({'vocab_size': 3, 'tokenizer': 'char', 'itos': ['a', 'b', 'c']}))
    r = cli('sample.py', f'--out_dir={tmp_path}', f'--meta_path={other}')
    assert r.returncode == 2 and 'vocabulary mismatch' in r.stderr
    r = cli('sample.py', f'--out_dir={tmp_path}', '--start=\u00e9t\u00e9')
    assert r.returncode == 2 and 'outside the vocabulary' in r.stderr
    garbled, gpt2, old = tmp_path / 'garbled.json', tmp_path / 'gpt2.json', tmp_path / 'old' / 'meta.pkl'
    garbled.write_bytes(b'not json')
    gpt2.write_text(json.dumps({'vocab_size': 50257, 'tokenizer': 'gpt2'}))
    old.parent.mkdir()
    old.write_bytes(b'any pickle: never read')
    for path, message in [(garbled, 'cannot read'), (gpt2, 'a gpt2 meta.json, which holds no characters'),
                          (old, 'the pickle of an older prepare.py, never read (a pickle can run code): run '
                                '`python prepare.py` again')]:
        r = cli('sample.py', f'--out_dir={tmp_path}', f'--meta_path={path}')
        assert r.returncode == 2 and one_line_error(r.stderr) and message in r.stderr, r.stderr
    r = cli('sample.py', f'--out_dir={tmp_path}', '--top_k=-1')
    assert r.returncode == 2 and one_line_error(r.stderr) and 'top_k >= 0' in r.stderr
    prompt = tmp_path / 'prompt.txt'
    prompt.write_text('KING:')
    r = cli('sample.py', f'--out_dir={tmp_path}', f'--start=FILE:{prompt}', '--max_new_tokens=3',
            '--num_samples=1')
    assert r.returncode == 0 and r.stdout.startswith('KING:')


@pytest.mark.slow
@pytest.mark.parametrize('n, extra', [(2, ['config/ega_mope.py']), (3, ['--gradient_accumulation_steps=2'])])
def test_ddp_any_process_count(data_dir, tmp_path, n, extra):
    # the documented command with the default gradient_accumulation_steps (per process), any n
    out = tmp_path / 'ddp'
    r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={n}',
                        'train.py', *extra, *TINY, f'--data_dir={data_dir}', f'--out_dir={out}', '--max_iters=4'],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    gas = 2 if extra[0].startswith('--gradient') else 1
    assert f'{n} process(es)' in r.stdout and f'{n * gas * 4 * 32} tokens/iter' in r.stdout   # B=4, T=32
    ck = torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)
    assert ck['iter_num'] == 4 and not any(k.startswith(('module.', '_orig_mod.')) for k in ck['model'])
    assert 'FutureWarning' not in r.stderr, r.stderr[-2000:]                 # no deprecated DDP argument


@pytest.mark.slow
def test_a_ctrl_c_under_torchrun_stops_every_rank_at_one_step_and_saves(data_dir, tmp_path):
    """torchrun is the one launcher. A Ctrl-C reaches the launcher and both ranks (the terminal
    signals the process group); the launcher then sends its workers SIGTERM, which our ranks take
    as the same stop request (not a second signal that would leave without saving): both stop at
    one step, rank 0 saves once, and the checkpoint resumes."""
    out = tmp_path / 'b'
    args = [*TINY, f'--data_dir={data_dir}', '--threads=1', f'--out_dir={out}', '--max_iters=100000',
            '--lr_decay_iters=0', '--eval_interval=20']
    p = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                          'train.py', *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    deadline = time.time() + 240
    while not (out / 'ckpt.pt').exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    os.killpg(p.pid, signal.SIGINT)                             # what Ctrl-C in a terminal does
    stdout, stderr = p.communicate(timeout=240)
    assert p.returncode != 0
    assert stdout.count('caught signal 2: stopping at iter') == 1, stdout[-2000:]
    assert 'without saving' not in stderr, stderr[-2000:]
    it = torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)['iter_num']
    assert f'caught signal 2: stopping at iter {it}\n' in stdout
    # saved at the stop: by the signal, or by the eval that had just saved this very state (a Ctrl-C that
    # lands right after an eval's save; train.py then saves nothing twice)
    assert stdout.count(f'saved {out}/ckpt.pt at iter {it} (signal 2)') + \
        stdout.count(f'saved {out}/ckpt.pt at iter {it} (eval)') == 1, stdout[-2000:]
    assert not (out / 'run.lock').exists()
    resumed = train.train(tiny(data_dir, out, '--init_from=resume', f'--max_iters={it + 2}', '--lr_decay_iters=0'))
    assert resumed['iter'] == it + 2
    assert "unknown config key 'nproc'" in run('train.py', '--nproc=2').stderr


@pytest.mark.slow
def test_ddp_resume_with_dropout_is_exact(data_dir, tmp_path):
    """Two processes, dropout on: 4 steps in one go, or 2 steps and a resume for 2 more, end with
    the same weights (every rank's dropout stream is restored, not only rank 0's)."""
    def torchrun(out, *args):
        r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                            'train.py', *TINY, f'--data_dir={data_dir}', f'--out_dir={out}', '--lr_decay_iters=4',
                            *args], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)['model']
    whole = torchrun(tmp_path / 'a', '--max_iters=4')
    torchrun(tmp_path / 'b', '--max_iters=2')
    resumed = torchrun(tmp_path / 'b', '--max_iters=4', '--init_from=resume')
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_compiled_matches_eager():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, dropout=0.0)).eval()
    idx = torch.randint(65, (2, 16))
    with torch.no_grad():
        eager, _ = model(idx)
        compiled, _ = torch.compile(model)(idx)
    assert torch.allclose(compiled, eager, atol=1e-5, rtol=1e-5)


def test_compile_mode_reaches_torch_compile(data_dir, tmp_path, monkeypatch, capsys):
    """--compile_mode is torch.compile's mode for the training model (reduce-overhead: CUDA graphs), and
    the log's device line names it. torch.compile stands in here: the call is what is checked."""
    seen = []
    monkeypatch.setattr(torch, 'compile', lambda m, **kw: seen.append(kw) or m)
    train.train(tiny(data_dir, tmp_path, '--compile=True', '--compile_mode=reduce-overhead', '--max_iters=1'))
    assert seen == [{'mode': 'reduce-overhead'}]
    assert 'compile True (reduce-overhead)' in capsys.readouterr().out


@pytest.mark.parametrize('attn, ega_norm', [('dot', 'prefix'), ('ega', 'prefix'), ('ega', 'window')])
def test_bf16_autocast_close_to_fp32(attn, ega_norm):
    # the closest this CPU gets to the CUDA AMP path; the EGA statistics stay in fp32
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, attn=attn, ega_norm=ega_norm,
                          pos='mope', dropout=0.0))
    idx = torch.randint(65, (2, 64))
    _, ctx = train.autocast('cpu', 'bfloat16')
    with torch.no_grad():
        ref, _ = model(idx)
        with ctx:
            low, loss = model(idx, idx)
    assert low.dtype == torch.bfloat16 and torch.isfinite(loss)
    assert (low.float() - ref).abs().max().item() < 2e-2


def test_training_in_bf16_on_cpu(data_dir, tmp_path):
    summary = train.train(tiny(data_dir, tmp_path, '--dtype=bfloat16', '--attn=ega', '--max_iters=3'))
    assert summary['iter'] == 3 and math.isfinite(summary['best_val'])

# ---------------------------------------------------------------------------- broken inputs


def test_a_checkpoint_whose_config_does_not_fit_its_weights_is_one_error(data_dir, tmp_path):
    """A checkpoint that records --attn=fox over dot's weights (edited, or written by other code): sample.py
    and a resume each say so in one ConfigError (sample.py traced back; the resume claimed its weights
    would load in sample.py)."""
    train.train(tiny(data_dir, tmp_path, '--max_iters=2'))
    ck = torch.load(tmp_path / 'ckpt.pt', map_location='cpu', weights_only=True)
    ck['model_args']['attn'] = ck['config']['attn'] = 'fox'
    torch.save(ck, tmp_path / 'ckpt.pt')
    want = 'its weights do not fit the model its config describes: 4 missing (transformer.h.0.attn.gates.fox'
    with pytest.raises(ConfigError, match=re.escape(want)):
        sample.sample(load_config(sample.DEFAULTS, [f'--out_dir={tmp_path}', '--max_new_tokens=2', '--device=cpu'],
                                  sample.CHOICES))
    with pytest.raises(ConfigError, match=re.escape(want)):
        train.train(tiny(data_dir, tmp_path, '--init_from=resume', '--max_iters=4', '--attn=fox'))


def test_a_resume_accepts_every_spelling_of_the_runs_composition(data_dir, tmp_path):
    """ega+fox, fox+ega and ega_fox build one model: a resume under another spelling continues the run (it
    was refused as a config mismatch); another model is still refused."""
    train.train(tiny(data_dir, tmp_path, '--attn=ega+fox', '--max_iters=2', '--pos=learned+alibi'))
    for i, (attn, pos) in enumerate([('ega_fox', 'alibi+learned'), ('fox+ega', 'learned+alibi')]):
        done = train.train(tiny(data_dir, tmp_path, '--init_from=resume', f'--max_iters={3 + i}', f'--attn={attn}',
                                f'--pos={pos}'))
        assert done['iter'] == 3 + i and done['model'].config.attn == 'ega+fox'
    with pytest.raises(ConfigError, match=r"attn='fox' \(checkpoint: 'ega\+fox'\)"):
        train.train(tiny(data_dir, tmp_path, '--init_from=resume', '--max_iters=6', '--attn=fox',
                         '--pos=learned+alibi'))


def test_sampling_an_untrained_checkpoint_says_so(data_dir, tmp_path, capsys):
    """A Ctrl-C during the first eval leaves the iter-0 checkpoint: sample.py warns that it is untrained."""
    train.train(tiny(data_dir, tmp_path, '--max_iters=0'))
    capsys.readouterr()
    sample.sample(load_config(sample.DEFAULTS, [f'--out_dir={tmp_path}', '--max_new_tokens=2', '--device=cpu'],
                              sample.CHOICES))
    assert "warning: this checkpoint is at iter 0" in capsys.readouterr().err


def test_sampling_a_run_stopped_early_says_so(data_dir, tmp_path, capsys):
    """A checkpoint below its run's max_iters (a run stopped by Ctrl-C or a signal) is partly trained:
    sample.py says so; a finished run's is sampled without a word."""
    train.train(tiny(data_dir, tmp_path, '--max_iters=2'))
    args = [f'--out_dir={tmp_path}', '--max_new_tokens=2', '--device=cpu']
    capsys.readouterr()
    sample.sample(load_config(sample.DEFAULTS, args, sample.CHOICES))
    assert 'warning: this checkpoint' not in capsys.readouterr().err
    path = tmp_path / 'ckpt.pt'
    ck = torch.load(path, map_location='cpu', weights_only=True)
    ck['config']['max_iters'] = 5000
    torch.save(ck, path)
    sample.sample(load_config(sample.DEFAULTS, args, sample.CHOICES))
    assert "warning: this checkpoint is at iter 2 of its run's 5000 (stopped early)" in capsys.readouterr().err


def test_a_dropout_checkpoint_evaluates_through_flex(data_dir, tmp_path):
    """Evaluation has no dropout: --eval_only=True --attn_impl=flex reads a run trained with dropout 0.1
    (every paper-scale run; it was refused), and agrees with the fused path's eval."""
    train.train(tiny(data_dir, tmp_path, '--max_iters=2'))           # TINY trains with dropout 0.1
    vals = [train.train(tiny(data_dir, tmp_path, '--init_from=resume', '--eval_only=True',
                             f'--attn_impl={impl}'))['last_eval']['val'] for impl in ('sdpa', 'flex')]
    assert abs(vals[0] - vals[1]) < 1e-5, vals


def test_broken_checkpoint_is_a_one_line_error(data_dir, tmp_path, capsys):
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'))
    ckpt = tmp_path / 'ckpt.pt'
    good = ckpt.read_bytes()
    other = tmp_path / 'list.pt'
    torch.save([1, 2, 3], other)
    for broken in (good[:len(good) // 2], b'not a checkpoint\n', other.read_bytes()):
        ckpt.write_bytes(broken)
        capsys.readouterr()
        assert train.main(TINY + [f'--data_dir={data_dir}', f'--out_dir={tmp_path}', '--init_from=resume']) == 2
        err = capsys.readouterr().err
        assert one_line_error(err) and str(ckpt) in err, err
        assert sample.main([f'--out_dir={tmp_path}', '--max_new_tokens=2']) == 2
        err = capsys.readouterr().err
        assert one_line_error(err) and str(ckpt) in err, err


@pytest.mark.parametrize('split', ['train', 'val'])
def test_bin_of_odd_bytes_is_a_one_line_error(data_dir, tmp_path, capsys, split):
    data = tmp_path / 'data'
    shutil.copytree(data_dir, data)
    with open(data / f'{split}.bin', 'ab') as f:
        f.write(b'\0')      # half a uint16 token
    assert train.main(TINY + [f'--data_dir={data}', f'--out_dir={tmp_path / "out"}']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and f'{split}.bin' in err and 'not a whole number of uint16 tokens' in err, err


@pytest.mark.parametrize('split', ['train', 'val'])
def test_token_ids_outside_the_vocabulary_are_a_one_line_error(data_dir, tmp_path, capsys, split):
    data = tmp_path / 'data'
    shutil.copytree(data_dir, data)
    ids = np.fromfile(data / f'{split}.bin', dtype=np.uint16)
    ids[len(ids) // 2] = 65                                     # the char vocabulary is 0..64
    ids.tofile(data / f'{split}.bin')
    assert train.main(TINY + [f'--data_dir={data}', f'--out_dir={tmp_path / "out"}']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and f'{split}.bin holds token id 65, outside the vocabulary' in err, err
    assert not (tmp_path / 'out').exists()                      # before the model is built


def test_stale_temp_files_are_removed(data_dir, tmp_path):
    # what a kill -9 inside write_atomic leaves: f'{path}.{pid}.tmp'
    tmp_path.joinpath('ckpt.pt.4242.tmp').write_bytes(b'half a checkpoint')
    tmp_path.joinpath('log.jsonl.77.tmp').write_text('{"kind": ')
    tmp_path.joinpath('notes.tmp').write_text('not ours')
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'))
    assert sorted(p.name for p in tmp_path.glob('*.tmp')) == ['notes.tmp']


@pytest.mark.slow
def test_data_dir_found_next_to_train_py(data_dir, tmp_path):
    # prepare.py writes data/ next to itself; train.py run from elsewhere finds it there
    created = not (REPO / 'data').exists()
    name = f'test-{uuid.uuid4().hex}'
    try:
        shutil.copytree(data_dir, REPO / 'data' / name)
        r = subprocess.run([sys.executable, str(REPO / 'train.py'), *TINY, f'--data_dir=data/{name}',
                            f'--out_dir={tmp_path / "out"}', '--max_iters=1'],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        ck = torch.load(tmp_path / 'out' / 'ckpt.pt', map_location='cpu', weights_only=True)
        assert ck['data']['data_dir'] == str(REPO / 'data' / name)
    finally:
        shutil.rmtree(REPO / 'data' / name, ignore_errors=True)
        if created and (REPO / 'data').is_dir() and not any((REPO / 'data').iterdir()):
            (REPO / 'data').rmdir()


def test_missing_data_dir_names_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = f'data/nope-{uuid.uuid4().hex}'
    assert train.main(TINY + [f'--data_dir={name}', f'--out_dir={tmp_path / "out"}']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and str(tmp_path / name) in err and str(REPO / name) in err, err

# ---------------------------------------------------------------------------- schedule, resume, logs


@pytest.mark.slow
def test_lr_decay_follows_max_iters(data_dir, tmp_path, capsys):
    assert train.DEFAULTS['lr_decay_iters'] == 0
    args = TINY + [f'--data_dir={data_dir}', f'--out_dir={tmp_path}', '--lr_decay_iters=0', '--max_iters=6']
    assert train.main(args) == 0, capsys.readouterr().err
    lrs = [r['lr'] for r in records(tmp_path, 'train')]       # row i: the lr of step i-1
    assert lrs[2] == 1e-3                                       # warmup done (2 steps): the top of the cosine
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:]))        # then down ...
    assert records(tmp_path, 'eval')[-1]['lr'] == 1e-4          # ... to min_lr at max_iters
    assert train.main(args + ['--lr_decay_iters=2']) == 2       # an explicit one must pass warmup_iters
    assert 'or be 0 to follow max_iters' in capsys.readouterr().err


@pytest.mark.slow
def test_mope_pairs_are_logged_with_every_eval(data_dir, tmp_path, capsys):
    """pos=mope: the eval rows carry each pair's (w, s) as the model uses them, the model's own."""
    args = TINY + [f'--data_dir={data_dir}', f'--out_dir={tmp_path}', '--pos=mope', '--max_iters=4']
    assert train.main(args) == 0, capsys.readouterr().err
    rows = records(tmp_path, 'eval')
    m = torch.load(tmp_path / 'ckpt.pt', weights_only=True)['model']
    w, s = m['transformer.pos.log_w'].exp(), m['transformer.pos.log_s'].exp()
    w, s = morlet_rule(w, s)                                    # as the model uses them
    assert rows[-1]['mope']['w'] == pytest.approx(w.tolist(), abs=1e-5)
    assert rows[-1]['mope']['s'] == pytest.approx(s.tolist(), abs=1e-3)
    assert len(rows[0]['mope']['w']) == 16 and rows[0]['mope'] != rows[-1]['mope']     # C / 2 pairs, learned
    other = tmp_path / 'learned'
    assert train.main(TINY + [f'--data_dir={data_dir}', f'--out_dir={other}', '--max_iters=2']) == 0
    assert 'mope' not in records(other, 'eval')[-1]


@pytest.mark.slow
def test_resume_drops_log_rows_after_the_checkpoint(data_dir, tmp_path):
    train.train(tiny(data_dir, tmp_path / 'straight'))
    run_dir = tmp_path / 'split'
    train.train(tiny(data_dir, run_dir, '--max_iters=5'))
    at5 = (run_dir / 'ckpt.pt').read_bytes()
    train.train(tiny(data_dir, run_dir, '--init_from=resume', '--max_iters=8'))
    (run_dir / 'ckpt.pt').write_bytes(at5)      # as if killed at iter 8 with the checkpoint of iter 5
    train.train(tiny(data_dir, run_dir, '--init_from=resume'))
    straight, split = records(tmp_path / 'straight', 'train'), records(run_dir, 'train')
    assert [r['iter'] for r in split] == list(range(1, 11))
    assert [r['iter'] for r in records(run_dir, 'eval')] == [0, 5, 10]
    assert [r['loss'] for r in split] == [r['loss'] for r in straight]


@pytest.mark.slow
def test_ms_and_tok_s_come_from_the_same_median(data_dir, tmp_path, capsys):
    train.train(tiny(data_dir, tmp_path))
    rows = records(tmp_path, 'train')
    assert len(rows) == 10 and all(math.isclose(4 * 32 / r['tok_s'] * 1000, r['ms'], rel_tol=1e-9) for r in rows)
    assert 'tok/s (median of 10)' in capsys.readouterr().out


def test_eta_counts_the_evals_left():
    c = SimpleNamespace(max_iters=100, eval_interval=30)
    assert train.eta(c, 5, 0.0, 1.0) == 4                         # 30, 60, 90 and the final one at 100
    assert train.eta(c, 30, 0.0, 1.0) == 3 and train.eta(c, 100, 0.0, 1.0) == 0
    assert train.eta(c, 5, 0.5, 10.0) == 95 * 0.5 + 4 * 10.0
    assert train.eta(SimpleNamespace(max_iters=100, eval_interval=10), 0, 1.0, 2.0) == 100 + 10 * 2.0


def test_long_eval_shows_progress(data_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(train, 'PROGRESS_S', 0.0)       # a line after every batch
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'))
    progress = [l.split()[1] for l in capsys.readouterr().out.splitlines() if l.startswith('  eval: ')]
    assert progress == [f'{i}/6' for i in range(1, 7)] * 2     # 2 batches x (train, val, shuffled), 2 evals


def test_cpu_note_on_the_paper_scale_only(data_dir, tmp_path, capsys, monkeypatch):
    def work(files, vocab=65):
        cfg = load_config(train.DEFAULTS, [str(REPO / 'config' / f) for f in files], train.CHOICES)
        params = GPT(train.model_config(SimpleNamespace(**cfg), vocab)).num_params()
        return params, cfg['batch_size'] * cfg['block_size'] * cfg['gradient_accumulation_steps']
    note = runtime.scale_note(*work(['ega_mope.py']), ['config/ega_mope.py'])
    assert 'python train.py config/ega_mope.py config/cpu.py' in note
    assert runtime.scale_note(*work(['ega_mope.py', 'cpu.py'])) == ''
    # GPT-2 BPE with the overlay on: still slow, but the advice to add the overlay would be wrong
    note = runtime.scale_note(*work(['ega.py', 'cpu.py'], 50257), ['config/ega.py', 'config/cpu.py'])
    assert note.startswith('note:') and 'even with config/cpu.py' in note and 'add the overlay' not in note
    # printed once, at start-up
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'))
    assert 'note:' not in capsys.readouterr().out
    monkeypatch.setattr(runtime, 'CPU_WORK', 1)
    train.train(tiny(data_dir, tmp_path, '--max_iters=1'), ['config/dot.py'])
    notes = [l for l in capsys.readouterr().out.splitlines() if l.startswith('note:')]
    assert len(notes) == 1 and notes[0].endswith('python train.py config/dot.py config/cpu.py')

# ---------------------------------------------------------------------------- signals


@pytest.mark.slow
def test_sigint_during_a_long_eval_stops_at_once(data_dir, tmp_path):
    out = tmp_path / 'out'
    # 3 x 100000 eval batches: minutes, unless the eval itself heeds the signal
    live = Live('train.py', *TINY, f'--data_dir={data_dir}', f'--out_dir={out}', '--eval_iters=100000')
    live.wait_for('tokens/iter')
    time.sleep(1.0)
    t0 = time.time()
    live.proc.send_signal(signal.SIGINT)
    rc, stdout, stderr = live.finish()
    assert time.time() - t0 < 20, stdout
    assert rc == 128 + signal.SIGINT and 'Traceback' not in stderr, stderr
    assert stdout.count('saved ') == 1 and f"at iter 0 (signal {int(signal.SIGINT)})" in stdout, stdout
    assert not (out / 'log.jsonl').exists()     # no eval row from a cut eval
    assert torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)['iter_num'] == 0


@pytest.mark.slow
def test_second_signal_leaves_quietly(data_dir, tmp_path):
    out = tmp_path / 'out'
    train.train(tiny(data_dir, out, '--max_iters=2'))
    # the signal's checkpoint write is made slow, so the second signal lands inside it; the stub sleeps in
    # slices because a signal the kernel hands to one of torch's threads wakes no sleep of the main thread,
    # whose handler then runs only when the sleep ends (a CI run waited out a single 60 s sleep)
    code = ("import sys, time, train\n"
            "real = train.save_atomic\n"
            "def slow(obj, path):\n"
            "    print('writing', flush=True)\n"
            "    for _ in range(600):\n"
            "        time.sleep(0.1)\n"
            "    real(obj, path)\n"
            "train.save_atomic = slow\n"
            "sys.exit(train.main(sys.argv[1:]))\n")
    live = Live('-c', code, *TINY, f'--data_dir={data_dir}', f'--out_dir={out}', '--init_from=resume',
                '--max_iters=100000', '--lr_decay_iters=100000', '--eval_interval=100000')
    live.wait_for('iter 3:')
    live.proc.send_signal(signal.SIGINT)
    live.wait_for('writing')
    t0 = time.time()
    live.proc.send_signal(signal.SIGINT)
    rc, stdout, stderr = live.finish()
    assert time.time() - t0 < 10
    assert rc == 128 + signal.SIGINT and one_line_error(stderr) and 'without saving' in stderr, stderr
    assert torch.load(out / 'ckpt.pt', map_location='cpu', weights_only=True)['iter_num'] == 2   # intact
    assert not list(out.glob('*.tmp'))


def test_signal_inside_gradient_accumulation_resumes_exactly(data_dir, tmp_path, monkeypatch):
    gas = '--gradient_accumulation_steps=3'
    train.train(tiny(data_dir, tmp_path / 'straight', gas, '--max_iters=6'))

    class Interrupting(GPT):
        calls = 0

        def forward(self, idx, targets=None):
            if self.training:
                Interrupting.calls += 1
                if Interrupting.calls == 8:     # step 3 (iter 2), second micro-batch
                    os.kill(os.getpid(), signal.SIGINT)
            return super().forward(idx, targets)

    monkeypatch.setattr(train, 'GPT', Interrupting)
    summary = train.train(tiny(data_dir, tmp_path / 'split', gas, '--max_iters=6'))
    ck = torch.load(tmp_path / 'split' / 'ckpt.pt', map_location='cpu', weights_only=True)
    # signals stop a run between steps: the step under way ends (all its micro-steps), then the run saves
    assert summary['signal'] == signal.SIGINT and ck['iter_num'] == 3
    monkeypatch.setattr(train, 'GPT', GPT)
    train.train(tiny(data_dir, tmp_path / 'split', gas, '--max_iters=6', '--init_from=resume'))
    straight, split = records(tmp_path / 'straight', 'train'), records(tmp_path / 'split', 'train')
    assert [r['iter'] for r in split] == list(range(1, 7))
    assert [r['loss'] for r in split] == [r['loss'] for r in straight]


CONFIGS = sorted(p.name for p in (REPO / 'config').glob('*.py') if p.name != 'cpu.py')


@pytest.mark.parametrize('name', CONFIGS)
def test_every_config_trains_ten_steps_at_tiny_scale(name, data_dir, tmp_path):
    cfg = load_config(train.DEFAULTS, [str(REPO / 'config' / name), '--n_layer=1', '--n_head=2', '--n_embd=16',
                                       '--block_size=16', '--batch_size=2', '--eval_iters=1', '--eval_interval=10',
                                       '--log_interval=5', '--max_iters=10', '--warmup_iters=2',
                                       '--device=cpu', '--compile=False', f'--data_dir={data_dir}',
                                       f'--out_dir={tmp_path}'], train.CHOICES)
    summary = train.train(cfg)
    assert summary['iter'] == 10 and math.isfinite(summary['best_val'])
    losses = [r['loss'] for r in records(tmp_path, 'train')]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize('attn', ['dot', 'fox'])
def test_attention_stats_agree_with_the_weights_written_out(attn):
    """causality.attention_stats against loops over the weights of layer 0 computed here by hand: the
    softmax of q.k / sqrt(hs) under the mask, plus FoX's forget bias sum_(l=j+1..i) log f_l (what
    the model attends to after its gate)."""
    torch.manual_seed(0)
    T, V = 12, 11
    m = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=2, n_head=2, n_embd=16, dropout=0.0, attn=attn))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    data = np.random.default_rng(0).integers(0, V, 500).astype(np.uint16)
    offs = torch.tensor([[3, 50, 100, 200, 300]])
    x, _ = train.windows(data, offs[0][:train.STAT_WINDOWS], T, 'cpu')
    got = causality.attention_stats(m, x)
    with torch.no_grad():
        e = m.transformer.wte(x) + m.transformer.pos(T)[0]
        blk = m.transformer.h[0]
        u = blk.ln_1(e)
        q, k, _ = blk.attn.c_attn(u).split(16, dim=2)
        q, k = (t.view(len(x), T, 2, 8).transpose(1, 2) for t in (q, k))
        s = q @ k.transpose(-1, -2) / math.sqrt(8)                  # (B, nh, T, T)
        if attn == 'fox':
            logf = torch.nn.functional.logsigmoid(blk.attn.gates['fox'].forget(u)).transpose(1, 2)  # (B, nh, T)
            for i in range(T):
                for j in range(i + 1):
                    s[:, :, i, j] += logf[:, :, j + 1:i + 1].sum(-1)
        A = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf')).softmax(-1)
    B = len(x)
    for hd in range(2):
        dist = ent = 0.0
        near = {w: 0.0 for w in causality.NEAR}
        for b in range(B):
            for i in range(T):
                for j in range(i + 1):
                    a = A[b, hd, i, j].item()
                    dist += a * (i - j)
                    ent -= a * math.log(a) if a > 0 else 0.0
                    for w in causality.NEAR:
                        near[w] += a if i - j < w else 0.0
        n = B * T
        assert got['attn_dist'][0][hd] == pytest.approx(dist / n, abs=1e-4)
        assert got['attn_entropy'][0][hd] == pytest.approx(ent / n, abs=1e-4)
        for w in causality.NEAR:
            assert got[f'attn_near{w}'][0][hd] == pytest.approx(near[w] / n, abs=1e-4)
    for lag in (0, 1, 5, T - 1):
        want = sum(A[b, hd, i, i - lag].item() for b in range(B) for hd in range(2) for i in range(lag, T))
        assert got['attn_lag'][0][lag] == pytest.approx(want / (B * 2 * (T - lag)), abs=1e-5)
    assert len(got['attn_dist']) == 2 and len(got['attn_lag'][1]) == T
    fnet = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=1, n_head=2, n_embd=16, attn='fnet'))
    assert causality.attention_stats(fnet, x) == {}


def test_a_window_trained_ega_evaluates_causally_and_samples_saying_its_statistics(cli, data_dir, tmp_path):
    """The published EGA (ega_norm=window) evaluated as it can run: the same weights with prefix statistics
    (--eval_only=True --ega_norm=prefix), its row in the log marked with the form and causal by the audit;
    a form with no such switch is refused in one line; sample.py always says which statistics it uses."""
    out = tmp_path / 'run'
    assert train.main(tiny_args(data_dir, out, '--attn=ega', '--ega_norm=window', '--max_iters=5')) == 0
    for norm in ('window', 'prefix'):
        assert train.main(tiny_args(data_dir, out, '--attn=ega', f'--ega_norm={norm}', '--max_iters=5',
                                    '--init_from=resume', '--eval_only=True')) == 0
    rows = records(out, 'eval_only')
    assert [(r['ega_norm'], r['leaks']) for r in rows] == [('window', True), ('prefix', False)]
    assert rows[0]['val'] != rows[1]['val'] and rows[0]['eval_set'] == rows[1]['eval_set']
    r = cli('sample.py', f'--out_dir={out}', '--max_new_tokens=5', '--num_samples=1')
    assert r.returncode == 0 and 'note: attn=ega samples with ega_norm=window: the published statistics' in r.stderr
    assert 'LEAKS' in r.stderr                              # the audit's warning stays
    dot = tmp_path / 'dot'
    assert train.main(tiny_args(data_dir, dot, '--max_iters=5')) == 0
    r = cli('train.py', *tiny_args(data_dir, dot, '--ega_norm=window', '--max_iters=5', '--init_from=resume',
                                   '--eval_only=True'))
    last = r.stderr.splitlines()[-1]                        # after the warning that dot reads no ega_norm
    assert r.returncode == 2 and last.startswith('error: ') and "ega_norm='window' (checkpoint: 'prefix')" in last
    assert 'Traceback' not in r.stderr


def tiny_args(data_dir, out_dir, *extra):
    return [*TINY, f'--data_dir={data_dir}', f'--out_dir={out_dir}', *extra]
