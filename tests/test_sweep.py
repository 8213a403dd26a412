"""The registry's sweeps in full (marker 'sweep': `python -m pytest -m sweep`; .ci/run's sweep step
runs its two halves at once, SPECTRAL_TEST_SHARD=0/2 and 1/2): every composition of 2 and 3
attention parts under every positional encoding, at the tests' long window and the CPU study's,
its declared verdict against the exact audit (causality.sweep); and every composition's logits
through FlexAttention's forward against attend_plain in float64. tests/test_registry.py runs a third of its every-composition
tests in the suite and marks the other two thirds 'sweep', so that this step runs them too."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import causality  # noqa: E402
import model  # noqa: E402
from test_registry import COMPOSITIONS, logits_by_path  # noqa: E402

pytestmark = [pytest.mark.sweep, pytest.mark.usefixtures('one_thread'),
              pytest.mark.filterwarnings('ignore:flex_attention called without torch.compile')]


@pytest.mark.parametrize('T', causality.SWEEP_T[1:])
@pytest.mark.parametrize('pos', list(model.POS))
def test_every_composition_audits_as_declared_under_every_encoding(pos, T):
    bad = causality.sweep((T,), (pos,), out=sys.stderr)
    assert not bad, [(a, p, t, str(au)) for a, p, t, au in bad]


@pytest.mark.parametrize('attn', COMPOSITIONS)
def test_every_composition_through_flex_equals_plain(attn):
    pos = list(model.POS)[COMPOSITIONS.index(attn) % len(model.POS)]
    d = logits_by_path(attn, pos, COMPOSITIONS.index(attn), ('flex',))['flex']
    assert d < 1e-8, (attn, pos, d)
