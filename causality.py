"""
The causality audit (docs/variants.md §5): whether a model's logits at positions <= t
change when the tokens after t do, decided exactly in float64; and the influence map,
the same question as a picture. Every variant must pass the audit, or (a leaking
published form) fail it: tests/test_model.py holds each one's expected verdict.
"""

import copy
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from model import GPT, POS, GPTConfig, attn_lengths, pos_components

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
    fields = attn_lengths(cfg.attn) + tuple(f for n in pos_components(cfg.pos) for f in POS[n].lengths)
    lengths = {f: shrink_length(getattr(cfg, f), cfg.block_size, T_tiny) for f in fields}
    return replace(cfg, n_layer=min(cfg.n_layer, 2), n_head=nh, n_embd=8 * nh, block_size=T_tiny,
                   vocab_size=min(cfg.vocab_size, 50), dropout=0.0, **lengths)


def model_vocab(model):
    emb = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    if not emb:
        raise ValueError("audit: cannot tell the vocabulary size of this model; give it a .config")
    return emb[0].num_embeddings


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

