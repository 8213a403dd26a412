"""Nothing a stranger hands you runs as code: a crafted checkpoint, vocabulary or GPU pack, on every path
that loads one (sample.py, a resume, eval_only, lab.influence, lab.emd, the helpers that share
runtime.load_checkpoint, an ingest and the replay of an ingested run), is refused in one line, and the
file its code would have created never appears. A checkpoint of before 2026-12-05 is refused with the
command that converts it (lab/convert.py), which reads it with the same safe loader: a crafted file given to
it is refused, its code never runs, and the file is left as it was."""

import io
import json
import os
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import runtime  # noqa: E402
import train  # noqa: E402
from configurator import ConfigError  # noqa: E402
from test_train import TINY, one_line_error, tiny  # noqa: E402


class Payload:
    """Unpickled, it creates the file `marker`: what a crafted file's code would do."""
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, 'w')


def crafted_checkpoint(d, marker):
    d.mkdir(parents=True, exist_ok=True)
    torch.save(dict(model={'x': Payload(marker)}, model_args={}, optimizer={}, scaler={}, iter_num=0,
                    best_val_loss=1.0, rng={}, config={}), d / 'ckpt.pt')
    return d / 'ckpt.pt'


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / 'code-ran'
    yield m
    assert not m.exists(), 'the crafted file ran its code'


def test_a_crafted_checkpoint_runs_no_code_on_any_path(cli, data_dir, tmp_path, marker):
    ckpt = crafted_checkpoint(tmp_path / 'run', marker)
    for script, args in (('sample.py', [f'--out_dir={ckpt.parent}']),
                         ('train.py', [*TINY, f'--data_dir={data_dir}', f'--out_dir={ckpt.parent}',
                                       '--init_from=resume']),
                         ('train.py', [*TINY, f'--data_dir={data_dir}', f'--out_dir={ckpt.parent}',
                                       '--init_from=resume', '--eval_only=True']),
                         ('lab/influence.py', [f'--ckpt={ckpt}'])):
        r = cli(script, *args)
        assert r.returncode == 2 and one_line_error(r.stderr), (script, r.stderr)
        assert 'holds more than tensors and plain values' in r.stderr and 'io.open' in r.stderr
        assert 'lab.convert' not in r.stderr, r.stderr     # never advised to run the file through anything
        assert not marker.exists(), script
    with pytest.raises(ConfigError, match='holds more than tensors'):      # lab.phase, longctx, gates share it
        runtime.load_checkpoint(str(ckpt))


def test_lab_emd_loads_a_checkpoint_safely(tmp_path, marker, move_results, monkeypatch, capsys):
    from lab import emd
    move_results(tmp_path / 'results')
    crafted_checkpoint(tmp_path / 'results' / 'runs' / 'fourier_qk-s1', marker)
    monkeypatch.setitem(sys.modules, 'PyEMD', types.SimpleNamespace(EMD=object))    # the optional package
    assert emd.main(['--runs=fourier_qk-s1']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and 'holds more than tensors' in err


def test_a_vocabulary_is_json_and_a_pickle_is_never_read(cli, data_dir, tmp_path, marker):
    train.train(tiny(data_dir, tmp_path / 'run', '--max_iters=1'))
    evil = tmp_path / 'meta.pkl'
    evil.write_bytes(__import__('pickle').dumps(Payload(marker)))
    r = cli('sample.py', f'--out_dir={tmp_path / "run"}', f'--meta_path={evil}')
    assert r.returncode == 2 and one_line_error(r.stderr) and 'never read (a pickle can run code)' in r.stderr
    old = tmp_path / 'old_data'         # a data folder of an older prepare.py: its meta.pkl alone
    old.mkdir()
    for s in ('train', 'val'):
        (old / f'{s}.bin').write_bytes((Path(data_dir) / f'{s}.bin').read_bytes())
    (old / 'meta.pkl').write_bytes(evil.read_bytes())
    r = cli('train.py', *TINY, f'--data_dir={old}', f'--out_dir={tmp_path / "o"}')
    assert r.returncode == 2 and one_line_error(r.stderr) and '`python prepare.py` again' in r.stderr


def as_before_2026_12_05(path):
    """Rewrite a checkpoint of today's train.py as train.py wrote it before 2026-12-05: numpy's RNG state
    pickled as an array. Returns numpy's key as a list."""
    ck = torch.load(path, weights_only=True)
    kind, key, *rest = ck['rng']['numpy']
    ck['rng']['numpy'] = (kind, np.asarray(key, dtype=np.uint32), *rest)
    torch.save(ck, path)
    return key


def convert(path):
    return subprocess.run([sys.executable, '-m', 'lab.convert', f'--ckpt={path}'], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_an_old_checkpoint_is_refused_with_the_command_that_converts_it(data_dir, tmp_path):
    train.train(tiny(data_dir, tmp_path / 'run', '--max_iters=5'))
    path = tmp_path / 'run' / 'ckpt.pt'
    key = as_before_2026_12_05(path)
    with pytest.raises(ConfigError, match=f'before 2026-12-05 .*python -m lab.convert --ckpt={path} rewrites it'):
        runtime.load_checkpoint(str(path))
    p = convert(path)
    assert p.returncode == 0 and p.stdout.startswith('converted ') and 'it loads with weights_only=True' in p.stdout, \
        p.stderr
    before = path.read_bytes()                  # converted once: a second conversion leaves it as it is
    p = convert(path)
    assert p.returncode == 0 and p.stdout.startswith('left as it is ') and path.read_bytes() == before, p.stderr
    back, _ = runtime.load_checkpoint(str(path))
    assert back['rng']['numpy'][1] == key and back['iter_num'] == 5
    train.train(tiny(data_dir, tmp_path / 'run', '--max_iters=10', '--init_from=resume'))   # resumes
    p = subprocess.run([sys.executable, '-m', 'lab.convert'], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 2 and one_line_error(p.stderr) and '--ckpt=' in p.stderr


def crafted_old(d, marker, where):
    """A file that looks like an old checkpoint (numpy's RNG state an array) with code in it, at `where`."""
    d.mkdir(parents=True, exist_ok=True)
    rng = {'numpy': ('MT19937', np.zeros(624, dtype=np.uint32), 0, 0, 0.0)}
    ck = dict(model={}, model_args={}, optimizer={}, scaler={}, iter_num=0, best_val_loss=1.0, rng=rng, config={})
    if where == 'model':
        ck['model'] = {'x': Payload(marker)}
    elif where == 'rng':            # in the very slot the converter reads
        rng['numpy'] = ('MT19937', Payload(marker), 0, 0, 0.0)
    elif where == 'object_array':   # inside an array numpy rebuilds: numpy's names, and code among them
        arr = np.empty(1, dtype=object)
        arr[0] = Payload(marker)
        rng['numpy'] = ('MT19937', arr, 0, 0, 0.0)
    elif where == 'top':
        ck = Payload(marker)
    torch.save(ck, d / 'ckpt.pt')
    return d / 'ckpt.pt'


@pytest.mark.parametrize('where', ['model', 'rng', 'object_array', 'top'])
def test_the_converter_runs_no_code_and_leaves_a_refused_file_as_it_was(tmp_path, marker, where):
    """A crafted file, given to the converter, is refused in one line (exit 2), names what it holds, its
    code leaves no mark, and the file is left byte for byte."""
    path = crafted_old(tmp_path / 'run', marker, where)
    before = path.read_bytes()
    p = convert(path)
    assert p.returncode == 2 and one_line_error(p.stderr) and 'io.open' in p.stderr, p.stderr
    assert path.read_bytes() == before
    with pytest.raises(ConfigError) as e:       # and the root's refusal never advises the converter for it
        runtime.load_checkpoint(str(path))
    assert 'lab.convert' not in str(e.value) and 'io.open' in str(e.value), e.value


@pytest.mark.parametrize('where', ['model', 'rng', 'object_array', 'top'])
def test_the_converters_loader_refuses_code_its_scan_could_not_see(tmp_path, marker, where):
    """The scan of the pickle's names is only the message: the loader itself, with numpy's array allowed,
    refuses code (a pickle can push a name the scan cannot read)."""
    from lab import convert
    path = crafted_old(tmp_path / 'run', marker, where)
    with torch.serialization.safe_globals(convert.numpy_array_names()), pytest.raises(Exception):
        torch.load(path, weights_only=True)


def test_an_old_checkpoint_that_is_not_one_of_ours_is_not_rewritten(tmp_path):
    """Numpy's array alone, but not a checkpoint of train.py (keys missing), or a key of the wrong size: refused,
    the file left as it was."""
    d = tmp_path / 'run'
    d.mkdir()
    for name, ck in (('keys', dict(rng={'numpy': ('MT19937', np.zeros(624, dtype=np.uint32), 0, 0, 0.0)})),
                     *((name, dict(model={}, model_args={}, optimizer={}, scaler={}, iter_num=0, best_val_loss=1.0,
                                   rng={'numpy': ('MT19937', np.zeros(7, dtype=dt), 0, 0, 0.0)}))
                       for name, dt in (('size', np.uint32), ('dtype', np.float64)))):
        path = d / f'{name}.pt'
        torch.save(ck, path)
        before = path.read_bytes()
        p = convert(path)
        assert p.returncode == 2 and one_line_error(p.stderr), (name, p.stderr)
        assert dict(keys='not a checkpoint of train.py', size="not numpy's (uint32, 624 words)",
                    dtype='refused by the safe loader')[name] in p.stderr, p.stderr
        assert path.read_bytes() == before


def pack(path, members):
    """A .tar.gz of {name: bytes, or ('link', target)}."""
    with tarfile.open(path, 'w:gz') as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, data[1]
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def log(vals):
    return ''.join(json.dumps(dict(kind='eval', iter=i, val=v)) + '\n' for i, v in vals.items()).encode()


def test_a_pack_is_read_within_bounds_and_a_replay_of_it_runs_no_file_of_its_own(tmp_path, marker, move_results,
                                                                                   monkeypatch, capsys):
    from lab import gpu_pack, gpu_study, replay
    move_results(tmp_path / 'results')
    label = 'dot@paper-s9'
    evil_cmd = ['python', 'train.py', f'data/../results/runs/{label}/run.txt', '--seed=9']
    env = json.dumps(dict(command='x\x1b[2Jy', date='today', code='abc', versions='v')).encode()
    members = {'env.json': env,
               f'runs/{label}/run.json': json.dumps(dict(cmd=evil_cmd, max_iters=10, code=['abc+dirty'])).encode(),
               f'runs/{label}/log.jsonl': log({0: 4.0, 10: 1.5}),
               f'runs/{label}/run.txt': f"open({str(marker)!r}, 'w').close()\n".encode(),
               'runs/nan@paper-s1/run.json': json.dumps(dict(cmd=['python', 'train.py', 'config/dot.py'],
                                                              max_iters=10)).encode(),
               'runs/nan@paper-s1/log.jsonl': b'{"kind": "eval", "iter": 10, "val": NaN}\n',
               'runs/../escape/run.json': b'{}', '/abs/run.json': b'{}', 'runs/big@paper-s1/run.txt': b'x' * 4096,
               'runs/link@paper-s1/run.txt': ('link', '/etc/passwd')}
    p = pack(tmp_path / 'evil.tar.gz', members)
    monkeypatch.setattr(gpu_pack, 'MAX_FILE', 1024)
    assert gpu_study.main([f'--ingest={p}']) == 0
    out = capsys.readouterr().out
    assert '\x1b' not in out and 'x\\x1b[2Jy' in out                      # the terminal's escapes printed escaped
    assert 'nan@paper-s1: its final val at iter 10 is nan, not a finite loss: left out' in out
    for name, why in (('runs/../escape/run.json', 'not a file a pack holds'), ('/abs/run.json', 'not a file'),
                      ('runs/big@paper-s1/run.txt', '4,096 bytes: over the 1,024 bytes a file'),
                      ('runs/link@paper-s1/run.txt', 'not a plain file')):
        assert f'skipped {name}: {why}' in out, name
    assert f"warning: its command names 'data/../results/runs/{label}/run.txt'" in out
    assert sorted(os.listdir(tmp_path / 'results' / 'runs')) == [label]
    assert not (tmp_path / 'escape').exists() and not (tmp_path / 'results' / 'escape').exists()
    for arg in (f'--run={label}', '--run=dirty'):       # dirty: its code is recorded +dirty with no diff
        assert replay.main([arg]) == 2, arg
        err = capsys.readouterr().err
        assert one_line_error(err) and f'not replayed: {label}: ' in err and "is not a config file of the " \
            "repository's config/" in err, err
    assert gpu_study.main([f'--ingest={pack(tmp_path / "no_env.tar.gz", {"runs/a-s1/run.txt": b"x"})}']) == 2
    assert one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize('what', ['garbage', 'cut', 'env_list', 'run_json_list', 'log_garbage', 'no_run_json',
                                  'empty'])
def test_a_malformed_pack_is_one_line_or_leaves_nothing_of_a_run(tmp_path, move_results, capsys, what):
    """Each ingest either brings a run in whole or leaves nothing of it, and says why in a line; a file that is
    no pack is one error line (exit 2); never a traceback."""
    from lab import gpu_study
    move_results(tmp_path / 'results')
    env = json.dumps(dict(command='c', date='d', code='x', versions='v')).encode()
    good = {'env.json': env, 'runs/r-s1/run.json': json.dumps(dict(cmd=['python', 'train.py'], max_iters=10)).encode(),
            'runs/r-s1/log.jsonl': log({10: 1.5})}
    path = tmp_path / 'p.tar.gz'
    if what == 'garbage':
        path.write_bytes(b'\x1f\x8b not really gzip')
    elif what == 'cut':
        pack(path, good)
        path.write_bytes(path.read_bytes()[:60])
    elif what == 'env_list':
        pack(path, {**good, 'env.json': b'[1, 2]'})
    elif what == 'run_json_list':
        pack(path, {**good, 'runs/r-s1/run.json': b'[1, 2]'})
    elif what == 'log_garbage':
        pack(path, {**good, 'runs/r-s1/log.jsonl': b'\xff\xfe not json\n{"kind": "eval"\n'})
    elif what == 'no_run_json':
        pack(path, {k: v for k, v in good.items() if not k.endswith('run.json')})
    else:
        pack(path, {})
    rc = gpu_study.main([f'--ingest={path}'])
    out, err = capsys.readouterr()
    assert 'Traceback' not in out + err
    assert (rc == 2 and one_line_error(err)) or (rc == 0 and 'left out' in out), (rc, out, err)
    runs = tmp_path / 'results' / 'runs'
    assert not runs.exists() or sorted(os.listdir(runs)) == [], sorted(os.listdir(runs))


def hostile(ck, case):
    """A checkpoint of train.py that loads with weights_only=True, turned into what a stranger could hand over."""
    ck = dict(ck)
    w = dict(ck['model'])
    name = next(iter(w))
    if case == 'model_list':
        ck['model'] = list(w.values())
    elif case == 'model_strings':
        ck['model'] = {**w, name: 'not a tensor'}
    elif case in ('data', 'audit', 'config'):
        ck[case] = ['a', 'list']
    elif case == 'iter_num':
        ck['iter_num'] = 'five'
    elif case == 'rng':
        ck['rng'] = {'python': 1, 'numpy': 2, 'torch': 3}
    elif case == 'optimizer':
        ck['optimizer'] = {'state': {0: {'exp_avg': 'x'}}, 'param_groups': 'none'}
    elif case == 'nan':
        ck['model'] = {**w, name: torch.full_like(w[name], float('nan'))}
    elif case == 'int_weights':
        ck['model'] = {**w, name: w[name].to(torch.int64)}
    elif case == 'huge':
        ck['model_args'] = dict(ck['model_args'], n_layer=1000, n_embd=2 ** 16, n_head=1)
    return ck


# (case, what the line says, the paths it reaches: sample.py, a resume)
HOSTILE = [('model_list', 'its model is a list', 'sr'), ('model_strings', 'holds more than named tensors', 'sr'),
           ('data', 'its data is a list', 'sr'), ('audit', 'its audit is a list', 'sr'),
           ('config', 'its config is a list', 'sr'), ('iter_num', 'its iter_num is a str', 'sr'),
           ('rng', 'its optimizer or random state is not one train.py writes', 'r'),
           ('optimizer', 'its optimizer or random state is not one train.py writes', 'r'),
           ('nan', 'is not finite (NaN or inf)', 'sr'), ('int_weights', 'not floats', 'sr'),
           ('huge', 'GiB of float32 weights, over half this machine', 'sr')]


@pytest.mark.parametrize('case, says, where', HOSTILE, ids=[c for c, _, _ in HOSTILE])
def test_a_hostile_checkpoint_that_loads_safely_is_one_line(cli, data_dir, tmp_path, case, says, where):
    """Each field of the wrong type, non-finite or integer weights, a model too large for the machine: one line
    and exit 2 from sample.py and from a resume, never a traceback (issue 69: 14 tracebacks before)."""
    train.train(tiny(data_dir, tmp_path / 'run', '--max_iters=2'))
    path = tmp_path / 'run' / 'ckpt.pt'
    torch.save(hostile(torch.load(path, weights_only=True), case), path)
    runs = {'s': ('sample.py', [f'--out_dir={path.parent}', '--max_new_tokens=2', '--num_samples=1']),
            'r': ('train.py', [*TINY, f'--data_dir={data_dir}', f'--out_dir={path.parent}', '--init_from=resume',
                               '--max_iters=4'])}
    for key in where:
        script, args = runs[key]
        r = cli(script, *args)
        assert r.returncode == 2 and one_line_error(r.stderr) and says in r.stderr, (script, r.stderr[-800:])


@pytest.mark.parametrize('case', ['deep', 'fifo', 'dev_zero', 'big', 'vocab'])
def test_a_crafted_meta_json_is_one_line(cli, data_dir, tmp_path, case):
    """meta.json nested 100,000 deep (a RecursionError), a FIFO (a read that never ends), a link to /dev/zero (all
    memory), a file too large, a gpt2 vocabulary of 10^12: one line from train.py and sample.py (issue 69)."""
    d = tmp_path / 'data'
    d.mkdir()
    for s in ('train', 'val'):
        (d / f'{s}.bin').write_bytes((Path(data_dir) / f'{s}.bin').read_bytes())
    meta = d / 'meta.json'
    if case == 'deep':
        meta.write_text('[' * 100000 + ']' * 100000)
    elif case == 'fifo':
        os.mkfifo(meta)
    elif case == 'dev_zero':
        meta.symlink_to('/dev/zero')
    elif case == 'big':
        meta.write_text(json.dumps(dict(vocab_size=65, tokenizer='char', pad='x' * (2 << 20))))
    else:
        meta.write_text(json.dumps(dict(vocab_size=10 ** 12, tokenizer='gpt2')))
    r = cli('train.py', *TINY, f'--data_dir={d}', f'--out_dir={tmp_path / "o"}', timeout=60)
    assert r.returncode == 2 and one_line_error(r.stderr), r.stderr[-800:]
    train.train(tiny(data_dir, tmp_path / 'run', '--max_iters=1'))
    r = cli('sample.py', f'--out_dir={tmp_path / "run"}', f'--meta_path={meta}', '--max_new_tokens=2', timeout=60)
    assert r.returncode == 2 and one_line_error(r.stderr), r.stderr[-800:]


def test_a_pack_is_bounded_in_members_lines_and_numbers(tmp_path, move_results, monkeypatch, capsys):
    """Too many members: one line, nothing read past the bound; a file of too many lines skipped; a max_iters
    that is no step count (1e999 once overflowed) left out; never a traceback (issue 69)."""
    from lab import gpu_pack, gpu_study
    move_results(tmp_path / 'results')
    monkeypatch.setattr(gpu_pack, 'MAX_MEMBERS', 50)
    env = json.dumps(dict(command='c', date='d', code='x', versions='v')).encode()
    many = pack(tmp_path / 'many.tar.gz', {'env.json': env, **{f'runs/r-s1/x{i}.txt': b'' for i in range(60)}})
    assert gpu_study.main([f'--ingest={many}']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and 'over 50 members' in err
    monkeypatch.setattr(gpu_pack, 'MAX_LINES', 1000)
    cmd = ['python', 'train.py', 'config/dot.py']
    p = pack(tmp_path / 'p.tar.gz', {
        'env.json': env,
        'runs/lines@paper-s1/run.json': json.dumps(dict(cmd=cmd, max_iters=10)).encode(),
        'runs/lines@paper-s1/log.jsonl': b'\n' * 5000,
        'runs/inf@paper-s1/run.json': b'{"cmd": ["python", "train.py"], "max_iters": 1e999}',
        'runs/inf@paper-s1/log.jsonl': log({10: 1.5})})
    assert gpu_study.main([f'--ingest={p}']) == 0
    out, err = capsys.readouterr()
    assert 'Traceback' not in out + err
    assert 'skipped runs/lines@paper-s1/log.jsonl: over the 1,000 lines a file may hold' in out
    assert "inf@paper-s1: its max_iters inf is no step count in [1, 10,000,000]: left out" in out
    assert not (tmp_path / 'results' / 'runs').exists() or not os.listdir(tmp_path / 'results' / 'runs')


@pytest.mark.parametrize('arg, says', [('--seed=' + '1' * 200000, 'over the 8,192 a train.py command takes'),
                                       ('--threads=100000', 'one train.py refuses: threads must be in [0, '),
                                       ('--max_iters=1e999', "one train.py refuses: --max_iters='1e999'")],
                         ids=['long', 'threads', 'max_iters'])
def test_a_replay_refuses_a_command_train_py_would_and_leaves_no_worktree(tmp_path, move_results, capsys, arg, says):
    """A pack's command is checked as train.py checks its own options, and bounded in length, before anything
    is checked out (a 200 KB argument once ended in 'Argument list too long' with a worktree left registered)."""
    from lab import replay
    move_results(tmp_path / 'results')
    d = tmp_path / 'results' / 'runs' / 'x-s1'
    d.mkdir(parents=True)
    (d / 'run.json').write_text(json.dumps(dict(cmd=['python', 'train.py', 'config/dot.py', 'config/cpu.py', arg],
                                                max_iters=2000)))
    (d / 'log.jsonl').write_bytes(log({0: 4.0}))
    before = subprocess.run(['git', 'worktree', 'list'], cwd=REPO, capture_output=True, text=True).stdout
    assert replay.main(['--run=x-s1']) == 2
    err = capsys.readouterr().err
    assert one_line_error(err) and says in err, err
    assert subprocess.run(['git', 'worktree', 'list'], cwd=REPO, capture_output=True, text=True).stdout == before


def test_a_vocabulary_other_than_the_models_is_refused(cli, data_dir, tmp_path):
    """A meta.json of the right size with its characters permuted decoded other characters without a word
    (issue 69): the checkpoint records its vocabulary's sha256, and sample.py refuses another."""
    train.train(tiny(data_dir, tmp_path / 'run', '--max_iters=1'))
    meta = json.loads((Path(data_dir) / 'meta.json').read_text())
    meta['itos'] = meta['itos'][1:] + meta['itos'][:1]
    (tmp_path / 'meta.json').write_text(json.dumps(meta))
    r = cli('sample.py', f'--out_dir={tmp_path / "run"}', f'--meta_path={tmp_path / "meta.json"}',
            '--max_new_tokens=2', '--start=A')
    assert r.returncode == 2 and one_line_error(r.stderr) and 'is not the vocabulary this model was trained with' \
        in r.stderr, r.stderr
    r = cli('sample.py', f'--out_dir={tmp_path / "run"}', f"--meta_path={Path(data_dir) / 'meta.json'}",
            '--max_new_tokens=2', '--start=A', '--num_samples=1')
    assert r.returncode == 0, r.stderr                               # its own vocabulary, named: fine
