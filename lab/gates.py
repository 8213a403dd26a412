"""
What EGA's learned gate tracks (ledger row 42). The EGA paper says its gate suppresses
low-energy background tokens and lifts information-dense ones, and that the learned signal
may be general salience (rarity, word boundaries) rather than spectral energy. Here a trained
`ega` checkpoint reads fixed windows of val text; each layer's and head's gate on each key,
the logit log sigmoid(alpha (z_j - tau)) the attention adds, is rank-correlated (Spearman,
ties averaged) with two properties of the key's character: its log frequency in the training
text (negative: frequent characters are suppressed and rare ones lifted) and whether it is a
word boundary (a space, a newline or a punctuation mark).

    python train.py config/ega.py config/cpu.py --seed=1337 --out_dir=results/runs/mech_ega-s1337
    python -m lab.gates --runs=mech_ega-s1337      # its ckpt.pt; writes results/gates/mechanism.json

Beside it, the same architecture at a fresh random init (torch seed --seed), whose gate is
a random linear readout of the characters and already correlates a little. A head goes the
claimed way if it lifts boundaries (rho >= RHO) or suppresses frequent keys (rho with log
frequency <= -RHO), the other way if it does the opposite. The first SKIP (8) keys of each
window are left out: the causal z-score has no statistics yet there. It never replaces the
committed results with ones from fewer runs or val keys unless --replace=True.
"""

import os
import string
import sys
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch

from configurator import ConfigError
from prepare import META, read_meta
from runtime import load_checkpoint
from model import GPT, components
from lab import cli, paths
from lab.probes import outputs

# -----------------------------------------------------------------------------
runs = 'mech_ega-s1337'  # comma-separated run folders under results/runs holding an ega ckpt.pt
windows = 32            # val windows per checkpoint
seed = 0                # which val windows
replace = False         # write even where the committed mechanism.json holds more (other runs, more keys)
# -----------------------------------------------------------------------------
SKIP = 8                # keys at the start of a window left out (the causal z-score's first statistics)
RHO = 0.3               # a head tracks a property if |Spearman's rho| is at least this (ledger row 42)
BOUNDARY = set(' \n' + string.punctuation)


def ranks(x):
    """Ranks of x (1-D) from 0, ties given their average rank."""
    order = np.argsort(x, kind='stable')
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=r)
    return sums[inv] / counts[inv]


def spearman(x, y):
    rx, ry = ranks(np.asarray(x, float)), ranks(np.asarray(y, float))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / den) if den > 0 else 0.0


def gate_logits(model, idx):
    """The ega gate's key logit of every layer, (layers, B, nh, T), on idx (B, T)."""
    got = outputs(model, [b.attn.gates['ega'] for b in model.transformer.h], idx)    # (q, key_bias, bias) each
    return torch.stack([o[1].double() for o in got]).numpy()


def analyse(path, n_windows, seed):
    """Per layer and head: rho with the key's log training frequency and with the boundary indicator,
    and the mean gate logit on boundaries and elsewhere; the characters most suppressed and lifted."""
    ck, cfg = load_checkpoint(path)
    if 'ega' not in components(cfg.attn):
        raise ConfigError(f"{path}: attn={cfg.attn} has no EGA gate")
    model = GPT(cfg).eval()
    model.load_state_dict({k.removeprefix('_orig_mod.'): v for k, v in ck['model'].items()})
    data_dir = os.path.join(paths.REPO, ck['config']['data_dir'])
    itos = read_meta(os.path.join(data_dir, META))['itos']
    train = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')
    logf = np.log(np.bincount(train, minlength=cfg.vocab_size) + 1.0)
    val = np.memmap(os.path.join(data_dir, 'val.bin'), dtype=np.uint16, mode='r')
    T = cfg.block_size
    starts = np.random.default_rng(seed).integers(0, len(val) - T, n_windows)
    idx = np.stack([val[s:s + T].astype(np.int64) for s in starts])          # (W, T)
    keys = idx[:, SKIP:]                                                    # (W, T - SKIP)
    bound = np.vectorize(lambda t: itos[t] in BOUNDARY)(keys).astype(float).ravel()
    torch.manual_seed(seed)
    out = dict(iter=ck.get('iter_num'), attn=cfg.attn, keys=int(keys.size))
    logits = {name: gate_logits(m, torch.from_numpy(idx))[..., SKIP:]       # (L, W, nh, T - SKIP) each
              for name, m in (('trained', model), ('untrained', GPT(cfg).eval()))}   # a fresh init: a random readout
    for name, g in logits.items():
        heads = {}
        for layer in range(g.shape[0]):
            for h in range(g.shape[2]):
                x = g[layer, :, h].ravel()
                heads[f'{layer}.{h}'] = dict(rho_freq=round(spearman(x, logf[keys].ravel()), 4),
                                             rho_boundary=round(spearman(x, bound), 4),
                                             gate_boundary=round(float(x[bound > 0].mean()), 4),
                                             gate_other=round(float(x[bound == 0].mean()), 4))
        out[name] = heads
    mean = logits['trained'].mean(axis=(0, 2))                              # (W, T - SKIP)
    per_char = {itos[t]: float(mean[keys == t].mean()) for t in np.unique(keys) if (keys == t).sum() >= 20}
    order = sorted(per_char, key=per_char.get)
    return dict(out, suppressed={c: round(per_char[c], 3) for c in order[:6]},
                lifted={c: round(per_char[c], 3) for c in order[-6:]})


def tracking(heads):
    """Heads going the claimed way, (all, lifting boundaries: rho >= RHO, suppressing frequent keys: rho with
    log frequency <= -RHO), and heads going the other way (boundaries down or frequent keys up)."""
    up = [h['rho_boundary'] >= RHO for h in heads.values()]
    rare = [h['rho_freq'] <= -RHO for h in heads.values()]
    against = sum(h['rho_boundary'] <= -RHO or h['rho_freq'] >= RHO for h in heads.values())
    return sum(a or b for a, b in zip(up, rare)), sum(up), sum(rare), against


def row_gate_mechanism(done, leaking, cl):
    """Ledger row 42 from results/gates/mechanism.json (this module's output): how many of the trained
    gate's heads go the claimed way (boundaries lifted, frequent keys suppressed), against a fresh init."""
    res = paths.results_json('gates', 'mechanism.json')
    if not res:
        return 'not measured (python -m lab.gates)', 'untestable here'
    parts, verdicts = [], []
    for name, r in res['runs'].items():
        n = len(r['trained'])
        (way, up, rare, against), (init, _, _, init_against) = tracking(r['trained']), tracking(r['untrained'])
        parts.append(f"`{name}` (step {r['iter']}, {r['keys']:,} val keys per head): {way} of {n} heads go the claimed "
                     f"way ({up} lift boundaries, {rare} suppress frequent keys), {against} the other way; at a fresh "
                     f"init {init} and {init_against}; most suppressed {', '.join(repr(c) for c in r['suppressed'])}, "
                     f"most lifted {', '.join(repr(c) for c in r['lifted'])}")
        verdicts.append('reproduced' if way > init and way > against else 'contradicted' if way <= init
                        else 'not resolved')
    verdict = verdicts[0] if len(set(verdicts)) == 1 else 'not resolved'
    return '; '.join(parts) + f" (`{res['command']}`)", verdict


def less(old, new):
    """Why the results `new` hold less than the committed `old` ('' if they do not): a run of old missing
    from new, or read over fewer val keys."""
    for name, r in old.get('runs', {}).items():
        m = new.get(name, {}).get('keys', 0)
        if m < r['keys']:
            return (f"results/gates/mechanism.json holds {name} over {r['keys']:,} val keys per head; this would "
                    f"hold {m:,}: name every run it holds (--runs=...) at --windows as large, or pass --replace=True")
    return ''


def main(argv):
    defaults = dict(runs=runs, windows=windows, seed=seed, replace=replace)
    c, rc = cli.parse(__doc__, defaults, argv)
    if c is None:
        return rc
    c = SimpleNamespace(**c)
    out = {}
    try:
        for name in [r for r in c.runs.split(',') if r]:
            out[name] = analyse(os.path.join(paths.RUNS, name, 'ckpt.pt'), c.windows, c.seed)
            for kind in ('trained', 'untrained'):
                way, up, rare, against = tracking(out[name][kind])
                print(f"{name}, {kind}: of {len(out[name][kind])} heads, {up} lift boundaries and {rare} suppress "
                      f"frequent keys (|rho| >= {RHO}), {against} go the other way", flush=True)
    except ConfigError as e:
        return cli.fail(e)
    if not out:
        return cli.fail("name at least one run: --runs=mech_ega-s1337")
    why = '' if c.replace else less(paths.results_json('gates', 'mechanism.json'), out)
    if why:
        return cli.fail(why)
    paths.write_result('gates/mechanism.json', 'lab.gates', argv, skip=SKIP, runs=out)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
