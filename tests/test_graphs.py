"""torch.compile sees each form as one graph (the speed issue): every registered form and the README's
compositions, at the paper's width (8 heads, C = 256, T = 256; one layer, as graph breaks do not depend on
depth), compiled with fullgraph=True (a graph break is an error) through aot_eager (forward and backward
traced, nothing built: minutes, not the hour inductor would take). A run's calls then compile nothing new:

- training steps: one graph;
- an evaluation (eval mode, no grad) at the training length: one more, and training again reuses the first;
- an evaluation at T = 64 (lab/longctx.py and sample.py's shorter windows): at most one more, and each
  length, evaluated again, compiles nothing.

Slow (about 5 minutes on 2 cores, 2026-12-07): run by .ci/run with the slow tests."""

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from model import GPT, GPTConfig  # noqa: E402
from test_codegen import every_name  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize('form', every_name())
def test_one_graph_and_no_recompiles(form):
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters
    dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    m = GPT(GPTConfig(**dict(dict(n_layer=1, n_head=8, n_embd=256, block_size=256, vocab_size=65), **form)))
    c = torch.compile(m, backend='aot_eager', fullgraph=True)
    x, y = torch.randint(0, 65, (2, 2, 256))
    graphs = lambda: counters['stats']['unique_graphs']     # noqa: E731

    def train(n=2):
        m.train()
        for _ in range(n):
            _, loss = c(x, y)
            loss.backward()

    def evaluate(T):
        m.eval()
        with torch.no_grad():
            c(x[:, :T], y[:, :T])

    train()
    assert graphs() == 1, f"{form}: {graphs()} graphs for training steps"
    evaluate(256), evaluate(256), train(1)
    assert graphs() == 2, f"{form}: {graphs()} graphs after an evaluation and a step more (want 2)"
    evaluate(64)
    n = graphs()
    assert n <= 3, f"{form}: {n} graphs after an evaluation at T = 64 (want at most 3)"
    evaluate(64), evaluate(256), evaluate(64), train(1)
    assert graphs() == n, f"{form}: {graphs() - n} recompiles where every length and mode had been seen"
    assert not counters['graph_break'], dict(counters['graph_break'])
