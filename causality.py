"""
The causality audit (docs/variants.md §5): whether a model's logits at positions <= t
change when the tokens after t do, decided exactly in float64; and the influence map,
the same question as a picture; and the diagnostics every eval of train.py logs (what a
model learned, what it attends to). Every variant must pass the audit, or (a leaking
published form) fail it: tests/test_model.py holds each one's expected verdict, and
tests/test_registry.py checks every composition's declared verdict against it.

    python causality.py --sweep=True                  # every composition, encoding and window
    python causality.py --sweep=True --T=64 --pos=rope
    python causality.py --attn=ega --ega_norm=window  # one config's audit
"""

import copy
import itertools
import math
import sys
import time
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from model import ATTN, GPT, MOPE, POS, GPTConfig, SpectralQK, attn_lengths, components, pos_components

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


AUDIT_T = 24     # the tiny copy's window where none is asked for (train.py asks for its block_size)


def tiny_config(cfg, T=AUDIT_T):
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
def audit_model(model_or_cfg, T, g, device='cpu'):
    """(float64 model in eval mode on the device, the CPU by default; T; vocabulary size) for the
    audit and the influence map. A GPTConfig gives a tiny copy of that architecture, its window
    T (default AUDIT_T, at most block_size), with perturbed weights (so that no leak
    hides behind a zero init); a model is copied as it is, and read over T tokens
    (default: its block_size)."""
    if isinstance(model_or_cfg, GPTConfig):
        cfg = tiny_config(model_or_cfg, T or AUDIT_T)
        with torch.random.fork_rng(devices=[]):                # leave the caller's RNG stream alone
            torch.manual_seed(g.initial_seed())                 # the same verdict and number every time
            model = GPT(cfg).double()
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
        T = cfg.block_size
    else:
        model = copy.deepcopy(unwrap(model_or_cfg)).double()
    model.eval().to(device)
    cfg = getattr(model, 'config', None)
    T = T or (cfg.block_size if cfg is not None else 16)
    V = cfg.vocab_size if cfg is not None else model_vocab(model)
    return model, T, V


@torch.no_grad()
def audit(model_or_cfg, T=None, batch=3, seed=0, tol=1e-9, device='cpu'):
    """Exact causality audit in float64, eval mode, on the device (the CPU by default; the tests take
    SPECTRAL_TEST_DEVICE).
    Given a GPTConfig: audits a tiny copy of that architecture, with a window of T
    tokens (default AUDIT_T, at most its block_size), whose weights are randomly
    perturbed (so that no leak hides behind a zero init). Given a model (anything
    mapping idx (B, T) to logits (B, T, V), or to (logits, ...)): audits a float64
    copy of it as it is, over T tokens (default: its block_size). For several cut
    points t, the tokens after t are replaced and the logits at positions <= t
    compared; and one sequence's logits when the others in its batch change. The
    sequences of all cut points go through the model as one batch: two forward
    passes in all, which keeps the audit of every composition cheap."""
    g = torch.Generator().manual_seed(seed)
    model, T, V = audit_model(model_or_cfg, T, g, device)

    def logits(idx):
        out = model(idx.to(device))
        return out[0] if isinstance(out, tuple) else out       # (B, T, V)

    idx = torch.randint(V, (batch, T), generator=g)
    cuts = [t for t in sorted({0, T // 3, T // 2, (2 * T) // 3, T - 2}) if 0 <= t < T - 1]
    alts = []
    for t in cuts:
        alt = idx.clone()
        shift = torch.randint(1, V, (batch, T - t - 1), generator=g)
        alt[:, t + 1:] = (alt[:, t + 1:] + shift) % V           # every later token differs
        alts.append(alt)
    out = logits(torch.cat([idx] + alts)).split(batch)          # base, then each cut's copy
    max_change = max([(o[:, :t + 1] - out[0][:, :t + 1]).abs().max().item()
                      for t, o in zip(cuts, out[1:])], default=0.0)
    alt = idx.clone()
    alt[1:] = torch.randint(V, alt[1:].shape, generator=g)
    batch_change = (logits(alt)[0] - out[0][0]).abs().max().item() if batch > 1 else 0.0
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


@torch.no_grad()
def generation_logits(model, idx):
    """Each position's logits as sample.py gets them while it generates: position t's from the model
    run on idx[:, :t+1] alone, one batched pass per prefix length. idx (B, T); returns (B, T, V). A
    causal model's are its windowed logits (tests/test_registry.py, over the registry; a causal part
    that depends on the window's end says why not, Variant.edge); a leaking model's are what it
    delivers, no future token seen."""
    out = [model(idx[:, :t + 1])[0][:, -1] for t in range(idx.size(1))]    # T x (B, V)
    return torch.stack(out, 1)                                              # (B, T, V)


# ----------------------------------------------------------------------------- diagnostics
# what a trained model learned and what it attends to: train.py logs both at every eval, and the
# studies read them (lab/recency.py, the plots)

NEAR = (1, 4, 16)                   # the attention statistics' share of weight on the w nearest keys


@torch.no_grad()
def attention_stats(model, x):
    """What the model attends to, after its gates, on windows x (B, T) (GPT.attention, through
    attend_plain): per layer and head, the mean distance E[i - j] ('attn_dist'), the entropy of a
    row in nats ('attn_entropy') and the share of the weight on the w nearest keys, lag i - j < w
    ('attn_near1', ...), each averaged over rows and windows; and per layer the mean weight at
    each lag, over heads and the rows that reach it ('attn_lag'). {} without attention (FNet)."""
    model.eval()
    try:
        weights = model.attention(x)
    finally:
        model.train()
    if not weights:
        return {}
    T = x.size(1)
    i = torch.arange(T, device=x.device)
    lag = (i[:, None] - i[None, :]).clamp_min(0).float()       # (T, T); above the diagonal A is 0
    key = i[:, None] - i[None, :]                               # (T, T): row i, lag l -> key i - l
    out = {k: [] for k in ('attn_dist', 'attn_entropy', *(f'attn_near{w}' for w in NEAR), 'attn_lag')}
    for A in weights:
        A = A.float()                                           # (B, nh, T, T)
        B, nh = A.shape[:2]

        def rows(t):                                            # (B, nh, T) -> nh values
            return [round(v, 4) for v in t.mean((0, 2)).tolist()]
        out['attn_dist'].append(rows((A * lag).sum(-1)))
        out['attn_entropy'].append(rows(-(A * A.clamp_min(1e-30).log()).sum(-1)))
        for w in NEAR:
            out[f'attn_near{w}'].append(rows((A * (lag < w)).sum(-1)))
        # (B, nh, T, T): row i's weight at lag l, 0 where i - l < 0
        by_lag = A.gather(-1, key.clamp_min(0).expand(B, nh, T, T)) * (key >= 0)
        per_lag = by_lag.sum((0, 1, 2)) / (B * nh * (T - i))   # (T,): over the rows that reach lag l
        out['attn_lag'].append([round(v, 5) for v in per_lag.tolist()])
    return out


def learned(model):
    """What some variants learn, as the studies read it: 'bands', the FourierQK family's bands as
    periods in tokens keyed 'layer.head' (a list for several bands); 'mope', the MOPE pairs' (w, s)
    after the rule. Only the keys a model has."""
    out, bands = {}, {}
    for i, block in enumerate(model.transformer.h):
        qk = block.attn.qk
        per = qk.periods() if isinstance(qk, SpectralQK) else None
        for h, v in enumerate(per.tolist() if per is not None else ()):
            bands[f'{i}.{h}'] = [round(x, 2) for x in v] if isinstance(v, list) else round(v, 2)
    if bands:
        out['bands'] = bands
    if isinstance(model.transformer.pos, MOPE):
        with torch.no_grad():
            w, s = model.transformer.pos.freqs()
        out['mope'] = {'w': [round(x, 5) for x in w.tolist()], 's': [round(x, 3) for x in s.tolist()]}
    return out


def compositions(most=3):
    """Every valid composition of 2 to `most` registered attention parts, 'a+b' in the
    registry's order: two parts that fill one slot do not compose (components() says so), nor
    does dot (the base), the token mixer or a registered composition (ega_fox is ega+fox)."""
    names = [n for n, v in ATTN.items() if n != 'dot' and v.slot != 'mixer' and not v.of]
    out = []
    for k in range(2, most + 1):
        for parts in itertools.combinations(names, k):
            try:
                components('+'.join(parts))
            except ValueError:
                continue
            out.append('+'.join(parts))
    return out


SWEEP_T = (16, 64, 128)     # the tests' short and long windows, and the CPU study's


def sweep(Ts=SWEEP_T, pos=tuple(POS), out=sys.stdout):
    """The declared verdict (GPTConfig.leaks) of every composition under every encoding, at
    every window, against the audit. Returns the disagreements, (attn, pos, T, audit)."""
    bad, t0, combos = [], time.time(), compositions()
    for T in Ts:
        for p in pos:
            for attn in combos:
                cfg = GPTConfig(attn=attn, pos=p, block_size=max(T, GPTConfig.block_size))
                au = audit(cfg, T=T)
                if au.causal == cfg.leaks:
                    bad.append((attn, p, T, au))
                    print(f"  {attn} pos={p} T={T}: declared {'LEAKS' if cfg.leaks else 'causal'}, "
                          f"audit {au}", file=out, flush=True)
            print(f"T={T} pos={p}: {len(combos)} compositions, {len(bad)} disagreements so far "
                  f"({time.time() - t0:.0f} s)", file=out, flush=True)
    return bad


def main(argv):
    """The command line: one config's audit (GPTConfig's keys, --key=value), or --sweep=True
    (every encoding, or the one --pos names; windows --T=16,64)."""
    from configurator import ConfigError, describe, fail, load_config
    from model import CHOICES
    model_keys = {f: getattr(GPTConfig, f) for f in GPTConfig.__dataclass_fields__}
    defaults = {'sweep': False, 'T': '', **model_keys}
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(defaults, CHOICES))
        return 0
    try:
        c = load_config(defaults, argv, CHOICES)
        try:
            Ts = tuple(int(t) for t in c['T'].split(',') if t)
        except ValueError:
            raise ConfigError(f"--T={c['T']!r}: expected window lengths, e.g. --T=16,64") from None
        if any(t < 2 for t in Ts):          # a window of one token has no future to leak
            raise ConfigError(f"--T={c['T']!r}: each window length must be 2 or more")
        if not c['sweep']:
            print(audit(GPTConfig(**{k: c[k] for k in model_keys}), T=Ts[0] if Ts else None))
            return 0
    except (ConfigError, ValueError) as e:
        return fail(e)
    named = any(a.startswith('--pos=') for a in argv)
    bad = sweep(Ts or SWEEP_T, (c['pos'],) if named else tuple(POS))
    print(f"{len(bad)} declared verdicts the audit contradicts" if bad else
          "every declared verdict is the audit's", flush=True)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
