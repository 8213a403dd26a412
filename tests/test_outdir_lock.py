"""runtime.OutDirLock, one run per out_dir: a lock that holds no 'pid host' (a crash or a full disk left it)
is stale and taken over; one from another host is refused with the way to free it; two runs that find
one stale lock at the same moment never both take it; a full disk at lock time starts nothing."""

import errno
import multiprocessing
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import runtime  # noqa: E402
from configurator import ConfigError  # noqa: E402


def dead_pid():
    p = subprocess.Popen([sys.executable, '-c', 'pass'])
    p.wait()
    return p.pid


@pytest.mark.parametrize('text', ['', '\n', 'garbage', '123', f' {socket.gethostname()}',
                                  f'{dead_pid()} {socket.gethostname()}\n'])
def test_a_lock_no_live_run_holds_is_taken_over(tmp_path, text):
    (tmp_path / 'run.lock').write_text(text)
    lock = runtime.OutDirLock(str(tmp_path)).acquire()
    assert (tmp_path / 'run.lock').read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    lock.release()
    assert not (tmp_path / 'run.lock').exists()


def test_a_lock_of_another_host_is_refused_with_the_way_to_free_it(tmp_path):
    (tmp_path / 'run.lock').write_text('4242 another-machine\n')
    with pytest.raises(ConfigError, match=f"pid 4242 on another-machine.*if the run is gone, delete "
                                          f"{tmp_path / 'run.lock'}"):
        runtime.OutDirLock(str(tmp_path)).acquire()
    (tmp_path / 'run.lock').write_text(f'{os.getpid()} {socket.gethostname()}\n')     # a live run here
    with pytest.raises(ConfigError, match='wait for it to end, or use another out_dir$'):
        runtime.OutDirLock(str(tmp_path)).acquire()


def test_a_full_disk_at_lock_time_starts_nothing_and_leaves_no_lock(tmp_path, monkeypatch):
    def full(files):
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(runtime, 'write_atomic', full)
    with pytest.raises(ConfigError, match=r'cannot write .*run.lock \(No space left on device\): a full disk'):
        runtime.OutDirLock(str(tmp_path)).acquire()
    assert not (tmp_path / 'run.lock').exists()


def take(d, barrier, results, hold):
    barrier.wait()
    try:
        runtime.OutDirLock(d).acquire()
        results.put('took')
    except ConfigError:
        results.put('refused')
    hold.wait(10)           # the taker stays alive while the other checks


def test_two_runs_that_find_one_stale_lock_never_both_take_it(tmp_path):
    ctx = multiprocessing.get_context('fork')
    stale = f'{dead_pid()} {socket.gethostname()}\n'
    for i in range(60):
        d = tmp_path / str(i)
        d.mkdir()
        (d / 'run.lock').write_text(stale)
        barrier, results, hold = ctx.Barrier(2), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=take, args=(str(d), barrier, results, hold)) for _ in range(2)]
        for p in procs:
            p.start()
        got = sorted(results.get(timeout=30) for _ in procs)
        hold.set()
        for p in procs:
            p.join(30)
        assert got == ['refused', 'took'], (i, got)
