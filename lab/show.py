"""
What a variant attends to: each head's attention weights on one validation window, from a trained checkpoint or
a fresh model, and for a gated form its per-key gate, with the audit's verdict in the title.

    python -m lab.show --out_dir=RUN                        # a trained run: RUN/attention.png
    python -m lab.show --attn=ega --png=ega_fresh.png       # a fresh model at the CPU study scale
    python -m lab.show --out_dir=RUN --window=3 --png=PATH  # another of the run's val windows

The weights are the model's own: GPT.attention, after the gates (each row sums to 1; nothing above the diagonal
for a causal form), on a window of train.py's fixed val windows (the run's own set; a fresh model reads the CPU
study scale's), one image per layer and head (rows the queries, columns the keys, 0 to T - 1; a square-root colour scale,
so that faint weights show). A gate's per-key
gate g_j = exp(its key logit) (a logit above 0 taken against its largest: FoX's decay as the last query sees it)
is drawn under its layer, one line per head: the keys it lifts and the ones it
suppresses. matplotlib is optional and imported only to draw.
"""

import os
import sys
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from causality import audit
from configurator import ConfigError
from lab import cli, paths
from model import GPT, GPTConfig
from runtime import load_checkpoint, load_data, load_weights
from train import EVAL_SEED, eval_windows, windows

CPU = dict(n_layer=4, n_head=4, n_embd=128, block_size=128, batch_size=16, eval_iters=20)   # config/cpu.py


@torch.no_grad()
def weights(model, x):
    """Each layer's attention weights on x (1, T), (nh, T, T), and its gates' per-key gate (nh, T), or None where
    the layer has no gate (the gates' key logits add, so their product is the gate)."""
    logits = {}

    def keep(i):
        def hook(module, inputs, out):
            if out[1] is not None:
                logits[i] = logits.get(i, 0.0) + out[1].float()
        return hook
    hooks = [g.register_forward_hook(keep(i)) for i, b in enumerate(model.transformer.h) for g in b.attn.gates.values()]
    try:
        A = model.attention(x)
    finally:
        for h in hooks:
            h.remove()
    # a constant in a key logit cancels in the softmax: one above 0 (FoX's -c_j grows with j, past what exp holds)
    # is drawn against its largest, so that FoX's g_j = exp(c_(T-1) - c_j) is the last query's decay of key j;
    # EGA's log-sigmoid is at most 0 and drawn as it is, its sigmoid
    gates = [logits[i][0] if i in logits else None for i in range(len(A))]                   # (nh, T)
    return [a[0].float() for a in A], [g if g is None else (g - g.amax(-1, keepdim=True).clamp_min(0)).exp()
                                       for g in gates]


def load(c):
    """(model, its config, the window (1, T), where it comes from)."""
    if c['out_dir']:
        ck, cfg = load_checkpoint(os.path.join(os.path.expanduser(c['out_dir']), 'ckpt.pt'),
                                  keys=('model', 'model_args', 'config'))
        model = GPT(cfg)
        load_weights(model, ck['model'], c['out_dir'])
        run = SimpleNamespace(**{**CPU, **{k: v for k, v in ck['config'].items() if k in CPU}},
                              data_dir=c['data_dir'] or ck['config'].get('data_dir', 'data/shakespeare_char'))
        where = f"{c['out_dir']} at iter {ck.get('iter_num')}"
    else:
        try:
            cfg = GPTConfig(attn=c['attn'], pos=c['pos'], **{k: CPU[k] for k in ('n_layer', 'n_head', 'n_embd',
                                                                             'block_size')}, dropout=0.0)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        torch.manual_seed(0)
        model, run, where = GPT(cfg), SimpleNamespace(**CPU, data_dir=c['data_dir'] or 'data/shakespeare_char'), \
            'a fresh model (seed 0), untrained'
    _, data, _ = load_data(run)
    d, offs = eval_windows(data, run, EVAL_SEED)['val']
    flat = offs.flatten()
    if not 0 <= c['window'] < len(flat):
        raise ConfigError(f"--window={c['window']}: the run's val set has windows 0 to {len(flat) - 1}")
    x, _ = windows(d, flat[c['window']:c['window'] + 1], cfg.block_size, 'cpu')
    return model.float().eval(), cfg, x, where


def draw(A, gates, title, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    L, nh = len(A), A[0].shape[0] if A else 0
    rows = L + sum(g is not None for g in gates)
    fig, axes = plt.subplots(rows, nh, figsize=(2.2 * nh, 2.2 * rows), squeeze=False, constrained_layout=True)
    r = 0
    for i, (a, g) in enumerate(zip(A, gates)):
        for h in range(nh):
            axes[r, h].imshow(a[h].numpy(), cmap='viridis', interpolation='nearest',
                              norm=matplotlib.colors.PowerNorm(0.5, vmin=0.0, vmax=1.0))   # sqrt: faint rows show
            axes[r, h].set_title(f'layer {i}, head {h}', fontsize=8)
            axes[r, h].set_xticks([]), axes[r, h].set_yticks([])
        r += 1
        if g is not None:
            for h in range(nh):
                axes[r, h].plot(g[h].numpy(), lw=0.8)
                axes[r, h].set_title(f'layer {i}, head {h}: gate g_j', fontsize=8)
                axes[r, h].set_ylim(0, max(1.0, float(g[h].max())) * 1.05)
            r += 1
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv):
    c, rc = cli.parse(__doc__, dict(out_dir='', attn='', pos='learned', window=0, png='', data_dir='',
                                      overwrite=False), argv)
    if c is None:
        return rc
    try:
        if bool(c['out_dir']) == bool(c['attn']):
            raise ConfigError('name one model: --out_dir=RUN (a trained run) or --attn=NAME (a fresh one)')
        path = c['png'] or (os.path.join(c['out_dir'], 'attention.png') if c['out_dir'] else
                            f"attention_{c['attn']}.png")
        paths.check_output_file(path, '--png', overwrite=c['overwrite'])   # a committed picture: --overwrite=True
        model, cfg, x, where = load(c)
    except ConfigError as e:
        return cli.fail(e)
    A, gates = weights(model, x)
    if not A:
        return cli.fail(f"attn={cfg.attn} has no attention weights to draw (a token mixer)")
    verdict = audit(cfg, T=cfg.block_size)
    title = (f"attn={cfg.attn} pos={cfg.pos}, {where}; audit: {verdict.verdict} (future tokens move its logits "
             f"by {verdict.max_change:.1e})\nattention weights (rows: queries, columns: keys; sqrt colour scale)")
    try:
        draw(A, gates, title, path)
    except ImportError:
        return cli.fail('drawing needs matplotlib: pip install -r requirements-plots.txt')
    print(f"wrote {path}: {len(A)} layers x {A[0].shape[0]} heads on val window {c['window']} ({where}); "
          f"audit {verdict.verdict}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
