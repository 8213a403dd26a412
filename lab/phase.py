"""
FourierQK's phase ablation (docs/variants.md §4): a trained checkpoint evaluated on the
fixed windows with the spectra of q and k re-phased at random, each bin keeping its
amplitude, or reduced to their amplitudes. The row joins the run's log.jsonl as kind
'eval_only', the normal losses beside 'qk_phase': {'mode', 'where', 'train', 'val', 'shuffled'}.

    python -m lab.phase --out_dir=results/runs/fourier_qk-s1337 --qk_phase=random_shared

Modes: random_shared (one random phase per sequence, head and bin, the same for q and k:
the authors' main mode), random (independent phases for every channel of q and of k:
their stress test), amplitude (the phases dropped).

Where: a bilateral form ('filter') is re-phased at its filter, where the authors do it.
Any other model with attention ('qk': dot, the causal filters) gets the same operation on
its q and k after its own qk part, with unit weights: the control that says how much a
model that never saw a spectrum relies on the phases of q and k over the window. Both
sites are themselves bilateral: the re-phased model reads the whole window.
"""

import math
import os
import signal
import sys
import time

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
from torch import nn

import train
from configurator import ConfigError
from model import ATTN, components, real_dtype
from runtime import TrainError, load_checkpoint
from lab import cli

MODES = ('random_shared', 'random', 'amplitude')


def phase_angles(B, nh, T, hs, device, dtype):
    """Random phases as the authors draw them: uniform in [0, 2 pi) per (sequence, head, bin, and
    for hs > 1 channel); 0 at bin 0 and, for even T, at the Nyquist bin, whose phase irfft cannot
    hold. Returns (B, nh, T // 2 + 1, hs)."""
    phi = 2 * math.pi * torch.rand(B, nh, T // 2 + 1, hs, device=device, dtype=dtype)
    phi[:, :, 0] = 0.0
    if T % 2 == 0:
        phi[:, :, -1] = 0.0
    return phi


def hook(mode):
    """The spectral parts' phase hook for a mode: q -> (the angles for q, for k), or 'amplitude'."""
    def angles(q):
        B, nh, T, hs = q.shape
        dt = torch.promote_types(q.dtype, torch.float32)
        if mode == 'random_shared':
            phi = phase_angles(B, nh, T, 1, q.device, dt)
            return phi, phi
        if mode == 'random':
            return phase_angles(B, nh, T, hs, q.device, dt), phase_angles(B, nh, T, hs, q.device, dt)
        return 'amplitude', 'amplitude'
    return angles


def rephase(u, p):
    """irfft(|rfft_t(u)| e^(i p)) over the window, or irfft(|rfft_t(u)|) for p = 'amplitude': u (B, nh,
    T, hs) re-phased, in float32 or float64, every bin keeping its amplitude."""
    U = torch.fft.rfft(u.to(real_dtype(u)), dim=-2)                                     # (B, nh, F, hs)
    U = U.abs().to(U.dtype) if isinstance(p, str) else torch.polar(U.abs(), p.to(U.real.dtype).expand(U.shape))
    return torch.fft.irfft(U, n=u.size(-2), dim=-2)                                     # (B, nh, T, hs)


class Rephase(nn.Module):
    """A layer's qk part (inner, or None) with q and k re-phased over the window by the angles of a
    hook. A bilateral form (before: its `phased`, the inputs whose spectrum it takes) is re-phased at
    its filter's input, which is re-phasing the spectrum it weights, where the authors do it (irfft
    then rfft gives the spectrum back; its bin 0 and Nyquist stay real); any other after its qk part."""
    def __init__(self, inner, angles, before=''):
        super().__init__()
        self.inner, self.angles, self.before = inner, angles, before

    def forward(self, q, k):
        if self.before:
            pq, pk = self.angles(q)                             # drawn as the filter's own hook drew them
            return self.inner(rephase(q, pq) if 'q' in self.before else q, rephase(k, pk))
        scale = None
        if self.inner is not None:
            q, k, scale = self.inner(q, k)                      # (B, nh, T, hs or wider)
        pq, pk = self.angles(q)
        return rephase(q, pq).to(q.dtype), rephase(k, pk).to(k.dtype), scale


def set_phase(model, mode):
    """Re-phase q and k in every attention layer of model ('none' restores it); where: 'filter' (a
    bilateral form, at its filter), 'qk' (after the layer's qk part), None (no attention: fnet)."""
    where = None
    for block in model.transformer.h:
        att = block.attn
        if att.mixer is not None:
            continue
        if isinstance(att.qk, Rephase):
            att.qk = att.qk.inner
        before = getattr(att.qk, 'phased', '')
        if mode != 'none':
            att.qk = Rephase(att.qk, hook(mode), before)
        where = 'filter' if before else 'qk'
    return where


def evaluate(out_dir, mode, threads=0):
    """The run in out_dir evaluated with its phases kept and with `mode`; its eval_only row, logged."""
    ck, cfg = load_checkpoint(f"{out_dir}/ckpt.pt", keys=('model', 'model_args', 'config', 'iter_num'))
    if any(ATTN[n].slot == 'mixer' for n in components(cfg.attn)):
        raise ConfigError(f"{out_dir}: attn={cfg.attn} has no attention, so no q and k to re-phase")
    c = dict(ck['config'], out_dir=out_dir, init_from='resume', eval_only=True, threads=threads)
    r = train.setup({k: v for k, v in c.items() if k in train.DEFAULTS})
    old = {s: signal.signal(s, r.stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        t_start = time.time()
        lr = train.get_lr(r.c, r.iter_num)
        kept = train.estimate_losses(r)
        where = set_phase(r.model, mode)
        torch.manual_seed(train.EVAL_SEED)      # eval only: seeding here disturbs no training stream
        try:
            phased = train.estimate_losses(r)
        finally:
            set_phase(r.model, 'none')
        if kept is None or phased is None:
            raise TrainError(f"signal {r.stop.sig}: stopped before the evaluation ended; nothing logged")
        row = dict(train.eval_row(r, r.iter_num, kept, r.best_val, lr, time.time() - t_start), kind='eval_only', qk_phase={'mode': mode, 'where': where, **phased},
                   date=time.strftime('%Y-%m-%d %H:%M'))
        train.log(r, r.iter_num, row)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if r.lock:
            r.lock.release()
    print(f"{out_dir} at iter {r.iter_num}: val {kept['val']:.4f}, qk_phase={mode}: train {phased['train']:.4f} | "
          f"val {phased['val']:.4f} | shuffled val {phased['shuffled']:.4f}{'' if r.verdict.causal else train.LEAK_MARK}", flush=True)
    return row


def main(argv):
    defaults = {'out_dir': '', 'qk_phase': 'random_shared', 'threads': 0}
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults, {'qk_phase': MODES}))
        return 0
    try:
        c = cli.load(defaults, argv, {'qk_phase': MODES})
        if not c['out_dir']:
            raise ConfigError("name the run: --out_dir=results/runs/NAME")
        evaluate(c['out_dir'], c['qk_phase'], c['threads'])
    except ConfigError as e:
        return cli.fail(e)
    except TrainError as e:
        return cli.fail(e, 1)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
