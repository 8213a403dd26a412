"""Tests for model.py: shapes and gradients of every variant, the causality audit,
EGA against a plain T x T reference (docs/variants.md §2), MOPE (docs/variants.md §1), RoPE,
ALiBi, config validation and generation. Tiny models only; CPU; float64 where the
comparison is meant to be exact."""

import functools
import math
import sys
import time
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # import model.py without needing a conftest or install

import causality  # noqa: E402
import model  # noqa: E402
from model import GPT, GPTConfig, CausalSelfAttention  # noqa: E402


pytestmark = pytest.mark.usefixtures('one_thread')   # tests/conftest.py


def attend_bnth(*args, **kw):
    """model.attend returns (B, T, nh, hv); the references here are (B, nh, T, hv)."""
    return model.attend(*args, **kw).transpose(1, 2)


def tiny(**kw):
    base = dict(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    base.update(kw)
    return GPTConfig(**base)


EGA_NORMS = model.CHOICES['ega_norm']


def forms(kind):
    """Every form of each registered variant of `kind` ('attn' or 'pos'): its name and
    each combination of the options it reads that have a fixed set of values. A key
    such as 'ega ega_norm=window'; the value is the GPTConfig fields that build it."""
    out = {}
    for name, v in (model.ATTN if kind == 'attn' else model.POS).items():
        opts = [o for o in v.options if o in model.CHOICES]
        for vals in product(*(model.CHOICES[o] for o in opts)):
            key = ' '.join([name] + [f'{o}={x}' for o, x in zip(opts, vals)])
            out[key] = {kind: name, **dict(zip(opts, vals))}
    return out


ATTN_FORMS, POS_FORMS = forms('attn'), forms('pos')
# every attention form with every positional form: the options of one never touch the other's
PAIRS = [(a, p) for a in ATTN_FORMS for p in POS_FORMS
         # fnet has no attention logits: it refuses an encoding that acts on them (a GPTConfig error)
         if ATTN_FORMS[a]['attn'] != 'fnet' or POS_FORMS[p]['pos'] in model.FNET_POS]


def pair_config(a, p, **kw):
    return {**ATTN_FORMS[a], **POS_FORMS[p], **kw}


# -----------------------------------------------------------------------------
# 1. shapes and gradients

@pytest.mark.parametrize('a,p', PAIRS)
def test_forward_backward_every_variant(a, p):
    torch.manual_seed(0)
    cfg = tiny(**pair_config(a, p, dropout=0.1))
    m = GPT(cfg).train()
    B, T, V = 3, cfg.block_size, cfg.vocab_size                  # T == block_size: every wpe row used
    idx = torch.randint(V, (B, T))
    tgt = torch.randint(V, (B, T))
    logits, loss = m(idx, tgt)
    assert logits.shape == (B, T, V)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    params = list(m.named_parameters())
    assert params
    for name, p in params:
        assert p.requires_grad
        assert p.grad is not None, f'{name} got no gradient'
        assert torch.isfinite(p.grad).all(), f'{name} has a non-finite gradient'
    # without targets: no loss; a shorter sequence works too
    logits2, loss2 = m.eval()(idx[:, :5])
    assert logits2.shape == (B, 5, V) and loss2 is None


def test_forward_rejects_sequence_longer_than_block():
    m = GPT(tiny())
    with pytest.raises(ValueError):
        m(torch.zeros(1, 17, dtype=torch.long))


# -----------------------------------------------------------------------------
# 2. the causality audit

C, L = 'causal', 'LEAKS'
# the expected audit verdict of every form of every variant, written out: a variant
# (or a new value of one of its options) without an entry fails the tests below.
# A pair (attention, positions) leaks when either of its forms does.
EXPECTED_ATTN = {
    'dot': C,
    'ega ega_norm=prefix': C,
    'ega ega_norm=window': L,       # published: window statistics see the future
    'ega ega_norm=none': C,
    'fox': C,
    'ega_fox ega_norm=prefix': C,
    'ega_fox ega_norm=window': L,   # the EGA part's window statistics
    'ega_fox ega_norm=none': C,
    # the EGA paper's ablations (tests/test_ablations.py)
    'conv': C,                      # non-negative lags only
    'conv_paper': C,                # dot attention with fixed logit scales near the edges
    'scale_init scale_init_rest=torch': C,
    'scale_init scale_init_rest=normal': C,
    # the filter-bank gates: window z-scores leak as EGA's do
    'ega_morlet ega_norm=prefix gate_signal=proj': C,
    'ega_morlet ega_norm=prefix gate_signal=channel_mean': C,
    'ega_morlet ega_norm=window gate_signal=proj': L,  # window statistics
    'ega_morlet ega_norm=window gate_signal=channel_mean': L,  # window statistics
    'ega_morlet ega_norm=none gate_signal=proj': C,
    'ega_morlet ega_norm=none gate_signal=channel_mean': C,
    'flux ega_norm=prefix gate_signal=proj': C,
    'flux ega_norm=prefix gate_signal=channel_mean': C,
    'flux ega_norm=window gate_signal=proj': L,  # window statistics
    'flux ega_norm=window gate_signal=channel_mean': L,  # window statistics
    'flux ega_norm=none gate_signal=proj': C,
    'flux ega_norm=none gate_signal=channel_mean': C,
    'phase ega_norm=prefix gate_signal=proj': C,
    'phase ega_norm=prefix gate_signal=channel_mean': C,
    'phase ega_norm=window gate_signal=proj': L,  # window statistics
    'phase ega_norm=window gate_signal=channel_mean': L,  # window statistics
    'phase ega_norm=none gate_signal=proj': C,
    'phase ega_norm=none gate_signal=channel_mean': C,
    'daub ega_norm=prefix gate_signal=proj daub_order=2': C,
    'daub ega_norm=prefix gate_signal=proj daub_order=4': C,
    'daub ega_norm=prefix gate_signal=channel_mean daub_order=2': C,
    'daub ega_norm=prefix gate_signal=channel_mean daub_order=4': C,
    'daub ega_norm=window gate_signal=proj daub_order=2': L,  # window statistics
    'daub ega_norm=window gate_signal=proj daub_order=4': L,  # window statistics
    'daub ega_norm=window gate_signal=channel_mean daub_order=2': L,  # window statistics
    'daub ega_norm=window gate_signal=channel_mean daub_order=4': L,  # window statistics
    'daub ega_norm=none gate_signal=proj daub_order=2': C,
    'daub ega_norm=none gate_signal=proj daub_order=4': C,
    'daub ega_norm=none gate_signal=channel_mean daub_order=2': C,
    'daub ega_norm=none gate_signal=channel_mean daub_order=4': C,
    # the FourierQK family: every bilateral FFT form and control leaks, the one-sided filters do not
    'fourier_qk fourier_norm=l2': L,
    'fourier_qk fourier_norm=sum': L,
    'multi_fourier_qk fourier_norm=l2': L,
    'multi_fourier_qk fourier_norm=sum': L,
    'fourier_qk_causal': C,         # one-sided kernel, FFT zero-padded to 2T: no wrap-around
    'causal_gauss': C,
    'causal_mexhat': C,
    'causal_morlet': C,
    'random_qk': L,
    'mexhat_qk': L,
    'dc_qk': C,                     # bilateral, but every logit of a row is m_q . m_k: uniform attention
    'dc_gauss_qk': L,               # the Gaussian around bin 0 reaches the other bins
    'nyquist_qk': L,
    'morlet_xcorr': L,
    'qk_orthogonal': L,
    'qk_gaussian': L,
    'fnet': L,
    # beyond the papers (docs/variants.md §7)
    'dconv dconv_init=identity': C,  # three taps reaching back only
    'dconv dconv_init=torch': C,
}
EXPECTED_POS = {
    'learned': C,
    'sin': C,
    'mope mope_init=paper': C,
    'mope mope_init=sin': C,
    'mope_learned mope_init=paper': C,      # MOPE with the rule on the envelope: a table of positions
    'mope_learned mope_init=sin': C,
    'rope': C,
    'alibi': C,
    'none': C,
    'mope_rel': C,                  # a bias of i - j >= 0; attend masks above the diagonal
}


AUDIT_T = (16, 64)      # a short and a long window: a leak may need a long one to show


@functools.lru_cache(maxsize=None)
def config_audit(a, p, T):
    return causality.audit(GPTConfig(**pair_config(a, p)), T=T)


def expected(a, p):
    for key, table in ((a, EXPECTED_ATTN), (p, EXPECTED_POS)):
        if key not in table:
            pytest.fail(f"'{key}' has no entry in the expected audit table: add its verdict")
    return L if L in (EXPECTED_ATTN[a], EXPECTED_POS[p]) else C


# positional encodings composed (--pos=a+b), with their expected verdict (the attention
# compositions are every one, in tests/test_registry.py)
COMPOSED_POS = {'learned+alibi': C, 'learned+mope_rel': C, 'rope+alibi': C, 'mope+rope': C}


def test_the_plain_path_keeps_large_forget_logits_finite():
    """conv_paper's factor takes the plain path; with FoX beside it the per-key logit -c_j reaches
    T |log f| (about 390 here), whose exp overflows float32 unless shifted."""
    torch.manual_seed(0)
    m = GPT(tiny(attn='fox+conv_paper', block_size=128, fox_bias=-3.0)).eval()
    with torch.no_grad():
        assert torch.isfinite(m(torch.randint(11, (1, 128)))[0]).all()


def test_a_new_variant_is_one_part_and_one_registry_entry(monkeypatch):
    """The redesign's promise, kept: a toy variant, soft-capped logits 30 tanh(s / 30), is a
    small module and a registry entry (here, in this test, touching nothing in model.py); it
    trains, passes the audit, composes with a gate and computes the formula written out."""
    class SoftCap(nn.Module):
        def __init__(self, cfg):
            super().__init__()

        def forward(self, s):
            return 30 * torch.tanh(s / 30)

    monkeypatch.setitem(model.ATTN, 'softcap', model.Variant('soft-capped logits', slot='logits',
                                                             part=SoftCap))
    torch.manual_seed(0)
    cfg = tiny(attn='softcap', pos='alibi', dropout=0.1)
    m = GPT(cfg)
    idx = torch.randint(11, (2, 16))
    m.train()(idx, idx)[1].backward()
    assert causality.audit(cfg).causal and causality.audit(tiny(attn='softcap+fox')).causal
    mod = m.transformer.h[0].attn.double().eval()
    x = torch.randn(2, 16, cfg.n_embd, dtype=torch.float64)
    bias = model.alibi_bias(cfg.n_head, 16).double()
    B, T, C = x.shape
    q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in mod.c_attn(x).split(C, dim=2))
    s = 30 * torch.tanh(q @ k.transpose(-1, -2) / math.sqrt(C // 2) / 30) + bias
    A = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf')).softmax(-1)
    want = mod.c_proj((A @ v).transpose(1, 2).reshape(B, T, C))
    with torch.no_grad():
        assert (mod(x, None, bias) - want).abs().max().item() < 1e-12
        # (the cap is there: at logits near 1 it moves them by about s^3 / 2700, far above 1e-12)


def test_ega_plus_fox_is_ega_fox():
    torch.manual_seed(0)
    a = GPT(tiny(attn='ega_fox'))
    torch.manual_seed(0)
    b = GPT(tiny(attn='ega+fox'))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    idx = torch.randint(11, (2, 16))
    assert torch.equal(a.eval()(idx)[0], b.eval()(idx)[0])
    assert model.components('fox+causal_gauss') == ('fox', 'causal_gauss')
    # the order written does not matter: the parts come in the order the attention applies them
    assert model.components('causal_gauss+fox') == ('fox', 'causal_gauss')
    assert model.components('fox+ega') == model.components('ega_fox') == ('ega', 'fox')
    assert model.components('daub+conv+fox') == ('fox', 'conv', 'daub')
    assert model.attn_options('ega+causal_gauss') == ('ega_norm', 'ega_alpha', 'ega_tau', 'filter_taps',
                                                      'filter_learned')


@pytest.mark.parametrize('attn,msg', [
    ('causal_gauss+fourier_qk_causal', 'both fill the q, k transform'), ('ega+ega', 'ega comes twice'),
    ('ega_fox+fox', 'fox comes twice'), ('fnet+fox', 'fnet combines with nothing'), ('dot+ega', 'dot combines'),
    ('ega_morlet+daub', 'both fill the filter-bank gate'), ('ega+nope', "unknown name 'nope'")])
def test_bad_compositions_say_why(attn, msg):
    with pytest.raises(ValueError, match=msg):
        GPTConfig(attn=attn)


@pytest.mark.parametrize('pos', list(COMPOSED_POS))
@pytest.mark.parametrize('attn', ['dot', 'fox'])
def test_composed_positions_audit_as_expected_and_train(pos, attn):
    cfg = tiny(pos=pos, attn=attn)
    assert causality.audit(cfg).verdict == COMPOSED_POS[pos]
    assert model.pos_components(pos) == tuple(sorted(pos.split('+'), key=list(model.POS).index))
    torch.manual_seed(0)
    m = GPT(tiny(pos=pos, attn=attn, dropout=0.1)).train()
    idx = torch.randint(11, (2, 16))
    m(idx, idx)[1].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


@pytest.mark.parametrize('pos,msg', [
    ('learned+sin', 'learned and sin both give a table'), ('alibi+mope_rel', 'both give a bias'),
    ('none+alibi', 'none combines with nothing'), ('rope+rope', 'rope comes twice'),
    ('learned+alibx', "unknown name 'alibx'")])
def test_bad_position_compositions_say_why(pos, msg):
    with pytest.raises(ValueError, match=msg):
        GPTConfig(pos=pos)


@pytest.mark.parametrize('table,forms_', [(EXPECTED_ATTN, ATTN_FORMS), (EXPECTED_POS, POS_FORMS)],
                         ids=['attn', 'pos'])
def test_expected_tables_match_the_registry(table, forms_):
    assert set(table) == set(forms_), (
        f'missing: {sorted(set(forms_) - set(table))}, stale: {sorted(set(table) - set(forms_))}')


@pytest.mark.parametrize('T', AUDIT_T)
@pytest.mark.parametrize('a,p', PAIRS)
def test_audit_verdict(a, p, T):
    want = expected(a, p)
    au = config_audit(a, p, T)
    assert isinstance(au, causality.Audit)
    assert au.verdict == want, str(au)
    if want == C:
        assert au.causal and au.max_change <= au.tol and au.batch_change <= au.tol, str(au)
    else:
        assert not au.causal and au.max_change > 1e-6, str(au)
        assert au.batch_change <= au.tol, str(au)               # the leak is in time, not across the batch


@pytest.mark.parametrize('a,p', PAIRS)
def test_config_leaks_flag_agrees_with_audit(a, p):
    cfg = GPTConfig(**pair_config(a, p))
    for T in AUDIT_T:
        au = config_audit(a, p, T)
        assert cfg.leaks == (not au.causal), f'{cfg.leaks=} but audit says {au} at T={T}'
    assert cfg.leaks == (expected(a, p) == L)


def test_audit_is_fast_for_every_variant():
    # the audit runs at every start-up and in the tests: tiny_config must keep it small
    for a, p in [(a, 'learned') for a in ATTN_FORMS] + [('dot', p) for p in POS_FORMS]:
        cfg = GPTConfig(**pair_config(a, p))
        causality.audit(cfg)                                        # warm-up
        took = []
        for _ in range(3):                                      # the best of 3: a GC pause does not count
            t0 = time.process_time()                            # CPU time: a busy machine does not count
            causality.audit(cfg)
            took.append(time.process_time() - t0)
        assert min(took) < 0.1, (a, p, took)


def test_shrink_length():
    T, T_tiny = 256, 24
    assert causality.shrink_length(4, T, T_tiny) == 4               # a few lags fit the tiny window
    assert causality.shrink_length(12, T, T_tiny) == 12
    assert causality.shrink_length(128, T, T_tiny) == 12            # half the window stays half
    assert causality.shrink_length(256, T, T_tiny) == 24
    assert causality.shrink_length(300, T, T_tiny) > T_tiny         # longer than the window stays longer


def test_tiny_config_shrinks_a_variants_lengths(monkeypatch):
    @dataclass
    class WithTaps(GPTConfig):                                  # a variant with lengths in tokens
        taps: int = 128
        lags: int = 4

    monkeypatch.setitem(model.ATTN, 'dot', model.Variant('dot', lengths=('taps', 'lags')))
    small = causality.tiny_config(WithTaps(block_size=256), T=24)
    assert (small.block_size, small.taps, small.lags) == (24, 12, 4)
    assert causality.tiny_config(WithTaps(block_size=256, taps=256), T=24).taps == 24


V_TOY, D_TOY = 13, 6


class LeakyToy(nn.Module):
    """Adds the whole-sequence mean over time: every position sees the future."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V_TOY, D_TOY)
        self.head = nn.Linear(D_TOY, V_TOY)

    def forward(self, idx):
        h = self.emb(idx)                                       # (B, T, D)
        return self.head(h + h.mean(1, keepdim=True))          # (B, T, V)


class CausalToy(LeakyToy):
    """Cumulative mean over time: causal. Returns a tuple like GPT does."""

    def forward(self, idx):
        h = self.emb(idx)
        n = torch.arange(1, idx.shape[1] + 1, dtype=h.dtype)[None, :, None]
        return self.head(h + h.cumsum(1) / n), None


class BatchLeakToy(LeakyToy):
    """Causal in time, but mixes the sequences of a batch."""

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(h + h.mean(0, keepdim=True))


def test_audit_catches_a_leaky_toy_and_passes_a_causal_one():
    torch.manual_seed(0)
    leaky = causality.audit(LeakyToy())
    assert not leaky.causal and leaky.verdict == 'LEAKS' and leaky.max_change > 1e-6
    ok = causality.audit(CausalToy())
    assert ok.causal and ok.verdict == 'causal' and ok.max_change <= 1e-9 and ok.batch_change <= 1e-9
    mixed = causality.audit(BatchLeakToy())
    assert not mixed.causal and mixed.max_change <= 1e-9 and mixed.batch_change > 1e-6


@pytest.mark.parametrize('ega_norm,want', [('prefix', True), ('window', False)])
def test_audit_of_a_model_instance_leaves_it_untouched(ega_norm, want):
    torch.manual_seed(1)
    m = GPT(tiny(attn='ega', pos='mope', ega_norm=ega_norm, dropout=0.1))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    m.train()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    a = causality.audit(m)
    assert a.causal is want, str(a)
    assert m.training                                           # the original stays in train mode
    for k, v in m.state_dict().items():
        assert v.dtype == before[k].dtype, k
        assert torch.equal(v, before[k]), k
    assert all(p.dtype == torch.float32 for p in m.parameters())


# -----------------------------------------------------------------------------
# 3. EGA against a plain reference (docs/variants.md §2)

def ref_z(e, mode):
    """z over the last (time) axis, written out; std floored at 1e-8."""
    if mode == 'none':
        return e.clone()
    if mode == 'window':
        m = e.mean(-1, keepdim=True)
        sd = ((e - m) ** 2).mean(-1, keepdim=True).sqrt().clamp_min(1e-8)
        return (e - m) / sd
    assert mode == 'prefix'
    z = torch.empty_like(e)
    for j in range(e.shape[-1]):
        w = e[..., :j + 1]
        m = w.mean(-1)
        sd = ((w - m[..., None]) ** 2).mean(-1).sqrt().clamp_min(1e-8)
        z[..., j] = (e[..., j] - m) / sd
    return z


def ref_gate(e, alpha, tau, mode):
    return torch.sigmoid(alpha[:, None] * (ref_z(e, mode) - tau[:, None]))   # (B, nh, T)


def ref_attention(mod, x, rope=None, bias=None, gated=True):
    """CausalSelfAttention written out with an explicit T x T weight matrix."""
    B, T, Cx = x.shape
    nh, hs = mod.nh, Cx // mod.nh
    qkv = x @ mod.c_attn.weight.T + mod.c_attn.bias
    q, k, v = (t.reshape(B, T, nh, hs).transpose(1, 2) for t in qkv.split(Cx, dim=2))
    if rope is not None:
        q, k = model.rotate(q, *rope), model.rotate(k, *rope)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)            # (B, nh, T, T)
    if bias is not None:
        scores = scores + bias
    if 'fox' in mod.gates:
        scores = scores + ref_forget_bias(x @ mod.gates['fox'].forget.weight.T + mod.gates['fox'].forget.bias)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    A = torch.softmax(scores.masked_fill(future, float('-inf')), dim=-1)
    if gated and 'ega' in mod.gates:
        e = (x @ mod.gates['ega'].energy.weight.T + mod.gates['ega'].energy.bias).transpose(1, 2)      # (B, nh, T)
        g = ref_gate(e, mod.gates['ega'].alpha, mod.gates['ega'].tau, mod.gates['ega'].norm)
        A = A * g[:, :, None, :]
        A = A / A.sum(-1, keepdim=True).clamp_min(1e-8)
    y = (A @ v).transpose(1, 2).reshape(B, T, Cx)
    return y @ mod.c_proj.weight.T + mod.c_proj.bias


def ref_forget_bias(a):
    """FoX written out: D_ij = sum over l = j+1..i of log sigmoid(a_l), per head.
    a: (B, T, nh) gate pre-activations; returns (B, nh, T, T), zero on and above the diagonal."""
    B, T, nh = a.shape
    logf = torch.log(torch.sigmoid(a)).transpose(1, 2)         # (B, nh, T)
    D = torch.zeros(B, nh, T, T, dtype=a.dtype)
    for i in range(T):
        for j in range(i):
            D[:, :, i, j] = logf[:, :, j + 1:i + 1].sum(-1)
    return D


def random_ega_module(ega_norm, seed=0, T=12):
    torch.manual_seed(seed)
    cfg = tiny(attn='ega', ega_norm=ega_norm, block_size=T)
    mod = CausalSelfAttention(cfg).double().eval()
    with torch.no_grad():
        mod.gates['ega'].alpha.copy_(torch.empty(cfg.n_head, dtype=torch.float64).uniform_(0.5, 3.0))
        mod.gates['ega'].tau.copy_(torch.empty(cfg.n_head, dtype=torch.float64).uniform_(-0.7, 0.7))
        mod.gates['ega'].energy.weight.normal_(0.0, 0.5)
        mod.gates['ega'].energy.bias.normal_(0.0, 0.5)
        mod.c_attn.bias.normal_(0.0, 0.1)
        mod.c_proj.bias.normal_(0.0, 0.1)
    x = torch.randn(2, T, cfg.n_embd, dtype=torch.float64)
    return cfg, mod, x


@pytest.mark.parametrize('extra', ['plain', 'alibi', 'rope'])
@pytest.mark.parametrize('ega_norm', EGA_NORMS)
def test_ega_attention_matches_reference(ega_norm, extra):
    cfg, mod, x = random_ega_module(ega_norm)
    T, hs = x.shape[1], cfg.n_embd // cfg.n_head
    rope = bias = None
    if extra == 'alibi':
        bias = model.alibi_bias(cfg.n_head, T).double()
    elif extra == 'rope':
        ang = torch.arange(T, dtype=torch.float64)[:, None] * model.sin_freqs(hs).double()[None, :]
        rope = (torch.cos(ang), torch.sin(ang))
    with torch.no_grad():
        got = mod(x, rope, bias)
        want = ref_attention(mod, x, rope, bias)
        ungated = ref_attention(mod, x, rope, bias, gated=False)
    assert got.dtype == torch.float64 and got.shape == x.shape
    assert (got - want).abs().max().item() < 1e-6
    # the gate is not trivial here, so the comparison has teeth
    assert (want - ungated).abs().max().item() > 1e-3


@pytest.mark.parametrize('mode', EGA_NORMS)
def test_znorm_and_key_logit_match_loop_reference(mode):
    torch.manual_seed(0)
    e = torch.randn(2, 3, 17, dtype=torch.float64) * 2 + 0.5
    alpha = torch.tensor([0.7, 2.0, 3.3], dtype=torch.float64)
    tau = torch.tensor([-0.4, 0.0, 0.6], dtype=torch.float64)
    assert (model.znorm(e, mode) - ref_z(e, mode)).abs().max().item() < 1e-10
    gate = model.key_logit(e, alpha, tau, mode).exp()
    assert (gate - ref_gate(e, alpha, tau, mode)).abs().max().item() < 1e-10


def test_znorm_modes_differ_and_prefix_is_causal():
    torch.manual_seed(0)
    e = torch.randn(1, 2, 10, dtype=torch.float64)
    zw, zp = model.znorm(e, 'window'), model.znorm(e, 'prefix')
    assert (zw - zp).abs().max().item() > 1e-2
    assert (zw.mean(-1)).abs().max().item() < 1e-12              # window z has mean 0, std 1
    assert (zw.std(-1, unbiased=False) - 1).abs().max().item() < 1e-12
    e2 = e.clone()
    e2[..., 6:] += torch.randn(1, 2, 4, dtype=torch.float64)
    assert torch.equal(model.znorm(e2, 'prefix')[..., :6], zp[..., :6])
    assert not torch.allclose(model.znorm(e2, 'window')[..., :6], zw[..., :6])


def test_znorm_edge_cases():
    # one position, or a constant signal: z = 0 with a finite (zero) gradient
    one = torch.randn(2, 3, 1, dtype=torch.float64)
    for mode in ('window', 'prefix'):
        assert torch.equal(model.znorm(one, mode), torch.zeros_like(one))
        const = torch.full((1, 2, 8), 3.0, dtype=torch.float64, requires_grad=True)
        z = model.znorm(const, mode)
        assert torch.equal(z.detach(), torch.zeros_like(z))
        z.sum().backward()
        assert torch.isfinite(const.grad).all()
    # prefix running stats in float32 on a large offset (catastrophic cancellation guard)
    torch.manual_seed(0)
    e = (1000.0 + torch.randn(2, 2, 32)).float()
    got = model.znorm(e, 'prefix').double()
    want = ref_z(e.double(), 'prefix')
    assert (got - want).abs().max().item() < 1e-3


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_prefix_znorm_of_energies_tied_to_round_off_is_zero_with_no_gradient(dtype):
    """Two positions with one token and no positional signal tie exactly, but each path's round-off
    breaks the tie by an ulp or so: the prefix statistics then see no spread (z = 0, no gradient), not
    the sign of the round-off (z = +-1) with 1/std ~ 1e8 times the incoming gradient. Energies in
    float32, as gate_signal computes them whatever the autocast (bf16 ones are promoted first)."""
    e0 = torch.tensor(0.0029976784377906, dtype=torch.float32)
    e = torch.stack([e0, e0.nextafter(torch.tensor(1.0)), e0, e0 * 3, e0 * -2]).to(dtype).float()   # (5,)
    e = e.view(1, 1, 5).requires_grad_(True)
    z = model.znorm(e, 'prefix')
    assert z[0, 0, :3].tolist() == [0.0, 0.0, 0.0] and z[0, 0, 3].abs().item() > 0.5
    z[0, 0, :3].sum().backward()
    assert e.grad.abs().max().item() == 0.0
    # a genuine spread, 1e-4 of the energies' size, is kept
    spread = torch.tensor([[[1.0, 1.0 + 1e-4, 1.0 - 1e-4]]])
    assert model.znorm(spread, 'prefix')[0, 0, 1:].abs().min().item() > 0.5


def test_attend_gate_ones_no_dropout_is_plain_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 4, dtype=torch.float64) for _ in range(3))
    zeros = torch.zeros(2, 2, 9, dtype=torch.float64)         # log g for g = 1
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (attend_bnth(q, k, v, key_bias=zeros) - plain).abs().max().item() < 1e-12
    assert (attend_bnth(q, k, v) - plain).abs().max().item() < 1e-12
    bias = model.alibi_bias(2, 9).double()
    masked = bias.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float('-inf'))
    plain_b = F.scaled_dot_product_attention(q, k, v, attn_mask=masked)
    assert (attend_bnth(q, k, v, key_bias=zeros, bias=bias) - plain_b).abs().max().item() < 1e-12
    # a non-trivial gate changes the output
    g = torch.rand(2, 2, 9, dtype=torch.float64)
    assert (attend_bnth(q, k, v, key_bias=g.log()) - plain).abs().max().item() > 1e-3


@pytest.mark.parametrize('key_bias', [False, True])
@pytest.mark.parametrize('dropout_p', [0.0, 0.3])
def test_attend_masks_the_future_whatever_the_bias(key_bias, dropout_p):
    """A finite additive bias above the diagonal must not open the future: changing
    later keys and values leaves earlier outputs exactly as they were."""
    torch.manual_seed(0)
    B, nh, T, hs, t = 2, 2, 12, 4, 5
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(nh, T, T, dtype=torch.float64)           # finite everywhere
    kb = torch.randn(B, nh, T, dtype=torch.float64) if key_bias else None
    k2, v2 = k.clone(), v.clone()
    k2[:, :, t + 1:] += 3 * torch.randn(B, nh, T - t - 1, hs, dtype=torch.float64)
    v2[:, :, t + 1:] += 3 * torch.randn(B, nh, T - t - 1, hs, dtype=torch.float64)
    kb2 = None if kb is None else torch.cat((kb[..., :t + 1], kb[..., t + 1:] + 1.0), dim=-1)
    torch.manual_seed(1)
    y = attend_bnth(q, k, v, key_bias=kb, bias=bias, dropout_p=dropout_p)
    torch.manual_seed(1)
    y2 = attend_bnth(q, k2, v2, key_bias=kb2, bias=bias, dropout_p=dropout_p)
    assert (y[:, :, :t + 1] - y2[:, :, :t + 1]).abs().max().item() < 1e-12
    assert (y[:, :, t + 1:] - y2[:, :, t + 1:]).abs().max().item() > 1e-2   # later outputs do move


@pytest.mark.parametrize('key_bias', [False, True])
def test_attend_explicit_scale(key_bias):
    """scale replaces 1/sqrt(hs), also for the per-key logit's extra channel."""
    torch.manual_seed(0)
    B, nh, T, hs, s = 2, 3, 9, 6, 0.173
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    b = torch.randn(B, nh, T, dtype=torch.float64)
    scores = (q @ k.transpose(-1, -2)) * s + (b[:, :, None, :] if key_bias else 0)
    want = torch.softmax(scores.masked_fill(torch.ones(T, T).triu(1).bool(), float('-inf')), -1) @ v
    got = attend_bnth(q, k, v, key_bias=b if key_bias else None, scale=s)
    assert (got - want).abs().max().item() < 1e-12
    assert (attend_bnth(q, k, v, key_bias=b if key_bias else None) - want).abs().max().item() > 1e-3


@pytest.mark.parametrize('alibi', [False, True])
def test_attend_key_bias_no_dropout_is_gated_renormalised_attention(alibi):
    """Without dropout the per-key logit rides on an extra q.k channel: it must equal
    the explicit A_ij g_j / sum_j' A_ij' g_j' with A the causal softmax."""
    torch.manual_seed(0)
    B, nh, T, hs = 2, 3, 11, 4
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    g = torch.rand(B, nh, T, dtype=torch.float64) * 0.99 + 0.01
    bias = model.alibi_bias(nh, T).double() if alibi else None
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)
    scores = (scores + bias if alibi else scores).masked_fill(torch.ones(T, T).triu(1).bool(), float('-inf'))
    A = torch.softmax(scores, -1) * g[:, :, None, :]
    want = (A / A.sum(-1, keepdim=True)) @ v
    got = attend_bnth(q, k, v, key_bias=g.log(), bias=bias)
    assert (got - want).abs().max().item() < 1e-12


@pytest.mark.parametrize('gate_kind', ['ones', 'random'])
def test_attend_dropout_is_published_order(gate_kind):
    """attend(q, k, v, g, p) == renormalise(dropout(softmax(scores)) * g) v with the same
    dropout mask. The mask is recovered by one plain SDPA call with identity values and
    the same seed: its output is the dropped, rescaled T x T weight matrix itself."""
    torch.manual_seed(0)
    B, nh, T, hs, p = 2, 2, 10, 4, 0.3
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    g = torch.ones(B, nh, T, dtype=torch.float64) if gate_kind == 'ones' else \
        torch.rand(B, nh, T, dtype=torch.float64)
    torch.manual_seed(123)
    got = attend_bnth(q, k, v, key_bias=g.log(), dropout_p=p)
    eye = torch.eye(T, dtype=torch.float64).expand(B, nh, T, T)
    torch.manual_seed(123)
    D = F.scaled_dot_product_attention(q, k, eye, dropout_p=p, is_causal=True, scale=1 / math.sqrt(hs))
    assert (D == 0).any() and (D.tril() == 0).any()            # some weights were dropped
    A = D * g[:, :, None, :]
    A = A / A.sum(-1, keepdim=True).clamp_min(1e-8)
    want = A @ v
    assert (got - want).abs().max().item() < 1e-12
    # the renormalisation after dropout is real: without it (plain SDPA with dropout) differs
    torch.manual_seed(123)
    plain = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, scale=1 / math.sqrt(hs))
    assert (plain - D @ v).abs().max().item() < 1e-12           # same mask in both calls
    assert (got - plain).abs().max().item() > 1e-3


# the positional forms that reach attend() with an argument of their own: none, rotary, a T x T bias
PLAIN_POS = ('learned', 'rope', 'alibi', 'mope_rel')


@pytest.mark.parametrize('a', list(ATTN_FORMS))
def test_fused_attend_equals_the_plain_formula_for_every_form(a, monkeypatch):
    """Every form's logits through attend() (the fused kernel and its tricks) and through
    attend_plain() (explicit T x T weights): equal to float64 round-off (1e-9: FoX's key logits
    reach T |log f|), under each kind of
    positional argument; and close under CPU bf16 autocast."""
    for p in PLAIN_POS:
        if ATTN_FORMS[a]['attn'] == 'fnet' and p not in model.FNET_POS:
            continue
        torch.manual_seed(0)
        m = GPT(tiny(**ATTN_FORMS[a], pos=p)).double().eval()
        with torch.no_grad():
            for q in m.parameters():
                q.add_(0.1 * torch.randn_like(q))
        idx = torch.randint(11, (2, 16))
        with torch.no_grad():
            fused = m(idx)[0]
            monkeypatch.setattr(model, 'attend', model.attend_plain)
            plain = m(idx)[0]
            monkeypatch.undo()
            assert (fused - plain).abs().max().item() < 1e-9, (a, p)
            m.float()
            with torch.autocast('cpu', dtype=torch.bfloat16):
                fused16 = m(idx)[0].float()
                monkeypatch.setattr(model, 'attend', model.attend_plain)
                plain16 = m(idx)[0].float()
                monkeypatch.undo()
            assert (fused16 - plain16).abs().max().item() < 0.1 * (1 + plain.abs().max().item()), (a, p)


# the forms whose maths needs a (B, nh, T, T) tensor for backward (the registry's keeps_tt): a map
# of the scores (conv_paper), a mixing of q and k over time, a learned T x T bias (mope_rel: its
# gradient sums the per-sequence softmax gradients, which the fused kernels do not return)
KEEPS_TT = {n for n, v in model.ATTN.items() if v.keeps_tt} | {n for n, v in model.POS.items() if v.keeps_tt}


def keeps_tt(cfg, dtype=torch.float32):
    """Whether a training step of cfg's model (under autocast to a 16-bit dtype) saves for backward
    a tensor as large as every head's T x T weights (the math path of the attention forms them;
    the fused one does not)."""
    torch.manual_seed(0)
    m = GPT(cfg).train()
    B, T = 3, cfg.block_size
    found = []

    def pack(t):
        if t.dim() >= 3 and t.shape[-2:] == (T, T) and t.numel() >= B * cfg.n_head * T * T:
            found.append(tuple(t.shape))
        return t

    idx = torch.randint(cfg.vocab_size, (B, T))
    with torch.autocast('cpu', dtype=dtype, enabled=dtype != torch.float32), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(idx, idx)[1].backward()
    return bool(found)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('kind,name', [('attn', a) for a in model.ATTN] + [('pos', p) for p in model.POS])
def test_only_the_forms_that_need_it_keep_t_by_t_weights(kind, name, dtype):
    """At the study scale's settings (float32, no dropout) a variant saves no (B, nh, T, T)
    tensor per layer unless its maths needs one (KEEPS_TT): a bias (nh, T, T) or keys with
    transposed channels once sent every layer to the math path, at 1.5x the attention's time.
    T = 24 differs from every other dimension, so a (B, G, T) signal is not taken for one."""
    assert keeps_tt(tiny(**{kind: name}, block_size=24), dtype) == (name in KEEPS_TT), name


@pytest.mark.parametrize('dropout_p', [0.0, 0.3])
def test_attend_plain_sees_no_later_key_whatever_its_key_logits(dropout_p):
    """FoX's key logits -c_j span T |log f| (here about 30): attend_plain must neither shift them
    by a maximum over later keys (which, once the early gates fall under the normaliser's floor,
    lets later keys decide earlier rows) nor overflow. Later keys, values and logits changed, the
    rows up to t stay as they were, under the same dropout mask."""
    torch.manual_seed(0)
    B, nh, T, hs, t = 2, 2, 40, 4, 17
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    a = 0.5 * torch.randn(B, nh, T, dtype=torch.float64)    # f about 1/2
    kb = -F.logsigmoid(a).cumsum(-1)                            # -c_j: grows with j
    kb2, k2, v2 = kb.clone(), k.clone(), v.clone()
    kb2[..., t + 1:] += 30.0 + torch.rand(B, nh, T - t - 1, dtype=torch.float64)
    k2[..., t + 1:, :] = torch.randn(B, nh, T - t - 1, hs, dtype=torch.float64)
    v2[..., t + 1:, :] = torch.randn(B, nh, T - t - 1, hs, dtype=torch.float64)
    torch.manual_seed(1)
    y = model.attend_plain(q, k, v, key_bias=kb, dropout_p=dropout_p)
    torch.manual_seed(1)
    y2 = model.attend_plain(q, k2, v2, key_bias=kb2, dropout_p=dropout_p)
    assert torch.isfinite(y).all() and torch.isfinite(y2).all()
    assert (y[:, :t + 1] - y2[:, :t + 1]).abs().max().item() < 1e-12


@pytest.mark.parametrize('gated', [False, True])
def test_attend_plain_with_dropout_is_the_published_order(gated):
    """attend_plain(q, k, v, b, p) == renormalise(dropout(softmax(scores)) * g) v with its own
    dropout mask (recovered from the same seed), as attend() is (test above)."""
    torch.manual_seed(0)
    B, nh, T, hs, p = 2, 2, 10, 4, 0.3
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    g = torch.rand(B, nh, T, dtype=torch.float64) if gated else torch.ones(B, nh, T, dtype=torch.float64)
    torch.manual_seed(7)
    got = model.attend_plain(q, k, v, key_bias=g.log() if gated else None, dropout_p=p).transpose(1, 2)
    torch.manual_seed(7)
    keep = F.dropout(torch.ones(B, nh, T, T, dtype=torch.float64), p)   # the same mask, scaled 1/(1-p)
    s = (q @ k.transpose(-1, -2) / math.sqrt(hs)).masked_fill(torch.ones(T, T).triu(1).bool(), float('-inf'))
    A = torch.softmax(s, -1) * keep * g[:, :, None, :]
    want = (A / A.sum(-1, keepdim=True).clamp_min(1e-8) if gated else A) @ v
    assert (keep == 0).any() and (got - want).abs().max().item() < 1e-12


@pytest.mark.parametrize('bias', [True, False])
def test_ega_parameter_count(bias):
    n_layer, n_head, n_embd = 2, 2, 16
    dot = GPT(tiny(attn='dot', bias=bias, n_layer=n_layer, n_head=n_head, n_embd=n_embd))
    ega = GPT(tiny(attn='ega', bias=bias, n_layer=n_layer, n_head=n_head, n_embd=n_embd))
    assert ega.num_params() - dot.num_params() == n_layer * n_head * (n_embd + 3)
    n4 = GPT(tiny(attn='ega', n_layer=1, n_head=4, n_embd=32)).num_params() - \
        GPT(tiny(attn='dot', n_layer=1, n_head=4, n_embd=32)).num_params()
    assert n4 == 1 * 4 * (32 + 3)


@pytest.mark.parametrize('alpha,tau', [(None, None), (3.5, -0.25)])
def test_ega_gate_init_follows_the_config(alpha, tau):
    kw = {} if alpha is None else dict(ega_alpha=alpha, ega_tau=tau)
    m = GPT(tiny(attn='ega', **kw))
    want_a = 2.0 if alpha is None else alpha
    want_t = 0.0 if tau is None else tau
    mods = [x for x in m.modules() if isinstance(x, CausalSelfAttention)]
    assert len(mods) == 2
    for a in mods:
        assert a.gates['ega'].alpha.shape == (2,) and a.gates['ega'].tau.shape == (2,)
        assert torch.equal(a.gates['ega'].alpha.detach(), torch.full((2,), want_a))
        assert torch.equal(a.gates['ega'].tau.detach(), torch.full((2,), want_t))
        assert torch.equal(a.gates['ega'].energy.bias.detach(), torch.zeros(2))          # biases zero (docs §0)
        assert 0.005 < a.gates['ega'].energy.weight.std().item() < 0.05                  # N(0, 0.02)


def test_a_modules_own_init_is_not_overwritten_by_the_global_init(monkeypatch):
    """A variant that initialises its own parameters (per-head q/k scales, filter
    kernels) does so in init_own(); the global N(0, 0.02) init runs before it."""
    def init_own(self):
        with torch.no_grad():
            self.c_attn.weight.fill_(0.5)                       # a Linear the global init also visits
            self.c_attn.bias.fill_(-1.0)

    monkeypatch.setattr(CausalSelfAttention, 'init_own', init_own, raising=False)
    m = GPT(tiny())
    for a in (x for x in m.modules() if isinstance(x, CausalSelfAttention)):
        assert torch.equal(a.c_attn.weight.detach(), torch.full_like(a.c_attn.weight, 0.5))
        assert torch.equal(a.c_attn.bias.detach(), torch.full_like(a.c_attn.bias, -1.0))
    assert 0.005 < m.lm_head.weight.std().item() < 0.05         # the rest keeps the global init


def test_weight_decay_is_an_explicit_list():
    """Only Linear / Embedding weights and what a module lists in decayed(): a 2-D
    parameter of a variant's own (band centres, lag kernels) is not decayed by its shape."""
    m = GPT(tiny(attn='ega', pos='learned'))
    blk = m.transformer.h[0].attn
    blk.kernel = nn.Parameter(torch.randn(4, 3))                # 2-D, not a Linear's weight
    opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')
    dec, nodec = ({id(p) for p in g['params']} for g in opt.param_groups)
    assert id(blk.kernel) in nodec
    assert id(m.transformer.pos.wpe.weight) in dec and id(m.lm_head.weight) in dec
    assert id(blk.gates['ega'].energy.weight) in dec and id(blk.gates['ega'].energy.bias) in nodec
    assert len(opt.param_groups[0]['params']) == len(dec)        # the tied matrix listed once
    blk.decayed = lambda: (blk.kernel,)                          # a module can ask for decay
    dec2 = {id(p) for p in m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu').param_groups[0]['params']}
    assert id(blk.kernel) in dec2


@pytest.mark.parametrize('attn,pos', [('ega', 'mope'), ('multi_fourier_qk', 'learned'), ('conv_paper', 'learned')])
def test_decay_all_is_the_authors_recipe(attn, pos):
    """decay_all=True: every parameter decayed once (AdamW(model.parameters())), none left out; buffers
    (conv_paper's lag weights, which get no gradient as published) are no parameters."""
    m = GPT(tiny(attn=attn, pos=pos))
    opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu', decay_all=True)
    dec, nodec = ({id(p) for p in g['params']} for g in opt.param_groups)
    assert dec == {id(p) for p in m.parameters()} and not nodec and opt.param_groups[0]['weight_decay'] == 0.1
    assert len(opt.param_groups[0]['params']) == len(dec)        # the tied matrix listed once
    ours = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu').param_groups[1]['params']
    assert ours                                                  # by default biases, gains, gates are not
    assert all(id(p) in dec for p in ours)


# -----------------------------------------------------------------------------
# FoX: the forget gate (docs/variants.md §6)

def random_gate_module(attn, ega_norm='prefix', seed=0, T=12, fox_bias=0.0):
    torch.manual_seed(seed)
    cfg = tiny(attn=attn, ega_norm=ega_norm, block_size=T, fox_bias=fox_bias)
    mod = CausalSelfAttention(cfg).double().eval()
    with torch.no_grad():
        for p in mod.parameters():
            p.add_(0.3 * torch.randn_like(p))                   # gates far from their init
    return cfg, mod, torch.randn(2, T, cfg.n_embd, dtype=torch.float64)


@pytest.mark.parametrize('attn,ega_norm', [('fox', 'prefix'), ('ega_fox', 'prefix'), ('ega_fox', 'window'),
                                           ('ega_fox', 'none')])
@pytest.mark.parametrize('extra', ['plain', 'alibi'])
def test_fox_matches_the_explicit_forget_bias(attn, ega_norm, extra):
    """softmax(q k^T / sqrt(hs) + D) with D_ij = sum_(l=j+1..i) log f_l, written out as a
    T x T matrix, equals the per-key logit -c_j (c = cumsum log f)."""
    cfg, mod, x = random_gate_module(attn, ega_norm)
    bias = model.alibi_bias(cfg.n_head, x.shape[1]).double() if extra == 'alibi' else None
    with torch.no_grad():
        got, want = mod(x, None, bias), ref_attention(mod, x, None, bias)
    assert (got - want).abs().max().item() < 1e-9
    del mod.gates['fox']                                        # the forget gate is not trivial here
    with torch.no_grad():
        assert (mod(x, None, bias) - want).abs().max().item() > 1e-3


@pytest.mark.parametrize('with_gate', [False, True])
@pytest.mark.parametrize('impl', ['plain', 'sdpa'])
def test_a_per_key_logit_is_the_forget_bias_under_dropout(impl, with_gate):
    """FoX's per-key logit -c_j, a (B, nh, 1, T) bias, equals the T x T bias D = c_i - c_j under dropout
    too (a logit before the softmax and its dropout; the same mask drawn from the same seed), with EGA's
    gate after dropout beside it or not: through attend_plain, and through attend, where it rides a q.k
    channel. float64; c spans tens, as FoX's does."""
    torch.manual_seed(0)
    B, nh, T, hs = 2, 2, 20, 4
    q, k, v = (torch.randn(B, nh, T, hs, dtype=torch.float64) for _ in range(3))
    c = F.logsigmoid(torch.randn(B, nh, T, dtype=torch.float64) - 2).cumsum(-1)
    kb = 0.5 * torch.randn(B, nh, T, dtype=torch.float64) if with_gate else None
    fn = model.attend_plain if impl == 'plain' else model.attend
    outs = []
    for bias in (-c[:, :, None, :], c[..., :, None] - c[..., None, :]):
        torch.manual_seed(1)
        outs.append(fn(q, k, v, key_bias=kb, bias=bias, dropout_p=0.3))
    assert c.abs().max() > 20 and (outs[0] - outs[1]).abs().max().item() < 1e-10


@pytest.mark.parametrize('kind,name', [('attn', a) for a in model.ATTN] + [('pos', p) for p in model.POS])
def test_widths_aligned_for_cuda_change_nothing(kind, name, monkeypatch):
    """attend() pads q, k, v to a multiple of 8 on CUDA (ALIGN: its memory-efficient kernel takes no
    other width); forced here on the CPU, every form's logits and gradients are as without, in float64."""
    torch.manual_seed(0)
    m = GPT(tiny(**{kind: name}, block_size=24, n_embd=12, n_head=2)).double()     # hs = 6
    idx = torch.randint(11, (3, 24))
    out = []
    for align in ({}, {'cpu': 8}):
        monkeypatch.setattr(model, 'ALIGN', align)
        m.zero_grad()
        logits, loss = m(idx, idx)
        loss.backward()
        out.append((logits, {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}))
    (a, ga), (b, gb) = out
    assert (a - b).abs().max().item() < 1e-10 and ga.keys() == gb.keys(), name
    assert all((ga[n] - gb[n]).abs().max().item() < 1e-10 for n in ga), name


def test_fox_init_and_gradients():
    m = GPT(tiny(attn='fox'))
    blocks = [b.attn for b in m.transformer.h]
    for a in blocks:
        assert torch.equal(a.gates['fox'].forget.bias.detach(), torch.zeros(2))          # f = 0.5 at init
        assert 0.005 < a.gates['fox'].forget.weight.std().item() < 0.05                  # N(0, 0.02)
    m2 = GPT(tiny(attn='ega_fox', fox_bias=3.0))
    for a in (b.attn for b in m2.transformer.h):
        assert torch.equal(a.gates['fox'].forget.bias.detach(), torch.full((2,), 3.0))   # init_own, not the global init
    idx = torch.randint(11, (2, 16))
    m.train()(idx, idx)[1].backward()
    for a in blocks:
        assert a.gates['fox'].forget.weight.grad.abs().sum() > 0 and a.gates['fox'].forget.bias.grad.abs().sum() > 0
    opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')
    dec = {id(p) for p in opt.param_groups[0]['params']}
    assert id(blocks[0].gates['fox'].forget.weight) in dec and id(blocks[0].gates['fox'].forget.bias) not in dec


@pytest.mark.parametrize('bias', [True, False])
def test_fox_parameter_count(bias):
    kw = dict(bias=bias, n_layer=2, n_head=2, n_embd=16)
    dot, fox, both = (GPT(tiny(attn=a, **kw)).num_params() for a in ('dot', 'fox', 'ega_fox'))
    assert fox - dot == 2 * 2 * (16 + 1)                        # per layer and head: w_f, b_f
    assert both - dot == 2 * 2 * (16 + 1) + 2 * 2 * (16 + 3)


@pytest.mark.parametrize('attn', ['fox', 'ega_fox'])
def test_fox_bf16_autocast_close_to_float64(attn, monkeypatch):
    """A strong forget gate (log f about -2) over 128 positions makes |c| reach ~270:
    under bf16 autocast the model must keep it in float32 (attend runs that call in float32,
    with no T x T tensor) and stay close to float64."""
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=128, attn=attn, fox_bias=-2.0, dropout=0.0)
    m = GPT(cfg).eval()
    idx = torch.randint(65, (2, 128))
    with torch.no_grad():
        ref = copy_double(m)(idx)[0]
        assert (m(idx)[0].double() - ref).abs().max().item() < 1e-5           # float32: the channel is exact
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = m(idx)[0]
        err = (low.double() - ref).abs().max().item()
        assert low.dtype == torch.bfloat16 and err < 1e-2, err
        # the per-key channel in bf16 (c rounded to 16 bits, so attend no longer widens the
        # call) would be far off: the test can tell the two apart
        cumsum = model.forget_cumsum
        monkeypatch.setattr(model, 'forget_cumsum', lambda a: cumsum(a).to(torch.bfloat16))
        with torch.autocast('cpu', dtype=torch.bfloat16):
            naive = m(idx)[0]
        assert (naive.double() - ref).abs().max().item() > 4 * err


def copy_double(m):
    import copy
    return copy.deepcopy(m).double()


# -----------------------------------------------------------------------------
# 4. MOPE (docs/variants.md §1)

def test_every_published_part_names_its_paper_where_a_reader_of_the_class_looks():
    """Each registered part's class says where it comes from: its paper (authors, year, arXiv id, or that it
    is submitted) or that it is ours; the baselines without a paper are named here, each with why."""
    baselines = {'dot': 'the base, no part', 'ega_fox': 'a composition of ega and fox, each cited',
                 'learned': "nanoGPT's wpe (GPT-2's table, no arXiv paper)", 'none': 'no encoding'}
    unnamed = [n for table in (model.ATTN, model.POS) for n, v in table.items() if n not in baselines and not any(
        w in ((v.part.__doc__ or '') if v.part else '').lower() for w in ('arxiv', '(ours', 'ours:', 'submitted'))]
    assert not unnamed, unnamed


def test_mope_paper_init():
    P = 8
    mope = model.MOPE(tiny(pos='mope', n_embd=2 * P))
    w, s = mope.log_w.detach().double().exp(), mope.log_s.detach().double().exp()
    assert w.shape == (P,) and s.shape == (P,)
    assert abs(w[0].item() - 1.0) < 1e-6
    assert abs(w[-1].item() - 0.99 * math.pi) < 1e-5
    ratio = w[1:] / w[:-1]
    assert (ratio - (0.99 * math.pi) ** (1 / (P - 1))).abs().max().item() < 1e-5
    assert (s * w - 5.0).abs().max().item() < 1e-5


def test_the_published_rule_already_fires_at_the_paper_init_in_float32():
    """docs/variants.md §1: at the study scale (64 pairs) the rule fires at init for 11 pairs, 3 whose w the clamp
    lowers and 8 whose w s rounds below 5; there log w gets exactly no gradient."""
    def count():
        mope = model.MOPE(tiny(pos='mope', n_embd=128))
        w, s = mope.log_w.exp(), mope.log_s.exp()
        clamped = w > 0.95 * math.pi
        fires = torch.where(clamped, 0.95 * math.pi, w) * s < 5.0
        mope(16)[0].sum().backward()
        return int(clamped.sum()), int((fires & ~clamped).sum()), int((mope.log_w.grad == 0).sum())
    assert count() == (3, 8, 11)


def test_mope_forward_clamp_and_admissibility_rule():
    mope = model.MOPE(tiny(pos='mope', n_embd=16)).double()
    with torch.no_grad():
        mope.log_s.fill_(math.log(100.0))                       # w s >= 5 everywhere
        mope.log_w[0] = math.log(3.1)                           # above 0.95 pi: clamped
        mope.log_w[1], mope.log_s[1] = math.log(1.0), math.log(2.0)   # w s = 2 < 5: w = 5/s = 2.5
        mope.log_w[2], mope.log_s[2] = math.log(0.5), math.log(4.0)   # w s = 2 < 5: w = 1.25
        mope.log_s[3] = math.log(1e-5)                          # s clamped up to 1e-3
    w0, s0 = mope.log_w.exp().detach(), mope.log_s.exp().detach()
    w, s = (t.detach() for t in mope.freqs())
    assert abs(w[0].item() - 0.95 * math.pi) < 1e-12
    assert abs(w[1].item() - 2.5) < 1e-12 and abs(w[2].item() - 1.25) < 1e-12
    assert abs(s[3].item() - 1e-3) < 1e-15 and abs(w[3].item() - 5.0 / 1e-3) < 1e-9
    assert torch.equal(w[4:7], w0[4:7])                         # admissible pairs untouched
    assert abs(w0[7].item() - 0.99 * math.pi) < 1e-6            # the init's last pair is clamped too
    assert abs(w[7].item() - 0.95 * math.pi) < 1e-12
    assert torch.equal(s[:3], s0[:3]) and torch.equal(s[4:], s0[4:])
    assert ((w * s) >= 5.0 - 1e-9).all()
    # with the rule off: exp(log w), exp(log s) as they are
    mope.rule = False
    w, s = (t.detach() for t in mope.freqs())
    assert torch.equal(w, w0) and torch.equal(s, s0)
    assert model.MOPE(tiny(pos='mope', mope_rule=False)).rule is False


def test_below_the_rules_boundary_log_w_learns_only_under_mope_learned():
    """Weight decay pulls w s below 5 from the published init; there the published rule sets w = 5 / s, so
    log w's gradient is exactly 0 (its frequency cannot train), where mope_learned's rule widens the
    envelope instead (s = 5 / w) and log w keeps its gradient, log s then getting none."""
    for name in ('mope', 'mope_learned'):
        pe = model.POS[name].part(tiny(pos=name, n_embd=16)).double()
        with torch.no_grad():
            pe.log_s -= 0.05                                    # what decay's pull does: w s < 5 everywhere
        open_ = pe.log_w.exp() < 0.95 * math.pi                  # the pairs the clamp leaves alone
        pe(16)[0].pow(2).sum().backward()                       # any loss of the table
        gw, gs = pe.log_w.grad[open_], pe.log_s.grad[open_]
        w, s = (t.detach() for t in pe.freqs())
        assert torch.allclose(w * s, torch.full_like(w, 5.0))   # both hold the pairs on the boundary
        if name == 'mope':
            assert (gw == 0).all() and (gs != 0).all()          # frozen: log w moves by decay alone
        else:
            assert (gw != 0).all() and (gs == 0).all()
    learned = model.POS['mope_learned'].part(tiny(pos='mope_learned', n_embd=16))
    w, s = (t.detach() for t in learned.freqs())
    assert ((w * s) >= 5.0 - 1e-5).all() and isinstance(learned, model.MOPE)   # logged as MOPE's pairs are


def test_mope_pe_facts_paper_init():
    C, T = 16, 32
    pe = model.MOPE(tiny(pos='mope', n_embd=C, block_size=T)).double()(T)[0].detach()
    assert pe.shape == (T, C)
    assert torch.allclose(pe[0, 0::2], torch.ones(C // 2, dtype=torch.float64))   # cos(0) = 1
    assert torch.equal(pe[0, 1::2], torch.zeros(C // 2, dtype=torch.float64))     # sin(0) = 0
    norms = pe.norm(dim=1)
    assert abs(norms[0].item() - math.sqrt(C / 2)) < 1e-9
    assert (norms[25:] < 1e-3).all()
    assert norms[5].item() > 1e-2                                # not zero everywhere
    # the paper scale (C = 256): |PE| ~ 11 at b=0, ~0.03 at b=15, < 1e-3 past b=20
    big = model.MOPE(GPTConfig(pos='mope', n_embd=256, block_size=64)).double()(64)[0].detach().norm(dim=1)
    assert abs(big[0].item() - math.sqrt(128)) < 1e-9
    assert 0.01 < big[15].item() < 0.05
    assert (big[21:] < 1e-3).all()


def test_mope_wide_limit_is_the_sinusoidal_encoding():
    C, T = 16, 32
    cfg = tiny(pos='mope', mope_init='sin', mope_rule=False, n_embd=C, block_size=T)
    mope = model.MOPE(cfg)
    # the 'sin' init itself: sinusoidal w, s = mope_sigma * block_size
    assert torch.allclose(mope.log_w.detach().exp(), model.sin_freqs(C), rtol=1e-6, atol=0)
    assert torch.allclose(mope.log_s.detach().exp(), torch.full((C // 2,), cfg.mope_sigma * T), rtol=1e-6)
    mope = mope.double()
    with torch.no_grad():
        mope.log_w.copy_(model.sin_freqs(C).double().log())    # undo the float32 round trip of log/exp
        mope.log_s.fill_(80.0)                                  # s = e^80: the envelope is exactly 1
    b = torch.arange(T, dtype=torch.float64)
    sin64 = model.waves(b, model.sin_freqs(C).double())
    assert (mope(T)[0].detach() - sin64).abs().max().item() < 1e-12
    # layout (cos, sin) at (2i, 2i+1)
    w = model.sin_freqs(C).double()
    assert (sin64[:, 0::2] - torch.cos(b[:, None] * w)).abs().max().item() < 1e-12
    assert (sin64[:, 1::2] - torch.sin(b[:, None] * w)).abs().max().item() < 1e-12
    # the table that pos='sin' adds to the embeddings is that encoding (built in float32)
    table, rope, bias = GPT(tiny(pos='sin', n_embd=C, block_size=T)).transformer.pos(T)
    assert rope is None and bias is None
    assert torch.equal(table, model.waves(b.float(), model.sin_freqs(C)))
    assert (table.double() - sin64).abs().max().item() < 1e-5


@pytest.mark.parametrize('decay', [True, False])
def test_mope_weight_decay_groups(decay):
    m = GPT(tiny(pos='mope', attn='ega', mope_decay=decay))
    opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')
    dec, nodec = opt.param_groups
    assert dec['weight_decay'] == 0.1 and nodec['weight_decay'] == 0.0
    dec_ids, nodec_ids = {id(p) for p in dec['params']}, {id(p) for p in nodec['params']}
    all_ids = {id(p) for p in m.parameters()}
    assert dec_ids | nodec_ids == all_ids and not dec_ids & nodec_ids
    mope = m.transformer.pos
    for p in (mope.log_w, mope.log_s):
        assert (id(p) in dec_ids) is decay
        assert (id(p) in nodec_ids) is (not decay)
    for a in (x for x in m.modules() if isinstance(x, CausalSelfAttention)):
        assert id(a.gates['ega'].alpha) in nodec_ids and id(a.gates['ega'].tau) in nodec_ids and id(a.gates['ega'].energy.bias) in nodec_ids
        assert id(a.c_attn.weight) in dec_ids


# -----------------------------------------------------------------------------
# 5. RoPE and ALiBi

def rope_tables(T, hs):
    table, rope, bias = GPT(tiny(pos='rope', n_head=2, n_embd=2 * hs, block_size=T)).transformer.pos(T)
    assert table is None and bias is None
    return rope


def test_rope_buffers():
    T, hs = 16, 8
    cos, sin = rope_tables(T, hs)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * model.sin_freqs(hs)[None, :]
    assert cos.shape == (T, hs // 2)
    assert torch.allclose(cos, torch.cos(ang)) and torch.allclose(sin, torch.sin(ang))


def test_rotate_is_a_rotation_of_channel_pairs():
    T, hs = 16, 8
    cos, sin = rope_tables(T, hs)
    torch.manual_seed(0)
    x = torch.randn(2, 2, T, hs)
    r = model.rotate(x, cos, sin)
    assert r.shape == x.shape
    assert (r.norm(dim=-1) - x.norm(dim=-1)).abs().max().item() < 1e-5
    # complex reference: (x_2i + i x_2i+1) * exp(i theta)
    zc = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.complex(cos, sin)
    assert (r[..., 0::2] - zc.real).abs().max().item() < 1e-5
    assert (r[..., 1::2] - zc.imag).abs().max().item() < 1e-5
    assert (r[..., 1:, :] - x[..., 1:, :]).abs().max().item() > 1e-2   # it does rotate


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.bfloat16])
def test_rotate_fast_is_rotate(dtype):
    """The complex-product form against the plain one, values and gradients, on q as the model
    slices it from the q, k, v projection (a strided view): equal to round-off in float64 and
    float32; 16-bit input takes the plain form itself."""
    T, nh, hs = 16, 2, 8
    cos, sin = rope_tables(T, hs)
    torch.manual_seed(0)
    qkv = torch.randn(3, T, 3 * nh * hs, dtype=dtype, requires_grad=True)
    x = qkv.split(nh * hs, dim=2)[1].view(3, T, nh, hs).transpose(1, 2)   # k: offset C, strided
    g = torch.randn(3, nh, T, hs, dtype=dtype)
    outs = []
    for f in (model.rotate, model.rotate_fast):
        y = f(x, cos, sin)
        outs.append((y, torch.autograd.grad(y, qkv, g)[0]))
    (a, ga), (b, gb) = outs
    tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 0.0}[dtype]
    assert a.dtype == b.dtype and (a - b).abs().max().item() <= tol
    assert (ga - gb).abs().max().item() <= tol
    assert (a - x).abs().max().item() > 1e-2                    # it does rotate


def test_rope_dot_products_depend_only_on_the_offset():
    T, hs = 16, 8
    cos, sin = rope_tables(T, hs)
    torch.manual_seed(0)
    q = torch.randn(hs).expand(1, 1, T, hs)                     # the same q and k at every position
    k = torch.randn(hs).expand(1, 1, T, hs)
    dots = (model.rotate(q, cos, sin) @ model.rotate(k, cos, sin).transpose(-1, -2))[0, 0]   # (T, T)
    for i in range(T - 3):
        for j in range(T - 3):
            assert abs(dots[i, j].item() - dots[i + 3, j + 3].item()) < 1e-4, (i, j)
    # and it does depend on the offset
    assert dots[5, :6].std().item() > 1e-2


@pytest.mark.parametrize('nh', [1, 2, 4, 8])
def test_alibi_bias(nh):
    T = 7
    b = model.alibi_bias(nh, T)
    assert b.shape == (nh, T, T)
    assert torch.isfinite(b).all()                              # attend applies the causal mask
    assert torch.equal(b.diagonal(dim1=1, dim2=2), torch.zeros(nh, T))
    for h in range(1, nh + 1):
        m = 2.0 ** (-8.0 * h / nh)
        for r in range(T):
            for c in range(r + 1):
                assert abs(b[h - 1, r, c].item() + m * (r - c)) < 1e-6 * max(1, r - c)
    table, rope, bias = GPT(tiny(pos='alibi', n_head=2)).transformer.pos(16)
    assert table is None and rope is None
    assert torch.equal(bias, model.alibi_bias(2, 16))


# -----------------------------------------------------------------------------
# 6. config validation

def test_config_rejects_unknown_names():
    with pytest.raises(ValueError) as err:
        GPTConfig(attn='nope')
    for name in model.ATTN:
        assert name in str(err.value)
    assert tuple(model.ATTN) == tuple(model.CHOICES['attn']) and tuple(model.POS) == tuple(model.CHOICES['pos'])
    with pytest.raises(ValueError) as err:
        GPTConfig(pos='fourier')
    assert all(name in str(err.value) for name in model.POS)
    for field in ('ega_norm', 'mope_init'):
        with pytest.raises(ValueError):
            GPTConfig(**{field: 'nope'})


def test_config_rejects_bad_shapes():
    with pytest.raises(ValueError):
        GPTConfig(n_embd=30, n_head=4)                          # not divisible
    with pytest.raises(ValueError):
        GPTConfig(pos='rope', n_embd=6, n_head=2)               # head size 3 is odd
    GPTConfig(pos='learned', n_embd=6, n_head=2)                # the same sizes are fine without rope
    for pos in ('sin', 'mope'):
        with pytest.raises(ValueError):
            GPTConfig(pos=pos, n_embd=15, n_head=3)             # odd channel count
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError):
            GPTConfig(dropout=bad)
    with pytest.raises(ValueError):
        GPTConfig(n_layer=0)


# -----------------------------------------------------------------------------
# 7. generate

@pytest.fixture
def gen_model():
    torch.manual_seed(0)
    m = GPT(tiny(block_size=8, vocab_size=11))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.5 * torch.randn_like(p))                   # spread the logits: no near-ties
    return m.eval()


def greedy_reference(m, idx, n):
    for _ in range(n):
        logits, _ = m(idx[:, -m.config.block_size:])
        idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    return idx


def test_generate_shape_and_greedy(gen_model):
    prompt = torch.randint(11, (2, 5), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(10)
    a = gen_model.generate(prompt, 6, temperature=0)
    torch.manual_seed(20)
    b = gen_model.generate(prompt, 6, temperature=0)
    assert a.shape == (2, 11)
    assert torch.equal(a[:, :5], prompt)
    assert torch.equal(a, b)
    assert torch.equal(a, greedy_reference(gen_model, prompt, 6))
    torch.manual_seed(30)
    assert torch.equal(gen_model.generate(prompt, 6, temperature=1.0, top_k=1), a)


def test_generate_top_k_only_samples_the_top_k(gen_model):
    prompt = torch.randint(11, (1, 4), generator=torch.Generator().manual_seed(2)).expand(200, 4)
    top2 = set(torch.topk(gen_model(prompt[:1])[0][0, -1], 2).indices.tolist())
    torch.manual_seed(0)
    out = gen_model.generate(prompt, 1, temperature=1.0, top_k=2)[:, -1]
    assert set(out.tolist()) == top2                            # both appear in 200 draws, nothing else
    torch.manual_seed(0)
    free = gen_model.generate(prompt, 1, temperature=5.0)[:, -1]
    assert len(set(free.tolist())) > 2                          # without top_k, more tokens show up


def test_generate_crops_a_long_prompt(gen_model):
    prompt = torch.randint(11, (2, 20), generator=torch.Generator().manual_seed(3))   # > block_size 8
    out = gen_model.generate(prompt, 3, temperature=0)
    assert out.shape == (2, 23)
    assert torch.equal(out[:, :20], prompt)
    cropped = gen_model.generate(prompt[:, -8:], 3, temperature=0)
    assert torch.equal(out[:, 20:], cropped[:, 8:])


def test_audit_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(4)
    torch.manual_seed(0)
    causality.audit(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, attn='ega'))
    assert torch.equal(torch.rand(4), before)


def test_audit_of_a_config_is_reproducible():
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, attn='ega', ega_norm='window')
    torch.manual_seed(1)
    a = causality.audit(cfg)
    torch.manual_seed(2)
    assert causality.audit(cfg) == a


# -----------------------------------------------------------------------------
# 8. the influence map (docs/variants.md §5)

@pytest.mark.parametrize('attn,ega_norm,pos', [('dot', 'prefix', 'learned'), ('ega', 'prefix', 'mope'),
                                               ('fox', 'prefix', 'none'), ('ega', 'window', 'learned')])
def test_influence_map(attn, ega_norm, pos):
    cfg = GPTConfig(attn=attn, ega_norm=ega_norm, pos=pos)
    J = causality.influence(cfg)
    T = causality.tiny_config(cfg).block_size
    assert J.shape == (T, T)
    below = J[torch.ones(T, T, dtype=torch.bool).tril()]
    assert (below > 0).all()                                    # every earlier position matters
    above = J.triu(1).abs().max().item()
    if cfg.leaks:
        assert above > 1e-4                                     # the published EGA sees the future
    else:
        assert above == 0.0


def test_influence_map_of_a_model_instance():
    torch.manual_seed(0)
    m = GPT(tiny(attn='ega', ega_norm='window', block_size=10))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    J = causality.influence(m)
    assert J.shape == (10, 10) and J.triu(1).abs().max().item() > 1e-4
    assert all(p.dtype == torch.float32 for p in m.parameters())   # the original is untouched


# -----------------------------------------------------------------------------
# 9. the shared causal temporal filter

@pytest.mark.parametrize('L', [1, 4, 30])
def test_causal_conv_matches_the_sum(L):
    torch.manual_seed(0)
    B, G, T = 2, 3, 20
    u = torch.randn(B, G, T, dtype=torch.float64)
    h = torch.randn(G, L, dtype=torch.float64)
    want = torch.zeros(B, G, T, dtype=h.dtype)
    for t in range(T):
        for l in range(min(L, t + 1)):
            want[:, :, t] += h[None, :, l] * u[:, :, t - l]
    got = model.causal_conv(u, h)
    assert got.shape == (B, G, T) and got.dtype == h.dtype
    assert (got - want).abs().max().item() < 1e-12
    u2 = u.clone()
    u2[..., 11:] += 1.0                                         # the future does not reach t <= 10
    assert torch.equal(model.causal_conv(u2, h)[..., :11], got[..., :11])


def test_readme_variants_table_is_the_registry_and_docs_name_every_variant():
    """The registry is the source of truth: README's variants table is generated from it (python
    -m lab.readme --write=True), and docs/variants.md names every variant."""
    from lab import readme as gen
    text = (REPO / 'README.md').read_text()
    a, b = text.index(gen.MARKERS[0]) + len(gen.MARKERS[0]), text.index(gen.MARKERS[1])
    assert text[a:b].strip() == gen.table(), 'run: python -m lab.readme --write=True'
    # EGA's path, each function's file and line as the code has them now
    a, b = text.index(gen.PATH_MARKERS[0]) + len(gen.PATH_MARKERS[0]), text.index(gen.PATH_MARKERS[1])
    assert text[a:b].strip() == gen.path(), 'run: python -m lab.readme --write=True'
    docs = (REPO / 'docs' / 'variants.md').read_text()
    for name in list(model.ATTN) + list(model.POS):
        assert f'`--attn={name}`' in gen.table() or f'`--pos={name}`' in gen.table()
        assert f'`{name}`' in docs or f'`--pos={name}`' in docs or f'`--attn={name}`' in docs, name


@pytest.mark.parametrize('name', list(model.ATTN) + ['pos=' + p for p in model.POS]
                         + causality.compositions()[::110])
def test_no_variant_breaks_the_compiled_graph(name):
    """torch.compile traces every variant whole (dynamo's explain: no graph break), in training
    with dropout (the gate's other path) and in eval; a break would fall back to eager per piece."""
    kw = dict(pos=name[4:]) if name.startswith('pos=') else dict(attn=name)
    for dropout, train in ((0.1, True), (0.0, False)):
        torch._dynamo.reset()
        m = GPT(tiny(n_layer=1, dropout=dropout, **kw)).train(train)
        ex = torch._dynamo.explain(m)(torch.randint(11, (2, 16)))
        assert ex.graph_break_count == 0, (name, train, [str(b.reason)[:200] for b in ex.break_reasons])


def test_readme_generator_refuses_a_readme_without_its_blocks(tmp_path, monkeypatch, capsys):
    """python -m lab.readme --write=True on a README that lacks a block: one error line, exit 2, the file
    untouched (the variants block is not written where EGA's path cannot be)."""
    from lab import paths, readme as gen
    text = f"x\n{gen.MARKERS[0]}\nold\n{gen.MARKERS[1]}\ny\n"
    (tmp_path / 'README.md').write_text(text)
    monkeypatch.setattr(paths, 'REPO', str(tmp_path))
    assert gen.main(['--write=True']) == 2
    assert capsys.readouterr().err == f"error: README.md has no {gen.PATH_MARKERS[0]} ... {gen.PATH_MARKERS[1]} block\n"
    assert (tmp_path / 'README.md').read_text() == text
    (tmp_path / 'README.md').write_text(text + f"{gen.PATH_MARKERS[0]}\n{gen.PATH_MARKERS[1]}\n")
    assert gen.main(['--write=True']) == 0
    assert gen.path() in (tmp_path / 'README.md').read_text() and gen.table() in (tmp_path / 'README.md').read_text()
