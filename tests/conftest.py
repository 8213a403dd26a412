"""Where the tests get TinyShakespeare and the GPT-2 BPE files.

Two paths, and no test is skipped on either:
- download (a user's clone, with internet): the corpus comes through prepare.py's own
  download, checked against its sha256 and cached in the repository's data/ folder
  (gitignored; data/shakespeare_char/input.txt, where `python prepare.py` keeps it),
  so only the first run downloads. GPT-2 BPE comes through tiktoken's own cache;
  TIKTOKEN_CACHE_DIR is left as the user has it.
- offline: a read-only data folder holding tinyshakespeare/input.txt and
  tiktoken_cache/ (the gpt2 files under tiktoken's cache names). The tests use it
  when $SPECTRAL_TEST_DATA names it, or when it sits beside the clone as
  shared/data (this project's CI, which has no internet). Nothing is downloaded
  and TIKTOKEN_CACHE_DIR points into it for the gpt2 test.
SPECTRAL_TEST_DATA set to an empty string forces the download path.
"""

import hashlib
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import sys
import tempfile
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import prepare  # noqa: E402

ENV = 'SPECTRAL_TEST_DATA'
BESIDE = REPO.parent / 'shared' / 'data'   # the offline folder in this project's CI
CACHE = REPO / 'data' / 'shakespeare_char'  # where `python prepare.py` keeps its download


# ---------------------------------------------------------------------------- the device under test
# The registry's tests (fused = plain, compiled = eager, the audits, the checkpoint round trip, the
# precision of every form) run on the device SPECTRAL_TEST_DEVICE names: cpu (the default) or cuda[:N].
# The CPU runs them in float64 (exact) and under bf16 autocast; CUDA in bf16 autocast, and compiled.
DEVICE = os.environ.get('SPECTRAL_TEST_DEVICE', 'cpu')
LOW = 'bfloat16'                            # the 16-bit autocast users train in
ON_CUDA = DEVICE.startswith('cuda')


def pytest_configure(config):
    if DEVICE != 'cpu':
        import torch
        try:
            dev = torch.device(DEVICE)
        except RuntimeError as e:
            raise pytest.UsageError(f"SPECTRAL_TEST_DEVICE={DEVICE!r}: {e}") from None
        if dev.type != 'cuda':
            raise pytest.UsageError(f"SPECTRAL_TEST_DEVICE={DEVICE!r}: cpu or cuda[:N]")
        if not torch.cuda.is_available():
            raise pytest.UsageError(f"SPECTRAL_TEST_DEVICE={DEVICE}, but torch sees no CUDA device")


@pytest.hookimpl(trylast=True)        # after -m has deselected: the shards share out the tests that run
def pytest_collection_modifyitems(config, items):
    """SPECTRAL_TEST_SHARD=i/n keeps the tests whose node id hashes (crc32) to i modulo n: n pytest processes at
    once share a machine's cores (lab/gpu_check.sh, .ci/run's sweeps). A hash, not every n-th test: a parameter of
    n values put every test of one value in one shard (.ci/run's halves took 33 and 28 min, the sweep's longer
    window all in the first)."""
    shard = os.environ.get('SPECTRAL_TEST_SHARD')
    if not shard:
        return
    try:
        i, n = (int(x) for x in shard.split('/'))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"SPECTRAL_TEST_SHARD={shard!r}: i/n with 0 <= i < n") from None
    mine = [zlib.crc32(t.nodeid.encode()) % n == i for t in items]
    config.hook.pytest_deselected(items=[t for t, m in zip(items, mine) if not m])
    keep = [t for t, m in zip(items, mine) if m]
    items[:] = keep


def pytest_report_header(config):
    return f"registry tests on: {DEVICE} (SPECTRAL_TEST_DEVICE)"


@dataclass(frozen=True)
class Sources:
    corpus: Path                    # input.txt: read as it is (offline) or downloaded to (download)
    download: bool                  # fetch the corpus into corpus.parent when it is not there yet
    tiktoken_cache: Optional[Path]  # TIKTOKEN_CACHE_DIR for the gpt2 test; None: leave it alone


def pick_sources(env=os.environ, beside=BESIDE, cache=CACHE):
    """The offline folder if one is named or lies beside the clone, else the download path."""
    named = env.get(ENV)
    if named is not None:
        offline = Path(named) if named else None
    else:
        offline = beside if (beside / 'tinyshakespeare' / 'input.txt').is_file() else None
    if offline is None:
        return Sources(cache / 'input.txt', True, None)
    return Sources(offline / 'tinyshakespeare' / 'input.txt', False, offline / 'tiktoken_cache')


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def obtain_corpus(src):
    """A Path to a TinyShakespeare input.txt that matches prepare.SHA256 (downloading it
    on the download path if it is not cached yet), or pytest.fail saying what to do."""
    path = src.corpus
    if src.download and not path.exists():
        try:
            prepare.fetch_shakespeare(str(path.parent))  # checks the sha256, writes input.txt
        except prepare.PrepareError as e:
            pytest.fail(f'the tests need TinyShakespeare: {e}; or set {ENV} to a folder holding '
                        f'tinyshakespeare/input.txt and tiktoken_cache/', pytrace=False)
    if not path.is_file():
        pytest.fail(f'TinyShakespeare not found at {path} (offline data folder from {ENV} or '
                    f'beside the clone); set {ENV}= (empty) to download it instead', pytrace=False)
    digest = sha256(path)
    if digest != prepare.SHA256:
        pytest.fail(f'{path} has sha256 {digest}, not TinyShakespeare\'s {prepare.SHA256}'
                    + ('; delete it to download it again' if src.download else ''), pytrace=False)
    return path


@pytest.fixture(scope='session')
def sources():
    return pick_sources()


@pytest.fixture(scope='session')
def shakespeare(sources):
    """Path to a verified TinyShakespeare input.txt (read-only: copy it before changing it)."""
    return obtain_corpus(sources)


@pytest.fixture
def gpt2_cache(sources, monkeypatch):
    """For a test that loads tiktoken's gpt2 encoding: TIKTOKEN_CACHE_DIR set to the offline
    folder's cache on the offline path, left as the user has it on the download path.
    Returns the folder set, or None."""
    if sources.tiktoken_cache is not None:
        monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(sources.tiktoken_cache))
        return sources.tiktoken_cache
    try:                        # the download path, offline and without a cache: skipped, saying what it needs
        prepare.gpt2_encoding()
    except prepare.PrepareError as e:
        pytest.skip(f"needs tiktoken's gpt2 files: the network, or {ENV} naming a folder with tiktoken_cache/ ({e})")
    return None


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory, shakespeare):
    """The char-level data of TinyShakespeare (prepare.py), once per session."""
    import prepare
    out = tmp_path_factory.mktemp('data')
    prepare.prepare(input_path=str(shakespeare), out_dir=str(out))
    return out


@pytest.fixture(scope='module')
def one_thread():
    """For modules of tiny models: intra-op threads only add synchronisation, which is very
    slow on a shared 2-core machine (a 16x16 matmul went from 6 us to 16 ms)."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def move_results(monkeypatch):
    """For a test of lab/: a function that points the results folder (and the pool of runs in it) at
    a folder of the test's, for this test only."""
    def move(path):
        from lab import paths
        monkeypatch.setattr(paths, 'RESULTS', str(path))
        monkeypatch.setattr(paths, 'RUNS', os.path.join(str(path), 'runs'))
    return move


def dynamo_config_changes(before, config):
    """What differs between a copy of torch._dynamo.config (get_config_copy()) and the config now:
    a key that no longer reads (a deleted key still shows in a copy) or a value moved; '' if none."""
    missing = object()
    with warnings.catch_warnings():             # deprecated keys warn when read
        warnings.simplefilter('ignore')
        now = {k: getattr(config, k, missing) for k in before}
    gone = sorted(k for k, v in now.items() if v is missing)
    moved = sorted(k for k, v in now.items() if v is not missing and v != before[k])
    return '; '.join(filter(None, (gone and f"keys gone: {', '.join(gone)}",
                                   moved and f"values changed: {', '.join(moved)}")))


@pytest.fixture(autouse=True)
def dynamo_config_kept(request):
    """No test leaves torch._dynamo.config changed: a key deleted by a monkeypatch undo (pytest 9.2
    deletes what was not in the module's __dict__) fails every later compile of the session, far
    from its cause. This names the test that did it, and puts the config back."""
    import torch._dynamo.config as config      # once per session; a test's first touch imports it too
    before = config.get_config_copy()
    yield
    changes = dynamo_config_changes(before, config)
    if changes:
        config.load_config(before)          # put back, so that the later tests run as they would
        pytest.fail(f"{request.node.nodeid} left torch._dynamo.config changed: {changes}", pytrace=False)


# ----------------------------------------------------------------------------- commands as processes
# A process that imports torch takes seconds to start on a shared 2-core machine. The `cli` fixture
# runs `python SCRIPT ARGS` (or `python -m lab.X ARGS`) as a process forked from one that imported
# torch and the repository's modules once: each call is still a process of its own, with its own
# exit code, stdout and stderr (test_bad_inputs.py checks a few calls against python itself).

# no command module among them: runpy runs a module that is already imported only with a warning
PRELOAD = ['torch', 'numpy', 'model', 'runtime', 'train', 'lab.runner', 'lab.verdicts']



# What each forked process runs (the builtin exec of this text: the forkserver needs no module of
# the tests to start it). multiprocessing gives the exit code of a SystemExit, and prints an
# uncaught exception's traceback to stderr with exit code 1, as python does.
CHILD = """
import os, runpy, sys
for fd, path in ((1, out), (2, err)):
    f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(f, fd)
    os.close(f)
sys.stdout = open(1, 'w', buffering=1, closefd=False)
sys.stderr = open(2, 'w', buffering=1, closefd=False)
os.chdir(repo)
sys.path.insert(0, repo)
sys.argv = [script, *args]
if script.endswith('.py'):
    runpy.run_path(script, run_name='__main__')
else:
    runpy.run_module(script, run_name='__main__', alter_sys=True)
"""


@pytest.fixture(scope='session')
def cli():
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload(PRELOAD)
    cwd = os.getcwd()
    os.chdir(REPO)                  # the server imports PRELOAD from its working directory: the repository's
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.chdir(cwd)
    scratch = tempfile.mkdtemp(prefix='bad-inputs-')

    def run(script, *args, timeout=120):
        out, err = os.path.join(scratch, 'out'), os.path.join(scratch, 'err')
        p = ctx.Process(target=exec, args=(CHILD, dict(script=script, args=list(args), out=out, err=err,
                                                       repo=str(REPO))))
        p.start()
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
            pytest.fail(f"{script} {' '.join(args)}: still running after {timeout} s")
        return SimpleNamespace(returncode=p.exitcode, stdout=Path(out).read_text(), stderr=Path(err).read_text())
    yield run
    shutil.rmtree(scratch, ignore_errors=True)      # the two files of the last call
