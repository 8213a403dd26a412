import pickle
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # import prepare.py without needing a conftest or install

import prepare as prep  # noqa: E402

# shared/ sits next to the repo root, both locally (/work/shared) and in CI
SHARED = Path(__file__).resolve().parents[2] / 'shared' / 'data'


@pytest.fixture
def shakespeare():
    path = SHARED / 'tinyshakespeare' / 'input.txt'
    if not path.is_file():
        pytest.fail(f'shared corpus missing: expected TinyShakespeare at {path}')
    return path


def files_in(d):
    return sorted(p.name for p in Path(d).rglob('*'))


def test_char_level(shakespeare, tmp_path):
    res = prep.prepare(input_path=str(shakespeare), out_dir=str(tmp_path))
    assert (res['train_tokens'], res['val_tokens'], res['vocab_size']) == (1_003_854, 111_540, 65)
    assert files_in(tmp_path) == ['meta.pkl', 'train.bin', 'val.bin']

    train = np.fromfile(tmp_path / 'train.bin', dtype=np.uint16)
    val = np.fromfile(tmp_path / 'val.bin', dtype=np.uint16)
    assert (len(train), len(val)) == (1_003_854, 111_540)
    meta = pickle.loads((tmp_path / 'meta.pkl').read_bytes())
    assert meta['vocab_size'] == 65 and meta['tokenizer'] == 'char'
    text = shakespeare.read_text(encoding='utf-8')
    assert ''.join(meta['itos'][int(i)] for i in train) == text[:int(len(text) * 0.9)]
    assert all(meta['stoi'][ch] == i for i, ch in meta['itos'].items())

    # a second run must reproduce every byte
    before = {name: (tmp_path / name).read_bytes() for name in files_in(tmp_path)}
    prep.prepare(input_path=str(shakespeare), out_dir=str(tmp_path))
    assert {name: (tmp_path / name).read_bytes() for name in files_in(tmp_path)} == before


def test_gpt2(shakespeare, tmp_path, monkeypatch):
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(SHARED / 'tiktoken_cache'))
    res = prep.prepare(input_path=str(shakespeare), tokenizer='gpt2', out_dir=str(tmp_path))
    assert (res['train_tokens'], res['val_tokens'], res['vocab_size']) == (301_966, 36_059, 50257)
    assert np.fromfile(tmp_path / 'val.bin', dtype=np.uint16).size == 36_059
    assert pickle.loads((tmp_path / 'meta.pkl').read_bytes()) == {'vocab_size': 50257, 'tokenizer': 'gpt2'}


def test_existing_input_txt_is_used(shakespeare, tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError('should not download when input.txt exists')
    monkeypatch.setattr(prep, 'download', no_network)
    (tmp_path / 'input.txt').write_bytes(shakespeare.read_bytes())
    assert prep.prepare(out_dir=str(tmp_path))['train_tokens'] == 1_003_854


def test_download_saves_checked_copy(shakespeare, tmp_path, monkeypatch):
    monkeypatch.setattr(prep, 'download', lambda url, timeout=30: shakespeare.read_bytes())
    out = tmp_path / 'new'
    assert prep.prepare(out_dir=str(out))['val_tokens'] == 111_540
    assert (out / 'input.txt').read_bytes() == shakespeare.read_bytes()


def test_download_hash_mismatch_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(prep, 'download', lambda url, timeout=30: b'not shakespeare\n' * 10)
    with pytest.raises(prep.PrepareError, match='sha256'):
        prep.prepare(out_dir=str(tmp_path))
    assert files_in(tmp_path) == []


def test_offline_download(tmp_path, monkeypatch):
    def offline(*a, **k):
        raise urllib.error.URLError('[Errno -3] Temporary failure in name resolution')
    monkeypatch.setattr(urllib.request, 'urlopen', offline)
    out = tmp_path / 'out'
    with pytest.raises(prep.PrepareError, match='--input') as e:
        prep.prepare(out_dir=str(out))
    assert 'could not download' in str(e.value) and '\n' not in str(e.value)
    assert files_in(tmp_path) == []


@pytest.mark.parametrize('content, message', [
    (None, 'not found'),
    (b'', 'empty'),
    (b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR', 'binary'),
    (b'hello caf\xe9 world', 'offset 9'),
    (b'x', 'too short'),
])
def test_bad_input(tmp_path, content, message):
    path = tmp_path / 'input.bin'
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / 'out'
    with pytest.raises(prep.PrepareError, match=message):
        prep.prepare(input_path=str(path), out_dir=str(out))
    assert not out.exists()


def test_vocab_too_big_for_uint16(tmp_path):
    # 70k distinct code points, skipping the surrogates UTF-8 cannot encode
    chars = [chr(c) for c in range(1, 70_001) if not 0xD800 <= c <= 0xDFFF]
    path = tmp_path / 'wide.txt'
    path.write_text(''.join(chars), encoding='utf-8')
    with pytest.raises(prep.PrepareError, match='uint16'):
        prep.prepare(input_path=str(path), out_dir=str(tmp_path / 'out'))


def run_cli(*args):
    return subprocess.run([sys.executable, 'prepare.py', *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_cli_missing_input(tmp_path):
    r = run_cli('--input=/nonexistent', f'--out_dir={tmp_path}')
    assert r.returncode == 2
    assert r.stderr.startswith('error:') and r.stderr.count('\n') == 1, r.stderr
    assert '/nonexistent' in r.stderr


@pytest.mark.parametrize('args', [['--bogus=1'], ['--tokenizer=bpe'], ['--input'], ['input.txt']])
def test_cli_bad_flags(tmp_path, args):
    r = run_cli(*args, f'--out_dir={tmp_path}')
    assert r.returncode == 2
    assert r.stderr.startswith('error:') and r.stderr.count('\n') == 1, r.stderr
    assert files_in(tmp_path) == []


def test_cli_success(shakespeare, tmp_path):
    r = run_cli(f'--input={shakespeare}', f'--out_dir={tmp_path}')
    assert r.returncode == 0, r.stderr
    assert 'char: 1,003,854 train / 111,540 val tokens, vocab 65' in r.stdout
