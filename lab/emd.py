"""
The FourierQK paper's EMD validation, tested: it says that Empirical Mode Decomposition of
the trained model's q and k "recovers independently" its learned periods (about 49, 27, 10
and 6 tokens). EMD splits any signal into intrinsic mode functions (IMFs); on noise it
acts as a dyadic filter bank (Flandrin, Rilling and Goncalves, 2004): each IMF's mean
period about doubles the last one's whatever the signal. So the test here compares three
things on the same windows of val text: the trained checkpoints' q and k, the q and k of
the same architecture untrained, and white noise of the same length.

    pip install EMD-signal                   # the optional extra (PyEMD), imported lazily
    python -m lab.emd                        # every FourierQK checkpoint in results/runs
    python -m lab.emd --runs=fourier_qk-s1337 --windows=8

For every layer and head, every 4th channel of q and of k over T positions of a window is
decomposed; an IMF's mean period is 2 T / (its zero crossings). The table gives, per
source, the median period of IMF 1..5 over channels, heads, layers and windows, beside the
checkpoint's learned band periods. Written to results/fourierqk/emd.json (the ledger's row
24 reads it) and printed.
"""

import os
import sys
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch

import causality
from configurator import ConfigError
from model import GPT
from runtime import load_checkpoint
from lab import cli, paths
from lab.probes import outputs

# -----------------------------------------------------------------------------
runs = ''             # comma-separated run folders under results/runs ('' = every FourierQK one with a ckpt.pt)
windows = 8           # val windows per checkpoint
imfs = 5              # IMFs per signal
seed = 0              # which val windows, the untrained model's init and the noise
# -----------------------------------------------------------------------------
FAMILY = ('fourier_qk', 'multi_fourier_qk', 'fourier_qk_causal')


def periods(x, emd, k):
    """Mean periods of the first k IMFs of the 1-D series x: 2 len(x) / zero crossings."""
    out = []
    for imf in emd.emd(x, max_imf=k)[:k]:
        zc = int(np.sum(np.diff(np.signbit(imf)) != 0))
        out.append(2 * len(x) / zc if zc else float('inf'))
    return out


def qk_series(model, idx):
    """q and k of every layer, as (layer, B, T, C) float64 arrays, from the c_attn projection."""
    got = [o.double() for o in outputs(model, [b.attn.c_attn for b in model.transformer.h], idx)]
    C = model.config.n_embd
    return [(o[..., :C].numpy(), o[..., C:2 * C].numpy()) for o in got]


def decompose(series, emd, k):
    rows = []
    for q, kk in series:
        for x in (q, kk):
            for b in range(x.shape[0]):
                for c in range(0, x.shape[2], 4):
                    rows.append(periods(x[b, :, c], emd, k))
    return medians(rows, k)


def medians(rows, k):
    return [float(np.median([r[i] for r in rows if len(r) > i and np.isfinite(r[i])])) for i in range(k)]


def band_periods(model):
    out = []
    for p in causality.learned(model).get('bands', {}).values():
        out += p if isinstance(p, list) else [p]
    return sorted(out)


def main(argv):
    defaults = dict(runs=runs, windows=windows, imfs=imfs, seed=seed)
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return rc
    c = SimpleNamespace(**c)
    try:
        from PyEMD import EMD
    except ImportError:
        return cli.fail("the EMD analysis needs the optional EMD-signal package: pip install EMD-signal")
    base = paths.RUNS
    names = c.runs.split(',') if c.runs else sorted(
        d for d in os.listdir(base) if d.rsplit('-s', 1)[0] in FAMILY and os.path.exists(os.path.join(base, d, 'ckpt.pt')))
    if not names:
        return cli.fail("no FourierQK checkpoint in results/runs (python -m lab.study --study=fourierqk trains them)")
    emd, rng, out = EMD(), np.random.default_rng(c.seed), {}
    for name in names:
        path = os.path.join(base, name, 'ckpt.pt')
        if not os.path.exists(path):
            return cli.fail(f"{path} not found")
        try:
            ck, cfg = load_checkpoint(path, keys=('model', 'model_args', 'config'))   # weights_only: no code runs
        except ConfigError as e:
            return cli.fail(e)
        model = GPT(cfg)
        model.load_state_dict({k.removeprefix('_orig_mod.'): v for k, v in ck['model'].items()})
        data = np.memmap(os.path.join(paths.REPO, ck['config']['data_dir'], 'val.bin'), dtype=np.uint16, mode='r')
        T = cfg.block_size
        starts = rng.integers(0, len(data) - T, c.windows)
        idx = torch.from_numpy(np.stack([data[s:s + T].astype(np.int64) for s in starts]))
        torch.manual_seed(c.seed)
        untrained = GPT(cfg)
        out[name] = dict(trained=decompose(qk_series(model.eval(), idx), emd, c.imfs),
                         untrained=decompose(qk_series(untrained.eval(), idx), emd, c.imfs),
                         bands=band_periods(model), T=T)
        print(f"{name}: IMF periods, trained {fmt(out[name]['trained'])}; untrained {fmt(out[name]['untrained'])}",
              flush=True)
    T = out[names[0]]['T']
    noise = medians([periods(rng.standard_normal(T), emd, c.imfs) for _ in range(512)], c.imfs)
    print(f"white noise, T = {T}: IMF periods {fmt(noise)}")
    paths.write_result('fourierqk/emd.json', 'lab.emd', argv, noise=noise, runs=out)
    return 0


def fmt(p):
    return ', '.join(f"{x:.1f}" for x in p)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
