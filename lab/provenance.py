"""
Where a result comes from: each run's run.json (its command, max_iters, data, and every code
it was started or resumed with: '<commit>' or '<commit>+dirty', the diff of a dirty tree kept
beside it as code-<k>.diff, and the versions (python, torch, CUDA and the GPU) of each) and the
data's tokens as the tables name them. The code's version is runtime.git_commit, which a run's log
opens with; code_and_diff adds the diff of a dirty tree, which the lab keeps beside its results.
"""

import json
import os
import re
import subprocess
import tempfile
from datetime import datetime
from types import SimpleNamespace

from prepare import META, PrepareError, read_meta
from configurator import ConfigError, load_config
from runtime import check_run, git_commit, versions
from train import CHOICES, DEFAULTS, EVAL_SEED, eval_set
from lab import paths
from lab.studies import config_of, max_iters, resolve


class GitError(Exception):
    pass


def git(*args, cwd=paths.REPO, check=False, timeout=120):
    """git's stdout in cwd, as it is. check: a git that fails raises GitError with its message (else its stdout
    is returned, '' mostly). A missing git raises OSError."""
    p = subprocess.run(['git', *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode:
        raise GitError(f"git {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def code_and_diff(cwd=None, results=None):
    """(runtime.git_commit of the tree at cwd, the change against the commit as a patch, untracked files
    included, or '' when clean), the results folder left out; ('unknown', '') where git cannot tell."""
    cwd, results = cwd or paths.REPO, results or paths.RESULTS
    code = git_commit(cwd=cwd, results=results)
    if not code.endswith('+dirty'):
        return code, ''
    inside = os.path.relpath(results, cwd)
    skip = [] if inside.startswith('..') else [f':(exclude){inside}']
    try:
        diff = git('diff', 'HEAD', '--binary', '--', '.', *skip, cwd=cwd)
        for path in git('ls-files', '--others', '--exclude-standard', '--', '.', *skip, cwd=cwd).split('\n'):
            if path:    # an untracked file, as a patch that creates it
                diff += git('diff', '--no-index', '--binary', '--', os.devnull, path, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return code, ''
    return code, diff


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
    """run.json: the training command, max_iters, the data (its data_dir, and from its meta.json the tokenizer
    and vocabulary: the tables' scale line), and every code the run has seen; for a dirty tree, the diff
    against its commit in code-<k>.diff beside it (k: that code's place in the list)."""
    old = run_record(run) if st in ('resume', 'phase') else {}
    code, diff = code_and_diff()
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


# the split lengths prepare.py gives the same texts (train, val tokens): the windows of an evaluation set follow
# from them, so a run older than the log's record of its set has it derived without data/ prepared
SPLITS = {'data/shakespeare_char': (1003854, 111540), 'data/shakespeare': (301966, 36059),
          'data/corpus_char': (14479217, 1608804)}


MAX_CMD = 8192               # characters of a recorded training command (ours are a few hundred)


def command_problem(cmd):
    """Why a recorded training command may not run here ('' if it may): it must be python train.py, then the
    repository's own config files (config/NAME.py: a config file is Python, so no other is ever run, and no
    file of a pack or a run folder), then --key=value options."""
    if not (isinstance(cmd, list) and len(cmd) >= 2 and all(isinstance(a, str) for a in cmd) and cmd[1] == 'train.py'):
        return f"its command {str(cmd)[:120]!r} is not `python train.py ...`"
    if sum(map(len, cmd)) > MAX_CMD:        # a 200 KB argument once ended a replay in 'Argument list too long'
        return f"its command is {sum(map(len, cmd)):,} characters, over the {MAX_CMD:,} a train.py command takes"
    bad = [a for a in cmd[2:] if not (re.fullmatch(r'config/[\w-]+\.py', a) or re.fullmatch(r'--\w+=.*', a, re.S))]
    if bad:
        return (f"its command names {bad[0][:120]!r}, which is not a config file of the repository's config/ (a "
                f"config file is Python: only those are run) nor a --key=value option")
    args = [a for a in cmd[2:] if not a.startswith(('--out_dir=', '--init_from=', '--overwrite='))]
    try:        # as train.py itself checks it (its own out_dir aside: a replay trains elsewhere)
        cfg = load_config(DEFAULTS, args, CHOICES)
        check_run(SimpleNamespace(**dict(cfg, out_dir=os.path.join(tempfile.gettempdir(), 'replay-check'))))
    except ConfigError as e:
        return f"its command is one train.py refuses: {(str(e).splitlines() or [''])[0][:200]}"
    return ''


def derived_eval_set(rec):
    """The evaluation set (train.eval_set) a run's recorded command gives: its config's eval_iters,
    batch_size and block_size, EVAL_SEED and its data's split lengths (SPLITS, else the data's files); None
    where the command or the lengths cannot be read. What train.py logs since 2026-12-05; for the runs
    before, what their run.json records (lab/tests/test_study.py holds each to this)."""
    try:
        if command_problem(rec['cmd']):
            return None     # a config file is Python: only the repository's own are read
        args = [a for a in rec['cmd'][2:] if not a.startswith(('--out_dir=', '--init_from=', '--overwrite='))]
        c = SimpleNamespace(**config_of([a for a in args if not a.startswith('--')], [a for a in args if a.startswith('--')]))
        data_dir = os.path.normpath(c.data_dir)
        n = SPLITS.get(data_dir) or tuple(os.path.getsize(os.path.join(paths.REPO, data_dir, f'{s}.bin')) // 2
                                          for s in ('train', 'val'))
    except (OSError, KeyError, TypeError, ValueError, SyntaxError, AttributeError):
        return None
    return eval_set({'train': range(n[0]), 'val': range(n[1])}, c, EVAL_SEED)


def meta_record(data_dir):
    """{tokenizer, vocab_size} from data_dir's meta.json (prepare.py's), or None: what a run starts with."""
    try:
        meta = read_meta(os.path.join(paths.REPO, data_dir, META))
    except PrepareError:
        return None
    return dict(tokenizer=meta['tokenizer'], vocab_size=meta['vocab_size'])


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
