"""Tests for the EGA paper's ablations (docs/variants.md §3): each variant against a
plain float64 reference written out with explicit T x T scores, its init, which of
its parameters learn, and its weight-decay group. Tiny models only; CPU."""

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import model  # noqa: E402
from model import GPT, GPTConfig, CausalSelfAttention  # noqa: E402
from test_model import ref_gate  # noqa: E402


pytestmark = pytest.mark.usefixtures('one_thread')   # tests/conftest.py


def tiny(**kw):
    base = dict(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    base.update(kw)
    return GPTConfig(**base)


def random_module(seed=0, T=12, noise=0.0, **kw):
    """A CausalSelfAttention in float64, eval mode, its biases random; x: (2, T, C)."""
    torch.manual_seed(seed)
    cfg = tiny(block_size=T, **kw)
    mod = CausalSelfAttention(cfg)
    mod.apply(GPT._init_weights)                                # the model's init, init_own included
    mod = mod.double().eval()
    with torch.no_grad():
        mod.c_attn.bias.normal_(0.0, 0.1)
        mod.c_proj.bias.normal_(0.0, 0.1)
        mod.c_attn.weight.normal_(0.0, 0.3)                     # logits of order one
        for p in mod.parameters():
            p.add_(noise * torch.randn_like(p))
    return cfg, mod, torch.randn(2, T, cfg.n_embd, dtype=torch.float64)


def qkv(mod, x):
    B, T, C = x.shape
    nh, hs = mod.nh, C // mod.nh
    out = x @ mod.c_attn.weight.T + mod.c_attn.bias             # (B, T, 3C)
    return [t.reshape(B, T, nh, hs).transpose(1, 2) for t in out.split(C, dim=2)]  # (B, nh, T, hs) each


def finish(mod, scores, v, gate=None):
    """Mask the future, softmax over keys, optionally multiply by a per-key gate g_j and
    renormalise (EGA's published order), then the values and the output projection.
    scores: (B, nh, T, T); gate: (B, nh, T) or None."""
    B, nh, T, hs = v.shape
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    A = torch.softmax(scores.masked_fill(future, float('-inf')), dim=-1)   # (B, nh, T, T)
    if gate is not None:
        A = A * gate[:, :, None, :]
        A = A / A.sum(-1, keepdim=True)
    y = (A @ v).transpose(1, 2).reshape(B, T, nh * hs)
    return y @ mod.c_proj.weight.T + mod.c_proj.bias


def dot_reference(mod, x):
    q, k, v = qkv(mod, x)
    return finish(mod, q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), v)


def decayed_ids(m):
    return {id(p) for p in m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu').param_groups[0]['params']}


# -----------------------------------------------------------------------------
# conv: causal lag attention

def conv_reference(mod, x):
    """e_ij = sum_l c_l q_i . k_(j-l) / sqrt(hs), the sum over lags with j - l >= 0."""
    q, k, v = qkv(mod, x)
    B, nh, T, hs = q.shape
    c = mod.qk.lag_kernel                                          # (nh, L)
    scores = torch.zeros(B, nh, T, T, dtype=x.dtype)
    for i in range(T):
        for j in range(T):
            for l in range(c.shape[1]):
                if j - l >= 0:
                    scores[:, :, i, j] += c[None, :, l] * (q[:, :, i] * k[:, :, j - l]).sum(-1)
    return finish(mod, scores / math.sqrt(hs), v)


def test_conv_init_kernel_is_dot_exactly():
    cfg, mod, x = random_module(attn='conv')
    assert torch.equal(mod.qk.lag_kernel.detach(), torch.tensor([[1.0, 0, 0, 0]] * 2, dtype=torch.float64))
    _, dot, _ = random_module(attn='dot')
    dot.load_state_dict({k: v for k, v in mod.state_dict().items() if not k.startswith('qk.')})
    q, k, v = qkv(mod, x)
    with torch.no_grad():
        assert torch.equal(model.lag_keys(k, mod.qk.lag_kernel), k)   # the filtered keys are the keys, bit for bit
        # the outputs up to the attention kernel's rounding (the keys' memory layout differs)
        assert (mod(x) - dot(x)).abs().max().item() < 1e-12


def test_conv_random_kernel_matches_the_lag_sum():
    cfg, mod, x = random_module(attn='conv', conv_lags=3)
    with torch.no_grad():
        mod.qk.lag_kernel.normal_(0.0, 1.0)
        got, want = mod(x), conv_reference(mod, x)
    assert (got - want).abs().max().item() < 1e-6
    assert (want - dot_reference(mod, x)).abs().max().item() > 1e-3    # the lags matter here


def test_conv_kernel_learns_and_is_not_decayed():
    m = GPT(tiny(attn='conv'))
    idx = torch.randint(11, (2, 16))
    m(idx, idx)[1].backward()
    for b in m.transformer.h:
        g = b.attn.qk.lag_kernel.grad
        assert g is not None and (g != 0).all(), g               # every lag, c_1.. too (they start at 0)
    assert not {id(b.attn.qk.lag_kernel) for b in m.transformer.h} & decayed_ids(m)


def test_conv_lags_validated():
    with pytest.raises(ValueError, match='conv_lags'):
        GPTConfig(attn='conv', conv_lags=0)


# -----------------------------------------------------------------------------
# conv_paper: the published lag loop, block by block

def conv_paper_reference(mod, x):
    """The published loop written out: per head, for each lag l = -L..L with w_l = softmax(lag
    weights)_l >= 1e-4, the term w_l q_i . k_j / sqrt(hs) is added on the overlapping block of the
    score matrix, scores[:T-l, l:] for l > 0 and scores[a:, :T-a] for l = -a <= 0; then the causal
    mask, softmax and values."""
    q, k, v = qkv(mod, x)
    B, nh, T, hs = q.shape
    S = torch.zeros(B, nh, T, T, dtype=torch.float64)
    for h in range(nh):
        w = torch.softmax(mod.logits.lag_weights[h].double(), dim=0)
        L = (len(w) - 1) // 2
        for n, lag in enumerate(range(-L, L + 1)):
            if abs(w[n].item()) < 1e-4:
                continue
            if lag > 0:
                S[:, h, :T - lag, lag:] += w[n].item() * q[:, h, :T - lag] @ k[:, h, lag:].transpose(-1, -2) / math.sqrt(hs)
            else:
                a = -lag
                S[:, h, a:, :T - a] += w[n].item() * q[:, h, a:] @ k[:, h, :T - a].transpose(-1, -2) / math.sqrt(hs)
    return finish(mod, S, v)


@pytest.mark.parametrize('T', [12, 7])
def test_conv_paper_matches_the_published_block_loop(T):
    cfg, mod, x = random_module(attn='conv_paper', T=12)
    x = x[:, :T]                                                # also a window shorter than block_size
    assert mod.logits.lag_weights.shape == (cfg.n_head, 2 * cfg.conv_lags + 1)   # per head, lags -L..L
    with torch.no_grad():
        mod.logits.lag_weights.normal_(0.0, 1.0)                       # weights far from uniform
        mod.logits.lag_weights[0, 2] = -30.0                           # a lag below 1e-4: skipped
        assert (mod(x) - conv_paper_reference(mod, x)).abs().max().item() < 1e-12
        # not dot attention: the edge blocks scale the logits down
        assert (mod(x) - dot_reference(mod, x)).abs().max().item() > 1e-3


def test_conv_paper_factor_near_the_edges_and_its_weights_get_no_gradient():
    T, L = 256, 4
    w = torch.zeros(1, 2 * L + 1, dtype=torch.float64)         # softmax: 1/9 each
    c = model.conv_paper_factor(w, T)[0]                        # (T, T)
    assert c[100, 50].item() == pytest.approx(1.0)             # interior: every lag's block
    assert c[100, 0].item() == pytest.approx(5 / 9)            # key 0: lags -4..0 only
    assert c[T - 1, 100].item() == pytest.approx(5 / 9)        # the last row: lags -4..0 only
    cfg, mod, x = random_module(attn='conv_paper')
    lw = torch.randn(cfg.n_head, 2 * cfg.conv_lags + 1, dtype=torch.float64, requires_grad=True)
    mod.logits.lag_weights = lw                                        # as published: a leaf that wants a gradient
    mod(x).sum().backward()
    assert lw.grad is None                                      # read as Python floats: no gradient
    assert mod.c_attn.weight.grad is not None
    # published init: N(0, 0.02) per head and lag, not zeros
    m = GPT(tiny(attn='conv_paper', n_head=4))
    lw = m.transformer.h[0].attn.logits.lag_weights
    assert lw.shape == (4, 9) and 0.005 < lw.std().item() < 0.05


# -----------------------------------------------------------------------------
# scale_init: per-head q, k init std

@pytest.mark.parametrize('rest', ['torch', 'normal'])
def test_scale_init_per_head_std(rest):
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=2, n_head=8, n_embd=256, block_size=16, attn='scale_init', scale_init_rest=rest))
    C, hs = 256, 32
    for b in m.transformer.h:
        W = b.attn.c_attn.weight.detach()                       # (3C, C): q, k, v rows
        for part in (0, 1):
            for h in range(8):
                sd = W[part * C + h * hs: part * C + (h + 1) * hs].std().item()
                want = 0.02 * (1 + (h % 4) / 4)
                assert abs(sd / want - 1) < 0.05, (part, h, sd, want)
        assert abs(W[2 * C:].std().item() / 0.02 - 1) < 0.05     # v: N(0, 0.02)
        # published ('torch'): PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)), std 1/sqrt(3 fan_in)
        for lin in (b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj):
            want = 1 / math.sqrt(3 * lin.in_features) if rest == 'torch' else 0.02
            assert abs(lin.weight.std().item() / want - 1) < 0.05, (lin, rest)
            assert rest == 'normal' or lin.weight.abs().max().item() <= 1 / math.sqrt(lin.in_features)
            assert torch.all(lin.bias == 0)
    assert abs(m.transformer.wte.weight.std().item() / 0.02 - 1) < 0.05   # embeddings (and the tied head)
    # a dot model's q rows all keep 0.02, and its MLP too: the init changes are scale_init's alone
    d = GPT(GPTConfig(n_layer=1, n_head=8, n_embd=256, block_size=16, attn='dot'))
    W = d.transformer.h[0].attn.c_attn.weight.detach()
    assert abs(W[3 * hs:4 * hs].std().item() / 0.02 - 1) < 0.05
    assert abs(d.transformer.h[0].mlp.c_proj.weight.std().item() / 0.02 - 1) < 0.05


# -----------------------------------------------------------------------------
# pos=mope_rel: a relative Morlet logit bias

def mope_rel_reference(rel, T):
    """bias[h, i, j] = sum_m a_hm cos(w_hm (i - j)) exp(-(i - j)^2 / (4 s_hm^2)) for j <= i, by loops."""
    a, w, s = rel.a.detach(), rel.log_w.detach().exp(), rel.log_s.detach().exp()
    nh, M = a.shape
    out = torch.zeros(nh, T, T, dtype=a.dtype)
    for h in range(nh):
        for i in range(T):
            for j in range(i + 1):
                for m in range(M):
                    tau = float(i - j)
                    out[h, i, j] += a[h, m] * math.cos(w[h, m] * tau) * math.exp(-tau ** 2 / (4 * s[h, m] ** 2))
    return out


def test_mope_rel_bias_matches_the_loop_and_is_translation_invariant():
    torch.manual_seed(0)
    pos = model.MopeRel(tiny(pos='mope_rel', n_head=2, mope_rel_terms=3, block_size=10)).double()
    with torch.no_grad():
        for p in pos.parameters():
            p.add_(0.3 * torch.randn_like(p))
    table, rope, lag = pos(10)
    assert table is None and rope is None and isinstance(lag, model.LagBias) and lag.table.shape == (2, 10)
    bias = lag.dense()                                          # what the SDPA and plain paths add
    assert bias.shape == (2, 10, 10)
    below = torch.ones(10, 10, dtype=torch.bool).tril()
    want = mope_rel_reference(pos, 10)
    assert (bias - want)[:, below].abs().max().item() < 1e-12
    for d in (1, 3):                                            # bias[i + d, j + d] = bias[i, j]
        assert (bias[:, d:, d:] - bias[:, :-d, :-d])[:, below[:-d, :-d]].abs().max().item() < 1e-12
    assert (bias[0] - bias[1]).abs().max().item() > 1e-3          # heads differ
    assert torch.equal(pos(6)[2].dense(), bias[:, :6, :6])      # a shorter window: the same lags


def test_mope_rel_init():
    rel = model.MopeRel(tiny(pos='mope_rel', n_head=2, mope_rel_terms=4, block_size=64))
    w, s = rel.log_w.detach().exp(), rel.log_s.detach().exp()
    assert w.shape == (2, 4)
    assert abs(w.max().item() - 0.99 * math.pi) < 1e-5 and abs(w.min().item() - 2 * math.pi / 64) < 1e-6
    assert (w[0] > w[1]).all() and (w[:, :-1] > w[:, 1:]).all()  # dealt out in turn: every head spans the scales
    assert torch.allclose(w * s, torch.full_like(w, 5.0))
    assert torch.equal(rel.a.detach(), torch.full((2, 4), 0.1))


@pytest.mark.parametrize('attn', ['dot', 'ega', 'conv'])
def test_mope_rel_in_the_model_matches_the_explicit_biased_reference(attn):
    cfg, mod, x = random_module(attn=attn, pos='mope_rel')
    T = x.shape[1]
    torch.manual_seed(1)
    pos = model.MopeRel(cfg).double()
    with torch.no_grad():
        for p in pos.parameters():
            p.add_(0.3 * torch.randn_like(p))
        bias = pos(T)[2]
        got = mod(x, None, bias)
        q, k, v = qkv(mod, x)
        if attn == 'conv':                                      # k'_j = sum_l c_l k_(j-l), k = 0 before 0
            c = mod.qk.lag_kernel
            k = sum(c[None, :, l, None, None] * F.pad(k, (0, 0, l, 0))[:, :, :T] for l in range(c.shape[1]))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mope_rel_reference(pos, T)
        gate = None
        if attn == 'ega':
            gate = ega_gate_reference(mod, x)
        want = finish(mod, scores, v, gate)
    assert (got - want).abs().max().item() < 1e-6


def ega_gate_reference(mod, x):
    """EGA's gate written out, prefix statistics: g_j = sigmoid(alpha (z_j - tau))."""
    e = (x @ mod.gates['ega'].energy.weight.T + mod.gates['ega'].energy.bias).transpose(1, 2)            # (B, nh, T)
    return ref_gate(e, mod.gates['ega'].alpha, mod.gates['ega'].tau, 'prefix')           # test_model's written-out z and gate


def test_mope_rel_learns_and_is_not_decayed():
    m = GPT(tiny(pos='mope_rel'))
    idx = torch.randint(11, (2, 16))
    m(idx, idx)[1].backward()
    rel = m.transformer.pos
    for p in (rel.a, rel.log_w, rel.log_s):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert not {id(rel.a), id(rel.log_w), id(rel.log_s)} & decayed_ids(m)


# -----------------------------------------------------------------------------
# the filter-bank gates: ega_morlet, flux, phase, daub

NORMS = model.CHOICES['ega_norm']


def ref_z(e, mode):
    """z over the last (time) axis, written out; std floored at 1e-8."""
    if mode == 'none':
        return e.clone()
    if mode == 'window':
        m = e.mean(-1, keepdim=True)
        return (e - m) / ((e - m) ** 2).mean(-1, keepdim=True).sqrt().clamp_min(1e-8)
    z = torch.empty_like(e)
    for j in range(e.shape[-1]):
        w = e[..., :j + 1]
        m = w.mean(-1)
        z[..., j] = (e[..., j] - m) / ((w - m[..., None]) ** 2).mean(-1).sqrt().clamp_min(1e-8)
    return z


def ref_signal(fg, x):
    """u: (B, nh, T), the per-head projection or the channel mean."""
    if fg.signal is not None:
        return (x @ fg.signal.weight.T + fg.signal.bias).transpose(1, 2)
    return x.mean(-1)[:, None, :].expand(x.shape[0], fg.nh, x.shape[1])


def ref_morlet_coefficients(fg, u):
    """c_s[j] = sum_(t=0..L_s-1) k_s(t) u[j - (L_s - 1) + t], u = 0 before position 0: the
    published conv1d over the left-padded signal (kernel index 0 meets the oldest sample),
    k_s(t) = exp(-t^2 / (2 sig_s^2)) exp(i w_s t), with MOPE's clamps and rule written out."""
    w, sig = fg.log_w.exp(), fg.log_sig.exp()
    w, sig = w.clamp(max=0.95 * math.pi), sig.clamp(min=1e-3)
    w = torch.where(w * sig < 5.0, 5.0 / sig, w)
    B, nh, T = u.shape
    c = torch.zeros(B, nh, len(model.MORLET_LENGTHS), T, dtype=torch.complex128)
    for s, Ls in enumerate(model.MORLET_LENGTHS):
        for j in range(T):
            for t in range(Ls):
                src = j - (Ls - 1) + t
                if src >= 0:
                    k = torch.exp(-t ** 2 / (2 * sig[:, s] ** 2)) * torch.exp(1j * w[:, s] * t)   # (nh,)
                    c[:, :, s, j] += k[None, :] * u[:, :, src]
    return c


def ref_daub_coefficients(order, u, levels=4):
    """The undecimated (a trous) wavelet cascade, causal: a_0 = u, and at level j
    d_j[t] = sum_n g_n a_(j-1)[t - n 2^(j-1)], a_j[t] = sum_n h_n a_(j-1)[t - n 2^(j-1)]."""
    h = torch.tensor(model.DAUBECHIES[order], dtype=torch.float64)
    g = torch.tensor([(-1) ** n * h[len(h) - 1 - n] for n in range(len(h))], dtype=torch.float64)
    B, nh, T = u.shape
    a, out = u, []
    for j in range(levels):
        d = 2 ** j
        det, low = torch.zeros_like(a), torch.zeros_like(a)
        for t in range(T):
            for n in range(len(h)):
                if t - n * d >= 0:
                    det[..., t] += g[n] * a[..., t - n * d]
                    low[..., t] += h[n] * a[..., t - n * d]
        out.append(det)
        a = low
    return torch.stack(out, dim=2)                              # (B, nh, S, T)


def filter_gate_reference(mod, x):
    """The whole attention written out: q, k, v; the filter bank; energies; the mixed
    per-scale gates; for flux / phase the multi-quantity scores; explicit T x T softmax,
    gate and renormalise."""
    fg = next(g for g in mod.gates.values() if isinstance(g, model.FilterGate))
    q, k, v = qkv(mod, x)
    u = ref_signal(fg, x)
    if isinstance(fg, model.DaubGate):
        order = 2 if fg.daub.shape[1] == 46 else 4
        c = ref_daub_coefficients(order, u)
        E = c ** 2
    else:
        c = ref_morlet_coefficients(fg, u)
        E = c.real ** 2 + c.imag ** 2                           # (B, nh, S, T)
    z = ref_z(E, fg.norm)
    mix = torch.softmax(fg.m, dim=-1)                           # (nh, S)
    gate = (mix[None, :, :, None] * torch.sigmoid(fg.alpha[None, :, :, None] * (z - fg.tau[None, :, :, None]))).sum(2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])   # (B, nh, T, T)
    if fg.extra:
        Ebar = z.mean(2)                                        # (B, nh, T)
        if isinstance(fg, model.FluxGate):
            flux = torch.zeros_like(E)
            flux[..., 1:] = (E[..., 1:] - E[..., :-1]).abs()
            X, lam = ref_z(flux, fg.norm).mean(2), fg.lam_F
        else:
            X, lam = torch.cos(torch.atan2(c.imag, c.real).mean(2)), fg.lam_P
        scores = fg.lam_sim[None, :, None, None] * scores \
            + (fg.lam_E[None, :, None] * Ebar + lam[None, :, None] * X)[:, :, None, :]
    return finish(mod, scores, v, gate)


GATE_FORMS = [(a, n, 'proj') for a in ('ega_morlet', 'flux', 'phase', 'daub') for n in NORMS] + \
    [(a, 'prefix', 'channel_mean') for a in ('ega_morlet', 'daub')]


@pytest.mark.parametrize('attn,ega_norm,gate_signal', GATE_FORMS)
def test_filter_gates_match_the_reference(attn, ega_norm, gate_signal):
    cfg, mod, x = random_module(attn=attn, ega_norm=ega_norm, gate_signal=gate_signal, noise=0.3, T=20)
    with torch.no_grad():
        if gate_signal == 'channel_mean':
            x = x + torch.randn(2, 20, 1, dtype=torch.float64)  # a signal with a channel mean
        got = mod(x)
        want = filter_gate_reference(mod, x)
        mod.gates[attn].alpha.zero_()                           # the gate, constant: ungated
        flat = mod(x)
    assert (got - want).abs().max().item() < 1e-6
    assert (want - flat).abs().max().item() > 1e-3              # the gate is not trivial here


def test_daub_order_4_matches_the_cascade():
    cfg, mod, x = random_module(attn='daub', daub_order=4, noise=0.3, T=20)
    with torch.no_grad():
        assert (mod(x) - filter_gate_reference(mod, x)).abs().max().item() < 1e-6


@pytest.mark.parametrize('order', [2, 4])
def test_daubechies_coefficients(order):
    """Orthonormal (sum h = sqrt 2, sum h_n h_(n+2k) = delta_k) and `order` vanishing
    moments of the detail filter g_n = (-1)^n h_(L-1-n)."""
    h = torch.tensor(model.DAUBECHIES[order], dtype=torch.float64)
    L = len(h)
    assert L == 2 * order
    assert abs(h.sum().item() - math.sqrt(2)) < 1e-12
    for k in range(L // 2):
        assert abs((h[:L - 2 * k] * h[2 * k:]).sum().item() - (k == 0)) < 1e-12, k
    n = torch.arange(L, dtype=torch.float64)
    g = torch.tensor([(-1) ** i * h[L - 1 - i] for i in range(L)], dtype=torch.float64)
    for p in range(order):
        assert abs((n ** p * g).sum().item()) < 1e-9, p
    assert abs((n ** order * g).sum().item()) > 1e-3           # exactly `order` of them
    bank = model.daubechies_bank(order)
    assert bank.shape == (4, {2: 46, 4: 106}[order])
    assert (bank.pow(2).sum(1) - 1).abs().max().item() < 1e-12  # each dyadic detail filter has unit energy


def test_channel_mean_gate_is_constant_at_init():
    """The published signal, the channel mean of the LayerNorm output, is zero at init
    (a fresh LayerNorm's output has zero mean over channels): the gate starts constant.
    The learned projection does not."""
    for gate_signal, constant in (('channel_mean', True), ('proj', False)):
        torch.manual_seed(0)
        m = GPT(tiny(attn='ega_morlet', gate_signal=gate_signal)).double()
        idx = torch.randint(11, (2, 16))
        with torch.no_grad():
            x = m.transformer.h[0].ln_1(m.transformer.wte(idx) + m.transformer.pos.wpe.weight)
            key_bias = m.transformer.h[0].attn.gates['ega_morlet'](x, x, 0.0)[1]            # (B, nh, T)
            spread = (key_bias.max(-1).values - key_bias.min(-1).values).max().item()
        if constant:
            assert x.mean(-1).abs().max().item() < 1e-12
            assert spread < 1e-9, spread
        else:
            assert spread > 1e-2, spread


@pytest.mark.parametrize('attn', ['ega_morlet', 'flux', 'phase', 'daub'])
def test_filter_gate_parameters_learn_and_are_not_decayed(attn):
    m = GPT(tiny(attn=attn))
    idx = torch.randint(11, (2, 16))
    m(idx, idx)[1].backward()
    fg = m.transformer.h[0].attn.gates[attn]
    names = {n for n, _ in fg.named_parameters()}
    want = {'signal.weight', 'signal.bias', 'alpha', 'tau', 'm'}
    want |= {'log_w', 'log_sig'} if attn != 'daub' else set()
    want |= {'lam_sim', 'lam_E', 'lam_F'} if attn == 'flux' else set()
    want |= {'lam_sim', 'lam_E', 'lam_P'} if attn == 'phase' else set()
    assert names == want
    for n, p in fg.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        if n == 'log_w':
            # where the rule holds w = 5 / sig (w sig rounds to just below 5 at init for
            # L = 7), w learns through sig alone, as published; elsewhere it has a gradient
            w, sig = fg.log_w.exp(), fg.log_sig.exp()
            assert (p.grad[w * sig >= 5.0] != 0).all()
        else:
            assert (p.grad != 0).all(), n
    gate_ids = {id(p) for n, p in fg.named_parameters() if n != 'signal.weight'}
    assert not gate_ids & decayed_ids(m)
    assert id(fg.signal.weight) in decayed_ids(m)              # a Linear weight, as EGA's energy


def test_morlet_fixed_prior_has_buffers_not_parameters():
    m = GPT(tiny(attn='ega_morlet', morlet_learned=False))
    fg = m.transformer.h[0].attn.gates['ega_morlet']
    names = {n for n, _ in fg.named_parameters()}
    assert 'log_w' not in names and 'log_sig' not in names
    w = fg.log_w.exp()
    assert torch.allclose(w[0], math.pi / torch.tensor([3.0, 7.0, 15.0, 31.0]))
    assert torch.allclose(w * fg.log_sig.exp(), torch.full_like(w, 5.0))
    assert 'log_w' not in m.state_dict().keys()


def test_morlet_kernel_orientation_is_the_published_one():
    """Tap l of the kernel given to causal_conv meets u[t - l]: it carries the published
    kernel index L_s - 1 - l (index 0 meets the oldest sample)."""
    fg = model.MorletGate(tiny(attn='ega_morlet'))
    h = fg.filters()                                            # (nh, S, 31)
    w, sig = model.morlet_rule(fg.log_w.exp(), fg.log_sig.exp())
    for s, Ls in enumerate(model.MORLET_LENGTHS):
        t = torch.arange(Ls, dtype=torch.float32)
        k = torch.exp(-t ** 2 / (2 * sig[0, s] ** 2)) * torch.exp(1j * w[0, s] * t)
        assert torch.allclose(h[0, s, :Ls], k.flip(0).to(h.dtype))
        assert (h[0, s, Ls:] == 0).all()


def test_filter_gate_bf16_autocast_keeps_the_filters_in_float32():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=64, attn='flux', dropout=0.0)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    idx = torch.randint(65, (2, 64))
    fg = m.transformer.h[0].attn.gates['flux']
    x = m.transformer.h[0].ln_1(m.transformer.wte(idx) + m.transformer.pos.wpe.weight[:64]).detach()
    q = torch.zeros(1)                                          # the gate's forward(x, q, p): only its key logit here
    with torch.no_grad():
        ref = fg.double()(x.double(), q, 0.0)[1]
        fg.float()
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = fg(x.bfloat16(), q, 0.0)[1]
            assert model.causal_conv(x.bfloat16().transpose(1, 2), torch.randn(32, 5)).dtype == torch.float32
            logits = m(idx)[0]
    assert low.dtype == torch.float32
    assert (low.double() - ref).abs().max().item() < 5e-2      # the bf16 signal's rounding, no more
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize('complex_kernel', [False, True])
def test_causal_conv_bank_matches_the_sum(complex_kernel):
    """causal_conv with K kernels per channel, h: (G, K, L) -> (B, G, K, T), the sum written out."""
    torch.manual_seed(0)
    B, G, K, L, T = 2, 3, 4, 6, 15
    u = torch.randn(B, G, T, dtype=torch.float64)
    h = torch.randn(G, K, L, dtype=torch.float64)
    if complex_kernel:
        h = torch.complex(h, torch.randn(G, K, L, dtype=torch.float64))
    want = torch.zeros(B, G, K, T, dtype=h.dtype)
    for t in range(T):
        for l in range(min(L, t + 1)):
            want[:, :, :, t] += h[None, :, :, l] * u[:, :, None, t - l]
    got = model.causal_conv(u, h)
    assert got.shape == (B, G, K, T) and got.dtype == h.dtype
    assert (got - want).abs().max().item() < 1e-12


@pytest.mark.parametrize('attn', ['ega_morlet', 'flux', 'phase', 'daub'])
def test_filter_gate_init_and_parameter_count(attn):
    kw = dict(n_layer=2, n_head=2, n_embd=16)
    m = GPT(tiny(attn=attn, **kw))
    fg = m.transformer.h[0].attn.gates[attn]
    assert torch.equal(fg.alpha.detach(), torch.full((2, 4), 2.0))
    assert torch.equal(fg.tau.detach(), torch.zeros(2, 4))
    assert torch.equal(fg.m.detach(), torch.full((2, 4), 0.25))
    assert torch.equal(fg.signal.bias.detach(), torch.zeros(2))
    if attn != 'daub':
        w = fg.log_w.detach().exp()
        assert torch.allclose(w, (math.pi / torch.tensor([3.0, 7.0, 15.0, 31.0])).expand(2, 4))
        assert torch.allclose(fg.log_sig.detach().exp(), 5.0 / w)
    per_head = 16 + 1 + 3 * 4 + (2 * 4 if attn != 'daub' else 0)   # signal; alpha, tau, m; log w, log sig
    if attn in ('flux', 'phase'):
        assert torch.equal(fg.lam_sim.detach(), torch.ones(2))
        assert torch.equal(fg.lam_E.detach(), torch.full((2,), 0.01))
        assert torch.equal((fg.lam_F if attn == 'flux' else fg.lam_P).detach(), torch.full((2,), 0.01))
        per_head += 3
    assert m.num_params() - GPT(tiny(attn='dot', **kw)).num_params() == 2 * 2 * per_head


# -----------------------------------------------------------------------------
# dconv: Primer's multi-dconv-head attention (docs/variants.md §7)

def dconv_reference(mod, x, kernel):
    """q, k, v each through its channel's filter, written as the shifted sum
    u'_t = sum_l h_l u_(t-l) (u = 0 before t = 0), then dot attention. kernel: (3C, W)."""
    B, T, C = x.shape
    nh, hs = mod.nh, C // mod.nh
    u = x @ mod.c_attn.weight.T + mod.c_attn.bias               # (B, T, 3C)
    out = torch.zeros_like(u)
    for t in range(T):
        for l in range(kernel.shape[1]):
            if t - l >= 0:
                out[:, t] += kernel[:, l] * u[:, t - l]
    q, k, v = [t.reshape(B, T, nh, hs).transpose(1, 2) for t in out.split(C, dim=2)]
    return finish(mod, q @ k.transpose(-1, -2) / math.sqrt(hs), v)


@pytest.mark.parametrize('width', [1, 3, 5])
def test_dconv_matches_the_shifted_sum(width):
    cfg, mod, x = random_module(attn='dconv', dconv_width=width)
    with torch.no_grad():
        mod.qkv.kernel.normal_(0.0, 0.7)
        got, want = mod(x), dconv_reference(mod, x, mod.qkv.kernel)
    assert (got - want).abs().max().item() < 1e-10
    if width > 1:
        assert (want - dot_reference(mod, x)).abs().max().item() > 1e-3   # the taps matter here


def test_dconv_identity_init_is_dot_and_torch_init_is_conv1d_default():
    cfg, mod, x = random_module(attn='dconv')
    want = torch.zeros(3 * cfg.n_embd, 3, dtype=torch.float64)
    want[:, 0] = 1.0
    assert torch.equal(mod.qkv.kernel.detach(), want)
    with torch.no_grad():
        assert (mod(x) - dot_reference(mod, x)).abs().max().item() < 1e-12
    torch.manual_seed(0)
    k = model.ShortConv(tiny(attn='dconv', dconv_init='torch', dconv_width=3))
    k.init_own()
    bound = 1 / math.sqrt(3)
    assert k.kernel.abs().max() <= bound and k.kernel.abs().max() > 0.8 * bound
    assert abs(k.kernel.std().item() - bound / math.sqrt(3)) < 0.05   # U(-b, b): std b / sqrt 3


def test_dconv_kernel_learns_is_not_decayed_and_width_is_checked():
    m = GPT(tiny(attn='dconv'))
    idx = torch.randint(11, (2, 16))
    m(idx, idx)[1].backward()
    kernels = [b.attn.qkv.kernel for b in m.transformer.h]
    assert all(p.grad is not None and (p.grad[:, 1:] != 0).any() for p in kernels)   # the zero taps learn
    assert not {id(p) for p in kernels} & decayed_ids(m)
    with pytest.raises(ValueError, match='dconv_width'):
        tiny(attn='dconv', dconv_width=0)


def test_learned_plus_alibi_adds_the_bias_to_the_learned_table():
    torch.manual_seed(0)
    both = GPT(tiny(pos='learned+alibi')).eval()
    torch.manual_seed(0)
    learned = GPT(tiny(pos='learned')).eval()
    assert list(both.state_dict()) != list(learned.state_dict())          # the table sits in a PosSum
    learned.load_state_dict({k.replace('pos.parts.0.', 'pos.'): v for k, v in both.state_dict().items()})
    table, rope, bias = both.transformer.pos(16)
    assert torch.equal(table, learned.transformer.pos(16)[0]) and rope is None
    assert torch.equal(bias, model.alibi_bias(2, 16))
    idx = torch.randint(11, (2, 16))
    with torch.no_grad():
        x = learned.transformer.wte(idx) + table
        for blk in learned.transformer.h:
            x = blk(x, None, bias)
        want = learned.lm_head(learned.transformer.ln_f(x))
        assert (both(idx)[0] - want).abs().max().item() < 1e-5
        assert (learned(idx)[0] - want).abs().max().item() > 1e-3          # the bias matters
