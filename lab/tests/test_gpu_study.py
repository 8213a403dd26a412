"""lab/gpu_study.py: its scheduling in virtual time (six simulated runs, no process, no sleep), and on
the CPU at a tiny scale: the runs share the machine, each is estimated from its own log after a
short timed start, and what would pass the budget is stopped (it keeps its checkpoint and resumes
next time)."""

import bisect
import io
import json
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import gpu_study, runs, studies  # noqa: E402

TINY = """n_layer = 1
n_head = 2
n_embd = 16
block_size = 16
batch_size = 4
dropout = 0.0
max_iters = 30
warmup_iters = 2
eval_interval = 10
eval_iters = 2
log_interval = 5
device = 'cpu'
compile = False
threads = 1
data_dir = {data!r}
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch, data_dir, move_results):
    overlay = tmp_path / 'tiny.py'
    overlay.write_text(TINY.format(data=str(data_dir)))
    move_results(tmp_path / 'results')
    monkeypatch.setitem(studies.STUDIES, 'paper', dict(studies.STUDIES['paper'],
                                                       runs=studies.STUDIES['paper']['runs'][:1]
                                                       + studies.STUDIES['paper']['runs'][-1:]))
    return overlay, tmp_path / 'results'


LAST = studies.STUDIES['paper']['runs'][-1][0]      # the tiny study: dot and the paper study's last run
PAPER = studies.STUDIES['paper']                     # as specified (the tiny fixture cuts it)
ONE = ['--queue=paper', '--seeds=1337']


@pytest.mark.slow
def test_a_queue_of_two_studies_packs_its_runs_and_ingests_them_elsewhere(tiny, tmp_path, move_results, monkeypatch,
                                                                          capsys):
    """The device call's path on the CPU: two studies sharing dot, two seeds, run once each, into one pack;
    a run that cannot finish is packed too but left out of the other tree's results/runs."""
    overlay, res = tiny
    monkeypatch.setitem(studies.STUDIES, 'paper_rivals', dict(studies.STUDIES['paper_rivals'],
                                                              runs=studies.STUDIES['paper_rivals']['runs'][:2]))
    second = studies.STUDIES['paper_rivals']['runs'][1][0]
    pack = tmp_path / 'out' / 'runs.tar.gz'
    args = [f'--overlay={overlay}', '--budget_s=400', '--probe_iters=5', '--poll_s=0.2', '--parallel=3',
            '--queue=paper,paper_rivals', '--seeds=1337,2', f'--pack={pack}']
    assert gpu_study.main(args) == 0
    labels = [f'{v}@tiny-s{s}' for s in (1337, 2) for v in ('dot', LAST, second)]
    md = (res / 'paper@tiny' / 'GPU.md').read_text()
    assert md.count('| finished |') == 6 and all(f'| {x} |' in md for x in labels)
    with tarfile.open(pack) as tar:
        names = set(tar.getnames())
        env = json.loads(tar.extractfile('env.json').read())
    assert {f'runs/{x}/{f}' for x in labels for f in ('log.jsonl', 'run.json', 'run.txt')} <= names
    assert not any(n.endswith('.pt') for n in names) and 'GPU.md' in names
    assert env['versions'].startswith('python ') and env['code'] and '--pack=' in env['command']
    run_json = json.loads((res / "runs" / "dot@tiny-s1337" / "run.json").read_text())
    assert run_json['versions'][0].startswith('python ') and 'torch ' in run_json['versions'][0]
    head = (res / 'runs' / 'dot@tiny-s1337' / 'run.txt').read_text().splitlines()[:3]    # a warning may come first
    assert any(x.startswith('code ') and ', python ' in x and ', torch ' in x for x in head), head
    # the other tree: an unfinished run in the pack (its log cut before its last eval) is left out
    cut = tmp_path / 'cut.tar.gz'
    with tarfile.open(pack) as src, tarfile.open(cut, 'w:gz') as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name == f'runs/{second}@tiny-s2/log.jsonl':
                data = b''.join(x for x in data.splitlines(keepends=True) if b'"iter": 30' not in x)
            m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    other = tmp_path / 'other'
    move_results(other)
    (other / 'runs' / 'dot@tiny-s1337.ingest').mkdir(parents=True)     # what an ingest cut short left
    (other / 'runs' / 'dot@tiny-s1337.ingest' / 'stale.txt').write_text('x')
    capsys.readouterr()
    assert gpu_study.main([f'--ingest={cut}']) == 0
    assert not (other / 'runs' / 'dot@tiny-s1337' / 'stale.txt').exists()
    out = capsys.readouterr().out
    assert f'{second}@tiny-s2: not finished (last eval at iter 20 of 30): left out' in out
    assert sorted(p.name for p in (other / 'runs').iterdir()) == sorted(x for x in labels if x != f'{second}@tiny-s2')
    for x in labels[:5]:
        for f in ('log.jsonl', 'run.json', 'run.txt'):
            assert (other / 'runs' / x / f).read_bytes() == (res / 'runs' / x / f).read_bytes()
    # again: nothing changes; a run here that differs is kept
    (other / 'runs' / 'dot@tiny-s2' / 'run.txt').write_text('mine')
    assert gpu_study.main([f'--ingest={cut}']) == 0
    out = capsys.readouterr().out
    assert out.count(': already here') == 4 and 'dot@tiny-s2: a run of this name is here already: kept' in out
    assert (other / 'runs' / 'dot@tiny-s2' / 'run.txt').read_text() == 'mine'
    # the study's table reads the ingested runs like any
    from lab import study
    assert study.main(['--study=paper', f'--overlay={overlay}', '--table_only=True']) == 0
    table = (other / 'paper@tiny' / 'RESULTS.md').read_text()
    assert f'| {LAST} ' in table and '| dot ' in table


@pytest.mark.slow
def test_a_call_of_the_plan_runs_its_runs_and_an_ingest_writes_the_plan(tiny, tmp_path, move_results, monkeypatch,
                                                                        capsys):
    """--call=1 on the CPU at a tiny scale: the plan's first call (dot, ega and ega_paper at 3 seeds) all at
    once, each run's evals on one recorded set; its pack ingested elsewhere rewrites results/gpu/PLAN.md."""
    overlay, res = tiny
    monkeypatch.setitem(studies.STUDIES, 'paper', PAPER)
    pack = tmp_path / 'out' / 'runs.tar.gz'
    assert gpu_study.main([f'--overlay={overlay}', '--call=1', '--budget_s=400', '--probe_iters=5', '--poll_s=0.2',
                           f'--pack={pack}', f'--weights={tmp_path / "out"}']) == 0
    out = capsys.readouterr().out
    assert '9 runs planned (call 1 of results/gpu/PLAN.md), 9 at once' in out
    labels = [f'{v}@tiny-s{s}' for s in (1337, 2, 3) for v in ('dot', 'ega', 'ega_paper')]
    md = (res / 'paper@tiny' / 'GPU.md').read_text()
    assert md.count('| finished |') == 9 and all(f'| {x} |' in md for x in labels) and '--call=1 ' in md
    # the ega_paper runs' final weights, bf16, one file each: a checkpoint that evaluates causally, never resumes
    kept = sorted(p.name for p in (tmp_path / 'out').glob('*.pt'))
    assert kept == [f'ega_paper@tiny-s{s}.pt' for s in (1337, 2, 3)], kept
    import train
    from runtime import load_checkpoint
    ck, _ = load_checkpoint(str(tmp_path / 'out' / kept[0]))
    assert all(v.dtype == torch.bfloat16 for v in ck['model'].values() if v.is_floating_point())
    ev = tmp_path / 'eval'
    ev.mkdir()
    (ev / 'ckpt.pt').write_bytes((tmp_path / 'out' / kept[0]).read_bytes())
    assert train.main([str(overlay), '--attn=ega', f'--out_dir={ev}', '--init_from=resume', '--eval_only=True',
                       '--ega_norm=prefix']) == 0
    assert train.main([str(overlay), '--attn=ega', '--ega_norm=window', f'--out_dir={ev}', '--init_from=resume',
                       '--max_iters=40']) == 2                      # no optimizer state: it does not resume
    sets = {json.loads(x).get('eval_set') for label in labels for x in (res / 'runs' / label / 'log.jsonl').open()
            if json.loads(x)['kind'] == 'eval'}
    assert sets == {'2 x 4 windows of 16 tokens, seed 20240101, splits 1003854/111540'}
    other = tmp_path / 'other'
    move_results(other)
    assert gpu_study.main([f'--ingest={pack}']) == 0
    assert "PLAN.md: the plan's status from the runs now here" in capsys.readouterr().out
    assert '| 1 | ' in (other / 'gpu' / 'PLAN.md').read_text()
    assert gpu_study.main([f'--overlay={overlay}', '--call=1', '--budget_s=400']) == 0    # made: nothing to run
    assert (other / 'paper@tiny' / 'GPU.md').read_text().count('| finished before |') == 9


def test_bad_queue_seeds_pack_and_ingest_are_one_line_errors(tmp_path, capsys):
    for arg, says in (('--queue=paper,nope', "queue='paper,nope': expected studies"),
                      ('--call=999', 'call=999: results/gpu/PLAN.md has calls 1 to'),
                      ('--parallel=-1', 'expected --parallel >= 0'), ('--budget_s=nan', 'budget_s=nan: expected a finite number'),
                      ('--seeds=1,x', "seeds='1,x': expected integers"),
                      ('--pack=/proc/x.tar.gz', 'pack'),
                      (f'--ingest={tmp_path / "none.tar.gz"}', 'not a pack of lab.gpu_study --pack')):
        assert gpu_study.main([arg]) == 2, arg
        err = capsys.readouterr().err
        assert err.startswith('error: ') and says in err and err.count('\n') == 1, (arg, err)


def test_estimate_from_the_log():
    # eval 0 at the start, 30 steps with a compile inside, eval 30, then 30 steps of 60 ms and eval 60
    rows = [dict(kind='eval', iter=0, time=1.0), dict(kind='train', iter=10, ms=100.0),
            dict(kind='train', iter=20, ms=50.0), dict(kind='train', iter=30, ms=60.0),
            dict(kind='eval', iter=30, time=40.0), dict(kind='train', iter=40, ms=60.0),
            dict(kind='train', iter=50, ms=60.0), dict(kind='train', iter=60, ms=60.0),
            dict(kind='eval', iter=60, time=41.8 + 2.0)]
    assert gpu_study.estimate(rows, 0, 60, 100, 30, 5) is None             # nothing past the probe yet
    # no eval timed past the start: each of the 3 left (60, 90, 100) costs 3 splits x 5 batches, a
    # third of a step each
    e = gpu_study.estimate(rows[:4], 0, 10, 100, 30, 5)
    assert not e['timed'] and e['left'] == pytest.approx(70 * 0.06 + 3 * (5 * 0.06))
    # the interval from eval 0 to eval 30 holds the compile (39 s): never an eval's cost; 30 to 60 is
    # 30 steps at 60 ms and an eval of 2 s
    e = gpu_study.estimate(rows, 0, 50, 100, 30, 5)
    assert e['timed'] and e['eval_s'] == pytest.approx(2.0) and e['step_s'] == pytest.approx(0.06)
    assert e['left'] == pytest.approx(40 * 0.06 + 2 * 2.0)                   # evals at 90 and 100 left
    # resumed at 30: the rows up to 30 are an older process's, the eval at 30 precedes its compile
    assert not gpu_study.estimate(rows, 30, 40, 100, 30, 5)['timed']
    assert gpu_study.evals_left(100, 30, 60) == 2 and gpu_study.evals_left(90, 30, 60) == 1


@pytest.mark.slow
def test_the_runs_finish_inside_a_budget_and_are_not_run_twice(tiny, capsys):
    overlay, res = tiny
    args = [f'--overlay={overlay}', '--budget_s=400', '--probe_iters=5', '--poll_s=0.2', '--parallel=2', *ONE]
    assert gpu_study.main(args) == 0
    md = (res / 'paper@tiny' / 'GPU.md').read_text()
    assert md.count('| finished |') == 2 and '| dot@tiny-s1337 |' in md and f'{LAST}@tiny-s1337' in md
    log = [json.loads(x) for x in (res / 'runs' / f'{LAST}@tiny-s1337' / 'log.jsonl').open()]
    assert [r['iter'] for r in log if r['kind'] == 'eval'] == [0, 10, 20, 30]
    assert json.loads((res / 'runs' / 'dot@tiny-s1337' / 'run.json').read_text())['code']   # its code recorded
    assert (res / 'paper@tiny' / 'RESULTS.md').exists()                     # the study's table of them
    assert gpu_study.main(args) == 0
    assert (res / 'paper@tiny' / 'GPU.md').read_text().count('| finished before |') == 2


@pytest.mark.slow
def test_a_run_that_would_pass_the_budget_gives_way_and_keeps_its_checkpoint(tiny, monkeypatch):
    overlay, res = tiny
    overlay.write_text(overlay.read_text().replace('max_iters = 30', 'max_iters = 100000'))   # never ends alone
    real = gpu_study.estimate
    monkeypatch.setattr(gpu_study, 'estimate', lambda *a: (lambda e: e and dict(e, left=1e6, steps_s=1e6))(real(*a)))
    args = [f'--overlay={overlay}', '--budget_s=400', '--probe_iters=5', '--poll_s=0.2', '--parallel=2', *ONE]
    assert gpu_study.main(args) == 0
    md = (res / 'paper@tiny' / 'GPU.md').read_text()
    assert md.count('| stopped at ') == 2 and md.count('past the 400 s budget (it resumes next time)') == 2
    for label in ('dot@tiny-s1337', f'{LAST}@tiny-s1337'):
        assert (res / 'runs' / label / 'ckpt.pt').exists()
        assert runs.state(next(r for r in studies.plan('paper', overlay=str(overlay)) if r.label == label),
                          str(overlay))[0] == 'resume'


def test_no_budget_no_start_and_no_cuda_no_paper_scale(tiny):
    overlay, res = tiny
    assert gpu_study.main([f'--overlay={overlay}', '--budget_s=1', *ONE]) == 0
    assert (res / 'paper@tiny' / 'GPU.md').read_text().count('not started: the budget is spent') == 2
    p = subprocess.run([sys.executable, '-m', 'lab.gpu_study'], cwd=REPO, capture_output=True, text=True, timeout=120)
    import torch
    if not torch.cuda.is_available():
        assert p.returncode == 2 and p.stderr.startswith('error: no CUDA device') and 'Traceback' not in p.stderr


def test_the_defaults_fit_a_device_call_and_a_longer_budget_is_refused(capsys):
    assert gpu_study.budget_s + gpu_study.grace_s + gpu_study.OVERHEAD_S <= gpu_study.call_limit_s <= 570
    assert gpu_study.main(['--budget_s=540']) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: budget_s 540 + grace_s 30') and 'call_limit_s 570' in err and err.count('\n') == 1


# ----------------------------------------------------------------------------- virtual clock

class Clock:
    """time.time and time.sleep in virtual seconds: nothing sleeps."""

    def __init__(self):
        self.t = 0.0

    def time(self):
        return self.t

    def sleep(self, s):
        assert s >= 0
        self.t += s


class Sim:
    """One train.py in virtual time, its own process and log. From its launch: setup_s (imports,
    setup), the eval at iter 0, the first step with compile_s of compile, then steps of step_s and
    an eval of eval_s every `ev` steps; a train row every 10 steps (ms: the median of the last 50
    steps, the first 10 sharing the compile as train.py times them), an eval row with the time since
    its start. A SIGTERM: it stops after the step under way (an
    eval under way is cut short, unlogged) and saves; before setup ends, or a second one: it dies
    at once."""

    def __init__(self, clock, label, compile_s, eval_s, due_s, setup_s=6.0, n=5000, ev=250, ei=50, log=10):
        self.clock, self.label, self.dir = clock, label, f'/virtual/{label}'
        self.n, self.ev, self.ei, self.log, self.setup_s = n, ev, ei, log, setup_s
        self.compile_s, self.eval_s = compile_s, eval_s
        self.step_s = (due_s - setup_s - compile_s - (n // ev + 1) * eval_s) / n      # so that it ends at due_s
        assert self.step_s > 0
        self.signals, self.launched = [], None

    def launch(self):
        L = self.launched = self.clock.time()
        self.t_start = t = L + self.setup_s
        self.events, self.step_ends = [], []
        t += self.eval_s
        self.events.append((t, dict(kind='eval', iter=0, time=t - self.t_start, val=4.0)))
        times = []
        for i in range(1, self.n + 1):
            t += self.step_s + (self.compile_s if i == 1 else 0)
            self.step_ends.append(t)
            times.append(self.step_s + (self.compile_s / self.log if i <= self.log else 0))
            if i % self.log == 0:
                ms = sorted(times[-50:])[len(times[-50:]) // 2] * 1000
                self.events.append((t, dict(kind='train', iter=i, ms=ms, tok_s=1.0)))
            if i % self.ev == 0 or i == self.n:
                t += self.eval_s
                self.events.append((t, dict(kind='eval', iter=i, time=t - self.t_start, val=4.0 - i / self.n)))
        self.exit, self.rc, self.sig_t = t, 0, None
        return self

    # the process
    def poll(self):
        return self.rc if self.clock.time() >= self.exit else None

    @property
    def returncode(self):
        return self.poll()

    def send_signal(self, sig):
        now = self.clock.time()
        self.signals.append((now, sig))
        if self.poll() is not None:
            return
        if self.sig_t is not None or now < self.t_start:      # a second signal, or no handler yet
            self.exit, self.rc = now, 1 if self.sig_t is not None else -sig
            return
        self.sig_t = now
        k = bisect.bisect_left(self.step_ends, now)
        in_step = k < len(self.step_ends) and now > self.step_ends[k] - self.step_s - (self.compile_s if k == 0 else 0)
        self.exit = self.step_ends[k] if in_step else now      # the step finishes; an eval is cut short

    def kill(self):
        now = self.clock.time()
        self.signals.append((now, signal.SIGKILL))
        if self.poll() is None:
            self.exit, self.rc = now, -signal.SIGKILL

    # its log
    def rows(self):
        upto = min(self.clock.time(), self.exit)
        k = bisect.bisect_right([t for t, _ in self.events], upto)
        return [r for t, r in self.events[:k]
                if not (r['kind'] == 'eval' and self.sig_t is not None and t > self.sig_t)]


NAMES = ('dot', 'ega', 'ega_mope', 'fox', 'causal_gauss', 'fox_mope_rel')
# (compile s, eval s) of each: together with 6 s of setup, 21 evals and 5000 steps, due at 450 s
PROFILE = dict(dot=(25, 1.0), ega=(45, 1.5), ega_mope=(60, 2.0), fox=(30, 1.2), causal_gauss=(35, 1.0),
               fox_mope_rel=(50, 1.8))


def drive(monkeypatch, due, budget=540.0, grace=30.0, compile_s=None, more=()):
    """gpu_study.schedule over six Sims in virtual time (and more: names of the queue's next runs,
    each like dot): no process, no sleep. Returns the rows, the Sims and the virtual time at which
    schedule returned."""
    clock = Clock()
    sims = [Sim(clock, name, (compile_s or {}).get(name, PROFILE[name.split('#')[0]][0]),
                PROFILE[name.split('#')[0]][1], due.get(name, 450.0)) for name in NAMES + tuple(more)]
    monkeypatch.setattr(gpu_study, 'time', clock)
    monkeypatch.setattr(gpu_study, 'log_rows', lambda sim: sim.rows())
    monkeypatch.setattr(gpu_study, 'start', lambda sim, ov, c: dict(run=sim, proc=sim.launch(), begin=0, n=sim.n,
                                                                     ev=sim.ev, ei=sim.ei))
    monkeypatch.setattr(runs, 'state', lambda run, ov: ('start', 'not started'))
    c = SimpleNamespace(budget_s=budget, grace_s=grace, probe_iters=100, poll_s=1.0, parallel=6)
    rows = gpu_study.schedule(sims, '', c, budget, [])
    return {r['run']: r for r in rows}, {s.label: s for s in sims}, clock.t


def sigterms(sim):
    return [t for t, s in sim.signals if s == signal.SIGTERM]


def test_virtual_six_runs_due_inside_the_budget_all_finish_unsignalled(monkeypatch):
    """Six runs due at 450 s of a 540 s budget: none is stopped; each row reports its start-up
    (setup, the eval at 0 and compile, within a poll) and its ms/step apart."""
    rows, sims, end = drive(monkeypatch, {})
    for name, sim in sims.items():
        assert sim.signals == [], f"{name} signalled at {sim.signals}: it was due at 450 s of 540"
        assert rows[name]['status'] == 'finished' and rows[name]['steps'] == 5000
        assert rows[name]['ms'] == pytest.approx(sim.step_s * 1000)
        true = sim.setup_s + sim.eval_s + sim.compile_s
        assert true - 0.1 <= rows[name]['startup_s'] <= true + 1.1, (name, rows[name]['startup_s'], true)
    assert end <= 451


def test_virtual_runs_that_cannot_fit_get_one_sigterm_and_the_others_finish(monkeypatch):
    """ega and causal_gauss are due at 700 and 650 s: each gets one SIGTERM, early, saves and exits; the
    four due at 450 s are never signalled and finish."""
    rows, sims, end = drive(monkeypatch, dict(ega=700.0, causal_gauss=650.0))
    for name in ('dot', 'ega_mope', 'fox', 'fox_mope_rel'):
        assert sims[name].signals == [] and rows[name]['status'] == 'finished', \
            f"{name}, due at 450 s of 540: signalled at {sims[name].signals}; {rows[name]['status']}"
    for name in ('ega', 'causal_gauss'):
        assert len(sigterms(sims[name])) == 1 and len(sims[name].signals) == 1, f"{name}: {sims[name].signals}"
        assert sigterms(sims[name])[0] < 100            # judged from its log, long before the deadline
        assert rows[name]['status'].startswith('stopped at') and 'past the 540 s budget' in rows[name]['status']
        assert sims[name].rc == 0                       # it saved and exited
    assert end <= 540 + 30


def test_virtual_a_run_still_compiling_at_the_deadline_one_sigterm_then_sigkill(monkeypatch):
    """Its compile outlasts the budget: one SIGTERM at the deadline, SIGKILL at deadline + grace,
    nothing else; a run due 5 s past the deadline gets its one SIGTERM and saves."""
    rows, sims, end = drive(monkeypatch, dict(dot=1200.0, fox=545.0), compile_s=dict(dot=1000.0))
    assert sims['dot'].signals == [(540.0, signal.SIGTERM), (570.0, signal.SIGKILL)]
    assert 'killed at the hard limit' in rows['dot']['status'] and "last eval (iter 0)" in rows['dot']['status']
    assert len(sigterms(sims['fox'])) == 1 and sims['fox'].signals[0][1] == signal.SIGTERM and sims['fox'].rc == 0
    for name in ('ega', 'ega_mope', 'causal_gauss', 'fox_mope_rel'):
        assert sims[name].signals == [] and rows[name]['status'] == 'finished', \
            f"{name}, due at 450 s of 540: signalled at {sims[name].signals}; {rows[name]['status']}"
    assert end <= 540 + 30


def test_virtual_after_a_stop_for_the_budget_no_run_starts(monkeypatch):
    """ega cannot end by the deadline and is stopped early; the queue's next two, which could each end
    alone, never start: on the GPU a refilled slot slowed the others until none of them ended."""
    rows, sims, end = drive(monkeypatch, {'ega': 700.0, 'dot#2': 100.0, 'dot#3': 100.0}, more=('dot#2', 'dot#3'))
    assert len(sigterms(sims['ega'])) == 1 and sigterms(sims['ega'])[0] < 100
    for name in ('dot#2', 'dot#3'):
        assert sims[name].launched is None, f"{name} started at {sims[name].launched}"
        assert rows[name]['status'].startswith('not started: ega was stopped for the budget at '), rows[name]
    assert all(rows[n]['status'] == 'finished' for n in NAMES if n != 'ega')


def test_virtual_a_run_starts_only_with_the_time_a_finished_one_took(monkeypatch):
    """All six end at 450 s of 540: 90 s are left, less than any of them took, so the next two do not
    start (the old rule, 60 s left, started them to be stopped at the deadline)."""
    rows, sims, end = drive(monkeypatch, {}, more=('dot#2', 'dot#3'))
    for name in ('dot#2', 'dot#3'):
        assert sims[name].launched is None
        assert rows[name]['status'].startswith('not started: the budget is spent (under 450') and \
            'the quickest run finished here took as long' in rows[name]['status'], rows[name]
    # dot ends at 250 s and leaves 290 s, more than it took: dot#2 starts then (and ends by 450 s)
    rows, sims, end = drive(monkeypatch, {'dot': 250.0, 'dot#2': 200.0}, budget=540.0, more=('dot#2',))
    assert sims['dot#2'].launched == pytest.approx(250.0, abs=1.5) and rows['dot#2']['status'] == 'finished'
