"""
Where a result comes from: each run's run.json (its command, max_iters, data, and every code
it was started or resumed with: '<commit>' or '<commit>+dirty', the diff of a dirty tree kept
beside it as code-<k>.diff, and the versions (python, torch, CUDA and the GPU) of each) and the
data's tokens as the tables name them. The code's version is train.git_commit, which a run's log
opens with and bench.py shares.
"""

import json
import os
import pickle
from datetime import datetime

from runtime import versions
from train import git_commit
from lab import paths
from lab.studies import max_iters, resolve


def run_record(run):
    """A run's run.json as a dict ({} where there is none or it cannot be read)."""
    try:
        with open(os.path.join(run.dir, 'run.json')) as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else {}
    except (OSError, ValueError):
        return {}


def run_codes(run):
    """The git versions a run was started and resumed with (from its run.json)."""
    return list(run_record(run).get('code', []))


def record_start(run, overlay, st, cmd):
    """run.json: the training command, max_iters, the data (its data_dir, and from its meta.pkl the tokenizer
    and vocabulary: the tables' scale line), and every code the run has seen; for a dirty tree, the diff
    against its commit in code-<k>.diff beside it (k: that code's place in the list)."""
    old = run_record(run) if st in ('resume', 'phase') else {}
    code, diff = git_commit(with_diff=True, cwd=paths.REPO, results=paths.RESULTS)
    codes, diffs = list(old.get('code', [])) + [code], dict(old.get('diffs', {}))
    if diff:
        name = f'code-{len(codes) - 1}.diff'
        with open(os.path.join(run.dir, name), 'w') as f:
            f.write(diff)
        diffs[str(len(codes) - 1)] = name
    data_dir = resolve(run, overlay)['data_dir']
    data = old.get('data') or dict(data_dir=data_dir, **(meta_record(data_dir) or {}))   # what the tables name
    with open(os.path.join(run.dir, 'run.json'), 'w') as f:
        json.dump(dict(cmd=cmd, max_iters=max_iters(run, overlay), code=codes, diffs=diffs, data=data,
                       versions=list(old.get('versions', [])) + [versions()],
                       started=datetime.now().isoformat(timespec='seconds')), f, indent=1)


# what prepare.py writes from TinyShakespeare (the text it pins by its SHA256) into its default folders: the
# vocabulary follows from the text and the tokenizer, so a table names it without data/ being prepared
PREPARED = {'data/shakespeare_char': dict(tokenizer='char', vocab_size=65),
            'data/shakespeare': dict(tokenizer='gpt2', vocab_size=50257)}


def meta_record(data_dir):
    """{tokenizer, vocab_size} from data_dir's meta.pkl (prepare.py's), or None: what a run starts with."""
    try:
        with open(os.path.join(paths.REPO, data_dir, 'meta.pkl'), 'rb') as f:
            meta = pickle.load(f)
        rec = dict(tokenizer=meta.get('tokenizer', 'char'), vocab_size=meta['vocab_size'])
    except Exception:   # a garbled meta.pkl raises almost anything
        return None
    return rec if isinstance(rec['tokenizer'], str) and isinstance(rec['vocab_size'], int) else None


def tokens(data_dir, runs=()):
    """data_dir and its tokenizer and vocabulary as the runs recorded them (run.json 'data', written at their
    start), else as prepare.py writes its default folders (PREPARED); else the path alone. data/ itself is
    never read: a table regenerates the same on a fresh clone, where data/ is not prepared."""
    recorded = [r['data'] for r in map(run_record, runs) if isinstance(r.get('data'), dict)
                and r['data'].get('data_dir') == data_dir and 'vocab_size' in r['data']]
    rec = recorded[0] if recorded else PREPARED.get(os.path.relpath(os.path.join(paths.REPO, data_dir), paths.REPO))
    try:
        return f"{data_dir} ({rec['tokenizer']} tokens, vocab {rec['vocab_size']:,})"
    except (TypeError, KeyError, ValueError):
        return data_dir
