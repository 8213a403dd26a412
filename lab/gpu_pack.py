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
import tarfile
import time

from runtime import git_commit, versions
from lab import cli, paths
from lab.logs import num, read_log
from lab.provenance import command_problem

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


KEEP_WEIGHTS = ('ega_paper', 'ega_mope_paper')     # whose final weights come home: evaluated causally here
MAX_OUT = 16 * 2 ** 20                              # a file a device call brings back: 16 MiB at most


def keep_weights(runs, folder):
    """The final weights of the finished runs of KEEP_WEIGHTS, in bf16, as folder/<label>.pt: a checkpoint
    without its optimizer state (sample.py and train.py --eval_only=True load it, a resume refuses it), under
    MAX_OUT a file. Returns the paths written; what it could not keep, it says."""
    import torch
    from runtime import load_checkpoint
    written = []
    for r in runs:
        path = os.path.join(r.dir, 'ckpt.pt')
        if r.name not in KEEP_WEIGHTS or not os.path.isfile(path):
            continue
        ck, _ = load_checkpoint(path)
        if ck['iter_num'] < ck['config'].get('max_iters', 0):
            continue                                # not finished: nothing to evaluate
        ck = dict(ck, model={k: v.bfloat16() if v.is_floating_point() else v for k, v in ck['model'].items()},
                  optimizer={'state': {}, 'param_groups': []}, param_names=['(weights only: no optimizer state)'])
        out = os.path.join(folder, f'{r.label}.pt')
        os.makedirs(folder, exist_ok=True)
        torch.save(ck, out)
        if os.path.getsize(out) > MAX_OUT:
            os.remove(out)
            print(f"{r.label}: its weights are over {MAX_OUT // 2 ** 20} MiB in bf16: not kept")
            continue
        written.append(out)
        print(f"kept {r.label}'s final weights (bf16, {os.path.getsize(out) / 2 ** 20:.1f} MiB) in {out}")
    return written


def same_bytes(path, data):
    with open(path, 'rb') as f:
        return f.read() == data


MAX_FILE = 64 * 2 ** 20      # a member's bytes at most (a paper-scale log.jsonl is about 0.4 MiB)
MAX_PACK = 512 * 2 ** 20     # all the members read, together: a small pack cannot make us read gigabytes
MAX_MEMBERS = 10_000         # a pack's members at most (a call's pack holds tens): more is no pack of ours
MAX_LINES = 100_000          # a file's lines at most (a paper-scale log.jsonl has about 700)
MAX_ITERS = 10 ** 7          # a run's max_iters at most
SHOWN = 20                   # skipped members named one by one; the rest counted


def shown(x):
    """A pack's text as printed here: control characters (a terminal's escape sequences) escaped."""
    return re.sub(r'[\x00-\x1f\x7f-\x9f]', lambda m: f'\\x{ord(m.group()):02x}', str(x))


def pack_members(tar):
    """({label: {file: bytes}} of the runs' files, env.json's bytes, [(member, why it was skipped)])."""
    got, env, skipped, total = {}, None, [], 0
    for i, m in enumerate(tar):         # one header at a time: 300,000 empty members once took 385 MB
        if i >= MAX_MEMBERS:
            raise ValueError(f"over {MAX_MEMBERS:,} members: no pack of lab.gpu_study")
        parts = m.name.split('/')
        run_file = (len(parts) == 3 and parts[0] == 'runs' and SAFE.match(parts[1]) and parts[1] not in ('.', '..')
                    and (parts[2] in PACKED or re.match(r'code-\d+\.diff$', parts[2])))
        if not m.isfile():
            why = 'not a plain file (a link, a folder or a device)'
        elif not run_file and m.name not in ('env.json', 'GPU.md'):
            why = 'not a file a pack holds (runs/LABEL/log.jsonl, run.json, run.txt, code-N.diff; GPU.md, env.json)'
        elif m.size > MAX_FILE or total + m.size > MAX_PACK:
            why = f'{m.size:,} bytes: over the {MAX_FILE:,} bytes a file, or {MAX_PACK:,} a pack, may hold'
        elif (m.name == 'env.json' and env is not None) or (run_file and parts[2] in got.get(parts[1], {})):
            why = 'a second copy of a file already read'
        else:
            why = ''
        if why:
            skipped.append((m.name, why))
        elif m.name == 'env.json':
            env, total = tar.extractfile(m).read(), total + m.size
        elif run_file:
            data = tar.extractfile(m).read()
            total += m.size
            if data.count(b'\n') > MAX_LINES:     # 67 million empty lines once took minutes and 834 MB
                skipped.append((m.name, f'over the {MAX_LINES:,} lines a file may hold'))
            else:
                got.setdefault(parts[1], {})[parts[2]] = data
    return got, env, skipped


def finished_at(files, tmp):
    """The run's final val, or why it is not brought in (its run.json unreadable, not finished, its final val
    not finite)."""
    try:
        rec = json.loads(files['run.json'])
        n = rec['max_iters']
    except (KeyError, ValueError, TypeError, UnicodeDecodeError, AttributeError, RecursionError):
        return None, 'its run.json is missing or holds no max_iters'
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ITERS:      # 1e999 once overflowed
        return None, f"its max_iters {shown(repr(n))[:40]} is no step count in [1, {MAX_ITERS:,}]"
    if command_problem(rec.get('cmd')):     # nothing here runs it; lab.replay refuses it, and says so
        print(f"warning: {shown(command_problem(rec.get('cmd')))}: lab.replay will not replay it")
    evals, _, _ = read_log(os.path.join(tmp, 'log.jsonl'))
    if n not in evals:
        return None, f"not finished (last eval at iter {max(evals, default='-')} of {n})"
    if not num(evals[n].get('val')):
        return None, f"its final val at iter {n} is {evals[n].get('val')!r}, not a finite loss"
    return evals[n]['val'], ''


def ingest_pack(path):
    """A pack's finished runs into results/runs/<label>, each whole or not at all (a run that did not finish,
    whose final val is not finite or whose command names a file of its own is left out, saying why; a
    machine starts bare: no checkpoint of it exists), a run already here kept as it is, what the pack holds
    besides its runs' files named and skipped. Returns 0, or 2 for a file that is no pack."""
    try:
        with tarfile.open(path) as tar:
            got, env, skipped = pack_members(tar)
        env = json.loads(env) if env is not None else None
        if not isinstance(env, dict):
            raise ValueError('no env.json of a dict')
    except (OSError, tarfile.TarError, EOFError, ValueError, UnicodeDecodeError) as e:
        return cli.fail(f"--ingest={path}: not a pack of lab.gpu_study --pack ({type(e).__name__}: "
                        f"{shown((str(e).splitlines() or [''])[0])})")
    print(f"{path}: made {shown(env.get('date'))} by `{shown(env.get('command'))}` at {shown(env.get('code'))}, "
          f"{shown(env.get('versions'))}")
    for name, why in skipped[:SHOWN]:
        print(f"skipped {shown(name)}: {why}")
    if len(skipped) > SHOWN:
        print(f"skipped {len(skipped) - SHOWN:,} more members")
    for label, files in sorted(got.items()):
        dest = os.path.join(paths.RUNS, label)
        if os.path.exists(dest):
            same = all(os.path.isfile(os.path.join(dest, f)) and same_bytes(os.path.join(dest, f), b)
                       for f, b in files.items())
            print(f"{label}: {'already here' if same else 'a run of this name is here already: kept, not replaced'}")
            continue
        tmp = dest + '.ingest'
        try:
            shutil.rmtree(tmp, ignore_errors=True)     # what an ingest cut short left: not part of this run
            os.makedirs(tmp)
            for f, b in files.items():
                with open(os.path.join(tmp, f), 'wb') as fh:
                    fh.write(b)
            val, why = finished_at(files, tmp)
            if why:
                print(f"{label}: {why}: left out")
                continue
            os.replace(tmp, dest)
            print(f"{label}: finished, val {val:.4f}: into {paths.rel(dest)}")
        except OSError as e:        # a full disk, a folder not ours: this run stays out, whole
            print(f"{label}: not brought in ({type(e).__name__}: {e.strerror or e}): left out")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0
