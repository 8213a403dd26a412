"""torch.compile's CUDA code, generated on a CPU: inductor writes the Triton kernels of every registered
form's training step (forward and backward) as it would for a GPU, and no kernel is built or run.

The CPU compiles through C++, so a fault of inductor's Triton code generation never shows in the
rest of the suite; the paper's EGA at T = 256 failed to compile on the first GPU for one
(pytorch#180221, torch <= 2.11: a split scan, a cumsum over more than 128 steps, with a broadcast value
fused in). This test asks for inductor's Triton backend on the CPU (cpu_backend='triton', which needs
the triton package: the CUDA build of torch brings it) and stubs the two calls that would need a GPU:
the kernel build and the backend's hash. It is marked `codegen` and left out of the plain suite:
.ci/run runs it under this machine's torch with triton beside it, and under the GPU machine's (2.11),
each in a virtual environment of its own:

    python -m pytest -m codegen tests/test_codegen.py

The size matters: inductor splits a scan only for fewer rows than 64 per core (here B x nh = 4 rows
of T = 256), as on a GPU at the paper's batch (512 rows, 132 SMs)."""

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import model  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from test_precision import BIAS_COMPOSITIONS, README_COMPOSITIONS  # noqa: E402

pytestmark = pytest.mark.codegen

def every_name():
    out = [dict(attn=a) for a in model.ATTN] + [dict(pos=p) for p in model.POS if p != 'learned']
    out += list(README_COMPOSITIONS.values()) + list(BIAS_COMPOSITIONS.values())
    # the gates' other path (no dropout: the per-key logit rides the q.k channel), as the CPU study runs
    out += [dict(attn=a, dropout=0.0) for a, v in model.ATTN.items() if v.slot in ('gate', 'filter_gate') or v.of]
    return [pytest.param(f, id=' '.join(f'{k}={v}' for k, v in f.items())) for f in out]


@pytest.fixture(scope='module')
def triton_on_the_cpu():
    try:
        import triton  # noqa: F401
    except ImportError:
        pytest.fail("this test needs the triton package (the CUDA build of torch brings it); "
                    ".ci/run installs the GPU machine's torch for it", pytrace=False)
    import torch._functorch.config as functorch_config
    import torch._inductor.async_compile as async_compile
    import torch._inductor.config as inductor_config
    import torch.utils._triton as utils_triton
    saved = (inductor_config.cpu_backend, functorch_config.force_non_lazy_backward_lowering,
             async_compile.AsyncCompile.triton, utils_triton.triton_hash_with_backend)
    built = []

    def build(self, kernel_name, source_code, *args, **kw):     # the kernel is written: count it
        built.append(kernel_name)

    inductor_config.cpu_backend = 'triton'
    functorch_config.force_non_lazy_backward_lowering = True    # the backward's code at the first call
    async_compile.AsyncCompile.triton = build
    utils_triton.triton_hash_with_backend = lambda: 'codegen-only'     # asks the GPU driver otherwise
    yield built
    (inductor_config.cpu_backend, functorch_config.force_non_lazy_backward_lowering,
     async_compile.AsyncCompile.triton, utils_triton.triton_hash_with_backend) = saved
    torch._dynamo.reset()


@pytest.mark.parametrize('form', every_name())
def test_every_form_has_triton_code_for_its_training_step(form, triton_on_the_cpu):
    torch._dynamo.reset()
    built = triton_on_the_cpu
    built.clear()
    torch.manual_seed(0)
    cfg = GPTConfig(**{'n_layer': 1, 'n_head': 2, 'n_embd': 32, 'block_size': 256, 'vocab_size': 65,
                       'dropout': 0.1, **form})
    m = GPT(cfg).train()
    idx = torch.randint(65, (2, 256))
    try:
        with torch.autocast('cpu', dtype=torch.bfloat16):
            torch.compile(m)(idx, idx)[1].backward()
    except Exception as e:      # the stubbed kernels cannot run; a codegen fault comes first
        msg = str(e)
        assert 'list indices must be integers' not in msg, f"{form}: {msg.splitlines()[0]}"
        # the first kernel the compiled step launches is a stub: any other error is inductor's own
        assert built and "object has no attribute 'run'" in msg, f"{form}: {type(e).__name__}: {msg[:500]}"
    else:
        pytest.fail(f"{form}: the compiled step ran, so no kernel went through the stub")
