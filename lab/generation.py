"""
What a model delivers when it generates: each position's loss with the model run on exactly the tokens
before it, as sample.py generates (causality.generation_logits), beside its windowed loss on the same fixed
validation windows, and for the published EGA (ega_norm=window) beside the same weights with causal prefix
statistics.

    python -m lab.generation --out_dir=out-ega_mope-cpu          # one run's checkpoint: its three losses
    python -m lab.generation --ckpt=PATH/ckpt.pt --batches=1 --windows=8   # a paper-scale one: 8 windows
    python -m lab.generation_study                               # every published leaking form, retrained

Three evaluations of one checkpoint, each named wherever its loss is shown:
- window: train.py's val loss, every position of a window in one pass. A leaking form reads the window's later
  tokens there: LEAKS, no modelling result.
- prefix (the published EGA only): the same weights with ega_norm=prefix, EGA's statistics over the keys so far,
  every position in one pass. Causal, but not how the model generates: each step of sample.py has statistics
  over the tokens so far, which at the window's end are the window's.
- generation: position t's logits from the model run on tokens 0..t alone, one batched pass per prefix length:
  no future token ever enters, and each token is predicted as sample.py predicts it. What a leaking model really
  delivers. For a causal model it is the window loss (tests/test_registry.py, over the registry), except where a
  part depends on the window's end (model.Variant.edge: conv_paper).

The windows are the run's own (train.py's fixed val windows: its eval_iters batches, --batches=N the first N,
--windows=K the first K of each), on its recorded data: a data folder whose sha256 differs from the checkpoint's
is refused. A progress line comes every 30 s. The generation pass runs the model once per prefix length, about
T/2 times a window's cost: on one core of this 2-core machine, with the other busy, 140 s for the CPU study
scale's 20 batches of 16 windows of 128 tokens, and 11 s a window at the paper's size (T = 256; 712 s for one
batch of 64), so a paper-scale checkpoint is scored on a subset (--batches=1 --windows=8: 72 s).
"""

import math
import os
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.nn.functional as F

from causality import audit, generation_logits
from configurator import ConfigError
from lab import cli
from model import ATTN, GPT, attn_options, components
from runtime import load_checkpoint, load_data, load_weights
from train import EVAL_SEED, LEAK_MARK, eval_set, eval_windows, windows

PROGRESS_S = 30.0
NAMES = {'window': 'window (every position at once)', 'prefix': 'prefix (ega_norm=prefix, the same weights)',
         'generation': 'generation (each token from the tokens before it alone, as sample.py)'}


def load(path, data_dir=''):
    """(model, its prefix-statistics twin or None, config, checkpoint, val windows, the evaluation set's name)."""
    ck, cfg = load_checkpoint(path, keys=('model', 'model_args', 'config'))
    conf = ck['config']
    need = ('data_dir', 'block_size', 'batch_size', 'eval_iters')
    if not isinstance(conf, dict) or not all(isinstance(conf.get(k), str if k == 'data_dir' else int) for k in need):
        raise ConfigError(f"{path}: its config records no {', '.join(need)}: not a checkpoint of train.py")
    c = SimpleNamespace(**{**conf, 'data_dir': os.path.expanduser(data_dir) if data_dir else conf['data_dir']})
    if c.block_size != cfg.block_size:
        raise ConfigError(f"{path}: its config's block_size {c.block_size} is not its model's {cfg.block_size}")
    _, data, meta = load_data(c)
    recorded = ck.get('data', {}).get('sha256') if isinstance(ck.get('data'), dict) else None
    if recorded and recorded != meta['sha256']:
        raise ConfigError(f"{c.data_dir} is not the data {path} was trained on (sha256 {meta['sha256'][:12]}, the "
                          f"checkpoint's {str(recorded)[:12]}): point --data_dir at that data")
    model = GPT(cfg)
    load_weights(model, ck['model'], path)
    model.float().eval()                # weights kept in bf16 (lab.gpu_study --weights) evaluate in float32
    twin = None
    if 'ega_norm' in attn_options(cfg.attn) and cfg.ega_norm == 'window':
        twin = GPT(replace(cfg, ega_norm='prefix'))
        twin.load_state_dict(model.state_dict())
        twin.eval()
    return model, twin, cfg, ck, eval_windows(data, c, EVAL_SEED)['val'], eval_set(data, c, EVAL_SEED)


def per_position(logits, y):
    """Cross-entropy of each position, (B, T), in float32."""
    return F.cross_entropy(logits.float().transpose(1, 2), y, reduction='none')


@torch.no_grad()
def evaluate(path, data_dir='', batches=0, windows_=0, out=print):
    """The three losses of one checkpoint on its val windows: {'window', 'generation', and 'prefix' where the
    form has it: mean loss}, with each one's per-position and per-batch means, the audit, the set and the cost."""
    model, twin, cfg, ck, (d, offs), name = load(path, data_dir)
    n = min(batches or len(offs), len(offs))
    nw = min(windows_ or len(offs[0]), len(offs[0]))
    if n < len(offs) or nw < len(offs[0]):
        name += f", the first {nw} windows of the first {n} batches"
    forms = {'window': lambda x: model(x)[0], 'generation': lambda x: generation_logits(model, x)}
    if twin is not None:
        forms['prefix'] = lambda x: twin(x)[0]
    T = cfg.block_size
    pos = {k: torch.zeros(T) for k in forms}
    per_batch = {k: [] for k in forms}
    secs = dict.fromkeys(forms, 0.0)
    t0 = shown = time.time()
    for i in range(n):
        x, y = windows(d, offs[i][:nw], T, 'cpu')               # (B, T) each
        for k, f in forms.items():
            t = time.time()
            loss = per_position(f(x), y)                        # (B, T)
            secs[k] += time.time() - t
            pos[k] += loss.mean(0)
            per_batch[k].append(loss.mean().item())
        if time.time() - shown >= PROGRESS_S and i + 1 < n:
            shown = time.time()
            left = (shown - t0) / (i + 1) * (n - i - 1)
            out(f"  {os.path.basename(os.path.dirname(os.path.abspath(path)))}: {i + 1}/{n} batches, "
                f"{left / 60:.1f} min left", flush=True)
    au = audit(cfg, T=T)
    res = {k: sum(v) / n for k, v in per_batch.items()}
    return dict(res, attn=cfg.attn, pos=cfg.pos, iter=ck.get('iter_num'), leaks=not au.causal, audit=str(au),
                edge=[ATTN[n].edge for n in components(cfg.attn) if ATTN[n].edge], eval_set=name, batches=n, windows=nw,
                per_position={k: [round(v.item() / n, 5) for v in p] for k, p in pos.items()},
                per_batch={k: [round(v, 6) for v in p] for k, p in per_batch.items()},
                seconds={k: round(v, 1) for k, v in secs.items()}, threads=torch.get_num_threads())


def lines(res):
    """The three losses, each with its evaluation's name; a leaking form's window loss marked."""
    out = []
    for k in ('window', 'prefix', 'generation'):
        if k in res:
            mark = LEAK_MARK if k == 'window' and res['leaks'] else ''
            out.append(f"{k:<10} {res[k]:.4f}  {NAMES[k].split(' ', 1)[1]}{mark}")
    return out


def main(argv):
    c, rc = cli.parse(__doc__, dict(out_dir='', ckpt='', data_dir='', batches=0, windows=0, threads=0), argv)
    if c is None:
        return rc
    if bool(c['out_dir']) == bool(c['ckpt']):
        return cli.fail('name one checkpoint: --out_dir=RUN (its ckpt.pt) or --ckpt=PATH')
    if min(c['batches'], c['windows'], c['threads']) < 0:
        return cli.fail(f"need batches, windows and threads >= 0 (0: all; torch's choice), got {c['batches']}, "
                        f"{c['windows']} and {c['threads']}")
    if c['threads']:
        torch.set_num_threads(c['threads'])
    path = os.path.expanduser(c['ckpt'] or os.path.join(c['out_dir'], 'ckpt.pt'))
    try:
        res = evaluate(path, c['data_dir'], c['batches'], c['windows'])
    except (ConfigError, OSError) as e:
        return cli.fail(e)
    print(f"{path}: attn={res['attn']} pos={res['pos']} at iter {res['iter']}, audit {res['audit']}")
    print(f"val loss on {res['eval_set']}:")
    print('\n'.join(lines(res)))
    cost = ', '.join(f"{k} {v:.0f} s" for k, v in res['seconds'].items())
    print(f"cost: {cost} on {res['threads']} thread(s)")
    return 0 if all(math.isfinite(res[k]) for k in res['seconds']) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
