""".ci/run, what CI runs, is also the README's command for a user's clone: it must not touch their runs."""

import subprocess
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
