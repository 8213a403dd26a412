"""
The causality audit as a picture: the influence map of a config or a checkpoint.

    python -m lab.influence config/ega.py                      # a tiny perturbed copy of that architecture
    python -m lab.influence config/ega_paper.py --png=influence.png
    python -m lab.influence --ckpt=out-ega-cpu/ckpt.pt --T=64  # a trained model as it is
    python -m lab.influence --side_by_side=ega,ega_paper --png=docs/influence.png

Entry [t, s] is the size of the gradient of position t's logits (on a fixed random
direction) with respect to the input embedding at position s (model.influence).
A causal model is exactly zero above the diagonal (s > t); anything there is the
future leaking in. Config files and --key=value work as in train.py; the PNG needs
the optional matplotlib (pip install -r requirements-plots.txt).
"""

import importlib.util
import os
import sys
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import runtime
import train
from causality import audit, influence
from configurator import ConfigError, load_config
from model import GPT
from lab import cli, paths

# -----------------------------------------------------------------------------
ckpt = ''             # a checkpoint to map as it is (else: the configured architecture)
T = 0                 # sequence length; 0: the tiny audit copy's (configs) or block_size (checkpoints)
png = ''              # write the map(s) here
side_by_side = ''     # comma-separated config names (config/<name>.py), mapped next to each other
seed = 0
# -----------------------------------------------------------------------------
OWN = {k: v for k, v in dict(globals()).items() if k in ('ckpt', 'T', 'png', 'side_by_side', 'seed')}


def subject(c, argv_files):
    """(label, model or GPTConfig) to map."""
    if c.ckpt:
        ck, cfg = runtime.load_checkpoint(c.ckpt)
        model = GPT(cfg)
        model.load_state_dict(ck['model'])
        return c.ckpt, model
    cfg = train.model_config(c)
    return ' '.join(argv_files) or f"attn={cfg.attn} pos={cfg.pos}", cfg


def side_configs(names):
    out = []
    for name in names.split(','):
        path = os.path.join(paths.REPO, 'config', f'{name}.py')
        c = SimpleNamespace(**load_config(train.DEFAULTS, [path], train.CHOICES))
        out.append((name, train.model_config(c)))
    return out


def plot(maps, path):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--png needs matplotlib: pip install -r requirements-plots.txt") from None
    fig, axes = plt.subplots(1, len(maps), figsize=(4.2 * len(maps), 4), squeeze=False)
    for ax, (label, verdict, J) in zip(axes[0], maps):
        # a log scale: a leak of 1% of the diagonal's size still shows; exact zeros stay black
        rel = (J / J.max()).clamp_min(1e-6).log10()                 # (T, T)
        im = ax.imshow(rel.numpy(), cmap='magma', vmin=-4, vmax=0)
        ax.set_title(f"{label}\n{verdict}", fontsize=9)
        ax.set_xlabel('input position s')
        ax.set_ylabel('output position t')
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label='log10 of influence / largest')
    fig.suptitle('influence of input s on output t (above the diagonal: the future)', fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, OWN, more='\n  (and every train.py key)'))
        return 0
    try:
        c = SimpleNamespace(**cli.load({**train.DEFAULTS, **OWN}, argv, train.CHOICES, files=True))
        files = [a for a in argv if not a.startswith('--')]
        todo = side_configs(c.side_by_side) if c.side_by_side else [subject(c, files)]
        if c.T < 0:
            raise ConfigError(f"T must be >= 1 (0: the model's block size), got {c.T}")
        for label, what in todo:
            size = (what.config if isinstance(what, GPT) else what).block_size
            if c.T > size:
                raise ConfigError(f"T={c.T} is longer than {label}'s block size {size}")
        if c.png:                                   # before any map is computed
            paths.check_output_file(c.png, '--png', mkdir=False)
            if importlib.util.find_spec('matplotlib') is None:
                raise ConfigError("--png needs matplotlib: pip install -r requirements-plots.txt")
        maps = []
        for label, what in todo:
            J = influence(what, T=c.T or None, seed=c.seed)            # (T, T)
            a = audit(what, T=c.T or None, seed=c.seed)
            above = J.triu(1).abs().max().item()
            print(f"{label}: {a.verdict}; largest influence of a later position {above:.1e} "
                  f"(of {J.max().item():.1e} overall), T={J.shape[0]}")
            maps.append((label, a.verdict, J))
        if c.png:
            plot(maps, c.png)
            print(f"wrote {c.png}")
    except ConfigError as e:
        return cli.fail(e)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
