"""What the CPU can show of the fast CUDA step (the speed issue), checked here for every form:

- no host sync in a training step. On CUDA, reading a device value (.item(), float(t), bool(t), a
  nonzero's size, tolist(), cpu()) makes the host wait for every queued kernel, and the next ones
  start late. train.py's step (get_batch, forward_backward, update) reads none, for every registered
  form and the README's compositions; the loop reads the loss at log steps and the losses at
  evaluations, nowhere else (the statistics an evaluation logs read too: not counted).
- FlexAttention's path (pick_impl's choice on CUDA for a logit map or a learned bias, without dropout)
  gives attend_plain's gradients, and keeps no tensor of every head's T x T weights for backward. The
  fused SDPA path at the CPU's settings: tests/test_model.py.
- SDPA's path at the paper's dropout (0.1; the CPU has no fused kernel with dropout, a stand-in keeps
  what CUDA's does): beside the kernel no form keeps such a tensor, nor hands SDPA a mask that large,
  unless its maths needs one.

Graph breaks and recompiles: tests/test_graphs.py. The kernels' speed needs a GPU (bench.py --device=cuda)."""

import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import model  # noqa: E402
import train  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from train import autocast  # noqa: E402
from test_codegen import every_name  # noqa: E402
from test_train import tiny  # noqa: E402

aten = torch.ops.aten
# the ops whose result on the host depends on the device's values: each waits for the device; and
# indexing by a boolean mask (t[mask], t[mask] = v), whose size is the mask's count
HOST_READS = {aten._local_scalar_dense, aten.nonzero, aten.equal, aten.masked_select, aten._unique2,
              aten.unique_dim, aten.unique_consecutive, aten.repeat_interleave}
MASK_INDEXING = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}


# the same read through Python, which never reaches the dispatcher on a CPU tensor: a copy to the host
# (tolist, numpy, cpu) or a Python number of a tensor. Checked where every tensor is the device's (a
# step's halves): get_batch's offsets are the host's own, where numpy() reads nothing
HOST_COPIES = {'tolist', 'numpy', 'cpu', 'item', '__bool__', '__float__', '__int__', '__index__'}


class HostCopies(TorchFunctionMode):
    """Appends to `seen` the name of every HOST_COPIES call run inside it."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, '__name__', '') in HOST_COPIES:
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


class DeviceReads(TorchDispatchMode):
    """Records every op of HOST_READS run inside it (autograd's backward included), and any marker
    put in `seen` by the caller, in order."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = func.overloadpacket
        if op in HOST_READS or (op in MASK_INDEXING and any(
                i is not None and i.dtype == torch.bool for i in args[1])):
            self.seen.append(op.__name__)
        return func(*args, **(kwargs or {}))


def training_steps(form, n=2, clip=1.0, check_finite=False):
    """The host reads of n steps of train.py's own step halves on a tiny model of form, under bf16
    autocast with the clip and fused AdamW train.py uses."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(**{'n_layer': 1, 'n_head': 2, 'n_embd': 16, 'block_size': 24, 'vocab_size': 65,
                         'dropout': 0.1, **form}))
    opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.99), 'cpu')
    scaler, ctx = torch.amp.GradScaler('cpu', enabled=False), autocast('cpu', 'bfloat16')[1]
    x = torch.randint(0, 65, (3, 24))
    with DeviceReads() as reads, HostCopies(reads.seen):
        for _ in range(n):
            train.forward_backward(m, x, x, ctx, scaler)
            if check_finite:        # a clip that checks the norm is finite: a read of the device
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip, error_if_nonfinite=True)
            train.update(m, opt, scaler, clip)
    return reads.seen


def test_the_detector_sees_each_kind_of_host_read():
    t = torch.tensor([0.5, 0.0])
    for read, name in [(lambda: t.sum().item(), '_local_scalar_dense'), (lambda: bool(t[0]), '_local_scalar_dense'),
                       (lambda: float(t[1]), '_local_scalar_dense'), (lambda: t.nonzero(), 'nonzero'),
                       (lambda: t[t > 0], 'index'), (lambda: torch.equal(t, t), 'equal'),
                       (lambda: t.clone().__setitem__(t > 0, 1.0), 'index_put_')]:
        with DeviceReads() as reads:
            read()
        assert name in reads.seen, (name, reads.seen)
    for read, name in [(lambda: t.tolist(), 'tolist'), (lambda: t.numpy(), 'numpy'), (lambda: t.cpu(), 'cpu'),
                       (lambda: float(t[0]), '__float__'), (lambda: t.sum().item(), 'item')]:
        seen = []
        with HostCopies(seen):
            read()
        assert name in seen, (name, seen)
    assert training_steps(dict(attn='dot'), n=1, check_finite=True), "a clip checking its norm reads the device"


@pytest.mark.parametrize('form', every_name())
def test_no_form_reads_the_device_inside_a_training_step(form):
    assert training_steps(form) == [], f"{form}: host reads in a training step: {training_steps(form)}"


def test_the_loop_reads_the_device_only_to_log_and_evaluate(data_dir, tmp_path, monkeypatch):
    """Between step k and step k + 1 the loop reads the device only where k is a log step or an
    evaluation's, and as often as the figures it prints; a step itself (its micro-steps, from the
    first batch to the update) never does."""
    get_batch, update, at = train.get_batch, train.update, {}
    with DeviceReads() as reads:
        def first_batch(r, it, micro):
            if micro == 0:
                reads.seen.append(('step', it))
                at['it'] = it
            return get_batch(r, it, micro)

        def updated(model, *a):
            update(model, *a)
            reads.seen.append(('stepped', at['it'] + 1))
        monkeypatch.setattr(train, 'get_batch', first_batch)
        monkeypatch.setattr(train, 'update', updated)
        cfg = tiny(data_dir, tmp_path, '--attn=ega', '--log_interval=4', '--eval_interval=6', '--max_iters=12')
        train.train(cfg)
    inside, after, k = False, {}, 0
    for s in reads.seen:
        if isinstance(s, tuple):
            inside, k = s[0] == 'step', s[1]
            after.setdefault(k, 0)
        else:
            assert not inside, f"a host read ({s}) inside the step at iter {k}"
            after[k] = after.get(k, 0) + 1
    # a log step reads its loss; an evaluation one mean per split (train, val, shuffled val), not one
    # per batch. Before the first step (k = 0) come the audit and the first evaluation
    want = {k: (k % 4 == 0) + 3 * (k % 6 == 0) for k in range(1, 13)}
    assert {k: n for k, n in after.items() if k} == want


# ---------------------------------------------------------------------------- FlexAttention's path

def every_heads_weights(t, B, nh, T):
    """Whether t, saved for backward, is a T x T tensor whose storage holds as much as every head's
    weights (B, nh, T, T): an expanded (T, T) or (nh, T, T) one does not."""
    return t.dim() >= 3 and t.shape[-2:] == (T, T) and t.untyped_storage().nbytes() >= B * nh * T * T * t.element_size()


@pytest.fixture
def flex_backward_on_the_cpu(monkeypatch):
    """FlexAttention's front end refuses a backward on the CPU (inductor's CPU kernel has none). Its
    autograd, the higher-order op (what it saves; the gradients of q, k, v and of the tensors a
    score_mod reads), is the one CUDA's compiled kernel sits under; here it runs the dense reference."""
    import torch.nn.attention.flex_attention as fa
    if not hasattr(fa, '_validate_device'):
        pytest.fail(f"torch {torch.__version__}: flex_attention._validate_device is gone; see how this "
                    "torch refuses a CPU backward", pytrace=False)
    monkeypatch.setattr(fa, '_validate_device', lambda *a, **k: None)


@pytest.mark.filterwarnings('ignore:flex_attention called without torch.compile')
@pytest.mark.parametrize('form', every_name())
def test_flex_path_gives_plain_gradients_and_keeps_no_t_by_t(form, flex_backward_on_the_cpu):
    """float64, no dropout (flex drops no weights). Kept: no tensor with the storage of every head's
    T x T weights (B, nh, T, T), for any form: the logit-level ones that keep such weights on SDPA's
    path (conv_paper's map, mope_rel's learned bias) keep none on flex's; qk_gaussian's and
    qk_orthogonal's time mixing is one (T, T) matrix, expanded."""
    B, T, nh = 3, 24, 2
    torch.manual_seed(0)
    m = GPT(GPTConfig(**{'n_layer': 1, 'n_head': nh, 'n_embd': 16, 'block_size': T, 'vocab_size': 65,
                         **form, 'dropout': 0.0})).double()
    logits = m.transformer.h[0].attn.logits
    if logits is not None and not hasattr(logits, 'score_mod'):
        pytest.fail(f"{form}: a logit map without a score_mod cannot take flex", pytrace=False)
    x = torch.randint(0, 65, (B, T))
    grads, kept = {}, []

    def pack(t):
        if every_heads_weights(t, B, nh, T):
            kept.append(tuple(t.shape))
        return t
    for impl in ('plain', 'flex'):
        m.set_impl(impl).zero_grad()
        with torch.autograd.graph.saved_tensors_hooks(pack if impl == 'flex' else (lambda t: t), lambda t: t):
            loss = m(x, x)[1]
        loss.backward()
        grads[impl] = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
    assert grads['flex'].keys() == grads['plain'].keys(), form
    for n, g in grads['plain'].items():
        assert torch.allclose(grads['flex'][n], g, rtol=1e-9, atol=1e-12), (form, n)
    assert not kept, (form, kept)


# ---------------------------------------------------------------------------- SDPA's path at the paper's dropout

SDPA = torch.nn.functional.scaled_dot_product_attention


class FusedSDPA(torch.autograd.Function):
    """scaled_dot_product_attention as a fused kernel keeps it for backward: q, k, v, the mask and the
    output, never the T x T weights (the CPU has no fused kernel with dropout: its math path keeps
    them). Forward only: these tests read what a step keeps, and run no backward."""

    @staticmethod
    def forward(ctx, q, k, v, mask, dropout_p, is_causal, scale):
        with torch.no_grad():
            y = SDPA(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
        ctx.save_for_backward(q, k, v, mask, y)
        return y

    @staticmethod
    def backward(ctx, dy):
        raise NotImplementedError("a stand-in: what it keeps is the test")


@pytest.mark.parametrize('form', [f for f in every_name() if 'dropout' not in f.values[0]])
def test_at_the_papers_dropout_no_form_keeps_t_by_t_beside_the_kernel(form, monkeypatch):
    """At dropout 0.1 (the paper's training) CUDA's fused kernels take what attend() hands SDPA. Beside
    the kernel, a form keeps no tensor of every head's T x T weights for backward, and hands SDPA no mask
    that large, unless its maths needs one (a logit map, conv_paper's, through the written-out path; q and
    k mixed over time is one (T, T) matrix, mope_rel's bias one (nh, T, T) for the batch), or FoX's logit
    meets a T x T positional bias. FoX's forget gate alone once built a (B, nh, T, T) float32 bias under
    dropout, and took it to SDPA as its mask."""
    B, T, nh = 3, 24, 2
    masks, kept = [], []

    def fused(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        masks.append(None if attn_mask is None else tuple(attn_mask.shape))
        return FusedSDPA.apply(q, k, v, attn_mask, dropout_p, is_causal, scale)
    monkeypatch.setattr(model.F, 'scaled_dot_product_attention', fused)

    def pack(t):
        if every_heads_weights(t, B, nh, T):
            kept.append(tuple(t.shape))
        return t
    torch.manual_seed(0)
    m = GPT(GPTConfig(**{'n_layer': 1, 'n_head': nh, 'n_embd': 16, 'block_size': T, 'vocab_size': 65,
                         **form, 'dropout': 0.1})).train()
    x = torch.randint(0, 65, (B, T))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast('cpu', dtype=torch.bfloat16):
        m(x, x)
    parts = set(form.get('attn', 'dot').split('+')) | {form.get('pos', 'learned')}
    needs = {n for n, v in model.ATTN.items() if v.keeps_tt and v.slot == 'logits'}
    # FoX's logit differs by sequence: added to a T x T positional bias it makes one (B, nh, T, T) mask
    # under dropout (without, it rides a channel beside the bias); apart, it would need its own argument
    if 'fox' in parts and {n for n, v in model.POS.items() if v.slot == 'bias'} & parts:
        needs |= parts
    big_masks = [s for s in masks if s is not None and len(s) == 4 and s[0] == B]
    assert bool(kept or big_masks) == bool(parts & needs), (form, kept, masks)
