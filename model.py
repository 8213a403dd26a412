"""A small GPT with switchable attention variants and positional encodings. First the GPT a
nanoGPT reader knows: the config, the attention written out (attend_plain, the formula),
CausalSelfAttention (the slots a variant fills), MLP, Block, GPT. Then the registry (ATTN, POS)
and the parts, family by family, with the config's check beside their names (CHOICES); last the
same formula, fast (attend: SDPA, attend_flex, pick_impl). docs/variants.md carries the maths.
Shapes: B batch, T time, C channels (n_embd), nh heads, hs head size (C // nh)."""

import math
import re
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
from torch.nn import functional as F

# ---- the configuration

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
    # the FourierQK family (docs/variants.md §4)
    fourier_sf: float = 2.0     # Gaussian band width in bins of the window; 0.5 / 16: narrow / wide
    fourier_norm: str = 'l2'    # band weights: unit L2 norm (main paper) or unit sum (follow-up)
    filter_taps: int = 0        # causal filters' taps; 0: block_size // 2 (published 128 at 256)
    filter_learned: bool = False    # causal filters' scale a: fixed at 4, or learned from 8
    # the EGA paper's ablations (docs/variants.md §3)
    conv_lags: int = 4          # conv: lags 0..conv_lags-1; conv_paper: lags -conv_lags..conv_lags
    mope_rel_terms: int = 4     # pos=mope_rel: Morlet terms per head
    gate_signal: str = 'proj'   # filter gates' u: w^T x + b per head, or channel_mean (published)
    morlet_learned: bool = True     # Morlet gate: learned log w, log sig; False: fixed (buffers)
    daub_order: int = 2         # daub: db2 (4 taps) or db4 (8 taps)
    scale_init_rest: str = 'torch'  # scale_init's other matrices: PyTorch's (published) or normal
    dconv_width: int = 3        # dconv (docs/variants.md §7): taps of the q, k, v filters
    dconv_init: str = 'identity'    # dconv's init: identity or torch

    def __post_init__(self):
        check_config(self)

    @property
    def leaks(self):
        """Whether a part is declared to see the future (Variant.leaks); the audit decides."""
        parts = [ATTN[n] for n in components(self.attn)]
        parts += [POS[n] for n in pos_components(self.pos)]
        return any(v.leaks_with(self) for v in parts)

# ---- the config's checks: the registries (filled by @register below) and every value's range

ATTN, POS = {}, {}

class Names:
    """A registry's names as it is now (it fills as the parts register, below); `in` also takes a
    composition 'a+b' (GPTConfig then checks its slots)."""

    def __init__(self, registry):
        self.registry = registry

    def __iter__(self):
        return iter(self.registry)

    def __contains__(self, name):
        return isinstance(name, str) and all(p in self.registry for p in name.split('+'))

# added to x; the others act on attention logits
FNET_POS = ('learned', 'sin', 'mope', 'mope_learned', 'none')
# every GPTConfig field with a fixed set of values
CHOICES = {'attn': Names(ATTN), 'pos': Names(POS), 'ega_norm': ('prefix', 'window', 'none'),
           'mope_init': ('paper', 'sin'), 'gate_signal': ('proj', 'channel_mean'),
           'daub_order': (2, 4), 'fourier_norm': ('l2', 'sum'),
           'scale_init_rest': ('torch', 'normal'), 'dconv_init': ('identity', 'torch')}

def check_config(cfg):
    """GPTConfig's check of its values (ValueError, one line): the names in CHOICES, finite
    numbers in range, the sizes that must divide, and the parts' own needs."""
    for name in ('attn', 'pos'):   # a composition says which part is wrong
        if isinstance(getattr(cfg, name), str) and '+' in getattr(cfg, name):
            (components if name == 'attn' else pos_components)(getattr(cfg, name))
    for name, valid in CHOICES.items():
        if getattr(cfg, name) not in valid:
            raise ValueError(f"{name}={getattr(cfg, name)!r} is not one of: "
                             f"{', '.join(map(str, valid))}")
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{f.name} must be a finite number, got {v}")
    at_least = dict(block_size=1, vocab_size=1, n_layer=1, n_head=1, n_embd=1, conv_lags=1,
                    dconv_width=1, mope_rel_terms=1, filter_taps=0)   # 0: block_size // 2
    for name, lo in at_least.items():
        if getattr(cfg, name) < lo:
            raise ValueError(f"{name} must be >= {lo}, got {getattr(cfg, name)}")
    for name in ('fourier_sf', 'mope_sigma'):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(cfg, name)}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}")
    pos = cfg.pos.split('+')
    if {'sin', 'mope', 'mope_learned'} & set(pos) and cfg.n_embd % 2:
        raise ValueError(f"pos={cfg.pos} pairs channels (cos, sin): n_embd must be even")
    if 'rope' in pos and (cfg.n_embd // cfg.n_head) % 2:
        raise ValueError("pos=rope rotates channel pairs: the head size must be even")
    if cfg.attn == 'fnet' and not set(pos) <= set(FNET_POS):
        raise ValueError(f"attn=fnet has no attention logits for pos={cfg.pos} to act on; "
                         f"use one of: {', '.join(FNET_POS)}")
    for f in attn_lengths(cfg.attn):
        if getattr(cfg, f) > cfg.block_size:
            raise ValueError(f"{f}={getattr(cfg, f)} is longer than the window (block_size="
                             f"{cfg.block_size}): the taps past it meet only zeros")

# ---- the attention, written out: the formula every path computes (the fast ones at the end)

def future_mask(T, device):
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)   # (T, T), True where j > i

def attend_plain(q, k, v, key_bias=None, bias=None, dropout_p=0.0, scale=None, logits=None,
                 keep=None):
    """The attention every variant computes, written out with its T x T weights:

        s_ij = logits((q_i . k_j) scale)_ij + bias_ij,  j <= i (the causal mask, whatever the bias)
        A = dropout(softmax_j(s)),  A'_ij = A_ij g_j / sum_j' A_ij' g_j'  with g_j = exp(key_bias_j)
        y_i = sum_j A'_ij v_j

    q, k (B, nh, T, hs); v (B, nh, T, hv); key_bias (B, nh, T); bias ([B,] nh, T or 1, T); logits a
    map of the scaled scores; keep a list to append A' to; each None when unused. scale: 1/sqrt(hs)
    by default. The gate after dropout, its normaliser floored at 1e-8, is EGA's published order
    (docs/variants.md §2). Returns (B, T, nh, hv)."""
    T, hs = q.size(-2), q.size(-1)
    scale = 1.0 / math.sqrt(hs) if scale is None else scale
    mask = future_mask(T, q.device)                             # (T, T)
    s = (q @ k.transpose(-2, -1)) * scale                       # (B, nh, T, T)
    if logits is not None:
        s = logits(s)                                           # (B, nh, T, T)
    # a bias or key logit wider than s (float32 beside bf16 scores) widens s: FoX's -c_j reaches
    # T |log f|, where bf16 keeps 2 to 3 digits and a row's softmax needs c_i - c_j exactly
    if bias is not None:
        s = s + (bias.dense() if isinstance(bias, LagBias) else bias)   # (B, nh, T, T)
    if key_bias is not None and dropout_p == 0.0:
        s = s + key_bias[:, :, None, :]     # softmax(s + b_j): the gate, renormalised (B, nh, T, T)
        key_bias = None
    A = F.dropout(s.masked_fill(mask, float('-inf')).softmax(-1), dropout_p)   # (B, nh, T, T)
    if key_bias is not None:
        # exp(b_j) overflows for a large b_j (FoX's -c_j; docs/variants.md §2): row i's gates are
        # shifted by its largest b_j, j <= i, if positive, which cancels in the ratio, no later key
        top = key_bias.cummax(-1).values.clamp_min(0.0)         # (B, nh, T), one per query
        g = (key_bias[:, :, None, :] - top[..., None]).masked_fill(mask, float('-inf')).exp()
        A = A * g                                               # (B, nh, T, T), g's dtype or wider
        A = A / A.sum(-1, keepdim=True).clamp_min(1e-8)
    if keep is not None:
        keep.append(A)
    return (A @ v).transpose(1, 2)                              # (B, T, nh, hv)

@dataclass
class LagBias:
    """A logit bias of the lag i - j alone, kept as its table (nh, T): dense() gives the (nh, T, T)
    bias the other paths add; attend_flex indexes the table and forms no T x T tensor."""
    table: torch.Tensor                                         # (nh, T)

    def dense(self):
        i = torch.arange(self.table.size(-1), device=self.table.device)
        return self.table[:, (i[:, None] - i[None, :]).clamp_min(0)]  # (nh, T, T), j > i masked

IMPLS = ('auto', 'sdpa', 'flex', 'plain')   # the attention paths (pick_impl)

# ---- the transformer

def plus(a, b):
    """a + b, where None is nothing to add (and a LagBias adds as its dense form). A bias of the
    key alone (B, nh, 1, T) added to a T x T one is shifted in row i by its entry at key i, a row's
    constant the softmax does not see: FoX's -c_j becomes c_i - c_j, small near the diagonal,
    where the 16 bits of a mask keep it (-c_j alone reaches T |log f|)."""
    if a is not None and b is not None:
        a, b = (t.dense() if isinstance(t, LagBias) else t for t in (a, b))
        if a.size(-2) != b.size(-2):                            # one is (B, nh, 1, T), T > 1
            a, b = (t - t[..., 0, :, None] if t.size(-2) == 1 else t for t in (a, b))   # (.., T, T)
    return b if a is None else a if b is None else a + b

class CausalSelfAttention(nn.Module):
    """The one attention every variant runs. A variant is a part that fills a slot
    (ATTN[name].slot; a composition 'a+b' fills several, one part to a slot but the gates):

      qkv           forward(qkv) -> qkv: the projections (B, T, 3C) filtered over time (dconv)
      qk            forward(q, k) -> (q, k, scale): what the logits are made of, after rope,
                    and their scale, None for 1/sqrt(hs) (FourierQK, the causal filters, conv)
      gate,         forward(x, q, p) -> (q, key_bias, bias): a per-key logit (B, nh, T) and/or
      filter_gate   a logit bias (B, nh, T, T), from x the block's LayerNorm output, p the
                    dropout rate; the gates' logits add (ega+fox)
      logits        forward(s) -> s: a map of the scaled scores (B, nh, T, T) (conv_paper), and for
                    attend_flex score_mod(T) -> (s, b, h, i, j) -> s, the same entry by entry
      init          init_qk(c_attn), init_rest(block): an init change (scale_init)
      mixer         forward(x) -> y: token mixing in place of attention (fnet)

    A positional encoding gives a table (added to x by GPT), rotary maps or a logit bias (rope,
    bias here). The rest is dot attention: attend(), or attend_plain() for a logit map."""

    def __init__(self, cfg):
        super().__init__()
        self.nh, self.dropout = cfg.n_head, cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.gates = nn.ModuleDict()
        self.qkv = self.qk = self.logits = self.init = self.mixer = None
        for n in components(cfg.attn):                          # in slot order
            slot, part = ATTN[n].slot, ATTN[n].part
            if slot in ('gate', 'filter_gate'):
                self.gates[n] = part(cfg)
            elif part is not None:
                setattr(self, slot, part(cfg))
        if self.mixer is not None:
            del self.c_attn                                     # it mixes x itself: no q, k, v
        self.keep = None            # a list: the plain path appends its weights (GPT.attention)
        self.impl = 'auto'          # the attention path (pick_impl); GPT.set_impl

    def init_own(self):
        if self.init is not None:
            self.init.init_qk(self.c_attn)

    def forward(self, x, rope=None, bias=None):
        B, T, C = x.size()
        nh, hs = self.nh, C // self.nh
        if self.mixer is not None:
            return self.resid_dropout(self.c_proj(self.mixer(x)))   # (B, T, C): no attention
        qkv = self.c_attn(x)                                    # (B, T, 3C)
        if self.qkv is not None:
            qkv = self.qkv(qkv)                                 # (B, T, 3C), filtered over time
        q, k, v = qkv.split(C, dim=2)                           # (B, T, C) each
        q = q.view(B, T, nh, hs).transpose(1, 2)                # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)                # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)                # (B, nh, T, hs)
        if rope is not None:
            q, k = rotate_fast(q, *rope), rotate_fast(k, *rope)
        p = self.dropout if self.training else 0.0
        scale = key_bias = None
        if self.qk is not None:
            q, k, scale = self.qk(q, k)                         # (B, nh, T, hs or wider)
        for gate in self.gates.values():
            q, kb, b = gate(x, q, p)  # (B, nh, T) and (B, nh, T, T), or None
            key_bias, bias = plus(key_bias, kb), plus(bias, b)
        impl = 'plain' if self.keep is not None else pick_impl(self.impl, q, bias, p, self.logits)
        if impl == 'sdpa':
            y = attend(q, k, v, key_bias, bias, p, scale)       # (B, T, nh, hs)
        elif impl == 'flex':
            y = attend_flex(q, k, v, key_bias, bias, scale, self.logits)   # (B, T, nh, hs)
        else:                       # no SDPA kernel maps the scores: the plain path forms them
            y = attend_plain(q, k, v, key_bias, bias, p, scale, self.logits, self.keep)
        return self.resid_dropout(self.c_proj(y.reshape(B, T, C)))

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
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def init_own(self):
        if self.attn.init is not None:
            self.attn.init.init_rest(self)

    def forward(self, x, rope=None, bias=None):
        x = x + self.attn(self.ln_1(x), rope, bias)
        x = x + self.mlp(self.ln_2(x))
        return x

class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        C = cfg.n_embd
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, C),
            pos=PosSum(cfg) if '+' in cfg.pos else POS[cfg.pos].part(cfg),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(C, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(C, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight       # tied
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        # N(0, 0.02) weights, zero biases (published); then a module's init_own(): apply() visits
        # children before their parent, so a part's own init has the last word
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if hasattr(m, 'init_own'):
            m.init_own()

    @torch.no_grad()
    def attention(self, idx):
        """Each layer's weights on idx (B, T) after its gates, (B, nh, T, T) each; [] for FNet."""
        blocks = [b.attn for b in self.transformer.h if b.attn.mixer is None]
        for a in blocks:
            a.keep = []
        try:
            self(idx)
            return [a.keep[0] for a in blocks]
        finally:
            for a in blocks:
                a.keep = None

    def set_impl(self, impl):
        """The attention path of every layer: auto, sdpa, flex or plain (pick_impl)."""
        if impl not in IMPLS:
            raise ValueError(f"attn_impl={impl!r} is not one of: {', '.join(IMPLS)}")
        for block in self.transformer.h:
            block.attn.impl = impl
        return self

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
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.reshape(-1))

    def decay_params(self):
        """What weight decay acts on: the Linear and Embedding weights, and what a module names in
        decayed() (MOPE's log w, log s, as published); nothing else (docs/variants.md §0)."""
        decay = {}
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                decay[id(m.weight)] = m.weight                  # the tied matrix once
            for p in getattr(m, 'decayed', tuple)():
                decay[id(p)] = p
        return list(decay.values())

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type,
                             decay_all=False):
        """AdamW; decay_all: decay every parameter (the authors' scripts), else decay_params()."""
        decay = list(self.parameters()) if decay_all else self.decay_params()
        ids = {id(p) for p in decay}
        no_decay = [p for p in self.parameters() if id(p) not in ids]
        groups = [{'params': decay, 'weight_decay': weight_decay},
                  {'params': no_decay, 'weight_decay': 0.0}]
        # fused where the device has it (any CUDA device, the CPU): one kernel, 4x faster here
        fused = torch.device(device_type).type in ('cuda', 'cpu') or None  # None: torch's choice
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Extend idx (B, T) by max_new_tokens sampled tokens. temperature 0 is greedy."""
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size:])
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

# ---- the registry: each part registers itself where it is defined; GPTConfig, --help, bench.py,
# the README's table and the tests read the names (--attn, --pos) from here

@dataclass(frozen=True)
class Variant:
    """One entry of the registry: what the variant is, the GPTConfig fields it reads, and the
    option values under which it sees the future (its published form): a bool or {field: values}."""
    doc: str
    options: tuple = ()
    leaks: object = False
    lengths: tuple = ()         # int options in tokens (taps, lags): the audit shrinks them with T
    slot: str = ''              # the part it fills (SLOTS, POS_SLOTS); a composition fills several
    of: tuple = ()  # a registered composition: the names it is made of (ega_fox = ega + fox)
    part: object = None         # the module that fills its slot, built from the config (None: dot)
    leaks_beside: tuple = ()    # parts beside which this one leaks (dc_qk: conv_paper's map)
    keeps_tt: bool = False      # backward needs T x T (score map, q, k mixed in time, learned bias)
    edge: str = ''  # a causal part whose logits depend on the window's end: why generating differs
    docs: int = 0   # its section of docs/variants.md

    def leaks_with(self, cfg):
        if set(self.leaks_beside) & set(components(cfg.attn)):
            return True
        if isinstance(self.leaks, bool):
            return self.leaks
        return any(getattr(cfg, k) in v for k, v in self.leaks.items())

SLOTS = {'qkv': 'the q, k, v filter', 'gate': 'a per-key gate', 'qk': 'the q, k transform',
         'filter_gate': 'the filter-bank gate', 'logits': 'the logit map',
         'init': 'an init change', 'mixer': 'the token mixer'}
POS_SLOTS = ('table', 'rope', 'bias')

def register(table, name, **kw):
    """A class decorator: the part registered as `name` in table (ATTN or POS), its doc the first
    sentence of its docstring, kw the other Variant fields."""
    def add(cls):
        first = ' '.join(cls.__doc__.split('\n\n')[0].split())      # the first paragraph, one line
        first = re.split(r'\.\s+(?=[A-Z])', re.sub(r'\s*\(docs/variants\.md §\d+\)', '', first))[0]
        table[name] = Variant(doc=first.rstrip('.'), part=cls, **kw)
        return cls
    return add

def components(attn):
    """The registered names an attention is made of, in slot order: ('ega', 'fox') for 'ega+fox'
    and for ega_fox. A ValueError says why for an unknown name or two parts of one slot."""
    bad = [part for part in attn.split('+') if part not in ATTN]
    if bad:
        raise ValueError(f"attn={attn!r}: unknown name {bad[0]!r}")
    names = [n for part in attn.split('+') for n in (ATTN[part].of or (part,))]
    if len(names) == 1:
        return tuple(names)
    for n in names:
        slot = ATTN[n].slot
        if names.count(n) > 1:
            raise ValueError(f"attn={attn!r}: {n} comes twice")
        if n == 'dot' or slot == 'mixer':
            base = ' (it is the base)' if n == 'dot' else ''
            raise ValueError(f"attn={attn!r}: {n} combines with nothing{base}")
        other = [m for m in names if m != n and ATTN[m].slot == slot and slot != 'gate']
        if other:
            raise ValueError(f"attn={attn!r}: {n} and {other[0]} both fill {SLOTS[slot]}")
    # a+b builds what b+a builds: the slots in the order the attention applies them, then ATTN's
    order = {n: (list(SLOTS).index(ATTN[n].slot), list(ATTN).index(n)) for n in names}
    return tuple(sorted(names, key=order.get))

def pos_components(pos):
    """The registered encodings pos is made of: ('learned', 'alibi') for 'learned+alibi'. A
    ValueError says why for an unknown name or two of one kind."""
    names = pos.split('+')
    bad = [n for n in names if n not in POS]
    if bad:
        raise ValueError(f"pos={pos!r}: unknown name {bad[0]!r}")
    for n in names if len(names) > 1 else ():
        other = [m for m in names if m != n and POS[m].slot == POS[n].slot]
        if n == 'none' or names.count(n) > 1 or other:
            why = 'combines with nothing' if n == 'none' else 'comes twice'
            raise ValueError(f"pos={pos!r}: " + (f"{n} and {other[0]} both give a {POS[n].slot}"
                                                 if other else f"{n} {why}"))
    return tuple(sorted(names, key=list(POS).index))

def attn_options(attn):
    """The GPTConfig fields an attention (composed or not) reads, each once."""
    return tuple(dict.fromkeys(o for n in components(attn) for o in ATTN[n].options))

def attn_lengths(attn):
    return tuple(dict.fromkeys(f for n in components(attn) for f in ATTN[n].lengths))

def pos_options(pos):
    """The GPTConfig fields an encoding (composed or not) reads."""
    return tuple(o for n in pos_components(pos) for o in POS[n].options)

class PosSum(nn.Module):
    """pos='a+b': encodings of different kinds at once, what each gives passed on as one's."""

    def __init__(self, cfg):
        super().__init__()
        self.parts = nn.ModuleList(POS[n].part(cfg) for n in pos_components(cfg.pos))

    def forward(self, T):
        outs = [part(T) for part in self.parts]                 # (table, rope, bias) each
        return tuple(next((o[i] for o in outs if o[i] is not None), None) for i in range(3))

ATTN['dot'] = Variant('causal scaled dot-product attention', docs=0)   # every slot left empty

# ---- positional encodings (docs/variants.md §1, §3, §7): forward(T) -> (table, rope, bias):
# a (T, C) table, rotary (cos, sin) tables (T, hs/2) or an (nh, T, T) logit bias, else None

def waves(b, w, s=None):
    """Positional waves, pairs (cos, sin) at channels (2i, 2i+1): b (T,) positions, w (P,) angular
    frequencies, s (P,) Gaussian widths (MOPE) or None (sinusoidal). Returns (T, 2P)."""
    ang = b[:, None] * w[None, :]                               # (T, P)
    pe = torch.stack((torch.cos(ang), torch.sin(ang)), dim=-1)  # (T, P, 2)
    if s is not None:
        pe = pe * torch.exp(-b[:, None] ** 2 / (2 * s[None, :] ** 2))[..., None]
    return pe.flatten(1)                                        # (T, 2P)

def sin_freqs(C, base=10000.0):
    return base ** (-torch.arange(0, C, 2, dtype=torch.float32) / C)  # (C/2,)

def morlet_rule(w, s):
    """MOPE's published clamps and w s >= 5 rule, also the Morlet gate's (docs/variants.md §1)."""
    w, s = w.clamp(max=0.95 * math.pi), s.clamp(min=1e-3)
    return torch.where(w * s < 5.0, 5.0 / s, w), s

@register(POS, 'learned', docs=1, slot='table')
class LearnedPos(nn.Module):
    """Learned absolute embedding (nanoGPT's wpe)."""

    def __init__(self, cfg):
        super().__init__()
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)

    def forward(self, T):
        return self.wpe.weight[:T], None, None                  # (T, C)

@register(POS, 'sin', docs=1, slot='table')
class SinPos(nn.Module):
    """Fixed sinusoidal table.
    Published: Vaswani et al. 2017, arXiv 1706.03762."""

    def __init__(self, cfg):
        super().__init__()
        b = torch.arange(cfg.block_size, dtype=torch.float32)
        self.register_buffer('table', waves(b, sin_freqs(cfg.n_embd)), persistent=False)  # (T, C)

    def forward(self, T):
        return self.table[:T], None, None                       # (T, C)

@register(POS, 'mope', docs=1, options=('mope_init', 'mope_sigma', 'mope_rule', 'mope_decay'),
          slot='table')
class MOPE(nn.Module):
    """Morlet positional encoding: learned Gaussian-windowed waves, as published.
    Published: Zeris 2026, arXiv 2606.01258 (MoPE; first in arXiv 2605.26355)."""

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
        return (self.log_w, self.log_s) if self.decay else ()   # with the rule, it pulls w s to 5

    def freqs(self):
        w, s = self.log_w.exp(), self.log_s.exp()
        return morlet_rule(w, s) if self.rule else (w, s)

    def forward(self, T):
        b = torch.arange(T, device=self.log_w.device, dtype=self.log_w.dtype)
        return waves(b, *self.freqs()), None, None              # (T, C)

@register(POS, 'mope_learned', docs=1, options=('mope_init', 'mope_sigma', 'mope_decay'),
          slot='table')
class MOPELearned(MOPE):
    """MOPE whose frequencies learn (ours): where w s < 5 the envelope widens to s = 5 / w,
    where the published rule sets w = 5 / s, which leaves log w no gradient there
    (docs/variants.md §1)."""

    def freqs(self):
        w, s = self.log_w.exp().clamp(max=0.95 * math.pi), self.log_s.exp().clamp(min=1e-3)
        return w, torch.where(w * s < 5.0, 5.0 / w, s)          # (P,) each

def rotate(x, cos, sin):
    """RoPE on channel pairs (2i, 2i+1). x: (B, nh, T, hs); cos, sin: (T, hs/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]                         # (B, nh, T, hs/2)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

def rotate_fast(x, cos, sin):
    """rotate() as one complex product per pair: a quarter of the time on the CPU. 16-bit x (no
    complex type) and compiled models (inductor fuses rotate(), not complex ops) take rotate()."""
    if x.dtype not in (torch.float32, torch.float64) or torch.compiler.is_compiling():
        return rotate(x, cos, sin)
    # a complex view needs unit-stride channels, even strides and offset (q, k, v: multiples of C)
    x = x if x.stride(-1) == 1 and not any(st % 2 for st in x.stride()[:-1]) else x.contiguous()
    w = torch.complex(cos.to(x.dtype), sin.to(x.dtype))       # (T, hs/2)
    xc = torch.view_as_complex(x.unflatten(-1, (-1, 2)))        # (B, nh, T, hs/2)
    return torch.view_as_real(xc * w).flatten(-2)               # (B, nh, T, hs)

@register(POS, 'rope', docs=1, slot='rope')
class Rope(nn.Module):
    """Rotary embedding of q and k.
    Published: Su et al. 2021, arXiv 2104.09864."""

    def __init__(self, cfg):
        super().__init__()
        b = torch.arange(cfg.block_size, dtype=torch.float32)
        ang = b[:, None] * sin_freqs(cfg.n_embd // cfg.n_head)[None, :]     # (T, hs/2)
        self.register_buffer('cos', torch.cos(ang), persistent=False)
        self.register_buffer('sin', torch.sin(ang), persistent=False)

    def forward(self, T):
        return None, (self.cos[:T], self.sin[:T]), None         # (T, hs/2) each

def alibi_bias(nh, T):
    """ALiBi: -m_h (i - j), m_h = 2^(-8h/nh); above the diagonal attend masks. (nh, T, T)."""
    m = 2.0 ** (-8.0 * torch.arange(1, nh + 1) / nh)            # (nh,)
    i = torch.arange(T)
    lag = (i[:, None] - i[None, :]).float()                     # (T, T)
    return -m[:, None, None] * lag                              # (nh, T, T)

@register(POS, 'alibi', docs=7, slot='bias')
class Alibi(nn.Module):
    """ALiBi's linear distance bias.
    Published: Press et al. 2022, arXiv 2108.12409."""

    def __init__(self, cfg):
        super().__init__()
        self.register_buffer('alibi', alibi_bias(cfg.n_head, cfg.block_size), persistent=False)

    def forward(self, T):
        return None, None, self.alibi[:, :T, :T]                # (nh, T, T)

@register(POS, 'none', docs=1)
class NoPos(nn.Module):
    """No positional encoding."""

    def __init__(self, cfg):
        super().__init__()

    def forward(self, T):
        return None, None, None

@register(POS, 'mope_rel', docs=3, options=('mope_rel_terms',), slot='bias', keeps_tt=True)
class MopeRel(nn.Module):
    """Relative Morlet bias (ours): per head, sum_m a cos(w tau) exp(-tau^2 / 4s^2) of the lag tau
    = i - j. Its init and why: docs/variants.md §3."""

    def __init__(self, cfg):
        super().__init__()
        nh, M = cfg.n_head, cfg.mope_rel_terms
        lo, hi = math.log(2 * math.pi / cfg.block_size), math.log(0.99 * math.pi)
        w = torch.exp(torch.linspace(hi, lo, nh * M)).view(M, nh).T  # (nh, M): terms h, h + nh, ..
        self.log_w = nn.Parameter(torch.log(w))                 # (nh, M)
        self.log_s = nn.Parameter(torch.log(5.0 / w))           # (nh, M)
        self.a = nn.Parameter(torch.full((nh, M), 0.1))         # (nh, M)

    def forward(self, T):
        tau = torch.arange(T, device=self.a.device, dtype=self.a.dtype)     # (T,) lags
        w, s = self.log_w.exp()[..., None], self.log_s.exp()[..., None]     # (nh, M, 1)
        env = torch.exp(-tau ** 2 / (4 * s ** 2))                           # (nh, M, T)
        return None, None, LagBias((self.a[..., None] * torch.cos(w * tau) * env).sum(1))  # (nh, T)

# ---- per-key gates (docs/variants.md §2 EGA, §6 FoX): forward(x, q, p) -> (q, key_bias, bias)

def gate_signal(lin, x):
    """lin(x) as (B, nh, T), in float32 whatever the autocast: a gate's energies rounded to bf16
    tie with their neighbours, and a tie opening a prefix has no variance (znorm); FoX's running
    sum of log f keeps the digits it needs (docs/variants.md §2)."""
    dt = torch.promote_types(x.dtype, torch.float32)
    with torch.autocast(x.device.type, enabled=False):
        b = None if lin.bias is None else lin.bias.to(dt)
        return F.linear(x.to(dt), lin.weight.to(dt), b).transpose(1, 2)    # (B, nh, T)

SCAN = 128      # the longest cumsum cumsum_time() runs in one piece

def cumsum_time(x):
    """x.cumsum(-1), as scans of at most SCAN steps: on CUDA, inductor compiles a longer scan as a
    split scan, whose code generation fails in torch <= 2.11 once a broadcast value (e_0, a head's
    alpha) is fused into its kernel (pytorch#180221: the causal EGA at T = 256 did not compile)."""
    T = x.size(-1)
    if T <= SCAN:
        return x.cumsum(-1)
    nb = -(-T // SCAN)
    xb = F.pad(x, (0, nb * SCAN - T)).unflatten(-1, (nb, SCAN))  # (..., nb, SCAN)
    inner = xb.cumsum(-1)                                       # (..., nb, SCAN) within blocks
    carry = F.pad(inner[..., :-1, -1], (1, 0)).cumsum(-1)       # (..., nb) the blocks before
    return (inner + carry[..., None]).flatten(-2)[..., :T]      # (..., T)

def znorm(e, mode):
    """z-normalise e (..., T) over time: 'window' (published: the whole window, so key j sees the
    future), 'prefix' (running statistics over positions <= j: causal) or 'none'."""
    if mode == 'none':
        return e
    if mode == 'window':
        d = e - e.mean(-1, keepdim=True)                        # (..., T)
        var = (d * d).mean(-1, keepdim=True)                    # (..., 1)
        # std floored at 1e-8 (published) under the sqrt: a constant window gets z = 0
        return d / torch.sqrt(var.clamp_min(1e-16))
    d = e - e[..., :1]      # a causal shift: the running variance does not cancel in float32
    n = torch.arange(1, e.shape[-1] + 1, device=e.device, dtype=e.dtype)
    m1 = cumsum_time(d) / n                                     # (..., T) running mean of d
    var = cumsum_time(d * d) / n - m1 * m1                      # (..., T) running variance
    sq = cumsum_time(e * e) / n                                 # (..., T) running mean square of e
    # a prefix without spread (always at j = 0; later where energies tie, to round-off: a std within
    # 64 ulps of e's size) has no scale: z = 0 with no gradient, where d / std would be round-off
    # blown up, and 1e8 times the incoming gradient sent back (docs/variants.md §2)
    flat = var <= ((64 * torch.finfo(e.dtype).eps) ** 2 * sq).clamp_min(1e-16)   # (..., T)
    return torch.where(flat, 0.0, (d - m1) / torch.sqrt(var.clamp_min(1e-16)))

def key_logit(e, alpha, tau, norm, mix=None, squash=F.logsigmoid):
    """EGA's gate as a logit, squash(alpha (z_j - tau)) = log sigmoid(...), z from znorm in float32
    (a bf16 running sum keeps three digits). e (B, nh, T), alpha, tau (nh,); or S scales, e (B, nh,
    S, T), alpha, tau, mix (nh, S), the gates mixed by softmax(mix) (docs/variants.md §3)."""
    z = znorm(e.to(torch.promote_types(e.dtype, torch.float32)), norm)  # (B, nh, [S,] T)
    lg = squash(alpha[..., None] * (z - tau[..., None]))        # (B, nh, [S,] T)
    if mix is None:
        return lg                                               # (B, nh, T)
    return torch.logsumexp(F.log_softmax(mix, dim=-1)[..., None] + lg, dim=-2)  # (B, nh, T)

GATE_LEAKS = {'ega_norm': ('window',)}  # the published z-norm, over the window, sees the future
GATE_OPTIONS = ('ega_norm', 'gate_signal', 'ega_alpha', 'ega_tau')  # every filter-bank gate reads
FILTER_GATE = dict(leaks=GATE_LEAKS, slot='filter_gate')   # and registers with

@register(ATTN, 'ega', docs=2, options=('ega_norm', 'ega_alpha', 'ega_tau'), leaks=GATE_LEAKS,
          slot='gate')
class EnergyGate(nn.Module):
    """Energy-gated attention: a per-key sigmoid gate on z-normalised energies e_j = w . x_j + b.
    Published: Zeris 2026, arXiv 2605.21842 (EGA-1), code of arXiv 2605.26355."""
    squash = staticmethod(F.logsigmoid)     # log g_j = squash(alpha (z_j - tau)), into (-inf, 0]

    def __init__(self, cfg):
        super().__init__()
        self.energy = nn.Linear(cfg.n_embd, cfg.n_head, bias=True)  # a Linear(C, 1) per head
        self.alpha = nn.Parameter(torch.full((cfg.n_head,), cfg.ega_alpha))     # (nh,)
        self.tau = nn.Parameter(torch.full((cfg.n_head,), cfg.ega_tau))         # (nh,)
        self.norm = cfg.ega_norm

    def forward(self, x, q, p):
        e = gate_signal(self.energy, x)                         # (B, nh, T), float32
        # its logit is in [-inf, 0]: q's dtype holds it (a float32 one keeps attend in float32)
        lg = key_logit(e, self.alpha, self.tau, self.norm, squash=self.squash)   # (B, nh, T)
        return q, lg.to(q.dtype), None

def forget_cumsum(a):
    """c_j = sum_(l<=j) log sigmoid(a_l), float32: |c| reaches T |log f| (docs/variants.md §6)."""
    a = a.to(torch.promote_types(a.dtype, torch.float32))
    return cumsum_time(F.logsigmoid(a))                         # (B, nh, T)

@register(ATTN, 'fox', docs=6, options=('fox_bias',), slot='gate')
class ForgetGate(nn.Module):
    """The Forgetting Transformer's forget gate: logits plus sum_(l=j+1..i) log f_l,
    f = sigmoid(w . x + b) (docs/variants.md §6).
    Published: Lin et al. 2025, arXiv 2503.02130."""

    def __init__(self, cfg):
        super().__init__()
        self.forget = nn.Linear(cfg.n_embd, cfg.n_head, bias=True)   # FoX's default gate
        self.fox_bias = cfg.fox_bias

    def init_own(self):
        nn.init.constant_(self.forget.bias, self.fox_bias)      # weights keep N(0, 0.02)

    def forward(self, x, q, p):
        cum = forget_cumsum(gate_signal(self.forget, x))        # (B, nh, T), float32
        # c_i is the same along row i and cancels in the softmax: the logit -c_j of key j. Without
        # dropout a key logit; with it a bias of the key alone, before the softmax and its dropout
        # (a key logit then gates after it, EGA's order): no T x T tensor either way (§6)
        return (q, -cum, None) if p == 0.0 else (q, None, -cum[:, :, None, :])   # (B, nh[, 1], T)

ATTN['ega_fox'] = Variant("EGA's gate and FoX's forget gate, their logits summed", docs=6,
                          options=attn_options('ega+fox'), leaks=GATE_LEAKS, of=('ega', 'fox'))

# ---- the filter-bank gates (docs/variants.md §3)

def causal_conv(u, h):
    """A causal filter over time, tap 0 = now: y[:, g, t] = sum_l h[g, l] u[:, g, t - l], in float32
    whatever the autocast. u (B, G, T); h (G, L), a real kernel per channel (a grouped conv1d, which
    correlates: hence the flip), or a bank (G, K, L), real or complex, returning (B, G, K, T)."""
    G, L = h.shape[0], h.shape[-1]
    if torch.is_autocast_enabled(u.device.type):
        with torch.autocast(u.device.type, enabled=False):      # else conv1d runs in 16 bits
            return causal_conv(u, h)
    dt = torch.promote_types(u.dtype, torch.float32)
    x = F.pad(u.to(dt), (L - 1, 0))                             # (B, G, T + L - 1)
    if h.dim() == 3:
        K = h.shape[1]
        w = torch.cat((h.real, h.imag), dim=1) if h.is_complex() else h   # (G, K or 2K, L)
        y = torch.einsum('bgtl,gkl->bgkt', x.unfold(-1, L, 1), w.to(dt).flip(-1))
        return torch.complex(y[:, :, :K], y[:, :, K:]) if h.is_complex() else y    # (B, G, K, T)
    return F.conv1d(x, h.to(dt).flip(-1)[:, None, :], groups=G)  # (B, G, T)

MORLET_LENGTHS = (3, 7, 15, 31)                                 # taps of the 4 Morlet scales

class FilterGate(nn.Module):
    """The filter-bank gates: a signal u per head through S causal filters, energies |c_s|^2, then
    EGA's gate path; flux and phase add lam_sim on q.k and two key logits (docs/variants.md §3)."""
    bank, extra, lam = 'morlet', None, None     # a subclass's filters, its third logit and scale

    def __init__(self, cfg):
        super().__init__()
        nh, S = cfg.n_head, len(MORLET_LENGTHS)
        self.nh, self.norm = nh, cfg.ega_norm
        self.signal = nn.Linear(cfg.n_embd, nh, bias=True) if cfg.gate_signal == 'proj' else None
        if self.bank == 'daub':                 # fixed filters, rebuilt from the config
            self.register_buffer('daub', daubechies_bank(cfg.daub_order).float(), persistent=False)
        else:
            w = (math.pi / torch.tensor(MORLET_LENGTHS, dtype=torch.float32)).repeat(nh, 1)
            for name, v in (('log_w', torch.log(w)), ('log_sig', torch.log(5.0 / w))):
                if cfg.morlet_learned:
                    setattr(self, name, nn.Parameter(v))                    # (nh, S)
                else:                                                       # the fixed prior
                    self.register_buffer(name, v, persistent=False)
        self.alpha = nn.Parameter(torch.full((nh, S), cfg.ega_alpha))       # (nh, S)
        self.tau = nn.Parameter(torch.full((nh, S), cfg.ega_tau))           # (nh, S)
        self.m = nn.Parameter(torch.full((nh, S), 1.0 / S))                 # (nh, S): mixing logits
        if self.extra:
            self.lam_sim = nn.Parameter(torch.ones(nh))                     # (nh,)
            self.lam_E = nn.Parameter(torch.full((nh,), 0.01))              # (nh,)
            setattr(self, self.lam, nn.Parameter(torch.full((nh,), 0.01)))  # (nh,) lam_F or lam_P

    def filters(self):
        """(nh, S, L) kernels for causal_conv, tap l meeting u[t - l]."""
        if self.bank == 'daub':
            return self.daub.expand(self.nh, *self.daub.shape)
        w, sig = morlet_rule(self.log_w.exp(), self.log_sig.exp())     # (nh, S) each
        Ls = torch.tensor(MORLET_LENGTHS, device=w.device)      # (S,)
        l = torch.arange(max(MORLET_LENGTHS), device=w.device)  # (L,) taps
        # published orientation: conv1d correlates, so index 0 meets the window's OLDEST sample
        t = Ls[:, None] - 1 - l[None, :]                        # (S, L)
        inside = (t >= 0).to(w.dtype)                           # (S, L): taps past L_s are 0
        t = t.clamp_min(0).to(w.dtype)                          # (S, L)
        env = torch.exp(-t ** 2 / (2 * sig[..., None] ** 2)) * inside   # (nh, S, L)
        ang = w[..., None] * t                                  # (nh, S, L)
        return torch.complex(env * torch.cos(ang), env * torch.sin(ang))   # (nh, S, L)

    def forward(self, x, q, p):
        B, T, C = x.shape
        if self.signal is not None:
            u = gate_signal(self.signal, x)                     # (B, nh, T), float32
        else:  # published: exactly 0 after a fresh LayerNorm
            u = x.mean(-1)[:, None, :].expand(B, self.nh, T)    # (B, nh, T)
        c = causal_conv(u, self.filters())                      # (B, nh, S, T), float32 or float64
        E = c.real ** 2 + c.imag ** 2 if c.is_complex() else c ** 2     # (B, nh, S, T)
        if not self.extra:
            return q, key_logit(E, self.alpha, self.tau, self.norm, mix=self.m).to(q.dtype), None
        z = znorm(E, self.norm)                                 # (B, nh, S, T), once for both
        key_bias = key_logit(z, self.alpha, self.tau, 'none', mix=self.m)   # (B, nh, T)
        if self.extra == 'flux':                                # mean_s z(|dE_s/dt|), the first 0
            X = znorm(F.pad((E[..., 1:] - E[..., :-1]).abs(), (1, 0)), self.norm).mean(2)
        else:   # cos(mean_s phase of c_s); atan2 has no gradient at 0: angle 0 there
            re = torch.where((c.real == 0) & (c.imag == 0), torch.ones_like(c.real), c.real)
            X = torch.cos(torch.atan2(c.imag, re).mean(2))      # (B, nh, T)
        key_bias = key_bias + self.lam_E[:, None] * z.mean(2) + getattr(self, self.lam)[:, None] * X
        return (q * self.lam_sim[:, None, None]).to(q.dtype), key_bias.to(q.dtype), None

@register(ATTN, 'ega_morlet', docs=3, options=GATE_OPTIONS + ('morlet_learned',), **FILTER_GATE)
class MorletGate(FilterGate):
    """EGA-M: a per-key gate from the energies of 4 complex Morlet filters of 3 to 31 taps.
    Published: Zeris 2026, arXiv 2605.21842 (EGA-M)."""

# Daubechies scaling (low-pass) filters, the standard orthonormal coefficients (sum sqrt 2, sum
# of squares 1; Daubechies, Ten Lectures on Wavelets, 1992, table 6.1, to double precision)
DAUBECHIES = {
    2: (0.48296291314453416, 0.8365163037378077, 0.2241438680420134, -0.12940952255126034),
    4: (0.23037781330889642, 0.71484657055291557, 0.63088076792985891, -0.027983769416859487,
        -0.18703481171909300, 0.030841381835560643, 0.032883011666885160, -0.010597401785069018),
}

def daubechies_bank(order, levels=4):
    """The detail filters of the undecimated Daubechies transform at scales 1, 2, 4, 8, (levels,
    L_max) in float64, tap l meeting u[t - l] (docs/variants.md §3)."""
    h = torch.tensor(DAUBECHIES[order], dtype=torch.float64)   # (L,)
    g = h.flip(0) * (-1.0) ** torch.arange(len(h))              # (L,) g_n = (-1)^n h_(L-1-n)

    def up(f, d):                                               # d - 1 zeros between taps
        n = (len(f) - 1) * d + 1
        return f.new_zeros(n).index_copy(0, torch.arange(0, n, d), f)
    def conv(a, b):                                             # the full convolution a * b
        return F.conv1d(a[None, None], b.flip(0)[None, None], padding=len(b) - 1)[0, 0]

    filters, low = [], torch.ones(1, dtype=torch.float64)
    for j in range(levels):
        filters.append(conv(low, up(g, 2 ** j)))                # (len(low) + len(up) - 1,)
        low = conv(low, up(h, 2 ** j))
    return nn.utils.rnn.pad_sequence(filters, batch_first=True)    # (levels, L_max), zero-padded

@register(ATTN, 'daub', docs=3, options=GATE_OPTIONS + ('daub_order',), **FILTER_GATE)
class DaubGate(FilterGate):
    """A per-key gate from the energies of fixed Daubechies detail filters (scales 1, 2, 4, 8).
    Published: Zeris 2026, arXiv 2605.21842 (EGA-DB2, DB4), no code."""
    bank = 'daub'

@register(ATTN, 'flux', docs=3, options=GATE_OPTIONS + ('morlet_learned',), **FILTER_GATE)
class FluxGate(FilterGate):
    """MQ-EF: the Morlet gate, logits lam_sim q.k/sqrt(hs) + lam_E mean z(E) + lam_F z(|dE/dt|).
    Published: Zeris 2026, arXiv 2605.26355 (MQ-EF)."""
    extra, lam = 'flux', 'lam_F'

@register(ATTN, 'phase', docs=3, options=GATE_OPTIONS + ('morlet_learned',), **FILTER_GATE)
class PhaseGate(FilterGate):
    """MQ-EP: the Morlet gate, logits lam_sim q.k/sqrt(hs) + lam_E mean z(E) + lam_P cos(phase).
    Published: Zeris 2026, arXiv 2605.26355 (MQ-EP)."""
    extra, lam = 'phase', 'lam_P'

# ---- the q, k, v filter (docs/variants.md §7): forward(qkv) maps the projections (B, T, 3C)

@register(ATTN, 'dconv', docs=7, options=('dconv_width', 'dconv_init'), lengths=('dconv_width',),
          slot='qkv')
class ShortConv(nn.Module):
    """Primer's multi-dconv-head attention: q, k and v each through a learned depthwise causal
    filter of dconv_width (3) taps (docs/variants.md §7).
    Published: So et al. 2021, arXiv 2109.08668 (Primer)."""

    def __init__(self, cfg):
        super().__init__()
        self.kernel = nn.Parameter(torch.zeros(3 * cfg.n_embd, cfg.dconv_width))   # (3C, W)
        self.init = cfg.dconv_init

    def init_own(self):
        with torch.no_grad():
            if self.init == 'identity':
                self.kernel.zero_()
                self.kernel[:, 0] = 1.0
            else:
                bound = 1.0 / math.sqrt(self.kernel.shape[1])
                self.kernel.uniform_(-bound, bound)

    def forward(self, qkv):
        y = causal_conv(qkv.transpose(1, 2), self.kernel)       # (B, 3C, T), float32 or float64
        return y.transpose(1, 2).to(qkv.dtype)                  # (B, T, 3C)

# ---- the EGA paper's other ablations (docs/variants.md §3): conv, conv_paper, scale_init

def lag_keys(k, c):
    """conv's keys filtered causally over time per head, k'_j = sum_l c_l k_(j-l); c (nh, L)."""
    B, nh, T, hs = k.shape
    u = k.transpose(2, 3).reshape(B, nh * hs, T)                # (B, nh*hs, T)
    y = causal_conv(u, c.repeat_interleave(hs, dim=0))          # (B, nh*hs, T), float32 or float64
    return y.view(B, nh, hs, T).transpose(2, 3).to(k.dtype)    # (B, nh, T, hs)

@register(ATTN, 'conv', docs=3, options=('conv_lags',), lengths=('conv_lags',), slot='qk')
class LagKeys(nn.Module):
    """Lag attention: logits sum_l c_l q_i . k_(j-l), l = 0..conv_lags-1, a learned causal kernel
    over the keys per head (docs/variants.md §3).
    Ours: a causal reading of the lag attention of Zeris 2026, arXiv 2605.26355."""

    def __init__(self, cfg):
        super().__init__()
        kernel = torch.zeros(cfg.n_head, cfg.conv_lags)
        kernel[:, 0] = 1.0                                      # c_0 = 1: dot attention at init
        self.lag_kernel = nn.Parameter(kernel)                  # (nh, L)

    def forward(self, q, k):
        return q, lag_keys(k, self.lag_kernel), None            # (B, nh, T, hs): sum_l c_l k_(j-l)

def conv_paper_factor(lag_weights, T):
    """conv_paper's factor c_ij on q_i . k_j / sqrt(hs) (docs/variants.md §3): 1 inside, less near
    the window's edges; w = softmax(lag_weights), no gradient (published), |w_l| < 1e-4 zeroed."""
    L = lag_weights.shape[1] // 2
    w = F.softmax(lag_weights, dim=-1).detach()                 # (nh, 2L+1)
    w = w * (w.abs() >= 1e-4)
    i = torch.arange(T, device=w.device)
    lags = torch.arange(-L, L + 1, device=w.device)[:, None]    # (2L+1, 1)
    rows = torch.where(lags > 0, i <= T - 1 - lags, i >= -lags)  # (2L+1, T)
    keys = torch.where(lags > 0, i >= lags, i <= T - 1 + lags)  # (2L+1, T)
    blocks = (rows[:, :, None] & keys[:, None, :]).to(w.dtype)  # (2L+1, T, T)
    return torch.einsum('hl,lij->hij', w, blocks)               # (nh, T, T)

@register(ATTN, 'conv_paper', docs=3, options=('conv_lags',), lengths=('conv_lags',),
          slot='logits', keeps_tt=True,
          edge="its factor depends on the distance to the window's end, which every generated "
               "token is at: it samples with the edge factor, not the one its windowed loss "
               "averages over")
class ConvPaper(nn.Module):
    """The published lag attention: dot attention with each logit scaled by the lag blocks that
    cover it (1 inside, less near the window's edges), fixed lag weights.
    Published: Zeris 2026, arXiv 2605.26355 (CONV-L4)."""

    def __init__(self, cfg):
        super().__init__()
        # published as parameters read with .item(): they never get a gradient, so a buffer
        self.register_buffer('lag_weights', torch.zeros(cfg.n_head, 2 * cfg.conv_lags + 1))

    def init_own(self):
        nn.init.normal_(self.lag_weights, 0.0, 0.02)  # published: drawn, then never changed

    def forward(self, s):
        return s * conv_paper_factor(self.lag_weights, s.size(-1)).to(s.dtype)  # (B, nh, T, T)

    def score_mod(self, T):                                     # for attend_flex
        c = conv_paper_factor(self.lag_weights, T)              # (nh, T, T)
        return lambda s, b, h, i, j: s * c[h, i, j]

@register(ATTN, 'scale_init', docs=3, options=('scale_init_rest',), slot='init')
class ScaleInit(nn.Module):
    """Dot attention whose q, k weights of head h are drawn with std 0.02 (1 + (h mod 4)/4).
    Published: Zeris 2026, arXiv 2605.26355 (SCALE-INIT)."""

    def __init__(self, cfg):
        super().__init__()
        self.nh, self.rest = cfg.n_head, cfg.scale_init_rest

    def init_qk(self, c_attn):
        C = c_attn.weight.shape[1]
        hs = C // self.nh
        with torch.no_grad():
            for part in (0, 1):                                 # q rows 0..C-1, k rows C..2C-1
                for h in range(self.nh):
                    rows = c_attn.weight[part * C + h * hs: part * C + (h + 1) * hs]  # (hs, C)
                    rows.normal_(0.0, 0.02 * (1 + (h % 4) / 4))

    def init_rest(self, block):
        if self.rest == 'torch':                # published, a second change (docs/variants.md §3)
            for lin in (block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                lin.reset_parameters()      # U(+-1/sqrt(fan_in)), biases zeroed, as published
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)

# ---- the FourierQK family (docs/variants.md §4): q and k filtered over time, v as it is; the
# bilateral forms see the whole window and leak, the causal ones use one-sided kernels

FOURIER_BIN = 4.0  # fourier_qk's initial band: bin 4 (a 64-token period at T = 256)
MULTI_PERIODS = (50.0, 26.0, 10.0, 5.0)  # multi_fourier_qk and mexhat_qk: initial periods in tokens
MORLET_W0 = 6.0                             # causal_morlet: h(t) = exp(-t^2/2a^2) exp(i W0 t / a)
FILTER_A, FILTER_A_LEARNED = 4.0, 8.0  # the causal filters' scale a: fixed, or the learned init
CAUSAL_FILTER = dict(options=('filter_taps', 'filter_learned'), lengths=('filter_taps',), slot='qk')

def real_dtype(x):
    return torch.promote_types(x.dtype, torch.float32)

def spectral_filter(u, w):
    """irfft(rfft_t(u) w, n=T), every bilateral FFT form's filter, in float32 or float64. u (B, nh,
    T, hs); w (nh, F) or (nh, K, F), F = T//2 + 1, giving (B, nh, T, K hs) band-major."""
    B, nh, T, hs = u.shape
    U = torch.fft.rfft(u.to(real_dtype(u)), dim=-2)            # (B, nh, F, hs) complex
    Ur = torch.view_as_real(U)  # (B, nh, F, hs, 2): real weights times
    if w.dim() == 2:  # (re, im), cheaper than a complex product
        Y = torch.view_as_complex(Ur * w[:, :, None, None])     # (B, nh, F, hs)
        return torch.fft.irfft(Y, n=T, dim=-2)                  # (B, nh, T, hs)
    K = w.shape[1]
    Y = torch.view_as_complex(Ur[:, :, None] * w[:, :, :, None, None])  # (B, nh, K, F, hs)
    y = torch.fft.irfft(Y, n=T, dim=-2)                         # (B, nh, K, T, hs)
    return y.permute(0, 1, 3, 2, 4).reshape(B, nh, T, K * hs)  # (B, nh, T, K hs)

def fft_causal_conv(u, h):
    """A causal convolution over time by FFT zero-padded to 2T (Hyena's fftconv), exact, O(T log T).
    u (B, nh, T, hs); h (nh, L), L <= T + 1, or it wraps and leaks (docs/variants.md §4)."""
    T, dt = u.size(-2), real_dtype(u)
    # over the last dim, time contiguous after one transpose: no FFT copies (bitwise the same)
    U = torch.fft.rfft(u.to(dt).transpose(-1, -2), n=2 * T, dim=-1)   # (B, nh, hs, T+1)
    H = torch.fft.rfft(h.to(dt), n=2 * T, dim=-1)              # (nh, T+1)
    y = torch.fft.irfft(U * H[:, None, :], n=2 * T, dim=-1)    # (B, nh, hs, 2T)
    return y[..., :T].transpose(-1, -2)                         # (B, nh, T, hs)

def bins(T, Tb, device, dtype):
    """rfft bins of T samples in Tb's bins: a band learned at Tb keeps its frequency at any T."""
    return torch.arange(T // 2 + 1, device=device, dtype=dtype) * (Tb / T)  # (F,)

def gauss_band(f, centre, width):
    """exp(-(f - centre)^2 / (2 width^2)): f (F,), centre (...,) -> (..., F)."""
    return torch.exp(-(f - centre[..., None]) ** 2 / (2 * width ** 2))  # (..., F)

def normalise(w, norm):
    """Weights to unit L2 norm ('l2', main paper) or unit sum ('sum', follow-up; 'l1'), last dim."""
    if norm == 'l2':
        return w / w.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return w / w.abs().sum(-1, keepdim=True).clamp_min(1e-12)

def band_kernel(f_star, s_f, Tb, L, dtype):
    """fourier_qk_causal's kernel, the one-sided half of the band's impulse response, unit L2 norm
    over Tb taps (docs/variants.md §4). f_star (nh,); returns (nh, L)."""
    t = torch.arange(max(L, Tb), device=f_star.device, dtype=dtype)   # (L',)
    s_t = Tb / (2 * math.pi * s_f)
    wave = torch.cos(2 * math.pi * f_star.to(dtype)[:, None] * t / Tb)   # (nh, L')
    h = torch.exp(-t ** 2 / (2 * s_t ** 2)) * wave             # (nh, L')
    return (h / h[:, :Tb].norm(dim=-1, keepdim=True))[:, :L]   # (nh, L)

class SpectralQK(nn.Module):
    """What the family shares: filter(q, k) -> (q~, k~, scale) from the subclass, in float32
    whatever the autocast. phased: which of q and k a bilateral form takes the window's spectrum
    of ('qk', 'k'; '' for none), what lab/phase.py re-phases."""
    phased = ''

    def __init__(self, cfg):
        super().__init__()
        self.nh, self.Tb = cfg.n_head, cfg.block_size
        self.s_f, self.norm = cfg.fourier_sf, cfg.fourier_norm

    def periods(self):
        """The learned bands as periods in tokens, (nh,) or (nh, K); None where there are none."""
        return None

    def forward(self, q, k):
        if torch.is_autocast_enabled(q.device.type):
            with torch.autocast(q.device.type, enabled=False):  # else the matmuls run in 16 bits
                return self.forward(q, k)
        return self.filter(q, k)   # time may be the unit-stride dim: attend() lays it out

class Bands(SpectralQK):
    """The bilateral forms: q and k through spectral_filter with weights over the bins, (nh, F), or
    (nh, K, F) for K bands whose logits are averaged; the subclass's kind picks the weights."""
    phased, kind = 'qk', 'fourier'

    def __init__(self, cfg):
        super().__init__(cfg)
        nh, Tb = cfg.n_head, cfg.block_size
        if self.kind == 'fourier':              # the centre f* = exp(log_f) in bins of the window
            self.log_f = nn.Parameter(torch.full((nh,), math.log(FOURIER_BIN)))              # (nh,)
        elif self.kind == 'multi':
            f0 = torch.tensor([Tb / p for p in MULTI_PERIODS])
            self.log_f = nn.Parameter(torch.log(f0).repeat(nh, 1))                         # (nh, 4)
        elif self.kind == 'random':             # from the run's seed, kept in checkpoints
            self.register_buffer('centre', torch.rand(nh) * (Tb / 2))                      # (nh,)
            width = torch.exp(torch.empty(nh).uniform_(math.log(0.5), math.log(16.0)))
            self.register_buffer('width', width)                                           # (nh,)
        elif self.kind == 'mexhat':             # peak at s W = sqrt(2): s = sqrt(2) period / (2 pi)
            s0 = torch.tensor([math.sqrt(2) * p / (2 * math.pi) for p in MULTI_PERIODS])
            self.log_s = nn.Parameter(torch.log(s0).repeat(nh, 1))                         # (nh, 4)

    def weights(self, f):
        if self.kind in ('fourier', 'multi'):                 # (nh, [4,] F)
            return normalise(gauss_band(f, self.log_f.exp().to(f.dtype), self.s_f), self.norm)
        if self.kind == 'random':
            w = gauss_band(f, self.centre.to(f.dtype), self.width.to(f.dtype)[:, None])   # (nh, F)
            return normalise(w, 'l2')
        if self.kind == 'mexhat':
            sW = self.log_s.exp().to(f.dtype)[..., None] * (2 * math.pi * f / self.Tb)  # (nh, 4, F)
            return normalise(sW ** 2 * torch.exp(-sW ** 2 / 2), 'l1')
        if self.kind == 'dc_gauss':
            return normalise(gauss_band(f, f.new_zeros(self.nh), self.s_f), 'l2')       # (nh, F)
        w = torch.zeros(self.nh, f.numel(), device=f.device, dtype=f.dtype)            # (nh, F)
        w[:, 0 if self.kind == 'dc' else -1] = 1.0                                      # one bin
        return w

    def periods(self):
        if self.kind == 'mexhat':
            return 2 * math.pi * self.log_s.detach().exp() / math.sqrt(2)
        return self.Tb / self.log_f.detach().exp() if self.kind in ('fourier', 'multi') else None

    def filter(self, q, k):
        hs, T, dt = q.size(-1), q.size(-2), real_dtype(q)
        w = self.weights(bins(T, self.Tb, q.device, dt))        # (nh, F) or (nh, K, F)
        qf = spectral_filter(q, w)                              # (B, nh, T, hs) or (B, nh, T, K hs)
        kf = spectral_filter(k, w)
        scale = 1.0 / (w.shape[1] * math.sqrt(hs)) if w.dim() == 3 else None
        return qf.to(q.dtype), kf.to(k.dtype), scale

@register(ATTN, 'fourier_qk', docs=4, options=('fourier_sf', 'fourier_norm'), leaks=True, slot='qk')
class FourierBand(Bands):
    """FourierQK: q and k filtered by a learned Gaussian band per head in the frequency domain of
    the whole window (bilateral FFT).
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK; unit-sum weights: its sequel, submitted)."""

@register(ATTN, 'multi_fourier_qk', docs=4, options=('fourier_sf', 'fourier_norm'), leaks=True,
          slot='qk')
class MultiFourierBands(Bands):
    """MultiFourier-QK: 4 learned Gaussian bands per head (periods 50, 26, 10, 5 at init),
    per-band logits averaged.
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK), no code."""
    kind = 'multi'

@register(ATTN, 'random_qk', docs=4, leaks=True, slot='qk')
class RandomBand(Bands):
    """Fixed random Gaussian bands per head (seeded centre and width), bilateral FFT.
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK's Random-QK), no code."""
    kind = 'random'

@register(ATTN, 'mexhat_qk', docs=4, leaks=True, slot='qk')
class MexHatBands(Bands):
    """Mexican-hat spectral bands at 4 learned scales per head, per-scale logits averaged,
    bilateral FFT.
    Published: Zeris 2026, FourierQK filter shape, submitted (MexHat-K4)."""
    kind = 'mexhat'

# causal only while a row's logits are equal: a logit map lets the window means reach the weights
@register(ATTN, 'dc_qk', docs=4, slot='qk', leaks_beside=('conv_paper',))
class OneBin(Bands):
    """q and k reduced to bin 0 (their window means): the logits of a row are equal, so the
    attention is uniform and nothing leaks.
    Published: Zeris 2026, FourierQK filter shape, submitted (DC-QK)."""
    kind = 'dc'

@register(ATTN, 'nyquist_qk', docs=4, leaks=True, slot='qk')
class NyquistBin(Bands):
    """q and k reduced to the last rfft bin, bilateral FFT.
    Published: Zeris 2026, FourierQK filter shape, submitted."""
    kind = 'nyquist'

@register(ATTN, 'dc_gauss_qk', docs=4, options=('fourier_sf',), leaks=True, slot='qk')
class DCGaussBand(Bands):
    """The FourierQK paper's DC-QK: a fixed Gaussian band on bin 0, fourier_sf bins wide,
    L2-normalised, bilateral FFT.
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK's DC-QK)."""
    kind = 'dc_gauss'

@register(ATTN, 'morlet_xcorr', docs=4, leaks=True, slot='qk')
class MorletXcorr(SpectralQK):
    """Keys circularly convolved with a symmetric Morlet lag kernel (FFT, no padding).
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK), no code."""
    phased = 'k'

    def __init__(self, cfg):
        super().__init__(cfg)
        lo, hi = math.log(2 * math.pi / 50), math.log(2 * math.pi / 5)
        w0 = torch.exp(torch.linspace(lo, hi, cfg.n_head))      # (nh,)
        self.log_w = nn.Parameter(torch.log(w0))                # (nh,)
        self.log_s = nn.Parameter(torch.log(5.0 / w0))          # (nh,)

    def filter(self, q, k):
        T, dt = q.size(-2), real_dtype(q)
        t = torch.arange(T, device=q.device, dtype=dt)
        tau = torch.where(t <= T // 2, t, t - T)                # (T,) circular lags 0, 1, .., -1
        w, s = self.log_w.exp().to(dt)[:, None], self.log_s.exp().to(dt)[:, None]
        kap = torch.exp(-tau ** 2 / (2 * s ** 2)) * torch.cos(w * tau)     # (nh, T)
        kap = kap / kap.norm(dim=-1, keepdim=True)
        lag = torch.fft.rfft(kap, dim=-1).real  # (nh, F): kappa is even, its spectrum real
        return q, spectral_filter(k, lag).to(k.dtype), None     # (B, nh, T, hs)

@register(ATTN, 'fourier_qk_causal', docs=4, options=('fourier_sf',), slot='qk')
class CausalBand(Bands):
    """FourierQK's learned band as a one-sided kernel over the window, by FFT convolution
    zero-padded to 2T (ours)."""
    phased = ''

    def __init__(self, cfg):
        super().__init__(cfg)
        self.taps = cfg.block_size

    def filter(self, q, k):
        T = q.size(-2)
        # taps beyond T meet only the zero padding; a kernel set longer than the window is kept
        L = min(self.taps, T) if self.taps <= self.Tb else self.taps
        h = band_kernel(self.log_f.exp(), self.s_f, self.Tb, L, real_dtype(q))   # (nh, L)
        return fft_causal_conv(q, h).to(q.dtype), fft_causal_conv(k, h).to(k.dtype), None

@register(ATTN, 'qk_gaussian', docs=4, leaks=True, slot='qk', keeps_tt=True)
class TimeMix(SpectralQK):
    """Control: q and k mixed over time by a fixed random Gaussian T x T matrix.
    Published as a control: Zeris 2026, arXiv 2607.07478 (FourierQK), no code."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer('mix', self.matrix(torch.randn(self.Tb, self.Tb) / math.sqrt(self.Tb)))

    def matrix(self, M):
        return M                                                # (Tb, Tb)

    def filter(self, q, k):
        T, dt = q.size(-2), real_dtype(q)
        M = self.mix[:T, :T].to(dt)                             # (T, T)
        return (M @ q.to(dt)).to(q.dtype), (M @ k.to(dt)).to(k.dtype), None   # (B, nh, T, hs)

@register(ATTN, 'qk_orthogonal', docs=4, leaks=True, slot='qk', keeps_tt=True)
class OrthogonalMix(TimeMix):
    """Control: q and k mixed over time by a fixed random orthogonal T x T matrix.
    Published as a control: Zeris 2026, arXiv 2607.07478 (FourierQK), no code."""

    def matrix(self, M):
        M, R = torch.linalg.qr(M)
        return M * torch.sign(torch.diagonal(R))[None, :]       # (Tb, Tb)

@register(ATTN, 'causal_gauss', docs=4, **CAUSAL_FILTER)
class CausalFilter(SpectralQK):
    """q and k through a causal Gaussian filter over time, exp(-t^2 / 2a^2) over filter_taps taps,
    a fixed at 4 or learned from 8 (docs/variants.md §4); its relatives change shape(r, env).
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK), no code."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.taps = cfg.filter_taps or max(1, cfg.block_size // 2)
        self.log_a = None
        if cfg.filter_learned:
            self.log_a = nn.Parameter(torch.full((cfg.n_head,), math.log(FILTER_A_LEARNED)))
        else:
            self.register_buffer('a', torch.full((cfg.n_head,), FILTER_A), persistent=False)

    def shape(self, r, env):
        return env

    def kernel(self, L, dtype):
        a = self.a if self.log_a is None else self.log_a.exp()  # (nh,)
        r = torch.arange(L, device=a.device, dtype=dtype) / a.to(dtype)[:, None]   # (nh, L)
        h = self.shape(r, torch.exp(-r ** 2 / 2))               # (nh, L), complex for morlet
        return h / h.abs().pow(2).sum(-1, keepdim=True).sqrt()  # (nh, L)

    def filter(self, q, k):
        B, nh, T, hs = q.shape
        h = self.kernel(self.taps, real_dtype(q))               # (nh, L), complex for morlet
        # q and k in one call, their channels side by side (half the calls: a clear gain on the CPU)
        u = torch.cat((q, k), dim=1).transpose(2, 3).reshape(B, 2 * nh * hs, T)  # (B, 2 nh hs, T)
        # a complex kernel as its Re and Im parts side by side: logits Re.Re + Im.Im, 1/sqrt(hs)
        ys = [causal_conv(u, part.repeat(2, 1).repeat_interleave(hs, dim=0)).view(B, 2 * nh, hs, T)
              for part in ((h.real, h.imag) if h.is_complex() else (h,))]   # (B, 2 nh, hs, T) each
        y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=2)     # (B, 2 nh, hs or 2 hs, T)
        # split, not slices: a slice's backward fills a zero tensor of the whole
        qf, kf = y.transpose(2, 3).to(q.dtype).split(nh, dim=1)  # (B, nh, T, hs or 2 hs) each
        return qf, kf, 1.0 / math.sqrt(hs)

@register(ATTN, 'causal_mexhat', docs=4, **CAUSAL_FILTER)
class CausalMexHat(CausalFilter):
    """q and k through a causal Mexican-hat filter over time, (1 - t^2/a^2) exp(-t^2 / 2a^2).
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK), no code."""

    def shape(self, r, env):
        return (1 - r ** 2) * env

@register(ATTN, 'causal_morlet', docs=4, **CAUSAL_FILTER)
class CausalMorlet(CausalFilter):
    """q and k through a causal complex Morlet filter, exp(-t^2 / 2a^2) exp(i 6 t / a); logits
    Re.Re + Im.Im.
    Published: Zeris 2026, arXiv 2607.07478 (FourierQK)."""

    def shape(self, r, env):
        return torch.polar(env, MORLET_W0 * r)

@register(ATTN, 'fnet', docs=4, leaks=True, slot='mixer')
class FNet(nn.Module):
    """FNet: attention replaced by Re(FFT_time(FFT_channels(x))), orthonormal, in x's dtype.
    Published: Lee-Thorp et al. 2022, arXiv 2105.03824."""

    def __init__(self, cfg):
        super().__init__()

    def forward(self, x):
        y = torch.fft.fft2(x.to(real_dtype(x)), dim=(-2, -1), norm='ortho')  # (B, T, C) complex
        return y.real.to(x.dtype)                               # (B, T, C)

# ---- the same formula, fast: attend() through F.scaled_dot_product_attention, attend_flex()
# through FlexAttention, pick_impl() choosing among them and attend_plain(); each held to
# attend_plain by the tests. SDPA's fused kernels take only q, k, v, a scale, a mask and dropout
# (no T x T weights): the tricks below fit the rest in

def widen_values(v, width):
    """v (B, nh, T, hv) zero-padded to width: q, k wider than v (K bands, [Re, Im]) then take the
    CPU's fused kernel, not the math path (about 2x faster at 2 hs)."""
    return torch.cat((v, v.new_zeros(()).expand(*v.shape[:-1], width - v.size(-1))), dim=-1)

def logit_channel(q, k, b, scale):
    """A logit b_j (B, nh, T) of key j, the same for every query, as one more q.k channel (1 on q,
    b_j / scale on k), and a zero one for an even width (CPU flash's fast case)."""
    B, nh, T, hs = q.shape
    e = 1 + (hs + 1) % 2
    one, zero = q.new_ones(()).expand(B, nh, T, e), q.new_zeros(()).expand(B, nh, T, e)
    q = torch.cat((q, one), dim=-1)                                             # (B, nh, T, hs+e)
    return q, torch.cat((k, (b.unsqueeze(-1) / scale).to(k.dtype), zero[..., 1:]), dim=-1)

def gate_as_channel(q, k, v, key_bias, scale):
    """Without dropout, softmax(s + b_j) is logit_channel's, 0 on v; no 1e-8 floor (§2)."""
    q2, k2 = logit_channel(q, k, key_bias, scale)                              # (B, nh, T, hs+e)
    return q2, k2, widen_values(v, v.size(-1) + q2.size(-1) - q.size(-1))     # (B, nh, T, hv+e)

def gate_on_values(q, k, v, key_bias):
    """With dropout the gate comes after it: values [g v, g], the last output channel the
    normaliser; dropout's mask and 1/(1-p) cancel in the caller's ratio."""
    g = key_bias.unsqueeze(-1).exp().to(v.dtype)                # (B, nh, T, 1)
    v = torch.cat((v * g, g), dim=-1)                           # (B, nh, T, hv+1)
    if q.size(-1) < v.size(-1):
        q, k = F.pad(q, (0, 1)), F.pad(k, (0, 1))               # (B, nh, T, hs+1)
    return q, k, v

# the widths a device's fused kernels take: CUDA's memory-efficient kernel only a multiple of 8
# (16 bits) or 4 (float32), else SDPA runs its math path and T x T weights; a gate's channels make
# 33 or 34
ALIGN = {'cuda': 8}

def aligned(q, k, v, a):
    """q, k, v zero-padded to one width, a multiple of a: zeros add nothing to q.k, and y's extra
    channels are dropped by the caller."""
    w = -(-max(q.size(-1), v.size(-1)) // a) * a
    return tuple(F.pad(t, (0, w - t.size(-1))) if t.size(-1) < w else t for t in (q, k, v))

def kernel_layout(t):
    """t, or t[None], copied where it must be for the CPU's fused kernel: unit-stride channels and a
    4-D mask, else the math path's T x T weights, as for a mask with a gradient (clone:
    contiguous() keeps a width-1 view)."""
    t = t if t.stride(-1) == 1 else t.clone(memory_format=torch.contiguous_format)
    return t[None] if t.dim() == 3 else t

def attend(q, k, v, key_bias=None, bias=None, dropout_p=0.0, scale=None):
    """attend_plain() (same arguments but logits, same result) through the fused kernel. A bias of
    the key alone ((B, nh, 1, T): FoX's -c_j) rides a q.k channel at any dropout; a logit wider than
    q (FoX's float32 -c_j, EGA's log g_j without dropout, beside bf16 q, k) runs the call in its
    dtype, where the channel is exact and so is the gradient it returns."""
    bias = bias.dense() if isinstance(bias, LagBias) else bias
    per_key = bias is not None and bias.dim() == 4 and bias.size(-2) == 1
    logit = bias if per_key else key_bias if dropout_p == 0.0 else None
    if logit is not None and logit.dtype.itemsize > q.dtype.itemsize:
        with torch.autocast(q.device.type, enabled=False):      # which would take SDPA to 16 bits
            wide = (t.to(logit.dtype) for t in (q, k, v))
            return attend(*wide, key_bias, bias, dropout_p, scale).to(q.dtype)   # (B, T, nh, hv)
    hs, T, hv = q.size(-1), q.size(-2), v.size(-1)
    scale = 1.0 / math.sqrt(hs) if scale is None else scale
    if per_key:                     # before the softmax and its dropout, as a bias is
        q, k = logit_channel(q, k, bias[:, :, 0, :], scale)    # (B, nh, T, hs+1 or 2)
        bias, hs = None, q.size(-1)
    if key_bias is None and hv < hs:
        v = widen_values(v, hs)                                 # (B, nh, T, hs)
    elif key_bias is not None and dropout_p == 0.0:
        q, k, v = gate_as_channel(q, k, v, key_bias, scale)     # one more q.k channel
    elif key_bias is not None:
        q, k, v = gate_on_values(q, k, v, key_bias)             # [g v, g]
    if per_key and v.size(-1) < q.size(-1):
        v = widen_values(v, q.size(-1))                         # (B, nh, T, q's width)
    if ALIGN.get(q.device.type):
        q, k, v = aligned(q, k, v, ALIGN[q.device.type])        # (B, nh, T, a multiple of 8) each
    q, k, v = kernel_layout(q), kernel_layout(k), kernel_layout(v)    # (B, nh, T, width) each
    mask = None if bias is None else kernel_layout(   # (1 or B, nh, T, T), or None: is_causal
        bias.to(q.dtype).masked_fill(future_mask(T, q.device), float('-inf')))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                       is_causal=mask is None, scale=scale)
    y = y.transpose(1, 2)                                       # (B, T, nh, width)
    if key_bias is not None and dropout_p > 0.0:
        # divided after the transpose: (B, T, nh, hv) order, no copy in the caller's reshape; in
        # float32 at least, as the published floor 1e-8 is 0 in float16
        dt = torch.promote_types(y.dtype, torch.float32)
        return (y[..., :hv].to(dt) / y[..., hv:hv + 1].to(dt).clamp_min(1e-8)).to(y.dtype)
    return y[..., :hv]                                          # (B, T, nh, hv)

FLEX = {}   # the compiled kernel and causal masks

def attend_flex(q, k, v, key_bias=None, bias=None, scale=None, logits=None):
    """attend_plain() without dropout through FlexAttention: the key logits, a logit bias (a
    LagBias by its table) and a logit map as one score_mod of a fused kernel, no T x T weights."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, nh, T, hs = q.shape
    hv = v.size(-1)
    v = widen_values(v, hs) if hv < hs else v                   # (B, nh, T, hs)
    lag_table = bias.table if isinstance(bias, LagBias) else None
    bias = None if bias is None or lag_table is not None else bias.expand(B, nh, T, T)
    m = logits.score_mod(T) if logits is not None else None

    def score_mod(s, b, h, i, j):
        s = s if m is None else m(s, b, h, i, j)
        s = s if key_bias is None else s + key_bias[b, h, j]
        s = s if bias is None else s + bias[b, h, i, j]
        return s if lag_table is None else s + lag_table[h, (i - j).clamp(min=0)]
    key = (T, q.device)
    if key not in FLEX:
        FLEX[key] = create_block_mask(lambda b, h, i, j: i >= j, None, None, T, T, device=q.device)
    # eager flex forms the scores: compile it
    if q.is_cuda and 'kernel' not in FLEX:
        FLEX['kernel'] = torch.compile(flex_attention)     # once, not a new wrapper per call
    fn = FLEX['kernel'] if q.is_cuda else flex_attention
    y = fn(q, k, v, score_mod=score_mod, block_mask=FLEX[key], scale=scale)   # (B, nh, T, hs)
    return y.transpose(1, 2)[..., :hv]                          # (B, T, nh, hv)

def flex_refusal(dropout, cuda, training, logits=None):
    """Why FlexAttention cannot run ('' where it can): the one rule that train.py's config check,
    the lab's bench and pick_impl read. It drops no weights, its backward runs on CUDA alone, and
    a logit map reaches it as a score_mod."""
    if dropout > 0:
        return f"attn_impl=flex takes no dropout (FlexAttention drops no weights; here {dropout:g})"
    if training and not cuda:
        return "attn_impl=flex trains on CUDA only (FlexAttention's backward)"
    return "attn_impl=flex: the logit map has no score_mod" if logits and \
        not hasattr(logits, 'score_mod') else ''

def pick_impl(impl, q, bias, dropout_p, logits):
    """The attention path: 'sdpa' (attend), 'flex' (attend_flex) or 'plain' (attend_plain). auto:
    flex on CUDA without dropout for a logit map or a learned bias (sdpa's kernels would form the
    T x T weights); else sdpa, or plain for a logit map. Never flex off CUDA: no backward there."""
    why = flex_refusal(dropout_p, q.is_cuda, False, logits)
    if impl == 'auto':
        learned = bias is not None and (isinstance(bias, LagBias) or bias.requires_grad)
        impl = 'flex' if q.is_cuda and not why and (logits is not None or learned) else 'sdpa'
    if impl == 'flex' and why:
        raise ValueError(f"{why} (or use attn_impl=auto)")
    return 'plain' if impl == 'sdpa' and logits is not None else impl
