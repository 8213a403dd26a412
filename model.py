"""
A small GPT with switchable attention variants and positional encodings.

docs/variants.md gives the math of each variant, as published and as implemented
here. The file reads top to bottom: the registry of variants and the configuration,
the shared mechanisms (positional waves, z-normalisation, the per-key gate logit,
the fused attention call), the modules, the model, and the causality audit that
every variant must pass (or, for a leaking published form, must fail).

Shapes: B batch, T time, C channels (n_embd), nh heads, hs head size (C // nh).
"""

import copy
import inspect
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Variant:
    """One entry of the registry below: what the variant is, the GPTConfig fields it
    reads, and the option values under which it sees future tokens (its published
    form). `leaks` is a bool, or {field: values} for a leak that depends on an option.
    The audit decides; this lets a config say so before a model is built."""
    doc: str
    options: tuple = ()
    leaks: object = False
    lengths: tuple = ()     # int options counted in tokens (filter taps, lags): the audit shrinks them with T

    def leaks_with(self, cfg):
        if isinstance(self.leaks, bool):
            return self.leaks
        return any(getattr(cfg, k) in v for k, v in self.leaks.items())


# the one source of truth for names, options and leaks: GPTConfig, train.py's
# checks and --help, the tests and the README table all read these
ATTN = {
    'dot': Variant('causal scaled dot-product attention'),
    'ega': Variant('energy-gated attention: a per-key sigmoid gate on z-normalised energies',
                   options=('ega_norm', 'ega_alpha', 'ega_tau'), leaks={'ega_norm': ('window',)}),
    'fox': Variant("the Forgetting Transformer's forget gate: logits plus the sum of log f "
                   'over the positions between key and query', options=('fox_bias',)),
    'ega_fox': Variant("EGA's gate and FoX's forget gate, their logits summed",
                       options=('ega_norm', 'ega_alpha', 'ega_tau', 'fox_bias'),
                       leaks={'ega_norm': ('window',)}),
}
POS = {
    'learned': Variant('learned absolute embedding (nanoGPT wpe)'),
    'sin': Variant('fixed sinusoidal table'),
    'mope': Variant('Morlet positional encoding: learned Gaussian-windowed waves',
                    options=('mope_init', 'mope_sigma', 'mope_rule', 'mope_decay')),
    'rope': Variant('rotary embedding of q and k'),
    'alibi': Variant('ALiBi linear distance bias'),
    'none': Variant('no positional encoding'),
}
# every GPTConfig field with a fixed set of values
CHOICES = {
    'attn': tuple(ATTN),
    'pos': tuple(POS),
    'ega_norm': ('prefix', 'window', 'none'),
    'mope_init': ('paper', 'sin'),
}


@dataclass
class GPTConfig:
    # the paper scale (docs/variants.md §0)
    block_size: int = 256
    vocab_size: int = 65
    n_layer: int = 6
    n_head: int = 8
    n_embd: int = 256
    dropout: float = 0.1
    bias: bool = True
    attn: str = 'dot'           # a name in ATTN
    pos: str = 'learned'        # a name in POS
    # EGA (docs/variants.md §2)
    ega_norm: str = 'prefix'    # prefix: causal running stats; window: published, leaks; none
    ega_alpha: float = 2.0      # gate sharpness at init
    ega_tau: float = 0.0        # gate threshold at init
    # MOPE (docs/variants.md §1)
    mope_init: str = 'paper'    # paper: w log-spaced 1..0.99pi, s = 5/w; sin: sinusoidal w, wide s
    mope_sigma: float = 4.0     # with mope_init='sin': s = mope_sigma * block_size
    mope_rule: bool = True      # published clamps and the w*s >= 5 admissibility rule
    mope_decay: bool = True     # published: weight decay on log w, log s
    # FoX forget gate (docs/variants.md §6)
    fox_bias: float = 0.0       # f = sigmoid(w^T x + b) starts near sigmoid(fox_bias): 0.5 at 0

    def __post_init__(self):
        for name, valid in CHOICES.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"{name}={getattr(self, name)!r} is not one of: {', '.join(valid)}")
        for name in ('block_size', 'vocab_size', 'n_layer', 'n_head', 'n_embd'):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.pos in ('sin', 'mope') and self.n_embd % 2:
            raise ValueError(f"pos={self.pos} pairs channels (cos, sin): n_embd must be even")
        if self.pos == 'rope' and (self.n_embd // self.n_head) % 2:
            raise ValueError("pos=rope rotates channel pairs: the head size must be even")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def leaks(self):
        """True for a published form known to see the future. The audit decides;
        this lets a config say so before any model is built."""
        return ATTN[self.attn].leaks_with(self) or POS[self.pos].leaks_with(self)

# -----------------------------------------------------------------------------
# shared mechanisms

def waves(b, w, s=None):
    """Positional waves, pairs laid out (cos, sin) at channels (2i, 2i+1).
    b: (T,) positions, w: (P,) angular frequencies, s: (P,) Gaussian widths or None.
    The sinusoidal encoding is s=None; MOPE multiplies by exp(-b^2 / 2s^2), so that
    s -> inf gives back the sinusoidal encoding exactly."""
    ang = b[:, None] * w[None, :]                               # (T, P)
    pe = torch.stack((torch.cos(ang), torch.sin(ang)), dim=-1)  # (T, P, 2)
    if s is not None:
        pe = pe * torch.exp(-b[:, None] ** 2 / (2 * s[None, :] ** 2))[..., None]
    return pe.flatten(1)                                        # (T, 2P)


def sin_freqs(C, base=10000.0):
    return base ** (-torch.arange(0, C, 2, dtype=torch.float32) / C)  # (C/2,)


def znorm(e, mode):
    """z-normalise per-key signals e: (..., T) over time.
    window: statistics over the whole window (published; position j sees the future)
    prefix: running statistics over positions <= j (causal)
    none:   e unchanged."""
    if mode == 'none':
        return e
    if mode == 'window':
        d = e - e.mean(-1, keepdim=True)
        var = (d * d).mean(-1, keepdim=True)
    else:
        # shifting by the first value keeps the running variance from cancelling
        # catastrophically in float32, and the shift is causal
        d = e - e[..., :1]
        n = torch.arange(1, e.shape[-1] + 1, device=e.device, dtype=e.dtype)
        m1 = d.cumsum(-1) / n
        var = (d * d).cumsum(-1) / n - m1 * m1
        d = d - m1
    # std floored at 1e-8 (published); the clamp sits under the sqrt so a
    # constant signal gives z = 0 with a zero, not infinite, gradient
    return d / torch.sqrt(var.clamp_min(1e-16))


def key_logit(e, alpha, tau, norm):
    """The EGA gate as a logit: log g_j = log sigmoid(alpha (z_j - tau)).
    e: (B, nh, T) per-key energies; alpha, tau: (nh,). Statistics in float32 even
    under autocast: a bf16 running sum over T keys keeps about three digits."""
    z = znorm(e.to(torch.promote_types(e.dtype, torch.float32)), norm)  # (B, nh, T)
    return F.logsigmoid(alpha[:, None] * (z - tau[:, None]))   # (B, nh, T)


def causal_conv(u, h):
    """A causal filter over time, tap 0 = the current position:
    y[:, g, t] = sum_l h[g, l] u[:, g, t - l], with u = 0 before t = 0.
    u: (B, G, T) signals, h: (G, L) one real or complex kernel per channel g.
    Left padding by L - 1 and a grouped conv1d (which correlates, hence the flip);
    in float32 even under autocast. Returns (B, G, T), complex if h is."""
    G, L = h.shape
    dt = torch.promote_types(u.dtype, torch.float32)
    x = F.pad(u.to(dt), (L - 1, 0))                             # (B, G, T + L - 1)
    if h.is_complex():
        re, im = (F.conv1d(x, k.to(dt).flip(-1)[:, None, :], groups=G) for k in (h.real, h.imag))
        return torch.complex(re, im)                            # (B, G, T)
    return F.conv1d(x, h.to(dt).flip(-1)[:, None, :], groups=G)  # (B, G, T)


def future_mask(T, device):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)   # (T, T), True where j > i


def forget_cumsum(a):
    """FoX's forget gate, accumulated over time: f_l = sigmoid(a_l) and
    c_j = sum_(l <= j) log f_l, so that the forget bias D_ij = sum_(l=j+1..i) log f_l
    is c_i - c_j. a: (B, nh, T) gate pre-activations. float32 even under autocast:
    |c| grows to T |log f|, far beyond what 16 bits hold to the needed precision."""
    return F.logsigmoid(a.to(torch.promote_types(a.dtype, torch.float32))).cumsum(-1)  # (B, nh, T)


def forget_as_key_logit(dtype, dropout_p):
    """Whether the forget gate can ride the per-key logit channel: exact in float32
    or float64 without dropout. Otherwise -c_j is too large for the channel (16-bit
    rounding of a value near T |log f| reaches whole logits) or for exp() (the
    dropout form's g = exp(b) overflows), and the model uses the T x T bias instead."""
    return dropout_p == 0.0 and dtype in (torch.float32, torch.float64)


def attend(q, k, v, key_bias=None, bias=None, dropout_p=0.0, scale=None):
    """Causal attention through F.scaled_dot_product_attention.
    q, k: (B, nh, T, hs); v: (B, nh, T, hv); key_bias: (B, nh, T), a logit b_j added
    to every query's score of key j (EGA: b_j = log g_j), or None; bias: an additive
    (nh, T, T) or (B, nh, T, T) logit bias, or None. The causal mask is applied
    whatever the bias holds: a finite bias above the diagonal must not open the future.
    scale: the logit scale, 1/sqrt(hs) by default; a variant that concatenates K
    bands or [Re, Im] channels along hs passes its own (e.g. 1/(K sqrt(hs_band))).
    Returns (B, T, nh, hv): heads last, ready to be merged by a reshape.

    A per-key logit re-weights the attention to A_ij g_j / sum_j' A_ij' g_j' with
    g_j = exp(b_j). Without dropout that is one more q.k channel: 1 on the query
    side, b_j sqrt(hs) on the key side (and a zero value channel, since the fused
    kernels want one width for q, k and v). With dropout the published order is
    dropout first, then gate and renormalise, which needs the weights themselves:
    values [g v, g], whose extra output channel is the normaliser; the dropout mask
    and its 1/(1-p) scale act on both and cancel in the ratio. The first form has
    no floor on the normaliser (published: 1e-8), which matters only when every
    key a query sees has g_j below about 1e-8."""
    hs, T, hv = q.size(-1), q.size(-2), v.size(-1)
    scale = 1.0 / math.sqrt(hs) if scale is None else scale
    extra = 0                                                   # trailing channels that carry the gate
    if key_bias is not None:
        b = key_bias.unsqueeze(-1)                              # (B, nh, T, 1)
        if dropout_p == 0.0:
            # one channel carries the logit; a second, zero channel where needed keeps the
            # width even, which the CPU flash kernel runs much faster than an odd one
            # (cat with broadcast constants, not F.pad: padding fills the whole output first)
            extra = 1 + (hs + 1) % 2
            B, nh = q.shape[:2]
            one, zero = q.new_ones(()).expand(B, nh, T, 1), q.new_zeros(()).expand(B, nh, T, extra)
            q = torch.cat((q, one.expand(B, nh, T, extra)), dim=-1)               # (B, nh, T, hs+extra)
            k = torch.cat((k, (b / scale).to(k.dtype), zero[..., 1:]), dim=-1)   # (B, nh, T, hs+extra)
            v = torch.cat((v, zero), dim=-1)                                      # (B, nh, T, hv+extra)
        else:
            extra = 1
            g = b.exp().to(v.dtype)                             # (B, nh, T, 1)
            v = torch.cat((v * g, g), dim=-1)                   # (B, nh, T, hv+1)
            if hs == hv:
                q, k = F.pad(q, (0, 1)), F.pad(k, (0, 1))       # (B, nh, T, hs+1)
    if bias is None:
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
    else:
        mask = bias.to(q.dtype).masked_fill(future_mask(T, q.device), float('-inf'))  # (.., nh, T, T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    y = y.transpose(1, 2)                                       # (B, T, nh, hv+extra)
    if extra and dropout_p > 0.0:
        # dividing after the transpose writes (B, T, nh, hv) order: no copy in the caller's reshape
        return y[..., :hv] / y[..., hv:hv + 1].clamp_min(1e-8)  # (B, T, nh, hv)
    return y[..., :hv]                                          # (B, T, nh, hv)


def rotate(x, cos, sin):
    """RoPE on channel pairs (2i, 2i+1). x: (B, nh, T, hs); cos, sin: (T, hs/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]                         # (B, nh, T, hs/2)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def alibi_bias(nh, T):
    """ALiBi: -m_h (i - j), m_h = 2^(-8h/nh). Entries above the diagonal are
    meaningless: attend masks them."""
    m = 2.0 ** (-8.0 * torch.arange(1, nh + 1) / nh)            # (nh,)
    i = torch.arange(T)
    lag = (i[:, None] - i[None, :]).float()                     # (T, T)
    return -m[:, None, None] * lag                              # (nh, T, T)

# -----------------------------------------------------------------------------
# modules

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no bias=False before 2.1)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class MOPE(nn.Module):
    """Morlet positional encoding, published form (docs/variants.md §1)."""

    def __init__(self, cfg):
        super().__init__()
        P = cfg.n_embd // 2
        if cfg.mope_init == 'paper':
            w = torch.exp(torch.linspace(0.0, math.log(0.99 * math.pi), P))  # 1 .. 0.99 pi
            s = 5.0 / w
        else:
            w = sin_freqs(cfg.n_embd)
            s = torch.full((P,), cfg.mope_sigma * cfg.block_size)
        self.log_w = nn.Parameter(torch.log(w))                 # (P,)
        self.log_s = nn.Parameter(torch.log(s))                 # (P,)
        self.rule, self.decay = cfg.mope_rule, cfg.mope_decay

    def decayed(self):
        # published: weight decay on log w, log s; with the rule, it is what pulls w s down to 5
        return (self.log_w, self.log_s) if self.decay else ()

    def freqs(self):
        w, s = self.log_w.exp(), self.log_s.exp()
        if self.rule:
            w = w.clamp(max=0.95 * math.pi)
            s = s.clamp(min=1e-3)
            w = torch.where(w * s < 5.0, 5.0 / s, w)            # admissibility: w s >= 5
        return w, s

    def forward(self, T):
        b = torch.arange(T, device=self.log_w.device, dtype=self.log_w.dtype)
        return waves(b, *self.freqs())                          # (T, C)


class Positions(nn.Module):
    """The positional encoding, decided here and nowhere else. forward(T) returns
    what the model needs as (table, rope, bias): a (T, C) table added to the token
    embeddings, rotary (cos, sin) tables of (T, hs/2) for q and k, and a (nh, T, T)
    logit bias for attention; None where the encoding has none."""

    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg.pos
        C, T = cfg.n_embd, cfg.block_size
        b = torch.arange(T, dtype=torch.float32)
        # fixed tables are rebuilt from the config, not saved in checkpoints
        if self.kind == 'learned':
            self.wpe = nn.Embedding(T, C)
        elif self.kind == 'mope':
            self.mope = MOPE(cfg)
        elif self.kind == 'sin':
            self.register_buffer('table', waves(b, sin_freqs(C)), persistent=False)     # (T, C)
        elif self.kind == 'rope':
            ang = b[:, None] * sin_freqs(C // cfg.n_head)[None, :]                    # (T, hs/2)
            self.register_buffer('cos', torch.cos(ang), persistent=False)
            self.register_buffer('sin', torch.sin(ang), persistent=False)
        elif self.kind == 'alibi':
            # ALiBi's bias is a function of i - j: the one T x T table here, built once
            self.register_buffer('bias', alibi_bias(cfg.n_head, T), persistent=False)  # (nh, T, T)

    def forward(self, T):
        if self.kind == 'learned':
            return self.wpe.weight[:T], None, None              # (T, C)
        if self.kind == 'mope':
            return self.mope(T), None, None                     # (T, C)
        if self.kind == 'sin':
            return self.table[:T], None, None                   # (T, C)
        if self.kind == 'rope':
            return None, (self.cos[:T], self.sin[:T]), None     # (T, hs/2) each
        if self.kind == 'alibi':
            return None, None, self.bias[:, :T, :T]             # (nh, T, T)
        return None, None, None


class CausalSelfAttention(nn.Module):

    def __init__(self, cfg):
        super().__init__()
        self.nh, self.attn, self.ega_norm = cfg.n_head, cfg.attn, cfg.ega_norm
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.gated = cfg.attn in ('ega', 'ega_fox')
        self.forgets = cfg.attn in ('fox', 'ega_fox')
        if self.gated:
            # per head: a Linear(C, 1) energy (C + 1 parameters) plus alpha, tau
            self.energy = nn.Linear(cfg.n_embd, cfg.n_head, bias=True)
            self.alpha = nn.Parameter(torch.full((cfg.n_head,), cfg.ega_alpha))
            self.tau = nn.Parameter(torch.full((cfg.n_head,), cfg.ega_tau))
        if self.forgets:
            # per head: f = sigmoid(w^T x + b) on the block's LN output (FoX's default gate)
            self.forget = nn.Linear(cfg.n_embd, cfg.n_head, bias=True)
            self.fox_bias = cfg.fox_bias

    def init_own(self):
        if self.forgets:
            nn.init.constant_(self.forget.bias, self.fox_bias)   # weights keep N(0, 0.02)

    def forward(self, x, rope=None, bias=None):
        B, T, C = x.size()
        nh, hs = self.nh, C // self.nh
        q, k, v = self.c_attn(x).split(C, dim=2)                # (B, T, C) each
        q = q.view(B, T, nh, hs).transpose(1, 2)                # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)                # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)                # (B, nh, T, hs)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        key_bias = None
        if self.gated:
            # energy from the LN output x (published), not from k
            e = self.energy(x).transpose(1, 2)                  # (B, nh, T)
            key_bias = key_logit(e, self.alpha, self.tau, self.ega_norm)  # (B, nh, T)
        p = self.dropout if self.training else 0.0
        if self.forgets:
            c = forget_cumsum(self.forget(x).transpose(1, 2))   # (B, nh, T), float32
            if forget_as_key_logit(q.dtype, p):
                # D_ij = c_i - c_j, and c_i is the same along query i's row: it cancels
                # in the softmax, so the forget gate is the per-key logit -c_j
                key_bias = -c if key_bias is None else key_bias - c             # (B, nh, T)
            else:
                # the difference is formed in float32, where it is small near the diagonal
                D = c[..., :, None] - c[..., None, :]           # (B, nh, T, T)
                bias = D if bias is None else bias + D          # (B, nh, T, T)
        y = attend(q, k, v, key_bias=key_bias, bias=bias, dropout_p=p)  # (B, T, nh, hs)
        y = y.reshape(B, T, C)                                  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):

    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):

    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, rope=None, bias=None):
        x = x + self.attn(self.ln_1(x), rope, bias)
        x = x + self.mlp(self.ln_2(x))
        return x

# -----------------------------------------------------------------------------
# the model

class GPT(nn.Module):

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        C, T = cfg.n_embd, cfg.block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, C),
            pos=Positions(cfg),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=LayerNorm(C, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(C, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight       # tied
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        # N(0, 0.02) weights and zero biases for every Linear and Embedding (the
        # published init); then a module's own init, if it has one. apply() visits
        # children before their parent, so a variant that initialises its own
        # parameters (per-head q/k scales, filter kernels) in init_own() has the last word.
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if hasattr(m, 'init_own'):
            m.init_own()

    def num_params(self):
        return sum(p.numel() for p in self.parameters())         # the tied matrix counts once

    def forward(self, idx, targets=None):
        B, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        tr = self.transformer
        table, rope, bias = tr.pos(T)
        x = tr.wte(idx)                                         # (B, T, C)
        if table is not None:
            x = x + table                                       # (B, T, C)
        x = tr.drop(x)
        for block in tr.h:
            x = block(x, rope, bias)
        x = tr.ln_f(x)
        logits = self.lm_head(x)                                # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss

    def decay_params(self):
        """What weight decay acts on, listed: the weights of the Linear and Embedding
        maps, and what a module names in decayed() (MOPE's log w, log s, as
        published). Nothing else: biases, norms, gate scalars, and a variant's
        band centres, lag kernels or relative-position terms, 2-D or not, are
        decayed only where their module says so."""
        decay = {}
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                decay[id(m.weight)] = m.weight                  # the tied matrix once
            for p in getattr(m, 'decayed', tuple)():
                decay[id(p)] = p
        return list(decay.values())

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        decay = self.decay_params()
        ids = {id(p) for p in decay}
        no_decay = [p for p in self.parameters() if id(p) not in ids]
        groups = [{'params': decay, 'weight_decay': weight_decay},
                  {'params': no_decay, 'weight_decay': 0.0}]
        fused = device_type == 'cuda' and 'fused' in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({'fused': True} if fused else {}))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Extend idx (B, T) by max_new_tokens sampled tokens. temperature 0 is greedy."""
        for _ in range(max_new_tokens):
            ctx = idx[:, -self.config.block_size:]
            logits, _ = self(ctx)
            logits = logits[:, -1, :]                           # (B, vocab)
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None and top_k > 0:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                    logits = logits.masked_fill(logits < kth, float('-inf'))
                nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, nxt), dim=1)
        return idx

# -----------------------------------------------------------------------------
# the causality audit (docs/variants.md §5)

@dataclass
class Audit:
    causal: bool
    max_change: float     # largest change of a logit at positions <= t when tokens after t change
    batch_change: float   # largest change of one sequence's logits when another in the batch changes
    tol: float

    @property
    def verdict(self):
        return 'causal' if self.causal else 'LEAKS'

    def __str__(self):
        return (f"{self.verdict} (max logit change from future tokens {self.max_change:.1e}, "
                f"across the batch {self.batch_change:.1e}, tol {self.tol:.0e})")


def unwrap(model):
    """The plain module under torch.compile and DDP wrappers."""
    while True:
        inner = getattr(model, '_orig_mod', None) or getattr(model, 'module', None)
        if inner is None:
            return model
        model = inner


def shrink_length(n, T, T_tiny):
    """A length in tokens for a window of T_tiny instead of T: a short one (lags,
    a few taps) fits and is kept; a long one keeps its ratio to T, so a filter
    longer than the window stays longer than the window."""
    return n if 2 * n <= T_tiny else max(1, math.ceil(n * T_tiny / T))


def tiny_config(cfg, T=24):
    """The configured architecture, shrunk: every variant field kept, sizes small,
    and the variant's lengths in tokens shrunk together with T."""
    nh = min(cfg.n_head, 2)
    T_tiny = min(cfg.block_size, T)
    lengths = {f: shrink_length(getattr(cfg, f), cfg.block_size, T_tiny)
               for reg, name in ((ATTN, cfg.attn), (POS, cfg.pos)) for f in reg[name].lengths}
    return replace(cfg, n_layer=min(cfg.n_layer, 2), n_head=nh, n_embd=8 * nh, block_size=T_tiny,
                   vocab_size=min(cfg.vocab_size, 50), dropout=0.0, **lengths)


@torch.no_grad()
def audit_model(model_or_cfg, T, g):
    """(float64 model in eval mode on the CPU, T, vocabulary size) for the audit and
    the influence map. A GPTConfig gives a tiny copy of that architecture with
    perturbed weights (so that no leak hides behind a zero init); a model is copied
    as it is."""
    if isinstance(model_or_cfg, GPTConfig):
        with torch.random.fork_rng(devices=[]):                # leave the caller's RNG stream alone
            torch.manual_seed(g.initial_seed())                 # the same verdict and number every time
            model = GPT(tiny_config(model_or_cfg)).double()
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    else:
        model = copy.deepcopy(unwrap(model_or_cfg)).double()
    model.eval().cpu()
    cfg = getattr(model, 'config', None)
    T = T or (cfg.block_size if cfg is not None else 16)
    V = cfg.vocab_size if cfg is not None else model_vocab(model)
    return model, T, V


@torch.no_grad()
def audit(model_or_cfg, T=None, batch=3, seed=0, tol=1e-9):
    """Exact causality audit in float64, eval mode.
    Given a GPTConfig: audits a tiny copy of that architecture whose weights are
    randomly perturbed (so that no leak hides behind a zero init). Given a model
    (anything mapping idx (B, T) to logits (B, T, V), or to (logits, ...)): audits a
    float64 copy of it as it is. For several cut points t, the tokens after t are
    replaced and the logits at positions <= t compared."""
    g = torch.Generator().manual_seed(seed)
    model, T, V = audit_model(model_or_cfg, T, g)

    def logits(idx):
        out = model(idx)
        return out[0] if isinstance(out, tuple) else out       # (B, T, V)

    idx = torch.randint(V, (batch, T), generator=g)
    base = logits(idx)
    max_change = 0.0
    for t in sorted({0, T // 3, T // 2, (2 * T) // 3, T - 2}):
        if not 0 <= t < T - 1:
            continue
        alt = idx.clone()
        shift = torch.randint(1, V, (batch, T - t - 1), generator=g)
        alt[:, t + 1:] = (alt[:, t + 1:] + shift) % V           # every later token differs
        change = (logits(alt)[:, :t + 1] - base[:, :t + 1]).abs().max().item()
        max_change = max(max_change, change)
    alt = idx.clone()
    alt[1:] = torch.randint(V, alt[1:].shape, generator=g)
    batch_change = (logits(alt)[0] - base[0]).abs().max().item() if batch > 1 else 0.0
    causal = max_change <= tol and batch_change <= tol
    return Audit(causal, max_change, batch_change, tol)


def model_vocab(model):
    emb = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    if not emb:
        raise ValueError("audit: cannot tell the vocabulary size of this model; give it a .config")
    return emb[0].num_embeddings


def influence(model_or_cfg, T=None, seed=0):
    """The audit as a picture (docs/variants.md §5): a (T, T) map whose entry [t, s]
    is the size of the gradient of position t's logits (projected on a fixed random
    direction) with respect to the input embedding at position s. Exactly zero above
    the diagonal (s > t) for a causal model. Same models as audit(): a GPTConfig
    gives a tiny perturbed copy, a GPT is copied as it is."""
    g = torch.Generator().manual_seed(seed)
    model, T, V = audit_model(model_or_cfg, T, g)
    idx = torch.randint(V, (1, T), generator=g)
    r = torch.randn(V, generator=g, dtype=torch.float64)       # (V,)
    emb = {}

    def keep(module, inputs, out):                              # the embeddings, as a leaf
        emb['x'] = out.detach().requires_grad_(True)
        return emb['x']

    hook = model.transformer.wte.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(idx)[0][0]                           # (T, V)
            rows = []
            for t in range(T):
                grad, = torch.autograd.grad(logits[t] @ r, emb['x'], retain_graph=t < T - 1)
                rows.append(grad[0].norm(dim=-1))               # (T,)
    finally:
        hook.remove()
    return torch.stack(rows)                                    # (T, T)

