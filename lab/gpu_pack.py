"""
A device call's runs brought home: lab/gpu_study.py packs what it ran into one .tar.gz (a device
call returns at most 8 files from $OUT) and ingests a pack here, into results/runs, where the
tables, the ledger and the plots read them like any run. A pack holds each run's log.jsonl,
run.json (its command, code and diff, versions and GPU), run.txt and diffs; never a checkpoint.
"""

import io
import json
import os
import re
import shutil
import sys
import tarfile
import time

from runtime import versions
from train import git_commit
from lab import paths
from lab.logs import read_log

PACKED = ('log.jsonl', 'run.json', 'run.txt')   # and code-<k>.diff: a run's record without its checkpoint
SAFE = re.compile(r'[A-Za-z0-9_.@-]+$')


def write_pack(path, runs, md, command):
    """path (.tar.gz): runs/<label>/ of each run (PACKED and its diffs), GPU.md (the file md), and env.json
    (the command, the versions and the GPU, the code, the date)."""
    env = dict(command=command, versions=versions(),
               code=git_commit(cwd=paths.REPO, results=paths.RESULTS), date=time.strftime('%Y-%m-%d %H:%M UTC',
                                                                                          time.gmtime()))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with tarfile.open(path, 'w:gz') as tar:
        for r in runs:
            if os.path.isdir(r.dir):
                for f in sorted(os.listdir(r.dir)):
                    if f in PACKED or (f.startswith('code-') and f.endswith('.diff')):
                        tar.add(os.path.join(r.dir, f), arcname=f'runs/{r.label}/{f}')
        tar.add(md, arcname='GPU.md')
        data = json.dumps(env, indent=1).encode()
        info = tarfile.TarInfo('env.json')
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    print(f"packed {len(runs)} run(s), GPU.md and env.json into {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")


def same_bytes(path, data):
    with open(path, 'rb') as f:
        return f.read() == data


def ingest_pack(path):
    """A pack's finished runs into results/runs/<label>; one that did not finish is left out (a machine
    starts bare: no checkpoint of it exists), and a run already here is kept as it is. Returns 0, or 2
    for a file that is no pack."""
    try:
        with tarfile.open(path) as tar:
            got = {}
            for m in tar.getmembers():
                parts = m.name.split('/')
                if m.isfile() and len(parts) == 3 and parts[0] == 'runs' and SAFE.match(parts[1]) and \
                        (parts[2] in PACKED or re.match(r'code-\d+\.diff$', parts[2])):
                    got.setdefault(parts[1], {})[parts[2]] = tar.extractfile(m).read()
            env = json.loads(tar.extractfile('env.json').read())
    except (OSError, tarfile.TarError, KeyError, ValueError) as e:
        print(f"error: --ingest={path}: not a pack of lab.gpu_study --pack ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    print(f"{path}: made {env.get('date')} by `{env.get('command')}` at {env.get('code')}, {env.get('versions')}")
    for label, files in sorted(got.items()):
        dest = os.path.join(paths.RUNS, label)
        if os.path.exists(dest):
            same = all(os.path.isfile(os.path.join(dest, f)) and same_bytes(os.path.join(dest, f), b)
                       for f, b in files.items())
            print(f"{label}: {'already here' if same else 'a run of this name is here already: kept, not replaced'}")
            continue
        tmp = dest + '.ingest'
        shutil.rmtree(tmp, ignore_errors=True)     # what an ingest cut short left: not part of this run
        os.makedirs(tmp)
        for f, b in files.items():
            with open(os.path.join(tmp, f), 'wb') as fh:
                fh.write(b)
        try:
            n = int(json.loads(files['run.json'])['max_iters'])
        except (KeyError, ValueError, TypeError):
            n = None
        evals, _, _ = read_log(os.path.join(tmp, 'log.jsonl'))
        if n is None or n not in evals:
            print(f"{label}: not finished (last eval at iter {max(evals, default='-')} of {n}): left out")
            shutil.rmtree(tmp)
            continue
        os.replace(tmp, dest)
        print(f"{label}: finished, val {evals[n]['val']:.4f}: into {paths.rel(dest)}")
    return 0
