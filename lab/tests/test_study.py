"""lab/study.py and the modules it runs on: the resume logic (through the command lines it would
launch), the table maths against hand-computed values, the leak block, pending runs, RESULTS.md,
plots, signals and flag errors; README's status table (lab/status.py) and the claims ledger
(lab/ledger.py). Nothing trains: the runs are fake log.jsonl files and a fake launcher."""

import importlib.util
import json
import re
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import logs, paths, plots, provenance, runner, runs, stats, status, studies, study, tables  # noqa: E402

OVERLAY = """n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
batch_size = 16
max_iters = 500
eval_interval = 250
eval_iters = 20
data_dir = {data!r}
"""
# a study of its own: real config files, one that does not exist, a leaking variant
T_STUDY = dict(runs=[('dot', ['config/dot.py'], [], (1, 2, 3)), ('ega', ['config/ega.py'], [], (1, 2, 3)),
                     ('mope', ['config/mope.py'], ['--mope_init=sin'], (1,)),
                     ('ega_paper', ['config/ega_paper.py'], [], (1, 2, 3)),
                     ('fox9', ['config/no_such_config.py'], [], (1,))],
               refs=['dot', 'fox9'], causal={'ega_paper': 'ega'})


@pytest.fixture
def res(tmp_path, monkeypatch, move_results):
    """Results in a tmp dir, the test study registered, an overlay whose data_dir exists."""
    (tmp_path / 'data').mkdir()
    (tmp_path / 'data' / 'train.bin').write_bytes(b'\0\0')
    overlay = tmp_path / 'overlay.py'
    overlay.write_text(OVERLAY.format(data=str(tmp_path / 'data')))
    move_results(tmp_path / 'results')
    monkeypatch.setattr(studies, 'DEFAULT_OVERLAY', str(overlay))   # the test overlay is the study scale here
    monkeypatch.setattr(runner, 'POLL_S', 0.01)
    monkeypatch.setitem(studies.STUDIES, 't', T_STUDY)
    return tmp_path / 'results'


def ov(res):
    return str(res.parent / 'overlay.py')


EVAL_SET = '2 x 4 windows of 16 tokens, seed 20240101, splits 900/100'    # what fake runs are evaluated on


def fake_run(res, label, vals, leaks=False, tok=(1000.0,), gap=4.0, ckpt=False, extra=(), eval_set=EVAL_SET):
    """A run dir of study 't' whose log.jsonl has evals {iter: val} (on eval_set) and train rows with tok_s."""
    d = res / 'runs' / label
    d.mkdir(parents=True, exist_ok=True)
    rows = [dict(kind='train', iter=10 * (i + 1), loss=2.0, lr=1e-3, ms=50.0, tok_s=t, leaks=leaks)
            for i, t in enumerate(tok)]
    rows += [dict(kind='eval', iter=it, train=v, val=v, shuffled_val=v + gap, gap=gap, best_val=v, lr=1e-3,
                  leaks=leaks, time=1.0, eval_set=eval_set) for it, v in vals.items()]
    (d / 'log.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in [*rows, *extra]))
    if ckpt:
        (d / 'ckpt.pt').write_bytes(b'not really')
    return d


class FakeProc:
    def __init__(self, rc):
        self.rc, self.returncode, self.signals = rc, None, []

    def poll(self):
        self.returncode = self.rc
        return self.rc

    def send_signal(self, s):
        self.signals.append(s)


def fake_launcher(calls, finish=True, rc=0):
    """Records each launch; a finishing run appends the eval at max_iters (500) to its log (a phase
    evaluation its eval_only row) and leaves a ckpt.pt."""
    def launch(cmd, out_dir, fresh, env):
        calls.append(dict(cmd=cmd, fresh=fresh, omp=env.get('OMP_NUM_THREADS')))
        if finish:
            mode = next((a.split('=')[1] for a in cmd if a.startswith('--qk_phase=')), None)
            row = (dict(kind='eval_only', iter=500, val=1.5, qk_phase=dict(mode=mode, val=3.5 if mode == 'random'
                                                                           else 2.5))
                   if mode else dict(kind='eval', iter=500, val=1.5, gap=4.0, leaks=False, eval_set=EVAL_SET))
            with open(os.path.join(out_dir, 'log.jsonl'), 'a') as f:
                f.write(json.dumps(row) + '\n')
            with open(os.path.join(out_dir, 'ckpt.pt'), 'wb') as f:     # as train.py leaves it
                f.write(b'not really')
        return FakeProc(rc)
    return launch

# ----------------------------------------------------------------------------- maths


def test_stats_mean_sd_min_max():
    st = stats.stats([1.0, 2.0, 4.0])
    assert st['n'] == 3 and st['min'] == 1.0 and st['max'] == 4.0
    assert st['mean'] == pytest.approx(2.333333, abs=1e-6)
    assert st['sd'] == pytest.approx(1.527525, abs=1e-6)       # sample sd: sqrt(4.6667 / 2)
    assert stats.stats([5.0])['sd'] is None


def test_t95_is_the_exact_quantile():
    # closed forms: df = 1 is Cauchy, t = tan(0.475 pi); df = 2 has t = (2p - 1) / sqrt(2 p (1 - p))
    assert stats.t95(1) == pytest.approx(math.tan(0.475 * math.pi), rel=1e-10)
    assert stats.t95(2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-10)
    # the others against the density integrated numerically (midpoint rule, 200k steps)
    for df in (3, 4, 5, 10, 31):
        t = stats.t95(df)
        c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
        n = 200_000
        area = sum(c * (1 + ((i + 0.5) * t / n) ** 2 / df) ** (-(df + 1) / 2) for i in range(n)) * t / n
        assert 2 * area == pytest.approx(0.95, abs=1e-9), df
    assert 1.959 < stats.t95(10_000) < 1.961                    # the normal's 1.960 in the limit


def test_paired_difference_and_interval():
    a = {1337: 1.0, 2: 2.0, 3: 4.0, 9: 100.0}       # seed 9 has no partner, nor has seed 7
    b = {1337: 0.5, 2: 1.0, 3: 2.0, 7: -50.0}
    p = stats.paired(a, b)                          # differences 0.5, 1, 2
    assert p['n'] == 3
    assert p['mean'] == pytest.approx(1.166667, abs=1e-6)
    assert p['sd'] == pytest.approx(0.763763, abs=1e-6)
    assert p['half'] == pytest.approx(1.897292, abs=1e-6)     # 4.302653 * 0.763763 / sqrt(3)
    assert stats.paired({1: 2.0}, {1: 1.5})['half'] is None
    assert stats.paired({1: 2.0}, {2: 1.5}) is None


def test_read_log_keeps_the_last_row_of_an_iter_and_skips_junk(tmp_path):
    rows = [dict(kind='eval', iter=0, val=4.2), dict(kind='train', iter=10, tok_s=5.0),
            dict(kind='eval', iter=250, val=9.9), dict(kind='eval', iter=250, val=2.5),
            dict(kind='other', iter=3), dict(kind='eval', val=1.0), [1, 2], dict(kind='eval_only', iter=250, val=7.0),
            dict(kind='eval_only', val=8.0), dict(kind='eval_only', iter=250, val=6.0)]
    p = tmp_path / 'log.jsonl'
    p.write_text(''.join(json.dumps(r) + '\n' for r in rows) + '{"kind": "eval", "it')   # cut by a kill
    evals, trains, extra = logs.read_log(str(p))
    assert sorted(evals) == [0, 250] and evals[250]['val'] == 2.5
    assert list(trains) == [10]
    assert [r['val'] for r in extra] == [7.0, 6.0]               # every eval_only row, in order
    assert logs.read_log(str(tmp_path / 'none.jsonl')) == ({}, {}, [])


def test_summarize_final_best_gap_leaks_tok_s():
    evals = {0: dict(val=4.2, gap=0.0), 250: dict(val=2.0, gap=3.0), 500: dict(val=1.9, gap=3.5),
             750: dict(val=1.95, shuffled_val=6.0), 1000: dict(val=0.1)}    # 1000: past max_iters
    trains = {i: dict(tok_s=t, leaks=False) for i, t in [(10, 100.0), (20, 300.0), (30, 200.0), (40, 1000.0)]}
    s = logs.summarize(evals, trains, [], 750)
    assert s['done'] and s['final'] == 1.95 and s['best'] == 1.9
    assert s['gap'] == pytest.approx(4.05)           # no gap key: shuffled_val - val
    assert s['tok_s'] == 250.0 and s['leaks'] is False
    assert s['phase'] == {} and s['mope'] is None and s['bands'] is None
    trains[50] = dict(tok_s=1.0, leaks=True)
    assert logs.summarize(evals, trains, [], 750)['leaks'] is True
    unfinished = logs.summarize(evals, trains, [], 800)
    assert not unfinished['done'] and 'final' not in unfinished and unfinished['last'] == 1000

def test_summarize_learned_parameters_and_phase_ablation():
    """The final eval's mope / bands win; an older run has them from an eval_only row of its final
    checkpoint; the phase ablation comes from eval_only rows at max_iters only."""
    evals = {0: dict(val=4.0, mope=dict(w=[9.0], s=[9.0])), 500: dict(val=1.9)}
    extra = [dict(kind='eval_only', iter=500, val=1.9, mope=dict(w=[1.0], s=[5.0]), bands={'0.0': 30.0}),
             dict(kind='eval_only', iter=250, val=2.5, qk_phase=dict(mode='random', val=9.0)),
             dict(kind='eval_only', iter=500, val=1.9, qk_phase=dict(mode='random', val=3.2)),
             dict(kind='eval_only', iter=500, val=1.9, qk_phase=dict(mode='amplitude', val=4.4))]
    s = logs.summarize(evals, {}, extra, 500)
    assert s['mope'] == dict(w=[1.0], s=[5.0]) and s['bands'] == {'0.0': 30.0}
    assert s['phase'] == {'random': (1.9, 3.2), 'amplitude': (1.9, 4.4)}
    evals[500]['bands'] = {'0.0': 12.0}                 # the final training eval's own record comes first
    assert logs.summarize(evals, {}, extra, 500)['bands'] == {'0.0': 12.0}
    assert logs.summarize(evals, {}, extra[1:], 500)['mope'] is None   # iter 0's pairs are not the end's


# ----------------------------------------------------------------------------- the runner


def test_dry_run_skips_finished_resumes_interrupted_starts_new(res, capsys):
    fake_run(res, 'dot-s1', {0: 4.0, 250: 2.0, 500: 1.8})                  # finished: skip
    fake_run(res, 'ega-s1', {0: 4.0, 250: 2.0}, ckpt=True)                 # interrupted: resume
    fake_run(res, 'ega_paper-s1', {0: 4.0, 250: 2.0})                      # no ckpt.pt: afresh
    d = fake_run(res, 'mope-s1', {0: 4.0, 100: 1.9})                       # max_iters 100 in its run.json
    (d / 'run.json').write_text(json.dumps(dict(max_iters=100)))
    assert study.main(['--study=t', '--seeds=1', f'--overlay={ov(res)}', '--dry_run=True']) == 0
    out = capsys.readouterr().out
    assert '5 runs: 2 finished, 1 to resume, 1 to start, 1 cannot run' in out
    assert 'skip    dot-s1: finished (500 iters)' in out and 'skip    mope-s1: finished (100 iters)' in out
    assert (f"resume  ega-s1: not finished, last eval at iter 250 of 500; ckpt.pt: resumes\n        python train.py "
            f"config/ega.py {ov(res)} --seed=1 --out_dir={res}/runs/ega-s1 --init_from=resume") in out
    assert (f"start   ega_paper-s1: no checkpoint, last eval at iter 250: starts afresh\n        python train.py "
            f"config/ega_paper.py {ov(res)} --seed=1 --out_dir={res}/runs/ega_paper-s1 --overwrite=True\n") in out
    assert 'missing fox9-s1: config/no_such_config.py does not exist (yet): not run' in out
    assert not (res / '.gitignore').exists() and not (res / 't' / 'RESULTS.md').exists()   # wrote nothing


def test_runner_launches_only_what_is_missing_then_nothing(res, monkeypatch, capsys):
    fake_run(res, 'dot-s1', {0: 4.0, 500: 1.8})
    fake_run(res, 'ega-s1', {0: 4.0, 250: 2.0}, ckpt=True)
    (res / 'runs' / 'ega-s1' / 'run.json').write_text(json.dumps(dict(max_iters=500, code=['0ld0000'])))
    monkeypatch.setattr(provenance, 'code_and_diff', lambda **k: ('abc1234', ''))
    calls = []
    monkeypatch.setattr(runner, 'launch', fake_launcher(calls))
    monkeypatch.setattr(plots, 'plot', lambda *a: False)
    assert study.main(['--study=t', '--seeds=1,2', f'--overlay={ov(res)}', '--jobs=2']) == 0
    out = capsys.readouterr().out
    launched = {c['cmd'][-1] if c['cmd'][-1].startswith('--init') else c['cmd'][-1].split('/')[-1]: c for c in calls}
    assert sorted(launched) == ['--init_from=resume', 'dot-s2', 'ega-s2', 'ega_paper-s1', 'ega_paper-s2', 'mope-s1',
                                'mope-s2']
    assert launched['--init_from=resume']['cmd'] == ['python', 'train.py', 'config/ega.py', ov(res), '--seed=1',
                                                     f'--out_dir={res}/runs/ega-s1', '--init_from=resume']
    assert not launched['--init_from=resume']['fresh'] and launched['dot-s2']['fresh']
    assert launched['mope-s1']['cmd'][2:5] == ['config/mope.py', ov(res), '--mope_init=sin']
    assert {c['omp'] for c in calls} == {'1'}
    assert '[0m00s] resume ega-s1 | 1 running, 6 waiting' in out and 'start dot-s2 | 2 running, 3 waiting' in out
    assert 'done mope-s2' in out and '| 0 left, elapsed' in out and 'FAILED' not in out
    assert json.loads((res / 'runs' / 'dot-s2' / 'run.json').read_text())['max_iters'] == 500
    # the code each run has seen: a new run the current one, a resumed run its old one too
    assert json.loads((res / 'runs' / 'dot-s2' / 'run.json').read_text())['code'] == ['abc1234']
    assert json.loads((res / 'runs' / 'ega-s1' / 'run.json').read_text())['code'] == ['0ld0000', 'abc1234']
    assert "the runs': 0ld0000, abc1234" in (res / 't@seeds-1-2' / 'RESULTS.md').read_text()
    assert (res / '.gitignore').read_text().split() == ['*.pt', '*.tmp']
    assert '- dot-s2:' not in (res / 't@seeds-1-2' / 'RESULTS.md').read_text()           # finished, not pending
    calls.clear()
    assert study.main(['--study=t', '--seeds=1,2', f'--overlay={ov(res)}', '--jobs=1']) == 0
    assert calls == []                                                          # all finished


def test_phase_evaluations_run_once_after_training_and_keep_run_json(res, monkeypatch, capsys):
    """A study's phase variants get one more job per phase mode from their checkpoint (--qk_phase=
    random_shared, then random): for a run finished before (with its ckpt.pt; here with its random
    mode already done), and for one trained in this very call; then nothing."""
    monkeypatch.setitem(studies.STUDIES, 't', dict(T_STUDY, runs=T_STUDY['runs'][:2], phase=['ega']))
    fake_run(res, 'dot-s1', {0: 4.0, 500: 1.8}, ckpt=True)                  # not a phase variant
    d = fake_run(res, 'ega-s1', {0: 4.0, 500: 1.7}, ckpt=True,
                 extra=[dict(kind='eval_only', iter=500, val=1.5, qk_phase=dict(mode='random', val=3.5))])
    (d / 'run.json').write_text(json.dumps(dict(cmd=['the training command'], max_iters=500)))
    fake_run(res, 'ega-s3', {0: 4.0, 500: 1.7})                             # no checkpoint left to evaluate
    assert study.main(['--study=t', '--seeds=1,2,3', f'--overlay={ov(res)}', '--dry_run=True']) == 0
    out = capsys.readouterr().out
    assert '1 phase-randomised evaluations to run' in out and '1 to train again for their later evaluations' in out
    assert (f"phase   ega-s1: finished (500 iters); its phase-randomised evaluation is to run\n        python "
            f"-m lab.phase --out_dir={res}/runs/ega-s1 --qk_phase=random_shared") in out
    assert (f"retrain ega-s3: finished (500 iters), but no ckpt.pt for its later evaluations: trained again\n"
            f"        python train.py config/ega.py {ov(res)} --seed=3 --out_dir={res}/runs/ega-s3 --overwrite=True\n"
            ) in out
    calls = []
    monkeypatch.setattr(runner, 'launch', fake_launcher(calls))
    monkeypatch.setattr(plots, 'plot', lambda *a: False)
    assert study.main(['--study=t', '--seeds=1,2,3', f'--overlay={ov(res)}', '--jobs=1']) == 0
    out = capsys.readouterr().out
    def job(cmd):       # (run, what follows its out_dir) of a training command, (run, [mode]) of a phase one
        if cmd[1:3] == ['-m', 'lab.phase']:
            return cmd[3].split('/')[-1], [cmd[4]]
        return cmd[5].split('/')[-1], cmd[6:]
    jobs = [job(c['cmd']) for c in calls]
    assert jobs == [('ega-s1', ['--qk_phase=random_shared']), ('dot-s2', []), ('ega-s2', []),
                    ('ega-s2', ['--qk_phase=random_shared']), ('ega-s2', ['--qk_phase=random']),
                    ('dot-s3', []), ('ega-s3', ['--overwrite=True']), ('ega-s3', ['--qk_phase=random_shared']),
                    ('ega-s3', ['--qk_phase=random'])]
    assert calls[6]['fresh'] and not calls[7]['fresh']          # the re-training starts its run.txt afresh
    assert not calls[0]['fresh'] and 'done the random_shared phase evaluation of ega-s1: val 1.5000 with its ' \
        'phases, 2.5000 with random ones' in out
    assert json.loads((d / 'run.json').read_text())['cmd'] == ['the training command']   # kept
    md = (res / 't@seeds-1-2-3' / 'RESULTS.md').read_text()
    assert '## Phase-randomised evaluation' in md
    # ega: random phases 2.5 / 3.5 at seeds 1, 2, 3; dot's final val 1.8 (seed 1), 1.5 (seeds 2, 3)
    assert ('| ega | random_shared | 3 | 1.5000 (0.0000) | 2.5000 (0.0000) | +1.0000 (+1.0000..+1.0000) | '
            '+0.9000 (+0.4697..+1.3303) |') in md                   # against its own phases, against dot
    assert '| ega | random | 3 | 1.5000 (0.0000) | 3.5000 (0.0000) | +2.0000 (+2.0000..+2.0000) | +1.9000 (' in md
    assert '- ega-s3' not in md                                  # trained again and evaluated: nothing pending
    calls.clear()
    assert study.main(['--study=t', '--seeds=1,2,3', f'--overlay={ov(res)}', '--jobs=1']) == 0
    assert calls == []
    # a study's own phase modes: one more mode is one more evaluation of each run, from its checkpoint
    monkeypatch.setitem(studies.STUDIES['t'], 'phase_modes', ('random_shared', 'random', 'amplitude'))
    assert study.main(['--study=t', '--seeds=1,2,3', f'--overlay={ov(res)}', '--jobs=1']) == 0
    assert sorted(job(c['cmd']) for c in calls) == [(f'ega-s{i}', ['--qk_phase=amplitude']) for i in (1, 2, 3)]


def test_a_failing_run_is_reported_and_the_exit_code_says_so(res, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(runner, 'launch', fake_launcher(calls, finish=False, rc=1))
    monkeypatch.setitem(studies.STUDIES, 't', dict(T_STUDY, runs=T_STUDY['runs'][:1]))
    (res / 'runs' / 'dot-s1').mkdir(parents=True)
    (res / 'runs' / 'dot-s1' / 'run.txt').write_text('model: ...\nerror: something broke\n')
    # the caller's OMP_NUM_THREADS (unset, or set as on a CI machine) is what a single job gets:
    # set it here so that the test does not depend on the environment it runs in
    monkeypatch.setenv('OMP_NUM_THREADS', '3')
    assert study.main(['--study=t', '--seeds=1', f'--overlay={ov(res)}', '--jobs=1']) == 1
    out = capsys.readouterr().out
    assert 'FAILED dot-s1 after 0m00s (exit 1): error: something broke | 0 left' in out
    assert calls[0]['omp'] == '3'                                   # one job: threads left alone


def test_no_data_is_one_error_line_before_any_launch(res, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(runner, 'launch', fake_launcher(calls))
    os.remove(res.parent / 'data' / 'train.bin')
    assert study.main(['--study=t', '--seeds=1', f'--overlay={ov(res)}']) == 2
    assert calls == [] and 'run `python prepare.py` first' in capsys.readouterr().err


def test_launch_writes_run_txt_in_a_session_of_its_own(tmp_path):
    env = dict(os.environ, STUDY_TEST='x')
    code = "import os; print(os.getsid(0) == os.getpid(), os.environ['STUDY_TEST'])"
    assert runner.launch(['python', '-c', code], str(tmp_path), True, env).wait(timeout=60) == 0
    assert runner.launch(['python', '-c', 'print(1)'], str(tmp_path), False, env).wait(timeout=60) == 0
    assert (tmp_path / 'run.txt').read_text() == 'True x\n1\n'        # a resume appends
    assert runner.launch(['python', '-c', 'print(2)'], str(tmp_path), True, env).wait(timeout=60) == 0
    assert (tmp_path / 'run.txt').read_text() == '2\n'                 # a fresh start does not


CHILD = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
open(os.path.join(sys.argv[1], 'ready'), 'w').close()
while not got:
    time.sleep(0.01)
open(os.path.join(sys.argv[1], 'got1'), 'w').close()
deadline = time.time() + 0.5                    # saving a checkpoint: a second SIGTERM cuts it short
while len(got) < 2 and time.time() < deadline:
    time.sleep(0.01)
open(os.path.join(sys.argv[1], 'saved'), 'w').write(str(len(got)))
sys.exit(128 + got[0])
"""
WRAPPER = """
import os, subprocess, sys
sys.path.insert(0, {repo!r})
from lab import paths, runner, studies, study
paths.RESULTS, paths.RUNS = {results!r}, os.path.join({results!r}, 'runs')
runner.POLL_S, studies.DEFAULT_OVERLAY = 0.02, {overlay!r}
studies.STUDIES['t'] = dict(runs=[('dot', ['config/dot.py'], [], (1, 2, 3))], refs=['dot'], causal={{}})
runner.launch = lambda cmd, out_dir, fresh, env: subprocess.Popen([sys.executable, '-c', {child!r}, out_dir],
                                                                   start_new_session=True)
sys.exit(study.main(['--study=t', '--overlay={overlay}', '--jobs=2']))
"""


def wait_for(paths, timeout=60):
    deadline = time.time() + timeout
    while not all(p.exists() for p in paths) and time.time() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize('sig, times', [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGINT, 2)])
def test_a_signal_stops_the_runs_once_each_and_starts_no_more(res, tmp_path, sig, times):
    wrapper = tmp_path / 'wrapper.py'
    wrapper.write_text(WRAPPER.format(repo=str(REPO), results=str(res), child=CHILD, overlay=ov(res)))
    p = subprocess.Popen([sys.executable, str(wrapper)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = [res / 'runs' / f'dot-s{s}' for s in (1, 2)]
    wait_for([d / 'ready' for d in runs])
    p.send_signal(sig)
    if times == 2:                                  # the second signal reaches the runs too
        wait_for([d / 'got1' for d in runs])
        p.send_signal(sig)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, out
    assert [(d / 'saved').read_text() for d in runs] == [str(times)] * 2      # one SIGTERM per signal
    assert not (res / 'runs' / 'dot-s3').exists()
    assert 'stopped dot-s1' in out and 'stopped dot-s2' in out and 'Traceback' not in out


# ----------------------------------------------------------------------------- RESULTS.md and plots


def results_fixture(res):
    dup = [dict(kind='eval', iter=500, val=1.80, gap=4.1, leaks=False, eval_set=EVAL_SET)]   # the repeated row wins
    fake_run(res, 'dot-s1', {0: 4.0, 250: 2.0, 500: 9.99}, gap=4.1, tok=(900.0,), extra=dup)
    fake_run(res, 'dot-s2', {0: 4.0, 250: 2.0, 500: 1.78}, gap=4.2, tok=(1000.0, 10.0, 5000.0))
    fake_run(res, 'dot-s3', {0: 4.0, 250: 1.75, 500: 1.76}, gap=4.3, tok=(1100.0,))
    for s, v in ((1, 1.75), (2, 1.76), (3, 1.70)):
        fake_run(res, f'ega-s{s}', {0: 4.0, 250: 2.0, 500: v})
    fake_run(res, 'mope-s1', {0: 4.0, 250: 2.0, 500: 1.83})
    fake_run(res, 'ega_mope-s1', {0: 4.0, 250: 2.0, 500: 1.81})
    fake_run(res, 'ega_paper-s1', {0: 4.0, 250: 2.0, 500: 1.72}, leaks=True)
    fake_run(res, 'ega_paper-s2', {0: 4.0, 250: 2.0, 500: 1.74}, leaks=True)
    fake_run(res, 'ega_paper-s3', {0: 4.0, 250: 2.0}, leaks=True, ckpt=True)


def test_results_md(res, capsys, monkeypatch):
    monkeypatch.setitem(studies.STUDIES, 't', dict(T_STUDY, runs=T_STUDY['runs'] + [('ega_mope', ['config/ega_mope.py'],
                                                                                   [], (1,))]))
    results_fixture(res)
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    md = (res / 't' / 'RESULTS.md').read_text()
    causal, leaky = md.split('## Leaking variants: not a modelling result')
    leaky, pending = leaky.split('## Pending')
    assert f"- command: `python -m lab.study --study=t --table_only=True --overlay={ov(res)}`" in md
    assert ', torch ' in md and ' CPUs' in md and '- date' not in md
    assert "- code: the runs': not recorded" in md               # the fixture's runs have no run.json
    # nothing changed, nothing rewritten: the same bytes again
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    assert (res / 't' / 'RESULTS.md').read_text() == md
    # the fixture's data dir has no meta.json: the data is named by its path alone
    assert ('- scale: 4 layers, 4 heads, C = 128, T = 128, batch 16, 500 steps, eval every 250 on 20 val batches, '
            f'data {res.parent / "data"} ({ov(res)})\n') in md
    assert ('| dot | 3 | 1.7800 (0.0200) | 1.7600..1.8000 | 1.7767 (0.0252) | 1.7500..1.8000 | +4.200 | causal '
            '| 1,000 |') in causal
    assert '| ega | 3 | -0.0433 | -0.0950..+0.0084 | no |' in causal        # paired to dot: the interval holds 0
    assert '| mope | 1 | +0.0300 | n/a (1 seed) | n/a (one seed) |' in causal      # one seed: no interval
    assert '| ega_mope | 1 | +0.0100 | n/a (1 seed) | n/a (one seed) |' in causal
    assert 'sd of dot over seeds: 0.0200' in causal and 'difference to `fox9`' not in md
    assert 'ega_paper' not in causal                                       # never ranked with the causal ones
    assert '| ega_paper | 2 | 1.7300 (0.0141) | 1.7200..1.7400 |' in leaky and '**LEAKS**' in leaky
    assert '| ega_paper | ega | 2 | -0.0250 | -0.0885..+0.0385 |' in leaky   # the leak size
    assert '- ega_paper-s3: not finished, last eval at iter 250 of 500; ckpt.pt: resumes' in pending
    assert '- fox9-s1: config/no_such_config.py does not exist (yet): not run' in pending
    assert '- mope' not in pending and '- dot' not in pending
    assert 'plots skipped: matplotlib is not installed (pip install matplotlib)' in capsys.readouterr().out
    assert not (res / 't' / 'val_curves.png').exists()


def test_results_md_without_finished_runs_or_leaks(res, capsys):
    """No finished run: no table is written (a study not started yet leaves nothing behind); a
    finished causal run and no leak: no leak block, the rest pending."""
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    assert not (res / 't').exists() and f"no finished run: {res / 't' / 'RESULTS.md'} not written" in \
        capsys.readouterr().out
    fake_run(res, 'dot-s1', {0: 4.0, 500: 1.8})
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    md = (res / 't' / 'RESULTS.md').read_text()
    assert '| dot | 1 |' in md and '## Leaking' not in md
    assert '- dot-s2: not started' in md and '- fox9-s1: config/no_such_config.py does not exist' in md


def test_plots_are_written_with_matplotlib(res, capsys):
    assert 'matplotlib' not in vars(plots)                          # imported lazily, inside plot()
    results_fixture(res)
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    if importlib.util.find_spec('matplotlib') is None:              # an optional extra: then one line says so
        assert 'plots skipped: matplotlib is not installed' in capsys.readouterr().out
        return
    for name in ('val_curves.png', 'final_val.png', 'paired.png', 'diff_curves.png'):
        assert (res / 't' / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert 'plots skipped' not in capsys.readouterr().out


def test_learned_parameters_tables_and_plots(res, capsys):
    """The MOPE pairs and FourierQK periods of the final evals: RESULTS.md summarises them (with
    hand-computed periods 2 pi / w) and, with matplotlib, mope_pairs.png and periods.png."""
    w = [2 * 3.141592653589793 / p for p in (2.0, 4.0, 8.0)]          # periods 2, 4, 8 tokens
    pairs = dict(w=w, s=[2.5 / 3.141592653589793 * 2, 5.0 / w[1], 3.0])   # w s = 5 for the first two only
    fake_run(res, 'mope-s1', {0: 4.0, 500: 1.83}, extra=[dict(kind='eval', iter=500, val=1.83, mope=pairs, eval_set=EVAL_SET)])
    old = dict(kind='eval_only', iter=500, val=1.7, bands={'0.0': 48.7, '0.1': [50.0, 26.5, 10.0, 5.5]})
    fake_run(res, 'ega-s2', {0: 4.0, 500: 1.70}, extra=[old])
    fake_run(res, 'ega-s1', {0: 4.0, 500: 1.72})
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    md = (res / 't' / 'RESULTS.md').read_text()
    assert '| mope | 1 | 3 | 2.0 / 4.0 / 8.0 | 1.6 / 3.0 / 3.2 | 2 |' in md
    assert '| ega | 2 | 0.0: 48.7; 0.1: 50.0/26.5/10.0/5.5 |' in md and '| ega | 1 |' not in md.split('FourierQK')[1]
    if importlib.util.find_spec('matplotlib') is None:
        return
    for name in ('mope_pairs.png', 'periods.png'):
        assert (res / 't' / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_resolve_agrees_with_train_config():
    import train
    from configurator import load_config
    run = studies.Run('x', 'v', 1, ('config/dot.py',), ('--pos=none', '--max_iters=300'))
    mine = studies.resolve(run, 'config/cpu.py')
    theirs = load_config(train.DEFAULTS, ['config/dot.py', 'config/cpu.py', '--pos=none', '--max_iters=300'],
                         train.CHOICES)
    for k in ('n_layer', 'n_head', 'n_embd', 'block_size', 'batch_size', 'gradient_accumulation_steps',
              'max_iters', 'eval_interval', 'eval_iters', 'data_dir', 'pos', 'attn'):
        assert mine[k] == theirs[k], k

# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize('argv', [[], ['--study=nope'], ['nope'], ['ega_mope'], ['--jobs=2'],
                                  ['--study=ega_mope', '--jobs=0'], ['--study=ega_mope', '--seeds=a,b'],
                                  ['--study=ega_mope', '--seeds=-1'], ['--study=ega_mope', '--dry_run=maybe'],
                                  ['--study=ega_mope', '--colour=red'], ['--study=ega_mope', 'x'],
                                  ['--study=ega_mope', '--seeds'], ['--study=ega_mope', '--overlay=config/none.py']])
def test_bad_flags_are_one_error_line_and_exit_2(argv, capsys):
    assert study.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and err.count('\n') == 1


def test_cli_error_has_no_traceback():
    p = subprocess.run([sys.executable, '-m', 'lab.study', '--study=no_such_study'], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == (f"error: --study='no_such_study' is not one of: "
                                              f"{', '.join(studies.STUDIES)}\n")


def test_the_studies_are_as_specified():
    ega = {name: (cf, seeds) for name, cf, _, seeds in studies.STUDIES['ega_mope']['runs']}
    assert {n: s for n, (_, s) in ega.items()} == dict(dot=(1337, 2, 3, 4, 5), ega=(1337, 2, 3, 4, 5),
                                                       mope=(1337, 2, 3, 4, 5), ega_mope=(1337, 2, 3, 4, 5),
                                                       ega_paper=(1337, 2, 3), ega_mope_paper=(1337, 2, 3))
    assert all(cf == [f'config/{n}.py'] for n, (cf, _) in ega.items())
    gates = {name: (cf, ov) for name, cf, ov, _ in studies.STUDIES['gates']['runs']}
    assert gates['fox_nopos'] == (['config/fox.py'], ['--pos=none'])
    assert gates['ega_fox'] == (['config/ega_fox.py'], []) and len(gates) == 8   # the config's pos: learned
    assert studies.STUDIES['gates']['refs'] == ['dot', 'fox', 'dot_nopos', 'fox_nopos']
    abl = {name: (cf, ov, seeds) for name, cf, ov, seeds in studies.STUDIES['ablations']['runs']}
    assert sorted(abl) == sorted(['dot', 'conv', 'conv_paper', 'scale_init', 'ega_morlet', 'flux', 'phase', 'daub',
                                  'mope_rel', 'ega', 'ega_morlet_fixed'])
    assert all(v == ([f'config/{n}.py'], [], (1337, 2, 3)) for n, v in abl.items())
    assert studies.STUDIES['ablations']['refs'] == ['dot', 'ega', 'ega_morlet']
    fq = {name: (cf, ov, seeds) for name, cf, ov, seeds in studies.STUDIES['fourierqk']['runs']}
    assert {'fourier_qk', 'multi_fourier_qk', 'random_qk', 'causal_gauss', 'causal_morlet', 'fourier_qk_causal',
            'qk_orthogonal', 'fnet', 'dot'} <= set(fq)
    assert all(v == ([f'config/{n}.py'], [], (1337, 2, 3)) for n, v in fq.items())
    assert studies.STUDIES['fourierqk']['phase'] == ['fourier_qk', 'multi_fourier_qk']
    assert studies.STUDIES['fourierqk']['causal']['fourier_qk'] == 'fourier_qk_causal'
    bpe = {name: (cf, ov, seeds) for name, cf, ov, seeds in studies.STUDIES['bpe']['runs']}
    assert bpe == {f'bpe_{n}': ([f'config/{n}.py'], ['--data_dir=data/shakespeare'], (1337, 2, 3))
                   for n in ('dot', 'ega', 'causal_morlet', 'fourier_qk_causal')}
    assert studies.STUDIES['bpe']['refs'] == ['bpe_dot']
    for name, spec in studies.STUDIES.items():      # every config exists, every reference is a run of the study
        runs = {r[0] for r in spec['runs']}
        assert all(os.path.exists(REPO / f) for r in spec['runs'] for f in r[1]), name
        assert set(spec['refs']) <= runs and set(spec['causal']) | set(spec['causal'].values()) <= runs, name
        assert set(spec.get('phase', ())) <= runs, name
        assert {x for p in spec.get('pairs', ()) for x in p} <= runs, name
    dec = {name: (cf, ov) for name, cf, ov, _ in studies.STUDIES['decay']['runs']}
    assert dec['ega_decay_all'] == (['config/ega.py'], ['--decay_all=True']) and dec['ega'] == (['config/ega.py'], [])
    assert ('multi_fourier_qk_decay_all', 'multi_fourier_qk') in studies.STUDIES['decay']['pairs'] and len(dec) == 8
    loc = {r.name: studies.resolve(r, studies.DEFAULT_OVERLAY) for r in studies.plan('locality', seeds=[1])}
    assert {n: (c['attn'], c['pos']) for n, c in loc.items() if n.startswith(('fox_', 'alibi', 'dconv'))} == {
        'fox_causal_gauss': ('fox+causal_gauss', 'learned'), 'fox_dconv': ('fox+dconv', 'learned'),
        'fox_fourier_qk_causal': ('fox+fourier_qk_causal', 'learned'), 'fox_mope_rel': ('fox', 'mope_rel'),
        'alibi': ('dot', 'alibi'), 'alibi_learned': ('dot', 'learned+alibi'), 'dconv': ('dconv', 'learned'),
        'fox_nopos': ('fox', 'none')}
    assert set(studies.STUDIES['locality']['context']) <= set(loc)
    assert studies.STUDIES['locality']['refs'] == ['dot', 'fox']
    assert all(x in loc for i in studies.STUDIES['locality']['interactions'] for x in i)
    labels = [r.label for r in studies.plan('ega_mope')]
    assert labels[:6] == ['dot-s1337', 'ega-s1337', 'mope-s1337', 'ega_mope-s1337', 'ega_paper-s1337',
                          'ega_mope_paper-s1337'] and len(labels) == 26


def test_scale_and_seed_set_are_part_of_a_run_and_its_table(res, monkeypatch, capsys):
    """A run at another scale is another run (its own folder), and a table of another scale or seed
    set goes beside the study's own; a table with no finished run is not written, nor replaces one."""
    monkeypatch.setattr(plots, 'plot', lambda *a: False)
    fake_run(res, 'dot-s1', {0: 4.0, 500: 1.8})
    assert [r.label for r in studies.plan('t', [1], ov(res))][:2] == ['dot-s1', 'ega-s1']
    assert [r.label for r in studies.plan('t', [1], '')][:2] == ['dot@paper-s1', 'ega@paper-s1']
    assert studies.plan('t', [1], 'config/cpu.py')[0].label == 'dot@cpu-s1'
    assert study.main(['--study=t', '--overlay=', '--dry_run=True']) == 0
    out = capsys.readouterr().out
    assert '0 finished' in out and 'start   dot@paper-s1: not started' in out      # not the CPU-scale run
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    good = (res / 't' / 'RESULTS.md').read_text()
    fake_run(res, 'dot-s99', {0: 4.0, 500: 1.8})
    assert study.main(['--study=t', '--table_only=True', '--seeds=99', f'--overlay={ov(res)}']) == 0
    assert (res / 't@seeds-99' / 'RESULTS.md').exists() and (res / 't' / 'RESULTS.md').read_text() == good
    assert study.main(['--study=t', '--table_only=True', '--overlay=']) == 0      # no run finished at that scale
    assert not (res / 't@paper').exists() and 'not written' in capsys.readouterr().out
    paper = studies.plan('t', [1], '')[0]
    fake_run(res, paper.label, {0: 4.0, studies.max_iters(paper, ''): 1.8})
    assert study.main(['--study=t', '--table_only=True', '--overlay=']) == 0
    assert '- ega@paper-s1: not started' in (res / 't@paper' / 'RESULTS.md').read_text()
    # every run gone (or failed): the table is left as it was
    (res / 'runs' / 'dot-s1' / 'log.jsonl').unlink()
    assert study.main(['--study=t', '--table_only=True', f'--overlay={ov(res)}']) == 0
    assert (res / 't' / 'RESULTS.md').read_text() == good and 'left as it was' in capsys.readouterr().out


def test_readme_status_table_is_what_the_runs_give():
    text = (REPO / 'results' / 'README.md').read_text()
    a, b = text.index(status.STATUS[0]) + len(status.STATUS[0]), text.index(status.STATUS[1])
    assert text[a:b].strip() == status.status_md(), 'run: python -m lab.status --write=True'


def test_status_counts_finished_runs_and_phase_evaluations(res, monkeypatch):
    monkeypatch.setattr(studies, 'STUDIES', {'t': dict(T_STUDY, runs=T_STUDY['runs'][:2], phase=['ega'])})
    monkeypatch.setattr(studies, 'DEFAULT_OVERLAY', 'config/cpu.py')  # max_iters 2000
    fake_run(res, 'dot-s1', {0: 4.0, 2000: 1.8})
    fake_run(res, 'ega-s1', {0: 4.0, 2000: 1.7},
             extra=[dict(kind='eval_only', iter=2000, val=1.7, qk_phase=dict(mode='random', val=3.0))])
    fake_run(res, 'ega-s2', {0: 4.0, 250: 2.0})                 # not finished
    assert status.status_md().splitlines()[2] == '| `t` | CPU study | 2 / 6 | 1 / 6 | - |'
    (res / 't').mkdir(exist_ok=True)
    (res / 't' / 'RESULTS.md').write_text('table\n')            # linked once it exists
    assert status.status_md().splitlines()[2] == \
        '| `t` | CPU study | 2 / 6 | 1 / 6 | [t/RESULTS.md](t/RESULTS.md) |'


def test_a_run_name_means_one_run_in_every_study():
    """Studies share one pool of run folders: the same name must be the same command."""
    seen = {}
    for name_, spec in studies.STUDIES.items():
        for name, cf, ov, _ in spec['runs']:
            assert seen.setdefault(name, (cf, ov)) == (cf, ov), (name_, name)
    assert seen['dot'] == (['config/dot.py'], []) and seen['ega_nopos'] == (['config/ega.py'], ['--pos=none'])


def test_scale_names_the_tokens_the_runs_recorded(res, monkeypatch):
    """The tokenizer and vocabulary of a table's scale line: as the runs recorded them at their start
    (run.json 'data', from meta.json), else as prepare.py writes its default folders; never read from data/."""
    monkeypatch.setitem(studies.STUDIES, 't', dict(T_STUDY, runs=T_STUDY['runs'][:1]))
    run = studies.plan('t', [1])[0]
    data = res.parent / 'data'
    (data / 'meta.json').write_text(json.dumps({'vocab_size': 50257, 'tokenizer': 'gpt2'}))
    assert provenance.tokens(str(data), [run]) == str(data)                  # no record: not read from meta.json
    monkeypatch.setattr(provenance, 'code_and_diff', lambda **k: ('abc1234', ''))
    os.makedirs(run.dir)
    provenance.record_start(run, ov(res), 'start', ['python', 'train.py'])   # a run records its data at its start
    assert json.loads((Path(run.dir) / 'run.json').read_text())['data'] == dict(
        data_dir=str(data), tokenizer='gpt2', vocab_size=50257)
    (data / 'meta.json').unlink()                                        # data/ gone: the record stays
    assert provenance.tokens(str(data), [run]) == f'{data} (gpt2 tokens, vocab 50,257)'
    assert provenance.tokens(str(data)) == str(data) and provenance.tokens('data/other', [run]) == 'data/other'
    assert provenance.tokens('data/shakespeare_char') == 'data/shakespeare_char (char tokens, vocab 65)'
    assert provenance.tokens('data/shakespeare') == 'data/shakespeare (gpt2 tokens, vocab 50,257)'
    (Path(run.dir) / 'run.json').write_text(json.dumps(dict(data=dict(data_dir=str(data), vocab_size='x'))))
    assert provenance.tokens(str(data), [run]) == str(data)                  # a garbled record: the path alone


@pytest.mark.parametrize('name', ['bpe', 'ega_mope'])
def test_a_committed_table_regenerates_without_data_prepared(name, tmp_path, monkeypatch, move_results):
    """As on a fresh clone (data/ is gitignored): the repository without data/, the committed runs. The
    table is the committed one, scale line included, but for the machine it was made on."""
    for f in ('config', 'train.py'):
        (tmp_path / f).symlink_to(REPO / f)
    (tmp_path / 'results').mkdir()
    (tmp_path / 'results' / 'runs').symlink_to(REPO / 'results' / 'runs')
    monkeypatch.setattr(paths, 'REPO', str(tmp_path))                  # no data/ beside the configs
    move_results(tmp_path / 'results')
    monkeypatch.setattr(plots, 'plot', lambda *a: False)
    opts = dict(seeds=None, overlay=studies.DEFAULT_OVERLAY, jobs=1, dry_run=False, table_only=True)
    made = tables.write_results(name, studies.plan(name), opts, [f'--study={name}', '--table_only=True'])
    made = Path(made).read_text()
    kept = (REPO / 'results' / name / 'RESULTS.md').read_text()
    assert 'tokens, vocab' in made.split('- scale: ')[1].split('\n')[0]
    assert [x for x in made.splitlines() if not x.startswith('- machine: ')] == \
        [x for x in kept.splitlines() if not x.startswith('- machine: ')]


# ----------------------------------------------------------------------------- never overwritten by less


def two_variants(res, monkeypatch):
    """Study 't' as dot and ega at seeds 1, 2, 3, every run finished at iter 500; plot() recorded."""
    monkeypatch.setitem(studies.STUDIES, 't', dict(T_STUDY, runs=T_STUDY['runs'][:2]))
    for name, v in (('dot', 1.8), ('ega', 1.7)):
        for s in (1, 2, 3):
            fake_run(res, f'{name}-s{s}', {0: 4.0, 250: 2.0, 500: v + s / 100})
    drawn = []
    monkeypatch.setattr(plots, 'plot', lambda d, done, *a: drawn.append(sorted(done)) or False)
    return drawn


def written(d):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in Path(d).iterdir()}


def test_a_table_from_fewer_seeds_is_refused_and_nothing_is_written(res, monkeypatch, capsys):
    drawn = two_variants(res, monkeypatch)
    argv = ['--study=t', '--table_only=True', f'--overlay={ov(res)}']
    assert study.main(argv) == 0 and len(drawn) == 1
    (res / 't' / 'val_curves.png').write_bytes(b'a plot')
    before = written(res / 't')
    log = res / 'runs' / 'ega-s3' / 'log.jsonl'
    log.write_text(''.join(log.read_text().splitlines(True)[:3]))       # died early: its last eval at 250
    capsys.readouterr()
    assert study.main(argv) == 1
    err = capsys.readouterr().err
    assert err == (f"error: {res / 't' / 'RESULTS.md'} has 3 seeds of ega; this table would have 2 (ega-s3 stops "
                   "at iter 250 of 500). Finish the run, or pass --replace=True\n")
    assert written(res / 't') == before and len(drawn) == 1              # neither the table nor a plot
    assert study.main(argv + ['--replace=True']) == 0 and len(drawn) == 2
    assert '| ega | 2 |' in (res / 't' / 'RESULTS.md').read_text()
    assert study.main(argv) == 0                                         # the same again is not less
    # a variant gone altogether, and the study's runner: the table waits, the runs go on
    for label in ('dot-s1', 'dot-s2', 'ega-s2'):
        (res / 'runs' / label / 'log.jsonl').unlink()
    assert study.main(argv) == 1 and '3 seeds of dot; this table would have 1 (dot-s1 not started, dot-s2 not ' \
        'started); also fewer of ega (1 of 2). Finish the runs, or' in capsys.readouterr().err
    calls = []
    monkeypatch.setattr(runner, 'launch', fake_launcher(calls))
    assert study.main(['--study=t', f'--overlay={ov(res)}', '--jobs=1']) == 0 and len(calls) == 4
    out = capsys.readouterr().out           # dot-s1 done: 2 of dot; dot-s2: 1 of ega; then as many or more
    assert out.count('table not written: ') == 2 and 'table not written: ' not in out.split('done ega-s2')[1]
    assert '| ega | 3 |' in (res / 't' / 'RESULTS.md').read_text()


def test_a_table_at_another_scale_or_fewer_steps_is_refused(res, monkeypatch, capsys):
    two_variants(res, monkeypatch)
    argv = ['--study=t', '--table_only=True', f'--overlay={ov(res)}']
    assert study.main(argv) == 0
    good = (res / 't' / 'RESULTS.md').read_text()
    overlay = Path(ov(res))
    overlay.write_text(overlay.read_text().replace('batch_size = 16', 'batch_size = 8'))
    capsys.readouterr()
    assert study.main(argv) == 1
    assert capsys.readouterr().err == (f"error: {res / 't' / 'RESULTS.md'} has the scale 'batch 16'; this table "
                                       "would have 'batch 8'. Pass --replace=True to replace it (another scale or "
                                       "seed set is written beside it: --overlay, --seeds)\n")
    overlay.write_text(overlay.read_text().replace('batch_size = 8', 'batch_size = 16'))
    # a run started with fewer steps than its config now asks for: finished at its own max_iters
    (res / 'runs' / 'ega-s2' / 'run.json').write_text(json.dumps(dict(cmd=['x'], max_iters=250)))
    assert study.main(argv) == 1
    assert 'would count ega-s2 as finished at iter 250, where its config asks for 500' in capsys.readouterr().err
    assert (res / 't' / 'RESULTS.md').read_text() == good
    assert study.main(argv + ['--replace=True']) == 0


def readme_at(tmp_path, monkeypatch, *markers, where='README.md'):
    """A README.md (or results/README.md) with these blocks (empty) in a tmp repository root (config/
    and train.py linked)."""
    for f in ('config', 'train.py'):
        if not (tmp_path / f).exists():
            (tmp_path / f).symlink_to(REPO / f)
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(''.join(f"text\n{a}\n{b}\nmore\n" for a, b in markers))
    monkeypatch.setattr(paths, 'REPO', str(tmp_path))
    return tmp_path / where


def test_status_is_not_written_over_one_with_more_finished_runs(res, tmp_path, monkeypatch, capsys):
    two_variants(res, monkeypatch)
    monkeypatch.setattr(studies, 'STUDIES', {'t': studies.STUDIES['t']})
    readme = readme_at(tmp_path, monkeypatch, status.STATUS, where='results/README.md')
    monkeypatch.setattr(paths, 'RESULTS', str(tmp_path / 'results'))
    assert status.main(['--write=True']) == 0
    assert '| `t` | CPU study | 6 / 6: complete | - |' in readme.read_text()
    before = readme.read_text()
    log = res / 'runs' / 'ega-s3' / 'log.jsonl'
    log.write_text(''.join(log.read_text().splitlines(True)[:3]))
    capsys.readouterr()
    assert status.main(['--write=True']) == 1
    assert capsys.readouterr().err == ("error: results/README.md's status table has 6 finished runs of t; this one would "
                                       "have 5. Finish the runs (python -m lab.study --study=t --dry_run=True says "
                                       "which), or "
                                       "pass --replace=True\n")
    assert readme.read_text() == before
    assert status.main(['--replace=True']) == 2                         # only with --write=True
    assert status.main(['--write=True', '--dry_run=True']) == 1           # a dry run says so too, writes nothing
    assert readme.read_text() == before
    assert status.main(['--write=True', '--replace=True']) == 0
    assert '| `t` | CPU study | 5 / 6 | - |' in readme.read_text()


def test_ledger_is_not_written_over_one_from_more_runs(res, tmp_path, monkeypatch, capsys):
    from lab import ledger
    from lab.claims import Claim, Cmp
    readme = readme_at(tmp_path, monkeypatch, ledger.GPU_BLOCK)
    res.mkdir()
    monkeypatch.setattr(ledger, 'CLAIMS', [Claim(n='1', claim='EGA helps', paper='-0.1', rule='effect',
                                                 cmps=(Cmp('ega'),), effect=-0.1)])
    done = {v: {s: dict(final=x + s / 100, curve=[(500, x + s / 100)], eval_set=EVAL_SET) for s in (1, 2, 3)}
            for v, x in (('dot', 1.8), ('ega', 1.7))}
    monkeypatch.setattr(ledger, 'finished', lambda: (done, set()))
    assert ledger.main(['--write=True']) == 0
    before = readme.read_text(), (res / 'LEDGER.md').read_text()
    assert '`ega`: -0.100 (-0.100..-0.100, 3 seeds)' in before[1] and before[1].count('3 seeds') == 1
    assert '| row 1 | EGA helps | **' in before[1].split(ledger.ROWS_HEAD)[0]  # the summary: the claim, its verdict
    del done['ega'][3]                                                  # a run that died early
    capsys.readouterr()
    assert ledger.main(['--write=True']) == 1
    assert capsys.readouterr().err == ("error: results/LEDGER.md's ledger row 1 rests on 3 seeds for `ega`; this ledger "
                                       "would have 2. Finish the runs (python -m lab.status), or pass "
                                       "--replace=True\n")
    assert (readme.read_text(), (res / 'LEDGER.md').read_text()) == before
    assert ledger.main(['--write=True', '--replace=True']) == 0
    assert '2 seeds' in (res / 'LEDGER.md').read_text()


# ----------------------------------------------------------------------------- the ledger

def test_the_ledger_is_what_the_runs_give():
    """results/LEDGER.md is its summary, one line per claim, then every row, as the runs give them now."""
    from lab import ledger
    want = ledger.glance() + '\n' + ledger.header() + '\n' + ledger.table() + '\n'
    assert (REPO / 'results' / 'LEDGER.md').read_text() == want, 'run: python -m lab.ledger --write=True'


def test_readme_prose_states_the_ledgers_verdicts():
    """Every verdict the README's prose states ('row N: **verdict**', 'row N, paper scale: **verdict**', outside
    the generated blocks; '[row N](results/LEDGER.md): **verdict**' where it links the row) is the ledger's for
    that row now, and the opening states row 1's at both scales: a change of verdict cannot leave a sentence
    behind. The Results section links each row it cites."""
    from lab import ledger
    from lab.verdicts import ROWS, words
    text = (REPO / 'README.md').read_text()
    text = text[:text.index(ledger.GPU_BLOCK[0])] + text[text.index(ledger.GPU_BLOCK[1]):]
    cite = r'row\s+(\d+[a-h]?)(,\s+paper\s+scale)?(?:\]\(results/LEDGER\.md\))?:\s+\*\*([^*]+)\*\*'
    results = text[text.index('## Results'):text.index('\n## ', text.index('## Results') + 3)]
    assert len(re.findall(cite, results)) >= 10
    unlinked = re.findall(r'(?<!\[)row\s+\d+[a-h]?(?:,\s+paper\s+scale)?(?!\]\(results/LEDGER\.md\))\b', results)
    assert not unlinked, unlinked
    done, leaking = ledger.finished()
    paper = ledger.finished_paper()
    for n, scale, said in re.findall(cite, text):
        cl = next(c for c in ledger.CLAIMS if c.n == n)
        verdict = words(cl, ROWS[cl.rule](done, leaking, cl)[1])
        verdict = ledger.at_paper_scale(cl, verdict, *paper)[1] if scale else verdict
        assert ' '.join(said.split()) == verdict.split(' (')[0].split(':')[0].split(';')[0], (n, scale, said, verdict)
    opening = text[:text.index('## Quick start')]
    assert {('1', False), ('1', True)} <= {(n, bool(scale)) for n, scale, _ in re.findall(cite, opening)}
    assert len(re.findall(cite, text)) >= 10


def test_ledger_verdicts_follow_the_rule():
    from lab import verdicts

    def p(mean, half):
        return dict(n=3, mean=mean, half=half)
    v = verdicts.by_rule
    assert v('effect', p(-0.05, 0.02), -0.092) == 'reproduced'            # within 3x, clear of 0
    assert v('effect', p(-0.025, 0.012), -0.092) == 'direction only'      # 3.7x smaller
    assert v('effect', p(-0.5, 0.1), -0.092) == 'direction only'          # 5.4x larger
    assert v('effect', p(+0.027, 0.017), -0.119) == 'contradicted'
    assert v('effect', p(-0.028, 0.029), -0.059) == 'not distinguishable from zero'
    assert v('sign', p(0.036, 0.012), 1) == 'reproduced' and v('sign', p(-0.03, 0.01), 1) == 'contradicted'
    # no gain: a loss, or a tie inside the equivalence margin (0.02), holds it; a gain contradicts it; a tie
    # whose interval reaches a gain past the margin is not resolved. 'zero': no effect either way
    assert v('null', p(0.009, 0.037), None) == 'not resolved'             # the interval reaches -0.028
    assert v('null', p(0.009, 0.02), None) == 'reproduced' == v('null', p(0.08, 0.04), None)
    assert v('null', p(-0.096, 0.026), None) == 'contradicted'
    assert v('zero', p(0.023, 0.019), None) == 'contradicted' and v('zero', p(0.02, 0.03), None) == 'not resolved'
    assert v('zero', p(0.002, 0.015), None) == 'reproduced'
    # our own claims in their own words, a paper's as they are
    from lab.claims import Claim
    ours, theirs = Claim('x', '(ours) a claim', '-', 'null'), Claim('y', 'a claim', '-', 'null')
    assert verdicts.words(ours, 'reproduced: `a`') == 'holds: `a`' and verdicts.words(theirs, 'reproduced') == 'reproduced'
    assert [verdicts.words(ours, w) for w in ('contradicted', 'not distinguishable from zero', 'not resolved')] == \
        ['does not hold', 'not resolved', 'not resolved']
    # one seed: no interval, so no verdict (a tie by default would 'reproduce' every claim of no effect)
    for rule, effect in (('effect', -0.092), ('null', None), ('zero', None), ('sign', -1)):
        assert v(rule, p(-0.05, None), effect) == 'untestable here (one seed so far: no interval)'
    assert v('effect', None, -0.092) == 'untestable here'


def test_ledger_nothing_beats_the_base_and_the_context_row(monkeypatch, tmp_path, move_results):
    from lab import verdicts
    from lab.claims import Claim, Cmp
    done = {v: {s: dict(final=x + 0.001 * s, eval_set=EVAL_SET) for s in (1, 2, 3)} for v, x in
            (('fox', 1.60), ('a', 1.62), ('b', 1.55), ('dot', 1.78))}
    cl = Claim(n='x', claim='nothing beats fox', paper='-', rule='all',
               cmps=(Cmp('a', 'fox'), Cmp('b', 'fox')))
    text, verdict = verdicts.row_all(done, set(), cl)
    assert verdict == 'contradicted: `b - fox`'                      # b is clear of 0 below fox
    assert text.index('`b - fox`') < text.index('`a - fox`')         # sorted by the mean
    done['b'] = {s: dict(final=1.60 + 0.03 * (s % 2) - 0.015, eval_set=EVAL_SET) for s in (1, 2, 3)}   # holds 0, wide
    assert verdicts.row_all(done, set(), cl)[1] == 'not resolved: `b - fox`'
    done['b'] = {s: dict(final=1.601 + 0.001 * s, eval_set=EVAL_SET) for s in (1, 2, 3)}   # inside the margin
    assert verdicts.row_all(done, set(), cl)[1] == 'reproduced'
    cl.cmps += (Cmp('c', 'fox'),)                                    # a comparison not run: no verdict yet
    text, verdict = verdicts.row_all(done, set(), cl)
    assert verdict.startswith('untestable here') and 'not run yet: `c - fox`' in text
    move_results(tmp_path)
    assert verdicts.row_context(done, set(), cl)[1].startswith('untestable here')
    (tmp_path / 'locality').mkdir()

    def write(spec):
        # 32 points of 16 positions: a cold start (0..63) at 2.0, which the baseline 64..127 leaves out
        runs = {f'{v}-s{s}': dict(trained=128, T={'512': dict(curve=[2.0] * 4 + [1.6] * 4 + [1.6 + d + k * s] * 24)})
                for v, d, k in spec for s in (1, 2, 3)}
        runs['learned-s1'] = dict(refused='its weights do not fit')
        (tmp_path / 'locality' / 'context.json').write_text(json.dumps(runs))
        return verdicts.row_context(done, set(), cl)
    # against 0..127 alibi's +0.05 would read as a fall (the cold start's 2.0); against 64..127 it is a rise
    text, verdict = write([('alibi', 0.05, 0.001), ('fox_nopos', 0.005, 0.001), ('dot_nopos', 0.8, 0.001)])
    assert verdict == 'contradicted: `alibi`' and text.startswith('`fox_nopos`: +0.007 (+0.005..+0.009, 3 seeds)')
    assert '`dot_nopos` (control): +0.802' in text and 'refused: learned' in text   # listed, not judged
    text, verdict = write([('alibi', 0.005, 0.001), ('fox_nopos', 0.005, 0.02), ('dot_nopos', 0.8, 0.001)])
    assert verdict == 'not resolved: `fox_nopos`'                    # clear of nothing, past the margin
    assert write([('alibi', 0.005, 0.001), ('fox_nopos', -0.05, 0.001)])[1] == 'reproduced'


def test_ledger_interaction_pairs_seed_by_seed():
    from lab import verdicts
    from lab.claims import Cmp
    done = {v: {s: dict(final=x, eval_set=EVAL_SET) for s, x in finals.items()} for v, finals in
            (('ab', {1: 1.0, 2: 2.0, 3: 4.0}), ('a', {1: 0.5, 2: 1.0, 3: 1.0}), ('b', {1: 0.2, 2: 0.5, 3: 1.0, 9: 7.0}),
             ('dot', {1: 0.1, 2: 0.1, 3: 0.1}))}
    p = verdicts.compare(done, Cmp('ab', 'a', 'b', 'dot'))
    # per seed: (ab - a) - (b - dot) = 0.5 - 0.1, 1.0 - 0.4, 3.0 - 0.9
    assert p['n'] == 3 and p['mean'] == pytest.approx((0.4 + 0.6 + 2.1) / 3)
    assert verdicts.compare(done, Cmp('ab', 'a'))['mean'] == pytest.approx((0.5 + 1.0 + 3.0) / 3)


def test_ledger_survives_variants_without_finished_runs():
    """A run in progress is a variant with no finished seed (and may already be marked leaking):
    every row still renders, saying what it lacks."""
    from lab import ledger
    t = ledger.table({'dot': {}, 'multi_fourier_qk_decay_all': {}}, {'multi_fourier_qk_decay_all'})
    assert t.count('\n') == len(ledger.CLAIMS) + 1
    assert 'no paired seeds' in t and '**untestable here (no paired runs yet)**' in t


def test_ledger_paper_scale_column_is_the_same_rule_and_marks_a_change():
    """The paper-scale cells come from the CPU row's rule: given the CPU runs as the paper-scale ones, every
    row that paired runs decide (two seeds or more) repeats its CPU cells, and names the plan's call that adds a
    seed; a row with fewer is pending, naming the call that brings it to two; row 5 reads the learned pairs as
    its CPU cell does; the others show '-'. With EGA's effect flipped at the paper scale, row 1's verdict
    changes and says so."""
    from lab import ledger
    done, leaking = ledger.finished()
    for line in ledger.table(done, leaking, paper=(done, leaking)).splitlines()[2:]:
        cells = line.split(' | ')
        cl = next(c for c in ledger.CLAIMS if c.n == cells[0][2:])
        cmps = cl.cmps if cl.rule == 'all' else cl.cmps[:1]
        if cl.rule in ledger.PAPER_RULES and all(len(ledger.seed_diffs(done, c)) >= 2 for c in cmps):
            assert cells[5] == cells[3] and 'changes with scale' not in cells[6], cl.n
            assert re.fullmatch(re.escape(cells[4][:-2]) + r'(; a seed more: results/gpu/PLAN.md call \d+)?\*\*',
                                cells[6]), cl.n
        elif cl.rule in ledger.PAPER_RULES:
            assert cells[6].startswith('**pending (') or cells[5:7] == ['-', '-'], cl.n
        elif cl.rule == 'mope_pairs':
            assert cells[5:7] == cells[3:5] or (cells[5:7] == ['-', '-'] and 'no learned pairs' in cells[3]), cl.n
        elif cl.rule != 'cost':
            assert cells[5:7] == ['-', '-'], cl.n
    flipped = dict(done, ega={s: dict(x, final=2 * done['dot'][s]['final'] - x['final'])
                              for s, x in done['ega'].items() if s in done['dot']})
    row1 = ledger.table(done, leaking, paper=(flipped, leaking)).splitlines()[2].split(' | ')
    assert row1[4] == '**direction only**' and row1[6].startswith('**contradicted (changes with scale)'), row1


def test_a_pair_of_runs_read_on_other_val_windows_is_refused(res, monkeypatch):
    """Two runs of one seed evaluated on other sets (20 val batches against 50: other windows, not a subset)
    are no pair: not in the ledger's comparisons, its plots, a study's tables or its leak sizes; each says
    which seed it left out and why. A run whose set is not recorded pairs with nothing."""
    from lab import ledger, logs, plots_paired, verdicts
    from lab.claims import Claim, Cmp
    other = EVAL_SET.replace('2 x 4', '5 x 4')
    done = {v: {s: dict(final=x + s / 100, curve=[(500, x + s / 100)], eval_set=EVAL_SET) for s in (1, 2, 3)}
            for v, x in (('dot', 1.8), ('ega', 1.7))}
    done['ega'][1]['eval_set'] = other
    assert verdicts.seed_diffs(done, Cmp('ega')) == {2: pytest.approx(-0.1), 3: pytest.approx(-0.1)}
    assert verdicts.compare(done, Cmp('ega'))['n'] == 2
    text = verdicts.describe(done, set(), Cmp('ega'))
    assert text.startswith('`ega`: -0.100') and 'not paired: s1 (`ega` on 5 x 4 windows of 16 tokens, `dot` on 2 x 4' in text
    assert plots_paired.diffs(done, 'ega', 'dot') == {2: pytest.approx(-0.1), 3: pytest.approx(-0.1)}
    done['ega'][2]['eval_set'] = None                                   # not recorded: no pair either
    assert logs.alike(done, 'ega', 'dot')[1][2] == '`ega` on a set not recorded, `dot` on 2 x 4 windows of 16 tokens'
    cl = Claim(n='1', claim='EGA helps', paper='-0.1', rule='effect', cmps=(Cmp('ega'),), effect=-0.1)
    assert ledger.ROWS['effect'](done, set(), cl)[1] == 'untestable here (one seed so far: no interval)'
    # a study's table: the paired difference and the leak size over the seeds read alike
    monkeypatch.setitem(studies.STUDIES, 't', T_STUDY)
    for label, vals, es in (('dot-s1', {0: 4.0, 500: 1.80}, EVAL_SET), ('ega-s1', {0: 4.0, 500: 1.70}, other),
                            ('dot-s2', {0: 4.0, 500: 1.81}, EVAL_SET), ('ega-s2', {0: 4.0, 500: 1.71}, EVAL_SET)):
        fake_run(res, label, vals, eval_set=es)
    assert study.main(['--study=t', '--table_only=True', '--seeds=1,2', f'--overlay={ov(res)}']) == 0
    md = (res / 't@seeds-1-2' / 'RESULTS.md').read_text()
    assert '| ega | 1 | -0.1000 | n/a (1 seed) | n/a (one seed) |' in md
    assert '- evaluation: 2 x 4 windows of 16 tokens, seed 20240101, splits 900/100 (dot s1, dot s2, ega s2); ' \
           '5 x 4 windows of 16 tokens, seed 20240101, splits 900/100 (ega s1): runs on two sets are not paired' in md


def test_context_runs_keep_or_regain_their_checkpoint_until_longctx_has_them(res, monkeypatch, capsys):
    """A finished run of a study's `context` list is trained again when its ckpt.pt is gone and
    lab/longctx.py has not evaluated it; once context.json holds it, it is done."""
    monkeypatch.setitem(studies.STUDIES, 't', dict(T_STUDY, runs=T_STUDY['runs'][:2], context=['dot']))
    overlay = studies.DEFAULT_OVERLAY
    fake_run(res, 'dot-s1', {0: 4.0, 500: 1.8})                           # no checkpoint, not evaluated
    fake_run(res, 'dot-s2', {0: 4.0, 500: 1.8}, ckpt=True)                # its checkpoint kept
    fake_run(res, 'ega-s1', {0: 4.0, 500: 1.7})                           # not a context variant
    plan = {r.label: r for r in studies.plan('t', seeds=[1, 2])}
    assert runs.state(plan['dot-s1'], overlay)[0] == 'retrain'
    assert runs.state(plan['dot-s2'], overlay) == ('done', 'finished (500 iters); its longer contexts are to '
                                                   'evaluate: python -m lab.longctx')
    assert runs.state(plan['ega-s1'], overlay)[0] == 'done'
    (res / 't').mkdir(parents=True, exist_ok=True)
    (res / 't' / 'context.json').write_text(json.dumps({'dot-s1': {'refused': 'a reason'}}))
    assert runs.state(plan['dot-s1'], overlay) == ('done', 'finished (500 iters)')


def test_long_study_gives_the_difference_at_each_length_and_whether_it_still_shrinks(res, monkeypatch):
    monkeypatch.setitem(studies.STUDIES, 't', dict(
        runs=[(n, ['config/dot.py'], [], (1, 2, 3)) for n in ('dot_long', 'dot', 'fox_long', 'fox')],
        refs=['dot_long', 'dot'], causal={}, long={'dot_long': 'dot', 'fox_long': 'fox'}))
    for s in (1, 2, 3):
        e = s / 1000                                            # per-seed noise that the pairing removes
        for name, vals in (('dot', {0: 4.0, 500: 1.60 + e}), ('fox', {0: 4.0, 500: 1.50 + e}),
                           ('dot_long', {0: 4.0, 2000: 1.70 + e, 4000: 1.55 + e, 6000: 1.50 + e}),
                           ('fox_long', {0: 4.0, 2000: 1.60 + e, 4000: 1.50 + e, 6000: 1.47 + e + e})):
            d = fake_run(res, f'{name}-s{s}', vals)
            (d / 'run.json').write_text(json.dumps(dict(cmd=['x'], max_iters=max(vals))))
    opts = dict(seeds=None, overlay=studies.DEFAULT_OVERLAY, jobs=1, dry_run=False, table_only=True)
    path = tables.write_results('t', studies.plan('t'), opts, ['--study=t'])
    text = Path(path).read_text()
    long = text[text.index('## Do the gains last?'):]
    row = next(line for line in long.splitlines() if line.startswith('| fox | '))
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert cells[1].startswith('-0.1000 (3)') and cells[2].startswith('-0.1000 (3)')
    assert cells[3].startswith('-0.0500 (3)') and cells[4].startswith('-0.0280 (3)')    # -0.03 + mean e
    assert cells[5].startswith('+0.0220 (3)')                                         # still shrinking
    pytest.importorskip('matplotlib')
    assert (Path(path).parent / 'long.png').exists()


def test_the_rows_computed_from_the_model_can_fail(monkeypatch):
    """Rows 37 and 39 judge model.py itself: MOPE's wide limit and EGA's parameters per head."""
    import model
    import torch
    from lab import model_rows
    text, verdict = model_rows.row_mope_limit(None, None, None)
    assert verdict == 'reproduced' and 's = 1e+08' in text
    # an envelope that never opens (a fixed width) keeps MOPE away from the sinusoidal table
    monkeypatch.setattr(model.MOPE, 'freqs', lambda self: (self.log_w.exp(), torch.full_like(self.log_w, 10.0)))
    assert model_rows.row_mope_limit(None, None, None)[1] == 'contradicted'
    text, verdict = model_rows.row_gate_params(None, None, None)
    assert verdict == 'contradicted' and '259 parameters per head (d + 3' in text
    old = model.EnergyGate.__init__

    def no_bias(self, cfg):                                       # the paper's count: no bias on the energy
        old(self, cfg)
        self.energy = torch.nn.Linear(cfg.n_embd, cfg.n_head, bias=False)
    monkeypatch.setattr(model.EnergyGate, '__init__', no_bias)
    assert model_rows.row_gate_params(None, None, None)[1] == 'reproduced'


def test_the_mope_kernel_row_asks_whether_the_learned_kernel_is_one_of_the_lag():
    """Row 41: the kernel PE(i) . PE(j) of the pairs a run learned is the formula written out; pairs as
    trained here (w s = 5, narrow envelopes) make it one of absolute position (contradicted), pairs with
    wide envelopes make it one of the lag alone (reproduced); no logged pairs, untestable."""
    import math
    import torch
    from lab import model_rows
    w, s = [0.8, 2.0, 3.0], [6.25, 2.5, 5 / 3]                  # on the rule's boundary w s = 5
    T = 32
    reach, spread = model_rows.mope_kernel(w, s, T)
    i, j = 7, 3
    want = sum(math.exp(-(i * i + j * j) / (2 * sp * sp)) * math.cos(wp * (i - j)) for wp, sp in zip(w, s))
    pe = __import__('model').waves(torch.arange(T, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                   torch.tensor(s, dtype=torch.float64))
    assert abs((pe[i] @ pe[j]).item() - want) < 1e-12 and 0 < reach < T and max(spread) > 0.5
    run = lambda w, s: {'mope': {'w': w, 's': s}}               # noqa: E731
    text, verdict = model_rows.row_mope_kernel({'mope': {1337: run(w, s)}}, set(), None)
    assert verdict == 'contradicted' and 'by 1 runs' not in text and 'in every run' in text
    wide = {'mope': {1337: run(w, [1e6] * 3), 2: run(w, [1e7] * 3)}}
    text, verdict = model_rows.row_mope_kernel(wide, set(), None)
    assert verdict == 'reproduced' and 'PE reaches positions 0..127' in text
    assert model_rows.row_mope_kernel({}, set(), None)[1] == 'untestable here'


def test_the_emd_row_asks_whether_the_imfs_move_with_the_bands(monkeypatch):
    """Row 24: EMD recovers the learned periods only if its IMFs move between two families whose bands
    differ; IMFs that stay within NOISE_X of each other contradict it, IMFs that move leave it open."""
    from lab import verdicts

    def emd(second):
        run = lambda t, bands: dict(trained=t + [128.0], untrained=[2.9, 6.9, 16.0, 42.7, 128.0], bands=bands)  # noqa: E731
        return dict(noise=[2.9, 6.9, 16.0, 42.7, 128.0],
                    runs={'a-s1': run([3.0, 7.5, 21.0, 51.0], [35.0]), 'a-s2': run([3.0, 7.4, 21.3, 51.2], [33.0]),
                          'b-s1': run(second, [6.0, 10.0, 17.0, 61.0])})
    monkeypatch.setattr(verdicts, 'results_json', lambda *parts: emd([3.2, 8.0, 19.7, 51.2]))
    text, verdict = verdicts.row_emd(None, None, None)
    assert verdict == 'contradicted' and 'apart by 1.07x/1.07x/1.07x/1.00x' in text
    monkeypatch.setattr(verdicts, 'results_json', lambda *parts: emd([3.2, 8.0, 40.0, 51.2]))   # IMF 3 moved 1.9x
    assert verdicts.row_emd(None, None, None)[1].startswith('untestable here: the IMFs move')
    monkeypatch.setattr(verdicts, 'results_json', lambda *parts: {})
    assert verdicts.row_emd(None, None, None)[1] == 'untestable here'


def test_the_paper_column_reads_only_runs_of_the_papers_model_and_steps(tmp_path):
    """A run named @paper counts at the paper scale only where its recorded command trains 6 x 8 x 256, T = 256,
    for 5000 steps (ledger.PAPER_SIZE): one cut short or shrunk is left out, as is one with no readable command."""
    from lab import ledger
    for name, extra, want in (('paper', [], True), ('short', ['--max_iters=1500'], False),
                              ('small', ['config/cpu.py'], False), ('narrow', ['--n_embd=128'], False),
                              ('other_file', ['results/runs/x/run.txt'], False), ('none', None, False)):
        d = tmp_path / name
        d.mkdir()
        if extra is not None:
            cmd = ['python', 'train.py', 'config/dot.py', *extra, '--seed=2', f'--out_dir={d}']
            (d / 'run.json').write_text(json.dumps(dict(cmd=cmd, max_iters=5000)))
        assert ledger.paper_sized(str(d)) is want, name
