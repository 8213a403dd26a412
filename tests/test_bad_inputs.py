"""Bad inputs to every script: each is one line on stderr, `error: ...`, and a nonzero exit (2
for a mistake in the arguments or the files they name), never a traceback and never a silent
wrong result; an input that is legal but surely a mistake is one `warning: ...` line, and the
run goes on. One table of (script, arguments, exit code, part of the message), each row run as
its own process.

A process that imports torch takes seconds to start on a shared 2-core machine, so the rows
run in processes forked from one that imported torch and the repository's modules once
(multiprocessing's forkserver, the `cli` fixture of tests/conftest.py; torch does no work there
before the fork): each row is still a
process of its own, with its own exit code, stdout and stderr, running the script's
`if __name__ == '__main__'` block as `python SCRIPT ARGS` (or `python -m lab.X ARGS` for a module
of lab/) does. test_the_runner_agrees_with_python checks a few rows against python itself.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import runtime  # noqa: E402
import model  # noqa: E402
import train  # noqa: E402
from configurator import ConfigError, load_config  # noqa: E402

TINY = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=2', '--eval_iters=1',
        '--eval_interval=1', '--log_interval=1', '--max_iters=1', '--warmup_iters=0', '--dropout=0.0',
        '--device=cpu', '--compile=False']
SCRIPTS = ['train.py', 'sample.py', 'prepare.py', 'bench.py', 'lab.bench', 'lab.influence', 'lab.longctx', 'lab.authors',
           'lab.replay', 'lab.ledger', 'lab.study', 'lab.status', 'lab.gpu_study', 'lab.emd', 'lab.phase',
           'lab.corpus', 'lab.precision']       # a name without .py is a module of lab/: python -m lab.X


@pytest.fixture(scope='module')
def run(cli):                       # tests/conftest.py: each row a process forked from one that imported torch
    return cli


def python(script, *args):
    how = [script] if script.endswith('.py') else ['-m', script]
    return subprocess.run([sys.executable, *how, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def one_line(r, kind='error'):
    return r.stderr.startswith(f'{kind}: ') and r.stderr.count('\n') == 1 and 'Traceback' not in r.stderr

# ----------------------------------------------------------------------------- the files the rows name


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """{name: path} of the bad files (and a few places) the table's arguments name as {name}."""
    import torch
    d = tmp_path_factory.mktemp('bad')
    (d / 'latin1.py').write_bytes(b'n_layer = 2  # caf\xe9\n')             # a Latin-1 byte in a comment
    (d / 'utf16.py').write_bytes('n_layer = 2\n'.encode('utf-16'))        # not UTF-8 at all
    (d / 'binary').write_bytes(bytes(range(256)) * 4)
    (d / 'a_file').write_text('')
    (d / 'corrupt-s1').mkdir()
    (d / 'corrupt-s1' / 'ckpt.pt').write_bytes(b'PK\x03\x04 cut short')
    (d / 'foreign-s1').mkdir()
    torch.save({'state_dict': {}, 'epoch': 3}, d / 'foreign-s1' / 'ckpt.pt')   # another program's checkpoint
    (d / 'ctx').mkdir()
    (d / 'ctx' / 'context.json').write_text('{"alibi-s1": {"attn": ')        # cut short
    (d / 'ckdir' / 'ckpt.pt').mkdir(parents=True)                    # a folder where a checkpoint should be
    (d / 'config.json').write_text('{"n_layer": 3}')
    (d / 'yaml.py').write_text('n_layer: 3\n')
    (d / 'expr.py').write_text('n_head = 2\nn_layer == 3\n')
    (d / 'vocab0').mkdir()
    for s in ('train', 'val'):
        np.zeros(100, dtype=np.uint16).tofile(d / 'vocab0' / f'{s}.bin')
    (d / 'vocab0' / 'meta.json').write_text(json.dumps({'vocab_size': 0, 'tokenizer': 'char', 'itos': []}))
    return dict(tmp=str(d), latin1=str(d / 'latin1.py'), utf16=str(d / 'utf16.py'), binary=str(d / 'binary'),
                a_file=str(d / 'a_file'), corrupt=str(d / 'corrupt-s1'), foreign=str(d / 'foreign-s1'),
                ctx=str(d / 'ctx'), vocab0=str(d / 'vocab0'), ckdir=str(d / 'ckdir'), json_cfg=str(d / 'config.json'),
                yaml_cfg=str(d / 'yaml.py'), expr_cfg=str(d / 'expr.py'))

# ----------------------------------------------------------------------------- the table


ERRORS = [
    # a config file that is not UTF-8: the file and the byte's offset
    ('train.py', ['{latin1}'], 2, 'latin1.py is not UTF-8 text (byte 0xe9 at offset 18)'),
    ('train.py', ['{utf16}'], 2, 'utf16.py is not UTF-8 text (byte 0xff at offset 0)'),
    # sampling options, checked before the checkpoint is read
    ('sample.py', ['--temperature=nan', '--out_dir={tmp}'], 2, 'temperature=nan: expected a finite number'),
    ('sample.py', ['--temperature=inf', '--out_dir={tmp}'], 2, 'temperature=inf: expected a finite number'),
    ('sample.py', ['--temperature=-1', '--out_dir={tmp}'], 2, 'need temperature 0 (greedy) or a finite one >= 1e-6'),
    ('sample.py', ['--temperature=5e-324', '--out_dir={tmp}'], 2, 'below, logits / temperature overflow'),
    ('sample.py', ['--out_dir={ckdir}'], 2, 'ckpt.pt (it is not a regular file): train first'),
    ('sample.py', ['--top_k=-1', '--out_dir={tmp}'], 2, 'need top_k >= 0 (0 keeps every token)'),
    ('sample.py', ['--num_samples=0', '--out_dir={tmp}'], 2, 'need num_samples >= 1, got 0'),
    ('sample.py', ['--max_new_tokens=-1', '--out_dir={tmp}'], 2, 'need max_new_tokens >= 0, got -1'),
    # one device check, in runtime.check_device, for both
    ('sample.py', ['--device=tpu', '--out_dir={tmp}'], 2, "device='tpu' is not one of: auto, cpu, cuda, cuda:N, mps"),
    ('train.py', ['--device=tpu', '--out_dir={tmp}/o'], 2, "device='tpu' is not one of: auto, cpu, cuda, cuda:N, mps"),
    # lab.authors given a file that is not their script
    ('lab.authors', ['--script={binary}'], 2, 'binary is not Python source (not UTF-8 text: byte 0x80 at offset 128)'),
    ('lab.authors', [], 2, 'name their script: --script=PATH'),
    ('lab.authors', ['{binary}'], 2, "unexpected argument"),
    # bench.py and the lab's: the output checked before the benchmark, and their numbers
    ('lab.bench', ['--out={a_file}/x.json'], 2, 'a_file/x.json: cannot write there,'),
    ('lab.bench', ['--out={tmp}'], 2, 'is a folder: name a file'),
    ('lab.bench', ['--profile=dot', '--out={a_file}/x.md'], 2, 'a_file is a file, not a folder'),
    ('bench.py', ['--variants='], 2, 'need at least one variant'),
    ('lab.bench', ['--variants='], 2, 'variants is empty: name at least one'),
    ('lab.bench', ['--variants=,'], 2, 'variants is empty'),
    ('lab.bench', ['--top=-1'], 2, 'need top >= 1, got -1'),
    ('lab.bench', ['--top=0', '--profile=dot'], 2, 'need top >= 1, got 0'),
    ('lab.bench', ['--steps=0'], 2, 'need steps >= 1, got 0'),
    ('bench.py', ['--steps=0'], 2, 'steps >= 1'),
    ('lab.bench', ['--warmup=-1'], 2, 'need warmup >= 0, got -1'),
    ('lab.bench', ['--dropout=1.0'], 2, 'need 0 <= dropout < 1, got 1.0'),
    ('lab.bench', ['--deadline_s=nan'], 2, 'deadline_s=nan: expected a finite number'),
    ('lab.bench', ['--peak_tflops=-1'], 2, 'need peak_tflops >= 0 (0: PEAK_TFLOPS), got -1'),
    ('bench.py', ['--device=tpu'], 2, "device='tpu' is not one of: auto, cpu, cuda, cuda:N, mps"),
    # a file of the repository is never replaced by accident (bench.py --out=README.md once did it, silently;
    # bench.py now prints, and lab.bench's --out is checked)
    ('lab.bench', ['--out=README.md'], 2, '--out=README.md is a file of the repository that git tracks'),
    ('lab.bench', ['--out=results/bench/cpu.json'], 2, 'replaced only with --overwrite=True'),
    # a folder that access() calls writable for root, where no file can be made
    ('lab.bench', ['--out=/proc/x.json'], 2, '--out=/proc/x.json: cannot write in /proc'),
    # what train.py refuses, the lab's bench refuses too (it once raised NotImplementedError, or ran float16 on a CPU)
    ('lab.bench', ['--quick=True', '--variants=dot:learned:attn_impl=flex'], 2,
     "attn_impl=flex trains on CUDA only (FlexAttention's backward)"),
    ('lab.bench', ['--quick=True', '--variants=dot', '--dtype=float16'], 2, 'dtype=float16 needs CUDA'),
    # a path the step would not take, timed under its label (issue 69: conv_paper's map ran attend_plain)
    ('lab.bench', ['--quick=True', '--variants=conv_paper:learned:attn_impl=sdpa'], 2,
     "conv_paper's logit map has no SDPA form, so the step would run attend_plain under the sdpa label"),
    ('lab.bench', ['--quick=True', '--variants=dot:learned:compile_mode=reduce-overhead'], 2,
     "variant 'dot:learned:compile_mode=reduce-overhead': compile_mode=reduce-overhead needs --compile=True"),
    ('lab.bench', ['--quick=True', '--compile=True', '--variants=dot:learned:compile_mode=fast'], 2,
     "compile_mode='fast' is not one of: default, reduce-overhead, max-autotune-no-cudagraphs"),
    # lab.longctx: a study, a checkpoint or a context.json it cannot use
    ('lab.longctx', ['--study=bogus'], 2, "study='bogus' is not one of: ega_mope, gates"),
    ('lab.longctx', ['--runs={corrupt}', '--out_dir={tmp}/lc'], 2, 'is not a readable checkpoint, cut short'),
    ('lab.longctx', ['--runs={foreign}', '--out_dir={tmp}/lc'], 2, 'is not a checkpoint of train.py'),
    ('lab.longctx', ['--table_only=True', '--out_dir={ctx}'], 2, 'context.json is not readable JSON'),
    # lab.influence: the PNG's place checked before the map is computed
    ('lab.influence', ['--png=/nonexistent/x.png'], 2, 'the folder /nonexistent does not exist'),
    ('lab.influence', ['--png={a_file}/x.png'], 2, 'a_file is a file, not a folder'),
    ('lab.influence', ['--png={tmp}'], 2, 'is a folder: name a file'),
    ('lab.influence', ['--png=/proc/x.png'], 2, '--png=/proc/x.png: cannot write in /proc'),
    # train.py: values accepted silently before
    ('train.py', [*TINY, '--min_lr=1.0', '--learning_rate=1e-3', '--out_dir={tmp}/o'], 2,
     'min_lr (1.0) is above learning_rate (0.001)'),
    ('train.py', [*TINY, '--eval_only=True', '--out_dir={tmp}/o'], 2,
     'eval_only evaluates a trained checkpoint: add --init_from=resume'),
    ('train.py', [*TINY, '--data_dir={vocab0}', '--out_dir={tmp}/o'], 2, 'has no vocab_size in [1, 65536] (its tokens are uint16) and tokenizer char or gpt2: run'),
    ('train.py', [*TINY, '--out_dir={a_file}'], 2, 'a_file is a file, not a folder'),
    ('train.py', [*TINY, '--attn_impl=flex', '--out_dir={tmp}/o'], 2,
     "attn_impl=flex trains on CUDA only (FlexAttention's backward); eval_only runs it anywhere"),
    ('train.py', [*TINY, '--out_dir={a_file}/run'], 2, 'cannot create the out_dir'),
    ('train.py', [*TINY, '--compile_mode=reduce-overhead', '--out_dir={tmp}/o'], 2,
     "compile_mode=reduce-overhead is torch.compile's: it needs compile on (here compile=False on cpu)"),
    ('train.py', [*TINY, '--compile_mode=fast', '--out_dir={tmp}/o'], 2,
     "compile_mode='fast' is not one of: default, reduce-overhead, max-autotune-no-cudagraphs"),
    # the lab's commands: --key=value only
    ('lab.replay', [], 2, 'name the runs to replay (--run=RUN[,RUN...] or --run=dirty) or --table=True'),
    ('lab.replay', ['--run=no-such-run-s1'], 2, 'no run with a readable run.json and log.jsonl: no-such-run-s1'),
    ('lab.replay', ['no-such-run-s1'], 2, "unexpected argument 'no-such-run-s1': the options are --key=value"),
    ('lab.ledger', ['--write=maybe'], 2, "--write='maybe': expected a bool"),
    ('lab.ledger', ['--replace=True'], 2, '--replace=True goes with --write=True'),
    ('lab.status', ['--dry_run=True'], 2, '--replace=True and --dry_run=True go with --write=True'),
    ('lab.study', [], 2, 'name a study: --study=NAME, one of: ega_mope, gates'),
    ('lab.study', ['ega_mope'], 2, "unexpected argument 'ega_mope'"),
    ('lab.study', ['--study=nope'], 2, "--study='nope' is not one of: ega_mope, gates"),
    ('lab.gpu_study', ['--overlay=config/nope.py'], 2, '--overlay=config/nope.py: expected an existing file'),
    ('lab.gpu_study', ['--budget_s=-5'], 2, 'expected --parallel >= 0, --call >= 0, --budget_s > 0'),
    ('lab.gpu_study', ['--parallel=-1'], 2, 'expected --parallel >= 0'),
    # the newcomer audit of 2026-12-05: tracebacks and silent cases before
    ('prepare.py', ['--input=/dev/zero'], 2, 'input is not a regular file (a device or a pipe): /dev/zero'),
    ('sample.py', ['--out_dir={tmp}', '--start=FILE:/dev/zero'], 2, 'is not a regular file of at most 1,048,576 bytes'),
    ('lab.precision', ['--out=/proc/x.json', '--toy=True'], 2, '--out=/proc/x.json: cannot write in /proc'),
    ('lab.precision', ['--deadline_s=-1'], 2, 'need deadline_s > 0, got -1'),
    ('lab.precision', ['--tol=-1'], 2, 'need tol > 0, got -1'),
    ('lab.precision', ['--steps=0', '--toy=True'], 2, '--toy=True sets scale, steps, device and parallel itself: drop --steps'),
    ('lab.precision', ['--parallel=0', '--toy=True'], 2, 'drop --parallel'),
    ('lab.study', ['--study=ega_mope', '--seeds=99999999999'], 2, 'expected integers in [0, 2^32 - 64)'),
    ('lab.study', ['--study=ega_mope', '--dry_run=True', '--table_only=True'], 2, 'choose one'),
    ('causality.py', ['--T=0'], 2, "--T='0': each window length must be 2 or more"),
    ('train.py', [*TINY, '--init_from=resume', '--overwrite=True', '--out_dir={tmp}/o'], 2,
     '--overwrite=True replaces the run in out_dir, --init_from=resume continues it: choose one'),
    ('train.py', [*TINY, '--init_from=resume', '--eval_only=True', '--overwrite=True', '--out_dir={tmp}/o'], 2,
     '--init_from=resume evaluates it (eval_only): choose one'),
    ('train.py', ['{json_cfg}', '--out_dir={tmp}/o'], 2, 'config.json is not a .py file: config files are Python'),
    ('train.py', ['{yaml_cfg}', '--out_dir={tmp}/o'], 2, "yaml.py:1: 'n_layer: 3' is an annotation, which sets nothing: "
     'write n_layer = 3'),
    ('train.py', ['{expr_cfg}', '--out_dir={tmp}/o'], 2, "expr.py:2: 'n_layer == 3' is an expression, which sets nothing"),
]
WARNINGS = [
    # an option the variant does not read, set away from its default
    ('train.py', ['--ega_norm=window'], "warning: ega_norm='window' is not read by attn=dot pos=learned"),
    ('train.py', ['--attn=ega', '--pos=none', '--mope_sigma=2.0'],
     'warning: mope_sigma=2.0 is not read by attn=ega pos=none (it reads: ega_norm, ega_alpha, ega_tau)'),
    # a path the variant cannot take (it once ran the plain path without a word)
    ('train.py', ['--attn=conv_paper', '--attn_impl=sdpa'],
     "warning: attn_impl=sdpa: conv_paper's logit map has no SDPA form; the attention runs the plain path"),
    # a batch far larger than the data: every eval reads the val split many times over (once unannounced)
    ('train.py', ['--batch_size=5000', '--eval_iters=3', '--max_iters=0'],
     'warning: each eval reads 3 x 5000 windows of 16 tokens from a val split of 111,540: about 2 times over'),
]


def fill(args, files):
    return [a.format(**files) for a in args]


@pytest.mark.parametrize('script, args, code, message', ERRORS,
                         ids=[' '.join([s, *(x for x in a if x not in TINY)]) for s, a, _, _ in ERRORS])
def test_a_bad_input_is_one_error_line(run, files, script, args, code, message):
    r = run(script, *fill(args, files))
    assert r.returncode == code and one_line(r), r.stderr
    assert message in r.stderr, r.stderr


@pytest.mark.parametrize('script, args, message', WARNINGS, ids=[' '.join(a) for _, a, _ in WARNINGS])
def test_a_likely_mistake_is_one_warning_line_and_the_run_goes_on(run, files, data_dir, script, args, message):
    where = f"{files['tmp']}/w{WARNINGS.index((script, args, message))}"      # a folder of its own
    r = run(script, *TINY, f'--data_dir={data_dir}', f"--out_dir={where}", *args)
    assert r.returncode == 0 and one_line(r, 'warning'), r.stderr
    assert r.stderr.startswith(message) and 'done: best val' in r.stdout, r.stderr


@pytest.mark.parametrize('script', SCRIPTS)
def test_every_script_has_help_and_refuses_an_unknown_key(run, script):
    r = run(script, '--help')
    assert r.returncode == 0 and r.stderr == '' and len(r.stdout.splitlines()) >= 1, r.stderr
    r = run(script, '--bogus_key=1')
    assert r.returncode == 2 and one_line(r) and r.stdout == '', r.stderr


@pytest.mark.slow
def test_the_runner_agrees_with_python(run, files):
    for script, args in [('lab.replay', []), ('lab.ledger', ['--help']), ('sample.py', ['--temperature=nan'])]:
        a, b = run(script, *args), python(script, *args)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)

# ----------------------------------------------------------------------------- in-process


def test_a_nan_stop_says_whether_a_checkpoint_was_written(data_dir, tmp_path, monkeypatch):
    """A run that stops on a non-finite loss before its first save says that there is nothing to
    resume, not that a checkpoint that was never written is left as it was."""
    out = tmp_path / 'run'
    cfg = load_config(train.DEFAULTS, TINY + [f'--data_dir={data_dir}', f'--out_dir={out}'], train.CHOICES)
    monkeypatch.setattr(train, 'estimate_losses', lambda r: dict.fromkeys(('train', 'val', 'shuffled'), float('nan')))
    with pytest.raises(runtime.TrainError) as e:
        train.train(cfg)
    assert f"no checkpoint was written to {out / 'ckpt.pt'} (nothing to resume)" in str(e.value)
    (out / 'ckpt.pt').write_bytes(b'')                          # once one is written: as before
    assert runtime.checkpoint_left(str(out / 'ckpt.pt')) == \
        f"the last good checkpoint {out / 'ckpt.pt'} is left as it was"


def test_a_full_disk_while_training_is_one_line_and_the_last_checkpoint_stays(data_dir, tmp_path, monkeypatch):
    import errno
    out = tmp_path / 'run'
    saves, real = [], train.save_atomic

    def fills(obj, path):
        saves.append(path)
        if len(saves) > 1:          # the disk fills after the first checkpoint
            raise OSError(errno.ENOSPC, 'No space left on device')
        real(obj, path)
    monkeypatch.setattr(train, 'save_atomic', fills)
    cfg = load_config(train.DEFAULTS, [*TINY, '--max_iters=3', f'--data_dir={data_dir}', f'--out_dir={out}'],
                      train.CHOICES)
    with pytest.raises(runtime.TrainError) as e:
        train.train(cfg)
    assert str(e.value) == (f"cannot write {out / 'ckpt.pt'} at iter 1 (No space left on device): the last good "
                            f"checkpoint {out / 'ckpt.pt'} is left as it was; free some space, then go on with "
                            f"--init_from=resume")
    monkeypatch.setattr(train, 'save_atomic', real)
    assert runtime.load_checkpoint(str(out / 'ckpt.pt'))[0]['iter_num'] == 0      # loadable, the iter-0 save
    assert train.main([*TINY, '--max_iters=3', f'--data_dir={data_dir}', f'--out_dir={out}',
                       '--init_from=resume']) == 0


def test_a_full_disk_while_preparing_is_one_line_and_leaves_the_folder_as_it_was(shakespeare, tmp_path, monkeypatch,
                                                                                   capsys):
    import errno
    import prepare

    def full(files):
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(prepare, 'write_atomic', full)
    assert prepare.main([f'--input={shakespeare}', f'--out_dir={tmp_path / "d"}']) == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot write into {tmp_path / 'd'} (No space left on device): what it held is left as it was\n"
    assert list((tmp_path / 'd').iterdir()) == []


def test_a_resume_on_other_data_is_refused_unless_asked(data_dir, tmp_path):
    import shutil
    data = tmp_path / 'data'
    shutil.copytree(data_dir, data)
    args = [*TINY, '--max_iters=2', f'--data_dir={data}', f'--out_dir={tmp_path / "run"}']
    assert train.main(args) == 0
    val = np.fromfile(data / 'val.bin', dtype=np.uint16)
    val[::-1].tofile(data / 'val.bin')          # another text, the same vocabulary (as a re-prepare could give)
    with pytest.raises(ConfigError, match=r'was trained on other data than .* holds now \(sha256 '):
        train.train(load_config(train.DEFAULTS, [*args[:-3], '--max_iters=3', *args[-2:], '--init_from=resume'],
                                train.CHOICES))
    assert train.main([*args, '--max_iters=3', '--init_from=resume', '--resume_other_data=True']) == 0


def test_the_papers_evaluation_is_a_note_that_says_why_and_any_other_repeat_a_warning():
    data = {'val': range(111540)}
    note = runtime.eval_repeats(data, SimpleNamespace(eval_iters=50, batch_size=64, block_size=256))
    assert note.startswith("note: each eval reads 50 x 64 windows of 256 tokens") and 'expected' in note
    warn = runtime.eval_repeats(data, SimpleNamespace(eval_iters=50, batch_size=64, block_size=255))
    assert warn.startswith('warning: ') and 'lower --batch_size or --eval_iters' in warn
    assert runtime.eval_repeats(data, SimpleNamespace(eval_iters=20, batch_size=16, block_size=128)) is None


def numeric_keys():
    """(script, key) of every float option of every script and lab command with a config block."""
    import bench
    import sample
    from lab import bench as lab_bench, gpu_study, precision
    blocks = {'train.py': train.DEFAULTS, 'sample.py': sample.DEFAULTS, 'bench.py': bench.DEFAULTS,
              'lab.bench': lab_bench.DEFAULTS, 'lab.precision': precision.DEFAULTS}
    blocks['lab.gpu_study'] = {k: getattr(gpu_study, k) for k in ('budget_s', 'grace_s', 'call_limit_s', 'poll_s')}
    return [(s, k, d) for s, b in blocks.items() for k, d in b.items() if isinstance(d, float)]


@pytest.mark.parametrize('script, key, defaults', numeric_keys(), ids=[f'{s} {k}' for s, k, _ in numeric_keys()])
@pytest.mark.parametrize('value', ['nan', 'inf', '-inf'])
def test_every_float_option_refuses_a_number_that_is_not_finite(script, key, defaults, value):
    """nan passes every `>= 0` check and inf every `<= limit`: the configurator refuses both for every key."""
    with pytest.raises(ConfigError, match=f"{key}={value}: expected a finite number"):
        load_config({key: defaults}, [f'--{key}={value}'])


def test_a_config_file_with_a_byte_order_mark_loads(tmp_path):
    cfg = tmp_path / 'bom.py'
    cfg.write_bytes(b'\xef\xbb\xbfn_layer = 3\n')               # UTF-8 as Windows Notepad saves it
    assert load_config(train.DEFAULTS, [str(cfg)], train.CHOICES)['n_layer'] == 3


LAUNCHES = [({'RANK': '0'}, 'WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT unset'),
            ({'RANK': 'abc', 'WORLD_SIZE': '1', 'LOCAL_RANK': '0', 'MASTER_ADDR': 'x', 'MASTER_PORT': '1'},
             "RANK='abc' is no rank"),
            ({'RANK': '0', 'WORLD_SIZE': '1'}, 'LOCAL_RANK, MASTER_ADDR, MASTER_PORT unset'),
            ({'RANK': '2', 'WORLD_SIZE': '2', 'LOCAL_RANK': '0', 'MASTER_ADDR': 'x', 'MASTER_PORT': '1'},
             'RANK=2 of WORLD_SIZE=2 is no rank'),
            ({'RANK': '0', 'WORLD_SIZE': 'two', 'LOCAL_RANK': '0', 'MASTER_ADDR': 'x', 'MASTER_PORT': '1'},
             "WORLD_SIZE='two' is no rank")]


@pytest.mark.parametrize('env, says', LAUNCHES, ids=[' '.join(f'{k}={v}' for k, v in e.items()) for e, _ in LAUNCHES])
def test_a_launch_torchrun_did_not_make_is_one_line_naming_torchrun(env, says):
    with pytest.raises(ConfigError) as e:
        runtime.ddp_env(env)
    assert says in str(e.value) and 'launch DDP with torchrun' in str(e.value) and '\n' not in str(e.value)
    assert runtime.ddp_env({}) is None and runtime.ddp_env({'RANK': '-1'}) is None
    assert runtime.ddp_env({'RANK': '1', 'WORLD_SIZE': '2', 'LOCAL_RANK': '1', 'MASTER_ADDR': 'h',
                            'MASTER_PORT': '29500'}) == (1, 2, 1)


@pytest.mark.parametrize('env', [{'WORLD_SIZE': '2'}, {'LOCAL_RANK': '0'}, {'WORLD_SIZE': '2', 'LOCAL_RANK': '1'}])
def test_a_partial_torchrun_environment_without_rank_is_one_line(env):
    """WORLD_SIZE or LOCAL_RANK without RANK once trained one process without a word (issue 69)."""
    with pytest.raises(ConfigError) as e:
        runtime.ddp_env(env)
    assert 'set without RANK' in str(e.value) and 'torchrun' in str(e.value) and '\n' not in str(e.value)


def test_a_checkpoint_whose_iter_num_is_no_step_count_is_refused(data_dir, tmp_path):
    """iter_num = -5 once resumed with a negative learning rate (gradient ascent) without a word (issue 69)."""
    import torch
    train.train(load_config(train.DEFAULTS, [*TINY, f'--data_dir={data_dir}', f'--out_dir={tmp_path}'], train.CHOICES))
    for bad in (-5, 2.5, True, 'x'):
        ck = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
        torch.save(dict(ck, iter_num=bad), tmp_path / 'ckpt.pt')
        cfg = load_config(train.DEFAULTS, [*TINY, f'--data_dir={data_dir}', f'--out_dir={tmp_path}', '--max_iters=3',
                                           '--init_from=resume'], train.CHOICES)
        with pytest.raises(ConfigError, match=r'its iter_num (-5 is no step count|is a (float|bool|str), not the int)'):
            train.train(cfg)


@pytest.mark.slow
def test_a_launch_torchrun_did_not_make_is_one_line_from_the_command(data_dir, tmp_path):
    import os
    r = subprocess.run([sys.executable, 'train.py', *TINY, f'--data_dir={data_dir}', f'--out_dir={tmp_path}'],
                       cwd=REPO, capture_output=True, text=True, timeout=120, env=dict(os.environ, RANK='0'))
    assert r.returncode == 2 and one_line(r) and 'torchrun' in r.stderr, r.stderr


def test_a_tilde_in_a_path_option_is_the_home_folder(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert train.main([*TINY, f'--data_dir={data_dir}', '--out_dir=~/run']) == 0
    assert (tmp_path / 'run' / 'ckpt.pt').exists() and not (tmp_path / '~').exists()
    import prepare        # and prepare.py's folders (it made a folder named ~: issue 69)
    assert prepare.main([f"--input={Path(data_dir) / 'input.txt'}", '--out_dir=~/data']) == 0
    assert (tmp_path / 'data' / 'meta.json').exists() and not (tmp_path / '~').exists()
    from lab import bench     # and the bench's --out (lab.bench's), which replaces only what a bench wrote (issue 69)
    tiny_bench = ['--quick=True', '--steps=1', '--warmup=0', '--variants=dot']
    assert bench.main([*tiny_bench, '--out=~/b.json']) == 0 and (tmp_path / 'b.json').exists()
    assert bench.main([*tiny_bench, '--out=~/b.json']) == 0                 # its own record: replaced
    (tmp_path / 'notes.txt').write_text('mine')
    assert bench.main([*tiny_bench, '--out=~/notes.txt']) == 2 and (tmp_path / 'notes.txt').read_text() == 'mine'
    assert bench.main([*tiny_bench, '--out=~/notes.txt', '--overwrite=True']) == 0


def test_unread_options_are_those_of_other_variants_away_from_their_defaults():
    def warn(*args):
        return runtime.unread_options(SimpleNamespace(**load_config(train.DEFAULTS, list(args), train.CHOICES)))
    assert warn() == [] and warn('--attn=ega', '--ega_norm=window', '--pos=mope', '--mope_sigma=2') == []
    assert warn('--ega_norm=prefix') == []                      # the default, as config files set it
    assert [w.split('=')[0] for w in warn('--fox_bias=1.5', '--pos=rope', '--mope_rule=False')] == ['fox_bias',
                                                                                                   'mope_rule']
    assert warn('--n_layer=3', '--dropout=0.5') == []           # not a variant option


# command lines for train.py's config: known keys with values of any kind, keys without a value,
# unknown keys; each loads and passes check_run, or is a ConfigError, never another exception
VALUES = st.one_of(st.text(alphabet=st.characters(blacklist_categories=('Cs',), blacklist_characters='\x00'),
                           max_size=8),
                   st.integers(-10 ** 12, 10 ** 12).map(str), st.floats().map(repr),
                   st.sampled_from(['True', 'false', '0', '1', '-1', 'nan', 'inf', '-inf', '1e400', '', 'auto',
                                    'cuda:0', 'cpu', 'scratch', 'resume']))
ARG = st.one_of(st.tuples(st.sampled_from(sorted(train.DEFAULTS)), VALUES).map(lambda kv: f'--{kv[0]}={kv[1]}'),
                st.sampled_from([f'--{k}={c}' for k, cs in train.CHOICES.items() for c in cs]),
                st.sampled_from(sorted(train.DEFAULTS)).map(lambda k: f'--{k}'),
                st.from_regex(r'--[a-z_]{1,12}=[0-9]', fullmatch=True))


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
    return str(tmp_path_factory.mktemp('property'))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=st.lists(ARG, max_size=6))
def test_any_command_line_loads_or_is_a_config_error(scratch, argv):
    try:
        cfg = load_config(train.DEFAULTS, [f'--out_dir={scratch}/out', *argv], train.CHOICES)
        runtime.check_run(SimpleNamespace(**cfg))
        runtime.unread_options(SimpleNamespace(**cfg))
    except ConfigError as e:
        assert str(e) and '\n' not in str(e)


# the paths a run can take: every attention path, dropout, dtype, eval or training, over the registry's
# names and a few compositions; each is refused in one line before any work, or trains (or evaluates)
# a tiny model to the end. The space the newcomer probed by hand (flex with dropout, sdpa with a logit
# map, float16 on the CPU, ...), drawn whole.
RUN_ATTN = st.sampled_from(sorted(model.ATTN) + ['ega+fox', 'fox+conv_paper', 'ega+dconv+causal_gauss'])


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(attn=RUN_ATTN, pos=st.sampled_from(sorted(model.POS)), impl=st.sampled_from(model.IMPLS),
       dropout=st.sampled_from(['0.0', '0.1']), dtype=st.sampled_from(['auto', 'float32', 'bfloat16', 'float16']),
       eval_only=st.booleans())
def test_every_path_dropout_and_dtype_runs_or_is_refused_in_one_line(data_dir, tmp_path_factory, attn, pos, impl,
                                                                     dropout, dtype, eval_only):
    out = tmp_path_factory.mktemp('paths')
    base = [*TINY, f'--data_dir={data_dir}', f'--out_dir={out}', f'--attn={attn}', f'--pos={pos}',
            f'--dropout={dropout}']
    if attn == 'fnet' and pos not in model.FNET_POS:
        base[-2] = '--pos=none'
    if eval_only:       # a trained checkpoint to evaluate, then the path under test
        assert train.main(base) == 0
        base += ['--init_from=resume', '--eval_only=True']
    code = train.main([*base, f'--attn_impl={impl}', f'--dtype={dtype}'])
    assert code in (0, 2), code          # run_cli: 2 is a one-line config error (test_a_bad_input_...); never 1
