import functools
import http.server
import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # import prepare.py without needing an install

import prepare as prep  # noqa: E402
from conftest import ENV, Sources, obtain_corpus, pick_sources  # noqa: E402

# the corpus comes from the `shakespeare` fixture in conftest.py: an offline data folder
# where there is one, else prepare's own download, cached in data/


def files_in(d):
    return sorted(p.name for p in Path(d).rglob('*'))


def test_char_level(shakespeare, tmp_path):
    res = prep.prepare(input_path=str(shakespeare), out_dir=str(tmp_path))
    assert (res['train_tokens'], res['val_tokens'], res['vocab_size']) == (1_003_854, 111_540, 65)
    # TinyShakespeare given offline is kept as input.txt, where a download goes and the tests look
    assert files_in(tmp_path) == ['input.txt', 'meta.json', 'train.bin', 'val.bin']
    assert (tmp_path / 'input.txt').read_bytes() == shakespeare.read_bytes()

    train = np.fromfile(tmp_path / 'train.bin', dtype=np.uint16)
    val = np.fromfile(tmp_path / 'val.bin', dtype=np.uint16)
    assert (len(train), len(val)) == (1_003_854, 111_540)
    meta = json.loads((tmp_path / 'meta.json').read_text())      # JSON: data, never code
    assert meta['vocab_size'] == 65 and meta['tokenizer'] == 'char' and set(meta) == {'vocab_size', 'tokenizer', 'itos'}
    text = shakespeare.read_text(encoding='utf-8')
    assert ''.join(meta['itos'][int(i)] for i in train) == text[:int(len(text) * 0.9)]
    read = prep.read_meta(str(tmp_path / 'meta.json'))
    assert all(read['stoi'][ch] == i for i, ch in enumerate(read['itos']))

    # a second run must reproduce every byte
    before = {name: (tmp_path / name).read_bytes() for name in files_in(tmp_path)}
    prep.prepare(input_path=str(shakespeare), out_dir=str(tmp_path))
    assert {name: (tmp_path / name).read_bytes() for name in files_in(tmp_path)} == before


def test_stale_temps_of_a_killed_prepare_are_removed(shakespeare, tmp_path, capsys):
    # what a kill -9 inside write_atomic leaves: f'{path}.{pid}.tmp'
    (tmp_path / 'train.bin.4242.tmp').write_bytes(b'half the tokens')
    (tmp_path / 'meta.json.7.tmp').write_bytes(b'')
    (tmp_path / 'notes.tmp').write_text('not ours')
    prep.prepare(input_path=str(shakespeare), out_dir=str(tmp_path))
    assert sorted(p.name for p in tmp_path.glob('*.tmp')) == ['notes.tmp']
    assert 'removed 2 temp file(s) of an interrupted write' in capsys.readouterr().out


def test_gpt2(shakespeare, gpt2_cache, tmp_path):
    res = prep.prepare(input_path=str(shakespeare), tokenizer='gpt2', out_dir=str(tmp_path))
    assert (res['train_tokens'], res['val_tokens'], res['vocab_size']) == (301_966, 36_059, 50257)
    assert np.fromfile(tmp_path / 'val.bin', dtype=np.uint16).size == 36_059
    assert json.loads((tmp_path / 'meta.json').read_text()) == {'vocab_size': 50257, 'tokenizer': 'gpt2'}


def test_existing_input_txt_is_used(shakespeare, tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError('should not download when input.txt exists')
    monkeypatch.setattr(prep, 'download', no_network)
    (tmp_path / 'input.txt').write_bytes(shakespeare.read_bytes())
    assert prep.prepare(out_dir=str(tmp_path))['train_tokens'] == 1_003_854


def test_a_folder_prepared_from_input_is_not_prepared_again_offline(shakespeare, tmp_path, monkeypatch):
    """The README's CPU path starts with `python prepare.py`: after `--input=PATH` (offline) it once tried
    to download and failed. A folder that holds the tokenizer's files is left as it is, and says so."""
    def no_network(*a, **k):
        raise AssertionError('should not download: the folder is prepared')
    prep.prepare(input_path=str(shakespeare), out_dir=str(tmp_path))
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    monkeypatch.setattr(prep, 'download', no_network)
    monkeypatch.setattr(prep, 'HERE', str(tmp_path.parent))
    res = prep.prepare(out_dir=str(tmp_path))
    assert res['already'] and (res['train_tokens'], res['val_tokens'], res['vocab_size']) == (1_003_854, 111_540, 65)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    r = subprocess.run([sys.executable, 'prepare.py', f'--out_dir={tmp_path}'], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and 'is already prepared (1,003,854 train / 111,540 val tokens' in r.stdout, r.stderr
    monkeypatch.setattr(prep, 'download', lambda url, timeout=30: b'not shakespeare\n' * 10)
    try:                                # another tokenizer's folder is not prepared: made anew from its input.txt
        assert prep.prepare(out_dir=str(tmp_path), tokenizer='gpt2')['vocab_size'] == 50257
    except prep.PrepareError as e:      # offline without tiktoken's files
        assert 'tiktoken could not load the gpt2 encoding' in str(e)


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
    msg = str(e.value)
    assert msg.startswith('could not download') and '\n' not in msg
    assert msg.index('--input=PATH') < msg.index('(detail: [Errno -3] Temporary failure')  # the fix first
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


def test_cli_unusable_out_dir(shakespeare, tmp_path):
    (tmp_path / 'a_file').write_text('')
    r = run_cli(f'--input={shakespeare}', f'--out_dir={tmp_path / "a_file" / "data"}')
    assert r.returncode == 2 and r.stderr.count('\n') == 1, r.stderr
    assert r.stderr.startswith('error: cannot create the output folder') and 'Not a directory' in r.stderr


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

# ---------------------------------------------------------------------------- where the tests get their data


def corpus_folder(root, corpus_bytes, tiktoken=True):
    """An offline data folder: tinyshakespeare/input.txt and (empty) tiktoken_cache/."""
    (root / 'tinyshakespeare').mkdir(parents=True)
    (root / 'tinyshakespeare' / 'input.txt').write_bytes(corpus_bytes)
    if tiktoken:
        (root / 'tiktoken_cache').mkdir()
    return root


def test_sources_offline_folder_beside_the_clone(shakespeare, tmp_path):
    beside = corpus_folder(tmp_path / 'data', shakespeare.read_bytes())
    src = pick_sources(env={}, beside=beside, cache=tmp_path / 'cache')
    assert src == Sources(beside / 'tinyshakespeare' / 'input.txt', False, beside / 'tiktoken_cache')


def test_sources_download_when_nothing_is_beside(tmp_path):
    src = pick_sources(env={}, beside=tmp_path / 'absent', cache=tmp_path / 'cache')
    assert src == Sources(tmp_path / 'cache' / 'input.txt', True, None)


def test_sources_env_names_the_folder_or_forces_the_download(shakespeare, tmp_path):
    beside = corpus_folder(tmp_path / 'beside', shakespeare.read_bytes())
    named = tmp_path / 'named'
    src = pick_sources(env={ENV: str(named)}, beside=beside, cache=tmp_path / 'cache')
    assert src == Sources(named / 'tinyshakespeare' / 'input.txt', False, named / 'tiktoken_cache')
    src = pick_sources(env={ENV: ''}, beside=beside, cache=tmp_path / 'cache')
    assert src == Sources(tmp_path / 'cache' / 'input.txt', True, None)


def test_offline_path_reads_the_folder_and_never_downloads(shakespeare, tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError('the offline path must not download')
    monkeypatch.setattr(prep, 'download', no_network)
    beside = corpus_folder(tmp_path / 'data', shakespeare.read_bytes())
    src = pick_sources(env={}, beside=beside, cache=tmp_path / 'cache')
    assert obtain_corpus(src) == beside / 'tinyshakespeare' / 'input.txt'
    assert not (tmp_path / 'cache').exists()


def test_offline_path_rejects_a_wrong_corpus(tmp_path):
    beside = corpus_folder(tmp_path / 'data', b'not shakespeare\n')
    with pytest.raises(pytest.fail.Exception, match='sha256'):
        obtain_corpus(pick_sources(env={}, beside=beside, cache=tmp_path / 'cache'))


def test_named_folder_without_corpus_fails_clearly(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=re.escape(f'set {ENV}= (empty) to download')):
        obtain_corpus(pick_sources(env={ENV: str(tmp_path / 'nothing')}, cache=tmp_path / 'cache'))

# ---------------------------------------------------------------------------- download, from a local server


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    requests = None  # a list per server, set below

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def server(shakespeare, tmp_path, monkeypatch):
    """An HTTP server on 127.0.0.1 (a thread) serving a temp folder that holds a copy of the
    corpus as input.txt and a wrong file as bad.txt; prepare.URL points at input.txt.
    Yields its base URL and the list of request paths it has answered."""
    root = tmp_path / 'www'
    root.mkdir()
    (root / 'input.txt').write_bytes(shakespeare.read_bytes())
    (root / 'bad.txt').write_bytes(b'not shakespeare\n' * 10)
    seen = []
    handler = type('Handler', (CountingHandler,), {'requests': seen})
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f'http://127.0.0.1:{httpd.server_address[1]}'
    for var in ('no_proxy', 'NO_PROXY'):  # a user's proxy settings must not catch 127.0.0.1
        monkeypatch.setenv(var, '127.0.0.1,localhost')
    monkeypatch.setattr(prep, 'URL', f'{base}/input.txt')
    yield SimpleNamespace(base=base, requests=seen)
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def test_download_path_fetches_checks_and_caches(server, shakespeare, tmp_path):
    cache = tmp_path / 'data' / 'shakespeare_char'
    src = pick_sources(env={ENV: ''}, cache=cache)
    assert obtain_corpus(src) == cache / 'input.txt'        # real prepare.download, urllib, sha256
    assert server.requests == ['/input.txt']
    assert (cache / 'input.txt').read_bytes() == shakespeare.read_bytes()
    assert sorted(p.name for p in cache.iterdir()) == ['input.txt']  # no temp file left behind

    # cached: neither a second fixture call nor prepare() downloads again
    assert obtain_corpus(src) == cache / 'input.txt'
    res = prep.prepare(out_dir=str(cache))
    assert (res['train_tokens'], res['val_tokens']) == (1_003_854, 111_540)
    assert server.requests == ['/input.txt']


def test_prepare_downloads_once_then_uses_the_cached_copy(server, tmp_path):
    out = tmp_path / 'new'
    assert prep.prepare(out_dir=str(out))['val_tokens'] == 111_540
    assert files_in(out) == ['input.txt', 'meta.json', 'train.bin', 'val.bin']
    first = {name: (out / name).read_bytes() for name in files_in(out)}
    prep.prepare(out_dir=str(out))
    assert server.requests == ['/input.txt']
    assert {name: (out / name).read_bytes() for name in files_in(out)} == first


def test_served_file_with_wrong_sha256_is_not_kept(server, tmp_path, monkeypatch):
    monkeypatch.setattr(prep, 'URL', f'{server.base}/bad.txt')
    with pytest.raises(prep.PrepareError, match='sha256'):
        prep.prepare(out_dir=str(tmp_path / 'out'))
    with pytest.raises(pytest.fail.Exception, match='sha256'):
        obtain_corpus(pick_sources(env={ENV: ''}, cache=tmp_path / 'cache'))
    assert server.requests == ['/bad.txt', '/bad.txt']
    assert not (tmp_path / 'out').exists() and not (tmp_path / 'cache').exists()


def test_http_error_is_one_line_with_the_fix(server, tmp_path, monkeypatch):
    monkeypatch.setattr(prep, 'URL', f'{server.base}/missing.txt')
    with pytest.raises(prep.PrepareError, match='--input') as e:
        prep.prepare(out_dir=str(tmp_path / 'out'))
    assert 'could not download' in str(e.value) and str(e.value).endswith('(detail: HTTP 404 File not found)')
    assert '\n' not in str(e.value) and not (tmp_path / 'out').exists()


def test_cached_copy_with_wrong_sha256_fails_and_is_kept(tmp_path):
    cache = tmp_path / 'cache'
    cache.mkdir()
    (cache / 'input.txt').write_bytes(b'my own text\n')
    with pytest.raises(pytest.fail.Exception, match='delete it to download it again'):
        obtain_corpus(pick_sources(env={ENV: ''}, cache=cache))
    assert (cache / 'input.txt').read_bytes() == b'my own text\n'

# ---------------------------------------------------------------------------- tiktoken offline


def offline_tiktoken(monkeypatch):
    import tiktoken

    def fail(name):
        raise ConnectionError("HTTPSConnectionPool(host='openaipublic.blob.core.windows.net', port=443): "
                              "Max retries exceeded\nsecond line of the traceback text")
    monkeypatch.setattr(tiktoken, 'get_encoding', fail)


def test_tiktoken_offline_message_gives_the_fix_first(shakespeare, tmp_path, monkeypatch):
    offline_tiktoken(monkeypatch)
    out = tmp_path / 'out'
    with pytest.raises(prep.PrepareError) as e:
        prep.prepare(input_path=str(shakespeare), tokenizer='gpt2', out_dir=str(out))
    msg = str(e.value)
    assert msg.startswith('tiktoken could not load the gpt2 encoding: offline? set TIKTOKEN_CACHE_DIR')
    assert msg.index('run once with internet') < msg.index('(detail: ConnectionError: HTTPSConnectionPool')
    assert msg.endswith('Max retries exceeded)') and '\n' not in msg
    assert not out.exists()


def test_sample_gives_the_same_tiktoken_message(monkeypatch):
    import sample  # sample.py turns prepare's error into its ConfigError
    offline_tiktoken(monkeypatch)
    with pytest.raises(sample.ConfigError) as e:
        sample.load_tokenizer({'data': {'tokenizer': 'gpt2'}}, '')
    with pytest.raises(prep.PrepareError) as p:
        prep.gpt2_encoding()
    assert str(e.value).endswith(str(p.value))


def test_a_directory_or_a_list_of_files_splits_each_file(tmp_path):
    """Each file gives its first 90% to train and its last 10% to val, in file-name order; a
    directory and the comma-separated list of its .txt files prepare the same bytes."""
    src = tmp_path / 'src'
    src.mkdir()
    (src / 'a.txt').write_text('a' * 90 + 'A' * 10)
    (src / 'b.txt').write_text('b' * 180 + 'B' * 20)
    (src / 'notes.md').write_text('not read')
    res = prep.prepare(input_path=str(src), out_dir=str(tmp_path / 'dir'))
    assert (res['train_tokens'], res['val_tokens']) == (270, 30)
    meta = json.loads((tmp_path / 'dir' / 'meta.json').read_text())
    val = ''.join(meta['itos'][i] for i in np.fromfile(tmp_path / 'dir' / 'val.bin', dtype=np.uint16))
    assert val == 'A' * 10 + 'B' * 20
    prep.prepare(input_path=f"{src / 'a.txt'},{src / 'b.txt'}", out_dir=str(tmp_path / 'list'))
    for f in ('train.bin', 'val.bin', 'meta.json'):
        assert (tmp_path / 'dir' / f).read_bytes() == (tmp_path / 'list' / f).read_bytes()
    with pytest.raises(prep.PrepareError, match='no .txt files'):
        prep.prepare(input_path=str(tmp_path / 'dir'), out_dir=str(tmp_path / 'x'))
