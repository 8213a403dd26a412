"""
Our ega against the authors' own, from a local clone of their code, in one process.

    python -m lab.authors --script=PATH      # float64: our ega (ega_norm=window) against their EGA-1
    python bench.py --variants=dot,ega --authors=PATH     # their dot and EGA timed beside ours

PATH is the EGA + MOPE paper's training script, `paper2_ega_mope/gpt_phase4_memfix.py`
in a clone of github.com/AthanasiosZeris/energy-gated-attention (not carried here).
The script downloads its data and trains when run, so only its function and class
definitions are executed, beside the names they read (its size constants, set here):
bench.load_authors, which bench.py's --authors uses too.
"""

import os
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

import model
from bench import AuthorsError, load_authors
from configurator import ConfigError
from lab import cli


def ega_difference(path, T=24, C=32, nh=4, seed=0):
    """Largest |ours - theirs| of one attention layer's output and its size, in float64: our
    `ega` with the published window statistics, and their EGA1Attention, one module per head,
    with our q, k, v rows, energy, alpha and tau copied into each (weights drawn large, so
    that the gate is far from 1/2), both through our output projection."""
    hs = C // nh
    theirs = load_authors(path, C, nh, 1, T, 11)
    torch.manual_seed(seed)
    cfg = model.GPTConfig(attn='ega', ega_norm='window', n_layer=1, n_head=nh, n_embd=C, block_size=T,
                          vocab_size=11, dropout=0.0, bias=False)
    att = model.GPT(cfg).transformer.h[0].attn.double().eval()
    heads = [theirs['EGA1Attention'](hs).double().eval() for _ in range(nh)]
    gate = att.gates['ega']
    with torch.no_grad():
        for p in att.parameters():
            p.copy_(0.5 * torch.randn_like(p))
        q, k, v = att.c_attn.weight.split(C)                    # (C, C) each, head h in rows h*hs..
        for h, m in enumerate(heads):
            rows = slice(h * hs, (h + 1) * hs)
            m.query.weight.copy_(q[rows]), m.key.weight.copy_(k[rows]), m.value.weight.copy_(v[rows])
            m.proj.weight.copy_(gate.energy.weight[h:h + 1]), m.proj.bias.copy_(gate.energy.bias[h:h + 1])
            m.alpha.copy_(gate.alpha[h:h + 1]), m.tau.copy_(gate.tau[h:h + 1])
        x = torch.randn(3, T, C, dtype=torch.float64)           # (B, T, C)
        ours = att(x)                                           # (B, T, C)
        ref = att.c_proj(torch.cat([m(x) for m in heads], dim=-1))   # (B, T, C)
    return (ours - ref).abs().max().item(), ref.abs().max().item()


def main(argv):
    defaults = dict(script='')
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults))
        return 0
    try:
        c = cli.load(defaults, argv)
        if not c['script']:
            raise ConfigError("name their script: --script=PATH (their paper2_ega_mope/gpt_phase4_memfix.py; "
                              "--help says more)")
        diff, size = ega_difference(c['script'])
    except (ConfigError, AuthorsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"ega (ega_norm=window) against their EGA1Attention, float64, T=24 C=32 nh=4: largest difference "
          f"{diff:.1e} on outputs up to {size:.1f}")
    return 0 if diff <= 1e-10 * size else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
