""".ci/run, what CI runs, is also the README's command for a user's clone: it must not touch their runs; and
the shards lab/gpu_check.sh runs at once share out the tests."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ci_run_leaves_a_users_runs_alone_and_removes_its_placeholders(tmp_path):
    """.ci/run's placeholder runs (every config's out_dir and its -cpu one hold a run while the tests
    run): a folder that exists (a user's trained run) is left as it is, and the placeholders it made are
    gone when it exits. Its own lines, from `made=()` to the loop's end, run in a tree of two configs."""
    lines = (REPO / '.ci' / 'run').read_text().splitlines()
    start = lines.index('made=()')
    end = next(i for i in range(start, len(lines)) if lines[i] == 'done')
    (tmp_path / 'config').mkdir()
    (tmp_path / 'config' / 'a.py').write_text("out_dir = 'out-a'\n")
    (tmp_path / 'config' / 'b.py').write_text("out_dir = 'out-b'   # a comment\n")
    (tmp_path / 'out-a-cpu').mkdir()
    (tmp_path / 'out-a-cpu' / 'ckpt.pt').write_bytes(b'trained')
    script = '\n'.join(['set -euo pipefail', *lines[start:end + 1],
                        'ls -d out out-a out-b out-b-cpu > seen.txt; cat out-a/log.jsonl >> seen.txt'])
    r = subprocess.run(['bash', '-c', script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / 'seen.txt').read_text().split() == ['out', 'out-a', 'out-b', 'out-b-cpu', '{}']
    assert (tmp_path / 'out-a-cpu' / 'ckpt.pt').read_bytes() == b'trained'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['config', 'out-a-cpu', 'seen.txt']


def collected(shard, *args):
    """The node ids pytest selects for ARGS under SPECTRAL_TEST_SHARD=shard ('' for none)."""
    env = {k: v for k, v in os.environ.items() if k != 'SPECTRAL_TEST_SHARD'}
    if shard:
        env['SPECTRAL_TEST_SHARD'] = shard
    r = subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '--collect-only', '-q', *args],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if '::' in line]


def test_two_shards_share_out_the_tests_a_run_selects():
    """.ci/run's sweep halves and lab/gpu_check.sh's shards: SPECTRAL_TEST_SHARD=0/2 and 1/2 run every selected
    test once between them, and each value of a parameter reaches both halves (every other test, the rule before,
    put the sweep's audits at its longer window all in one half: the halves took 33 and 28 minutes)."""
    args = ['-m', 'sweep', 'tests/test_sweep.py']
    every, a, b = collected('', *args), collected('0/2', *args), collected('1/2', *args)
    assert len(every) > 10
    assert sorted(a + b) == sorted(every) and not set(a) & set(b)
    audits = [t for t in every if 'audits_as_declared' in t]
    windows = {t.rsplit('-', 1)[1] for t in audits}             # T, the last parameter: '64]', '128]'
    assert len(windows) >= 2, audits
    for w in windows:
        assert all(any(t in audits and t.endswith('-' + w) for t in half) for half in (a, b)), w
