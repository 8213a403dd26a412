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
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import prepare  # noqa: E402

ENV = 'SPECTRAL_TEST_DATA'
BESIDE = REPO.parent / 'shared' / 'data'   # the offline folder in this project's CI
CACHE = REPO / 'data' / 'shakespeare_char'  # where `python prepare.py` keeps its download


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
