"""lab/emd.py: the EMD test of the FourierQK paper's validation (row 24 of the ledger)."""
import builtins
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lab import emd  # noqa: E402


class FakeEMD:
    """Returns the given IMFs, as PyEMD's EMD().emd would."""
    def __init__(self, imfs):
        self.imfs = imfs

    def emd(self, x, max_imf):
        return self.imfs[:max_imf]


def test_an_imfs_period_is_twice_the_length_over_its_zero_crossings():
    T = 128
    t = np.arange(T) + 0.5
    imfs = np.stack([np.cos(2 * math.pi * t / p) for p in (4, 16, 64)])     # 2 T / p zero crossings each
    got = emd.periods(np.zeros(T), FakeEMD(imfs), 3)
    assert [round(p) for p in got] == [4, 16, 64]
    assert emd.periods(np.zeros(T), FakeEMD(np.ones((1, T))), 1) == [float('inf')]   # no crossing


def test_medians_skip_missing_and_infinite_periods():
    assert emd.medians([[2.0, 8.0], [4.0], [6.0, float('inf')]], 2) == [4.0, 8.0]


def test_without_the_optional_package_one_line_says_how_to_get_it(monkeypatch, capsys):
    real = builtins.__import__

    def no_pyemd(name, *a, **kw):
        if name == 'PyEMD':
            raise ImportError(name)
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, '__import__', no_pyemd)
    assert emd.main([]) == 2
    assert 'pip install EMD-signal' in capsys.readouterr().err


def test_a_bad_option_is_one_line():
    assert emd.main(['--windowz=3']) == 2
