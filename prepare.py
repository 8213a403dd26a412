"""
Prepare TinyShakespeare (or any UTF-8 text) for training.

    python prepare.py [--input=PATH] [--tokenizer=char|gpt2] [--out_dir=DIR]

Writes train.bin / val.bin (uint16 token ids) and meta.json (the vocabulary: data, never
code) into data/shakespeare_char/ (char) or data/shakespeare/ (gpt2), next to this file.
--input is a UTF-8 file, a directory (its .txt files, by name) or a comma-separated
list of files; each file gives its first 90% to train and its last 10% to val, so
that val holds every source in the proportion train does.
Without --input, TinyShakespeare is downloaded once, checked against its sha256 and
kept as input.txt in that folder (as is a local copy given with --input, found by its
sha256: the tests read it there); a folder already prepared is left as it is. GPT-2 BPE needs
tiktoken's gpt2 files: downloaded once into tiktoken's cache, or found offline in
the folder TIKTOKEN_CACHE_DIR names.
"""
import glob
import hashlib
import http.client
import json
import os
import sys
import urllib.error
import urllib.request

import numpy as np

from configurator import fail

URL = 'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
SHA256 = '86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed'
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = {'char': 'shakespeare_char', 'gpt2': 'shakespeare'}
META = 'meta.json'   # the vocabulary; an older prepare.py wrote meta.pkl, a pickle, which is never read
UINT16_IDS = 2 ** 16  # ids 0..65535 fit in uint16
USAGE = 'usage: python prepare.py [--input=FILE|DIR|FILE,FILE...] [--tokenizer=char|gpt2] [--out_dir=DIR]'


class PrepareError(Exception):
    pass


def download(url, timeout=30):
    # kept as a module-level function so tests can replace it
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def first_line(e, limit=200):
    """An error's message cut to one short line (some carry a whole traceback)."""
    lines = str(e).splitlines()
    line = lines[0] if lines else ''
    return line if len(line) <= limit else line[:limit] + '...'


def write_atomic(files):
    # write every temp file first, then swap them all in, so a failure midway
    # never leaves a half-written file (or a mix of old and new outputs) behind
    temps = []
    try:
        for path, data in files.items():
            tmp = f'{path}.{os.getpid()}.tmp'
            temps.append((tmp, path))
            with open(tmp, 'wb') as f:
                f.write(data)
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.remove(tmp)


def write_checked(out_dir, files):
    """write_atomic, or a PrepareError of one line (a full disk): the folder keeps what it held."""
    try:
        write_atomic(files)
    except OSError as e:
        raise PrepareError(f"cannot write into {out_dir} ({e.strerror or e}): what it held is left as it was") \
            from None


def make_dir(path, what='output folder'):
    """os.makedirs, or a PrepareError that says why the folder cannot be made."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise PrepareError(f"cannot create the {what} {path}: {e.strerror or e}") from None


def remove_stale_temps(out_dir, names):
    """Remove the f'{path}.{pid}.tmp' that a kill -9 mid-write left of write_atomic's files
    (out_dir/name for each name). All of them go, not only those of dead pids: a program owns
    its output folder while it writes there, and a pid says nothing on a disk shared by several
    machines, or once reused."""
    stale = [p for name in names for p in glob.glob(os.path.join(glob.escape(out_dir), f'{name}.*.tmp'))
             if p[len(os.path.join(out_dir, name)) + 1:-4].isdigit()]
    for p in stale:
        os.remove(p)
    if stale:
        print(f"removed {len(stale)} temp file(s) of an interrupted write: {', '.join(stale)}")


def fetch_shakespeare(out_dir):
    try:
        print(f'downloading {URL}')
        data = download(URL)
    except (OSError, http.client.HTTPException, ValueError) as e:
        if isinstance(e, urllib.error.HTTPError):
            reason = f'HTTP {e.code} {e.reason}'
        else:
            reason = getattr(e, 'reason', None) or e
        detail = first_line(reason) or type(e).__name__
        raise PrepareError(f'could not download TinyShakespeare from {URL}: offline? pass a local '
                           f'copy with --input=PATH (detail: {detail})') from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise PrepareError(f'downloaded TinyShakespeare has sha256 {digest}, expected {SHA256}; '
                           'pass a trusted local copy with --input=PATH')
    make_dir(out_dir)
    remove_stale_temps(out_dir, ('train.bin', 'val.bin', META, 'input.txt'))
    write_checked(out_dir, {os.path.join(out_dir, 'input.txt'): data})
    return data


MAX_INPUT = 2 ** 31          # bytes of one input file: 2 GiB of text is about a billion uint16 tokens


def read_text(path):
    try:
        if os.path.exists(path) and not os.path.isdir(path) and not os.path.isfile(path):
            raise PrepareError(f'input is not a regular file (a device or a pipe): {path}')
        if os.path.getsize(path) > MAX_INPUT:
            raise PrepareError(f'input is {os.path.getsize(path):,} bytes, over the {MAX_INPUT:,} prepare.py '
                               f'reads from one file: split it, and pass the folder of its parts: {path}')
        with open(path, 'rb') as f:
            return f.read()
    except FileNotFoundError:
        raise PrepareError(f'input file not found: {path}')
    except IsADirectoryError:
        raise PrepareError(f'input is a directory, not a file: {path}')
    except OSError as e:
        raise PrepareError(f'cannot read {path}: {e.strerror or e}')


def read_inputs(input_path):
    """[(name, text)] of a file, a directory's .txt files (by name) or a comma-separated list."""
    if os.path.isdir(input_path):
        names = sorted(glob.glob(os.path.join(input_path, '*.txt')))
        if not names:
            raise PrepareError(f'no .txt files in the directory {input_path}')
    else:
        names = [p for p in input_path.split(',') if p]
    return [(n, decode(read_text(n), n)) for n in names]


def decode(data, name):
    if not data:
        raise PrepareError(f'input file is empty: {name}')
    # NUL is valid UTF-8, but no real text has one: catches images, .bin files, UTF-16
    nul = data.find(b'\0')
    if nul >= 0:
        raise PrepareError(f'input looks binary (NUL byte at offset {nul}): {name}')
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError as e:
        raise PrepareError(f'input is not valid UTF-8 (bad byte at offset {e.start}): {name}')


def encode_char(train_text, val_text):
    chars = sorted(set(train_text + val_text))
    if len(chars) > UINT16_IDS:
        raise PrepareError(f'{len(chars)} distinct characters: too many for uint16 token ids '
                           f'(max {UINT16_IDS}); try --tokenizer=gpt2')
    stoi = {ch: i for i, ch in enumerate(chars)}
    train = np.array([stoi[c] for c in train_text], dtype=np.uint16)
    val = np.array([stoi[c] for c in val_text], dtype=np.uint16)
    meta = {'vocab_size': len(chars), 'tokenizer': 'char', 'itos': chars}     # itos: id -> character
    return train, val, meta


GPT2_FIX = ('set TIKTOKEN_CACHE_DIR to a folder holding the gpt2 files, '
            'or run once with internet so that tiktoken caches them')


def gpt2_encoding():
    """tiktoken's gpt2 encoding, or a PrepareError that gives the fix first and the cause after
    (shared with sample.py)."""
    try:
        import tiktoken
    except ImportError:
        raise PrepareError('tiktoken is not installed: pip install -r requirements.txt '
                           '(or pip install tiktoken)') from None
    try:
        return tiktoken.get_encoding('gpt2')
    except Exception as e:  # network/cache failures surface as many different types
        detail = first_line(e)
        raise PrepareError(f'tiktoken could not load the gpt2 encoding: offline? {GPT2_FIX} '
                           f'(detail: {type(e).__name__}: {detail})') from None


def encode_gpt2(train_text, val_text):
    enc = gpt2_encoding()
    train = np.array(enc.encode_ordinary(train_text), dtype=np.uint16)
    val = np.array(enc.encode_ordinary(val_text), dtype=np.uint16)
    return train, val, {'vocab_size': enc.n_vocab, 'tokenizer': 'gpt2'}


MAX_META = 1 << 20          # bytes: a char vocabulary is kilobytes; more is no meta.json of ours
MAX_VOCAB = 1 << 16         # train.bin and val.bin hold uint16 token ids


def read_meta(path):
    """A prepared folder's vocabulary from its meta.json (`path`): {'vocab_size', 'tokenizer', and for 'char'
    'itos' (id -> character) and 'stoi'}. A PrepareError of one line where it is missing, garbled, or where
    only the meta.pkl of an older prepare.py is there: a pickle can run code, so it is never read."""
    old = os.path.join(os.path.dirname(path), 'meta.pkl') if not path.endswith('.pkl') else path
    if path.endswith('.pkl') or (not os.path.exists(path) and os.path.exists(old)):
        raise PrepareError(f"{old} is the pickle of an older prepare.py, never read (a pickle can run code): run "
                           f"`python prepare.py` again, with the --input, --tokenizer and --out_dir it was made "
                           f"with, to write {META} beside it")
    if os.path.exists(path) and not os.path.isfile(path):    # a FIFO hangs a read, /dev/zero never ends
        raise PrepareError(f"{path} is not a regular file: run `python prepare.py`")
    try:
        if os.path.getsize(path) > MAX_META:
            raise ValueError(f"{os.path.getsize(path):,} bytes, over the {MAX_META:,} a vocabulary takes")
        with open(path, encoding='utf-8') as f:
            meta = json.loads(f.read(MAX_META + 1))
    except (OSError, ValueError, RecursionError) as e:      # RecursionError: a file nested thousands deep
        raise PrepareError(f"cannot read {path} ({type(e).__name__}: {first_line(e)}): run `python prepare.py`") \
            from None
    vocab = meta.get('vocab_size') if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or not 1 <= vocab <= MAX_VOCAB or \
            meta.get('tokenizer') not in DEFAULT_OUT:
        raise PrepareError(f"{path} has no vocab_size in [1, {MAX_VOCAB}] (its tokens are uint16) and tokenizer char "
                           f"or gpt2: run `python prepare.py` again")
    if meta['tokenizer'] == 'char':
        itos = meta.get('itos')
        if not (isinstance(itos, list) and len(itos) == vocab and all(isinstance(c, str) and len(c) == 1 for c in itos)
                and len(set(itos)) == vocab):
            raise PrepareError(f"{path}: its itos is not {vocab} distinct characters: run `python prepare.py` again")
        meta['stoi'] = {c: i for i, c in enumerate(itos)}
    return meta


def prepared(out_dir, tokenizer):
    """The counts of a folder that already holds this tokenizer's train.bin, val.bin and meta.json, or None."""
    try:
        meta = read_meta(os.path.join(out_dir, META))
        sizes = [os.path.getsize(os.path.join(out_dir, f'{s}.bin')) // 2 for s in ('train', 'val')]
    except (OSError, PrepareError):
        return None
    if meta['tokenizer'] != tokenizer or not all(sizes):
        return None
    return {'train_tokens': sizes[0], 'val_tokens': sizes[1], 'vocab_size': meta.get('vocab_size'),
            'out_dir': out_dir, 'already': True}


def prepare(input_path=None, tokenizer='char', out_dir=None):
    if tokenizer not in DEFAULT_OUT:
        raise PrepareError(f"unknown tokenizer {tokenizer!r} (choose 'char' or 'gpt2')")
    if out_dir is None:
        out_dir = os.path.join(HERE, 'data', DEFAULT_OUT[tokenizer])

    # read and validate everything before creating any output
    if input_path is not None:
        texts = read_inputs(input_path)
    else:
        name = os.path.join(out_dir, 'input.txt')
        done = prepared(out_dir, tokenizer)
        if done:                                # prepared before (from its input.txt or --input): nothing to do
            return done
        data = read_text(name) if os.path.exists(name) else fetch_shakespeare(out_dir)
        texts = [(name, decode(data, name))]

    parts = []
    for name, text in texts:
        n = len(text)
        split = int(n * 0.9)
        if split == 0 or split == n:
            raise PrepareError(f'input is too short to split 90/10 ({n} characters): {name}')
        parts.append((text[:split], text[split:]))
    encode = encode_char if tokenizer == 'char' else encode_gpt2
    train, val, meta = encode(''.join(t for t, _ in parts), ''.join(v for _, v in parts))

    make_dir(out_dir)
    remove_stale_temps(out_dir, ('train.bin', 'val.bin', META, 'input.txt'))
    files = {}
    if input_path is not None and len(texts) == 1 and hashlib.sha256(texts[0][1].encode()).hexdigest() == SHA256 \
            and not os.path.exists(os.path.join(out_dir, 'input.txt')):
        # TinyShakespeare given offline: kept as a download would keep it, where the tests look for it
        files[os.path.join(out_dir, 'input.txt')] = texts[0][1].encode()
    write_checked(out_dir, {**files,
        os.path.join(out_dir, 'train.bin'): train.tobytes(),  # same bytes as .tofile
        os.path.join(out_dir, 'val.bin'): val.tobytes(),
        os.path.join(out_dir, META): json.dumps(meta, ensure_ascii=True).encode(),
    })
    if os.path.exists(os.path.join(out_dir, 'meta.pkl')):   # an older prepare.py's pickle: gone, never read
        os.remove(os.path.join(out_dir, 'meta.pkl'))
    return {'train_tokens': len(train), 'val_tokens': len(val),
            'vocab_size': meta['vocab_size'], 'out_dir': out_dir}


def parse_args(argv):
    allowed = {'input': 'input_path', 'tokenizer': 'tokenizer', 'out_dir': 'out_dir'}
    kwargs = {}
    for arg in argv:
        key, eq, value = arg.partition('=')
        if not key.startswith('--') or key[2:] not in allowed:
            raise PrepareError(f'unknown flag {arg!r}; {USAGE}')
        if not eq or not value:
            raise PrepareError(f'{key} needs a value, as {key}=VALUE')
        kwargs[allowed[key[2:]]] = os.path.expanduser(value) if key != '--tokenizer' else value   # no shell expands ~ after =
    return kwargs


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0
    try:
        kwargs = parse_args(argv)
        res = prepare(**kwargs)
    except PrepareError as e:
        return fail(e)
    shown = os.path.relpath(res['out_dir'])
    shown = res['out_dir'] if shown.startswith('..') else shown
    if res.get('already'):
        print(f"{shown} is already prepared ({res['train_tokens']:,} train / {res['val_tokens']:,} val tokens, "
              f"vocab {res['vocab_size']}); --input=PATH prepares it again")
        return 0
    print(f"{kwargs.get('tokenizer', 'char')}: {res['train_tokens']:,} train / "
          f"{res['val_tokens']:,} val tokens, vocab {res['vocab_size']} -> {shown}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
