"""lab/replay.py (python -m lab.replay): re-training a committed run's first steps from a clean
commit and comparing every logged loss; and lab/provenance.py's record of each run's code (its
commit, and the diff of an uncommitted change: lab/provenance.py's code_and_diff)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import paths, provenance, replay, studies  # noqa: E402


def rows(*items):
    return {(k, i): dict(kind=k, iter=i, **v) for k, i, v in items}


def test_replay_cmd_keeps_the_run_and_its_schedule():
    rec = dict(cmd=['python', 'train.py', 'config/ega.py', 'config/cpu.py', '--seed=2', '--out_dir=results/runs/x',
                    '--init_from=resume'], max_iters=2000)
    cmd = replay.replay_cmd(rec, 250, '/tmp/o')
    assert cmd[1:] == ['train.py', 'config/ega.py', 'config/cpu.py', '--seed=2', '--lr_decay_iters=2000',
                       '--max_iters=250', '--out_dir=/tmp/o']
    rec['cmd'].insert(4, '--lr_decay_iters=900')                # a schedule set by the run itself is kept
    assert [a for a in replay.replay_cmd(rec, 250, '/o') if 'decay' in a] == ['--lr_decay_iters=900']


def test_a_replay_stops_where_its_run_stopped(tmp_path, move_results):
    """The stops come from run.txt's 'start at iter N' (0 and those at or past the replayed steps left out);
    each segment after the first resumes from the checkpoint the one before saved."""
    move_results(tmp_path)
    d = tmp_path / 'runs' / 'x-s1'
    d.mkdir(parents=True)
    assert replay.stops('x-s1', 250) == []                              # no run.txt: one segment
    (d / 'run.txt').write_text('... start at iter 0\n' * 2 + '... start at iter 28\n' * 2 + '... start at iter 589\n')
    assert replay.stops('x-s1', 250) == [28] and replay.stops('x-s1', 600) == [28, 589]
    # a run re-trained from iter 0 (its output appended to the old run's) keeps only its own stops
    (d / 'run.txt').write_text('start at iter 0\nstart at iter 28\nstart at iter 0\nstart at iter 40\n')
    assert replay.stops('x-s1', 250) == [40]
    (d / 'run.txt').write_text('start at iter 0\nstart at iter 28\nstart at iter 0\n')
    assert replay.stops('x-s1', 250) == []
    (d / 'run.txt').write_bytes(b'\xff\xfe start at iter 0\nstart at iter 7\n')     # not UTF-8: still read
    assert replay.stops('x-s1', 250) == [7]
    rec = dict(cmd=['python', 'train.py', 'config/ega.py', '--seed=1', '--init_from=resume'], max_iters=2000)
    one, two = replay.segments(rec, 250, '/o', [28])
    assert one[1:] == ['train.py', 'config/ega.py', '--seed=1', '--lr_decay_iters=2000', '--max_iters=28', '--out_dir=/o']
    assert two[1:] == ['train.py', 'config/ega.py', '--seed=1', '--lr_decay_iters=2000', '--init_from=resume',
                       '--max_iters=250', '--out_dir=/o']


def test_each_segment_gets_its_threads():
    assert replay.thread_counts(1, 0, []) == ([1], 1)
    assert replay.thread_counts(2, 0, [28, 90]) == ([2, 2, 2], 2)
    assert replay.thread_counts(1, 1, [28]) == ([1, 1], 1)
    assert replay.thread_counts(1, 2, [28, 90]) == ([1, 2, 2], '1 to iter 28, then 2')
    assert replay.thread_counts(1, 2, []) == ([1], 1)                # never stopped: no second count


def test_each_segment_runs_with_its_count(monkeypatch):
    seen = []
    monkeypatch.setattr(replay.subprocess, 'Popen', lambda cmd, env, **kw: seen.append((cmd, env['OMP_NUM_THREADS'])))
    job = dict(todo=[['a', '--max_iters=28'], ['b', '--max_iters=250']], counts=[1, 2], rev_dir='.', log=None)
    replay.launch(job)
    replay.launch(job)
    assert seen == [(['a', '--max_iters=28'], '1'), (['b', '--max_iters=250'], '2')] and job['cmd'][0] == 'b'


def test_compare_every_loss_up_to_the_step():
    a = rows(('eval', 0, dict(train=4.0, val=4.1, shuffled_val=4.2)), ('train', 10, dict(loss=3.0)),
             ('train', 20, dict(loss=2.5)), ('eval', 250, dict(train=2.0, val=2.1, shuffled_val=6.0)),
             ('train', 260, dict(loss=9.9)))
    b = {k: dict(v) for k, v in a.items() if k[1] <= 250}
    assert replay.compare(a, b, 250) == (8, 0.0, None, [], None)    # iter 260 is past the replay
    b[('train', 20)]['loss'] += 3e-6
    n, worst, where, missing, first = replay.compare(a, b, 250)
    assert worst == pytest.approx(3e-6 / 2.5) and where == 'train loss @ iter 20' and not missing
    assert first == 'train loss @ iter 20: 1.2e-06'
    b[('eval', 0)]['val'] += 1e-7                               # the first difference, by iter
    assert replay.compare(a, b, 250)[4] == 'eval val @ iter 0: 2.4e-08'     # 1e-7 / 4.1
    b[('eval', 250)]['shuffled_val'] -= 1e-5                   # relative to the loss above 1: 1e-5 / 6
    assert replay.compare(a, b, 250)[1:3] == (pytest.approx(1e-5 / 6), 'eval shuffled_val @ iter 250')
    del b[('eval', 250)]
    assert replay.compare(a, b, 250)[3] == ['eval@250']
    b[('train', 10)]['loss'] = float('nan')
    assert replay.compare(a, b, 250)[2] == 'train loss @ iter 10'   # a NaN is the worst difference


def test_untraced_and_pick_dirty(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, 'RUNS', str(tmp_path))
    for label, code, diffs in [('a-s2', ['c1+dirty'], {}), ('a-s1337', ['c1+dirty'], {}), ('b-s1', ['c1'], {}),
                               ('c-s3', ['c1', 'c2+dirty'], {'1': 'code-1.diff'}), ('d-s3', ['c1', 'c2+dirty'], {})]:
        (tmp_path / label).mkdir()
        (tmp_path / label / 'run.json').write_text(json.dumps(dict(cmd=['python', 'train.py'], max_iters=9,
                                                                   code=code, diffs=diffs)))
    assert sorted(replay.pick_dirty()) == ['a-s1337', 'd-s3']   # seed 1337 where it is dirty; c keeps its diff


def test_bad_arguments_are_one_line(capsys):
    for argv, msg in [([], 'name the runs to replay'), (['--run=x', '--table=True'], 'one of them'),
                      (['--run=x', '--steps=0'], '--steps=0: must be > 0'),
                      (['--run=x', '--jobs=two'], 'expected an int'),
                      (['--run=x', '--threads=0'], '--threads=0: must be > 0'),
                      (['--run=x', '--threads_after=-1'], 'must be >= 0'), (['--run=x', '--tol=0'], 'must be > 0'),
                      (['--run=x', '--speed=1'], "unknown config key 'speed'"), (['x'], "unexpected argument 'x'"),
                      (['--run=no_such_run-s1'], 'no run with a readable run.json')]:
        assert replay.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith('error: ') and msg in err and err.count('\n') == 1, err


@pytest.mark.slow
def test_a_replay_matches_its_run_and_catches_a_changed_log(tmp_path, move_results, data_dir, capsys):
    """End to end: a tiny run, trained by the committed train.py; its replay from a worktree at HEAD
    matches every loss; a log whose loss was changed by 1e-3 is found to differ."""
    move_results(tmp_path)
    run = tmp_path / 'runs' / 'tiny-s5'
    args = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=4', '--eval_iters=2',
            '--eval_interval=10', '--log_interval=5', '--max_iters=20', '--warmup_iters=2', '--dropout=0.0',
            '--device=cpu', '--compile=False', f'--data_dir={data_dir}', '--attn=ega', '--seed=5']
    head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True, text=True).stdout.strip()
    wt = tmp_path / 'wt'                                        # the run is made by the committed code
    subprocess.run(['git', 'worktree', 'add', '--detach', str(wt), head], cwd=REPO, check=True, capture_output=True)
    try:
        subprocess.run([sys.executable, 'train.py', *args, f'--out_dir={run}'], cwd=wt, check=True,
                       capture_output=True, env=dict(os.environ, OMP_NUM_THREADS='1'))
    finally:
        subprocess.run(['git', 'worktree', 'remove', '--force', str(wt)], cwd=REPO, capture_output=True)
    (run / 'run.json').write_text(json.dumps(dict(cmd=['python', 'train.py', *args, f'--out_dir={run}'],
                                                  max_iters=20, code=['x+dirty'])))
    assert replay.main(['--run=tiny-s5', '--steps=10', '--jobs=2']) == 0
    res, = json.loads((run / 'replay.json').read_text())
    assert res['ok'] and res['max_rel_diff'] <= 1e-6 and res['compared'] == 2 * 1 + 3 * 2 and res['threads'] == 1
    assert res['rev'] == head[:len(res['rev'])] and 'matches' in (tmp_path / 'REPLAYS.md').read_text()
    lines = (run / 'log.jsonl').read_text().splitlines()
    r = json.loads(lines[1])
    assert r['kind'] == 'train' and r['iter'] == 5
    r['loss'] += 1e-3
    (run / 'log.jsonl').write_text('\n'.join([lines[0], json.dumps(r), *lines[2:]]) + '\n')
    assert replay.main(['--run=tiny-s5', '--steps=10', '--threads=2']) == 1
    first, res = json.loads((run / 'replay.json').read_text())   # every replay of a run is kept
    assert first['ok'] and not res['ok'] and res['worst'] == 'train loss @ iter 5' and res['threads'] == 2
    assert res['first_diff'].startswith('train loss @ iter 5: ')
    assert res['max_rel_diff'] == pytest.approx(1e-3 / r['loss'], rel=1e-2)
    assert 'DIFFERS' in capsys.readouterr().out
    # a run stopped at iter 4 and resumed: the replay stops and resumes there too, and, resume being
    # exact, still matches every loss (the changed one put back)
    (run / 'log.jsonl').write_text('\n'.join(lines) + '\n')
    (run / 'run.txt').write_text('device cpu (NOSUCH kernels), start at iter 0\ncaught signal 15: stopping at iter 4\n'
                                 'start at iter 4\n')
    assert replay.main(['--run=tiny-s5', '--steps=10', '--threads_after=2']) == 0
    res = json.loads((run / 'replay.json').read_text())[-1]
    assert res['ok'] and res['resumed_at'] == [4] and res['threads'] == '1 to iter 4, then 2'
    assert 'tiny-s5: the run used NOSUCH kernels, this machine ' in capsys.readouterr().out
    assert res['machine'].endswith(', ' + replay.cpu_kernels())
    assert res['cmd'].endswith('--init_from=resume --max_iters=10') and res['compared'] == 2 * 1 + 3 * 2


def test_a_dirty_tree_is_recorded_with_its_diff(tmp_path, monkeypatch, move_results):
    move_results(tmp_path)
    run = studies.Run('t', 'dot', 1, ('config/dot.py',), ())
    Path(run.dir).mkdir(parents=True)
    monkeypatch.setattr(provenance, 'max_iters', lambda r, o: 500)
    monkeypatch.setattr(provenance, 'code_and_diff', lambda **k: ('abc1234+dirty', '--- a/x\n+++ b/x\n'))
    provenance.record_start(run, None, 'start', ['python', 'train.py'])
    rec = json.loads((Path(run.dir) / 'run.json').read_text())
    assert rec['code'] == ['abc1234+dirty'] and rec['diffs'] == {'0': 'code-0.diff'}
    assert (Path(run.dir) / 'code-0.diff').read_text() == '--- a/x\n+++ b/x\n'
    monkeypatch.setattr(provenance, 'code_and_diff', lambda **k: ('abc1234', ''))
    provenance.record_start(run, None, 'resume', ['python', 'train.py', '--init_from=resume'])
    rec = json.loads((Path(run.dir) / 'run.json').read_text())
    assert rec['code'] == ['abc1234+dirty', 'abc1234'] and rec['diffs'] == {'0': 'code-0.diff'}
    assert not replay.untraced(rec)


def test_git_commit_diff_covers_tracked_and_untracked_changes(tmp_path):
    """In a scratch repository: clean, then a changed tracked file and a new file both in the diff,
    and the results folder left out."""
    def git(*a):
        subprocess.run(['git', *a], cwd=tmp_path, check=True, capture_output=True)
    git('init', '-q')
    (tmp_path / 'a.py').write_text('x = 1\n')
    git('add', 'a.py')
    git('-c', 'user.email=t@t', '-c', 'user.name=t', 'commit', '-qm', 'one')
    where = dict(cwd=str(tmp_path), results=str(tmp_path / 'results'))
    code, diff = provenance.code_and_diff(**where)
    assert not code.endswith('+dirty') and diff == ''
    (tmp_path / 'a.py').write_text('x = 2\n')
    (tmp_path / 'b.py').write_text('y = 3\n')
    (tmp_path / 'results').mkdir()
    (tmp_path / 'results' / 'r.md').write_text('a table\n')
    code, diff = provenance.code_and_diff(**where)
    assert code.endswith('+dirty') and '-x = 1\n+x = 2' in diff and '+y = 3' in diff and 'a table' not in diff


def test_the_dirty_summary_counts_the_untraced_runs_and_what_covers_them(tmp_path, move_results):
    """results/README.md's block: untraced runs, the variants a matching replay covers, and the runs whose
    dirty state no matching replay covers; a replay of an earlier run of the same name does not count."""
    move_results(tmp_path)

    def run(label, code, replay=None):
        d = tmp_path / 'runs' / label
        d.mkdir(parents=True)
        (d / 'run.json').write_text(json.dumps(dict(cmd=['train.py'], max_iters=10, code=code)))
        if replay is not None:
            (d / 'replay.json').write_text(json.dumps([replay]))
    ok = lambda code: dict(ok=True, run_code=code, compared=3, max_rel_diff=0.0, missing=[], tol=1e-5)  # noqa: E731
    run('a-s1', ['c1+dirty'], ok(['c1+dirty']))                  # replayed: covers a's state c1+dirty
    run('a-s2', ['c1+dirty'])                                     # the same state: covered
    run('a-s3', ['c2+dirty'])                                     # another state: not covered
    run('b-s1', ['c3+dirty'], ok(['c0+dirty']))                  # a replay of an earlier b-s1: does not count
    run('c-s1', ['c4'])                                           # clean
    text = replay.dirty_summary()
    assert text.startswith('4 of the 5 committed runs') and 'in 2 variants' in text
    assert 'a matching replay covers 1 of them; not yet: `b`' in text
    assert '2 of the runs sit on a dirty state that no matching replay covers: `a-s3`, `b-s1`.' in text
    assert text.endswith(' 1 of the 4 have a matching replay of their own; not yet: `a-s2`, `a-s3`, `b-s1`.')
