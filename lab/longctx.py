"""
Contexts longer than the training window: do the locality priors extrapolate?

    python -m lab.longctx                          # the locality study's context runs with a ckpt.pt
    python -m lab.longctx --runs=alibi-s1337,rope-s2 --lengths=128,256,512 --windows=64
    python -m lab.longctx --table_only=True        # CONTEXT.md and context.png from context.json

Each checkpoint (trained at block_size 128 at the CPU study scale) is rebuilt at block_size T
for every T of `lengths`: the same weights, and the same model on the trained length, checked
(the logits of a window of the trained length must agree to 1e-6). A variant whose parts
read block_size (learned positions, filter taps of half the window, band grids) fails that
check and is refused with the reason, as is a leaking one. Then the mean val loss of every
position of fixed val windows of T tokens (the same windows, cut to T, for every run and T;
so a causal model's loss at positions below 128 is the same at every T) and its mean per
bucket of positions: [0, 128), [128, 256), [256, 512). Does the loss past 128 rise? Against the
positions 64..127, not 0..127: the first positions see little context, a cold start whose high loss
would flatter any later bucket (WARM).

Writes results/locality/context.json (one entry per run, kept across calls), CONTEXT.md
(per variant, mean over seeds and its spread) and context.png (loss by position, T = 512).
"""

import json
import math
import os
import sys
from dataclasses import replace
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch
import torch.nn.functional as F

from causality import audit
from configurator import ConfigError
from model import GPT
from runtime import find_data_dir, load_checkpoint
from train import windows as token_windows
from train import EVAL_SEED
from lab import cli, paths, studies
from lab.results_md import diff_cells
from lab.stats import paired, stats, t95

# -----------------------------------------------------------------------------
runs = ''               # comma-separated runs: names under results/runs, or folders ('' = the study's)
study = 'locality'      # whose `context` list and results folder
lengths = '128,256,512'  # context lengths to evaluate, in tokens
windows = 64            # val windows (of the longest length), the same for every run
batch = 16              # windows per forward
bucket = 128            # position buckets of this many tokens
table_only = False      # only CONTEXT.md and the plot, from context.json
out_dir = ''            # where context.json, CONTEXT.md and the plot go ('' = results/<study>)
# -----------------------------------------------------------------------------
BIN = 16                # positions per point of the stored loss curve
WARM = 64               # positions below this are the cold start: the baseline is WARM..trained-1


def past_and_warm(r, T=512):
    """A run's mean loss on positions trained..T-1 of its T-token windows and on WARM..trained-1 (the
    baseline without the cold start), from its stored curve; None where it has no such curve."""
    c = r.get('T', {}).get(str(T), {}).get('curve')
    n = r.get('trained', 0) // BIN
    if not c or not WARM // BIN < n < len(c):
        return None
    return sum(c[n:]) / len(c[n:]), sum(c[WARM // BIN:n]) / (n - WARM // BIN)


class ContextError(Exception):
    pass


class NotYet(Exception):
    """A run whose checkpoint is not its last: skipped, and not recorded."""


def finished_at(run_dir):
    """The iter a run ends at (its run.json's max_iters), or None where it has no run.json."""
    try:
        with open(os.path.join(run_dir, 'run.json')) as f:
            return int(json.load(f)['max_iters'])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def extended(model, T):
    """The model rebuilt at block_size T with its own weights, or a ContextError saying why it
    cannot be: its state does not fit, or it is another model on the trained length."""
    cfg = model.config
    big = GPT(replace(cfg, block_size=T)).eval()
    try:
        big.load_state_dict(model.state_dict())
    except RuntimeError as e:
        why = next((ln.strip() for ln in str(e).splitlines() if 'mismatch' in ln or 'Missing' in ln), str(e))
        raise ContextError(f"its weights do not fit a window of {T}: {why}") from None
    idx = torch.randint(cfg.vocab_size, (2, cfg.block_size), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (big(idx)[0] - model(idx)[0]).abs().max().item()
    if diff > 1e-6:
        raise ContextError(f"at block_size={T} it is another model on the trained length (logits move "
                           f"by {diff:.1e}): a part reads block_size")
    return big


def val_tokens(ck):
    """The val split of the data a checkpoint was trained on (its data_dir, or data/ of the same
    name here when that folder is gone: a run made in another worktree)."""
    d = ck.get('data', {}).get('data_dir') or 'data/shakespeare_char'
    if not os.path.exists(d):
        d = find_data_dir(os.path.join('data', os.path.basename(d)))[0]
    if not os.path.isfile(os.path.join(d, 'val.bin')):
        raise ConfigError(f"val.bin of the data the run was trained on not found in {d}: run `python prepare.py`")
    return np.memmap(os.path.join(d, 'val.bin'), dtype=np.uint16, mode='r')


def position_losses(model, val, T, offsets, batch):
    """Mean cross-entropy at each position 0..T-1 over the windows at `offsets`: (T,) float64."""
    total = torch.zeros(T, dtype=torch.float64)
    for i in range(0, len(offsets), batch):
        x, y = token_windows(val, offsets[i:i + batch], T, 'cpu')   # (b, T) each
        with torch.no_grad():
            logits = model(x)[0]                                # (b, T, vocab)
        ce = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction='none')   # (b, T)
        total += ce.double().sum(0)
    return total / len(offsets)


def evaluate(run_dir, Ts, offsets, c):
    """{'attn', 'pos', 'trained', 'iter', 'T': {T: {'loss', 'buckets', 'curve'}}} for one run;
    a ContextError says why a run cannot be evaluated."""
    ck, cfg = load_checkpoint(os.path.join(run_dir, 'ckpt.pt'))
    want = finished_at(run_dir)
    if want is not None and ck['iter_num'] != want:
        raise NotYet(f"its checkpoint is at iter {ck['iter_num']} of {want}: the run is still training")
    val = val_tokens(ck)
    if not audit(cfg).causal:
        raise ContextError("it leaks: its loss is no measure of language modelling at any length")
    model = GPT(cfg).eval()
    try:
        model.load_state_dict({k.removeprefix('_orig_mod.'): v for k, v in ck['model'].items()})
    except (RuntimeError, AttributeError) as e:
        why = (str(e).strip().splitlines() or [''])[-1].strip()
        raise ConfigError(f"{os.path.join(run_dir, 'ckpt.pt')}: its weights do not fit its own model_args "
                          f"({why})") from None
    out = {}
    for T in Ts:
        m = model if T <= cfg.block_size else extended(model, T)
        curve = position_losses(m, val, T, offsets, c.batch)
        out[str(T)] = dict(loss=curve.mean().item(),
                           buckets=[curve[b:b + c.bucket].mean().item() for b in range(0, T, c.bucket)],
                           curve=[curve[b:b + BIN].mean().item() for b in range(0, T, BIN)])
    return dict(attn=cfg.attn, pos=cfg.pos, trained=cfg.block_size, iter=ck['iter_num'], windows=len(offsets),
                T=out)


def variant(label):
    return label.rsplit('-s', 1)[0]


def table(res, Ts, bucket):
    """CONTEXT.md's table: per variant, the mean over seeds of the loss at each T and per bucket, the
    baseline WARM..trained-1 and, paired over seeds, the loss past the trained length minus it."""
    by = {}
    for label, r in sorted(res.items()):
        if 'T' in r:
            by.setdefault(variant(label), []).append(r)
    Tmax = max(Ts)
    nb = math.ceil(Tmax / bucket)
    tr = {r.get('trained') for rs in by.values() for r in rs}
    L = tr.pop() if len(tr) == 1 else None       # one trained length names the columns
    warm, past = (f'pos {WARM}-{L - 1}', f'past {L}') if L else (f'pos {WARM}-(trained-1)', 'past trained')
    heads = ([f'T={T}' for T in Ts] + [f'T={Tmax}, pos {b * bucket}-{(b + 1) * bucket - 1}' for b in range(nb)]
             + [f'T={Tmax}, {warm}', f'{past} minus {warm}: paired seeds', 'mean', '95% interval'])
    out = ['| variant | attn, pos | trained on | seeds | ' + ' | '.join(heads) + ' |',
           '|---' * (4 + len(heads)) + '|']
    for v, rs in by.items():
        cells = []
        for T in Ts:
            xs = [r['T'][str(T)]['loss'] for r in rs if str(T) in r['T']]
            cells.append(fmt(xs))
        for b in range(nb):
            xs = [r['T'][str(Tmax)]['buckets'][b] for r in rs if str(Tmax) in r['T']]
            cells.append(fmt(xs))
        pw = [x for x in (past_and_warm(r, Tmax) for r in rs) if x]
        cells.append(fmt([w for _, w in pw]))
        d = paired(dict(enumerate(p for p, _ in pw)), dict(enumerate(w for _, w in pw)))
        cells.append(diff_cells(d or None))
        out.append(f"| {v} | {rs[0]['attn']}, {rs[0]['pos']} | {rs[0]['trained']} | {len(rs)} | "
                   + ' | '.join(cells) + ' |')
    refused = [f"- {label}: {r['refused']}" for label, r in sorted(res.items()) if 'refused' in r]
    return out, refused


def fmt(xs):
    if not xs:
        return '-'
    m = stats(xs)
    return f"{m['mean']:.4f}" + ('' if m['sd'] is None else f" +- {m['sd']:.4f}")


def write(out_dir, res, Ts, c):
    rows, refused = table(res, Ts, c.bucket)
    n = sorted({r['windows'] for r in res.values() if 'windows' in r})
    text = ['# Longer contexts than trained on', '',
            f"Generated by `python -m lab.longctx --table_only=True` from context.json ({len(res)} runs); made by "
            f"`python -m lab.longctx` ({'/'.join(map(str, n))} val windows, the same for every run; losses in nats "
            "per character, mean +- sd over seeds). Each model, trained on windows of the length its row gives, is evaluated "
            "with its weights unchanged on windows of T tokens. The bucket columns split the longest window by "
            "position: a model that extrapolates keeps the loss past its training length at or below the loss "
            f"before it. The baseline leaves out the cold start, positions 0 to {WARM - 1}, which see little "
            f"context: the last three columns pair, over seeds, the mean loss on positions from the training length "
            f"to {max(Ts) - 1} minus the mean on {WARM} to the training length - 1, with the 95% interval "
            "(context.png draws it along the window).", '',
            *rows, '']
    if refused:
        text += ['Refused (the reason the model cannot run past its window):', '', *refused, '']
    with open(os.path.join(out_dir, 'CONTEXT.md'), 'w') as f:
        f.write('\n'.join(text))
    plot(out_dir, res, max(Ts))


def plot(out_dir, res, T):
    """The loss along the window minus each seed's own baseline (positions WARM..trained-1), mean over
    seeds with its 95% band, from WARM on: above 0 past the trained length, the model does worse there."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return
    by = {}
    for label, r in res.items():
        pw = past_and_warm(r, T)
        if pw:
            by.setdefault(variant(label), []).append(np.array(r['T'][str(T)]['curve']) - pw[1])
    if not by:
        return
    from lab.plots_paired import legend_right, line_band, style   # a colour and dash per series
    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(T // BIN) * BIN + BIN / 2
    keep = x >= WARM
    for i, (v, curves) in enumerate(sorted(by.items())):
        c = np.array(curves)                                    # (seeds, T // BIN)
        y = c.mean(0)
        half = t95(len(c) - 1) * c.std(0, ddof=1) / math.sqrt(len(c)) if len(c) > 1 else None
        line_band(ax, x[keep], y[keep], None if half is None else (y - half)[keep],
                  None if half is None else (y + half)[keep], style(i), f'{v} ({len(c)} seeds)')
    ax.axvline(128, color='grey', ls=':', lw=1)
    ax.axhline(0, color='black', lw=0.6)
    ax.set_xlabel(f'position in the window (trained on 128; from {WARM}: the cold start left out)')
    ax.set_ylabel(f'val loss minus the seed\'s mean on {WARM}..127')
    ax.set_title(f'Past the training window: windows of {T}, mean over seeds, 95% band')
    legend_right(ax)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, 'context.png'), dpi=120)
    plt.close(fig)


def main(argv):
    defaults = dict(runs=runs, study=study, lengths=lengths, windows=windows, batch=batch, bucket=bucket,
                    table_only=table_only, out_dir=out_dir)
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults))
        return 0
    try:
        c = SimpleNamespace(**cli.load(defaults, argv))
        Ts = sorted(int(t) for t in c.lengths.split(','))
        if not Ts or min(Ts) < 1 or c.windows < 1 or c.batch < 1 or c.bucket < 1:
            raise ConfigError('lengths, windows, batch and bucket must be positive')
        if c.study not in studies.STUDIES:
            raise ConfigError(f"study={c.study!r} is not one of: {', '.join(studies.STUDIES)}")
    except ValueError:
        return cli.fail(f"lengths={c.lengths!r}: comma-separated integers")
    except ConfigError as e:
        return cli.fail(e)
    try:
        return run(c, Ts)
    except ConfigError as e:        # a checkpoint or context.json that cannot be read
        return cli.fail(e)


def read_results(path):
    """context.json's entries ({} where there is none yet), or a ConfigError saying what to do."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding='utf-8') as f:
            res = json.load(f)
    except (OSError, ValueError) as e:      # ValueError: not JSON, or not UTF-8
        raise ConfigError(f"{path} is not readable JSON ({type(e).__name__}: {(str(e).splitlines() or [''])[0]}): "
                          f"delete it to evaluate the runs afresh") from None
    if not isinstance(res, dict) or not all(isinstance(r, dict) for r in res.values()):
        raise ConfigError(f"{path} is not a context.json of lab/longctx.py (an object of runs): delete it to "
                          f"evaluate the runs afresh")
    return res


def run(c, Ts):
    """Evaluate the runs that have a checkpoint (keeping what context.json holds), then the table."""
    out = c.out_dir or os.path.join(paths.RESULTS, c.study)
    path = os.path.join(out, 'context.json')
    res = read_results(path)
    if not c.table_only:
        if c.runs:
            labels = c.runs.split(',')
        else:
            names = studies.STUDIES.get(c.study, {}).get('context', ())
            labels = [r.label for r in studies.plan(c.study) if r.name in names]
        offsets = None
        for label in labels:
            d = label if os.sep in label else os.path.join(paths.RUNS, label)
            label = os.path.basename(os.path.normpath(d))
            if not os.path.exists(os.path.join(d, 'ckpt.pt')):
                print(f"{label}: no ckpt.pt (train it: python -m lab.study --study={c.study}); skipped")
                continue
            if offsets is None:
                val = val_tokens(load_checkpoint(os.path.join(d, 'ckpt.pt'))[0])
                g = torch.Generator().manual_seed(EVAL_SEED)
                offsets = torch.randint(len(val) - max(Ts) - 1, (c.windows,), generator=g)
            try:
                res[label] = evaluate(d, Ts, offsets, c)
                r = res[label]['T']
                print(f"{label}: " + ' | '.join(f"T={T} {r[str(T)]['loss']:.4f}" for T in Ts), flush=True)
            except NotYet as e:
                print(f"{label}: {e}; skipped", flush=True)
                continue
            except ContextError as e:
                res[label] = dict(refused=str(e))
                print(f"{label}: refused: {e}", flush=True)
            os.makedirs(out, exist_ok=True)
            with open(path, 'w') as f:
                json.dump(res, f, indent=1)
    if not res:
        return cli.fail("no context results yet: train the study's context runs first", 1)
    try:
        write(out, res, Ts, c)
    except (KeyError, TypeError, IndexError) as e:
        raise ConfigError(f"{path} does not fit these options or is damaged ({type(e).__name__}: {e}): give the "
                          f"--lengths and --bucket it was made with, or delete it to evaluate afresh") from None
    print(f"wrote {os.path.relpath(os.path.join(out, 'CONTEXT.md'), paths.REPO)}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
