"""
Train a GPT with any attention variant of model.py.

    python train.py config/ega_mope.py                  # paper scale (GPU)
    python train.py config/ega_mope.py config/cpu.py    # the CPU study scale
    python train.py config/cpu.py --attn=ega --max_iters=500
    torchrun --standalone --nproc_per_node=4 train.py config/ega_mope.py
    python train.py --help                              # every key, default and choice

Every eval reports val loss on fixed windows, the loss on globally shuffled val text and
the gap between them; the start-up causality audit decides whether the model can see the
future, and a leaking model's losses carry a LEAKS mark.

The file reads top to bottom: the config, the run's state (Run), the batch, the code's version
(the log opens with it), setup, the evaluation, the checkpoint, the step, the loop. What keeps a run safe (config checks, processes,
data, atomic checkpoints, exact resume, signals, one run per out_dir) is in runtime.py.
"""

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from types import SimpleNamespace
from typing import Optional

import numpy as np
import torch

from causality import Audit, audit
from configurator import ConfigError, describe
from model import (CHOICES as MODEL_CHOICES, GPT, GPTConfig, IMPLS, MOPE, SpectralQK, attn_options, components,
                   pos_components)
from prepare import PrepareError, make_dir, remove_stale_temps
# what keeps a run safe (checks, processes, data, atomic checkpoints, exact resume, signals)
from runtime import (COMPILE_MODES, OutDirLock, Procs, Stop, TrainError, checkpoint_left, due_eval, eta,
                     eval_repeats, eval_set, eval_windows, fmt_bands, fmt_time, init_processes, load_checkpoint, load_data,
                     load_state, model_config, not_written, optimizer_names, print_header, rng_state, run_cli, save_atomic,
                     set_rng_state, stop_signal, trim_log, wrap_ddp)
from runtime import HERE as _HERE   # not a config key: DEFAULTS below takes every public str global

# -----------------------------------------------------------------------------
# default config values: the paper scale of docs/variants.md §0 with plain dot attention
# I/O
out_dir = 'out'
data_dir = 'data/shakespeare_char'  # train.bin, val.bin, meta.json written by prepare.py; a relative
                                    # path missing from the working directory is taken next to train.py
eval_interval = 250
log_interval = 10
eval_iters = 50                     # fixed validation batches per eval (the papers used 50)
eval_only = False                   # evaluate the run's checkpoint once and exit (logged as kind 'eval_only')
init_from = 'scratch'               # 'scratch' or 'resume' (from out_dir/ckpt.pt)
resume_other_data = False           # resume on data other than the checkpoint's (its sha256 differs): refused
                                    # unless True
overwrite = False                   # a scratch start into an out_dir that holds a run (ckpt.pt, log.jsonl)
                                    # replaces it; False: refuse, naming the two ways on
seed = 1337
# data: tokens/iter = processes x gradient_accumulation_steps x batch_size x block_size
batch_size = 64                     # per process and micro-step
gradient_accumulation_steps = 1     # micro-steps per process, so any number of DDP processes works
# model: every GPTConfig field is a key (variant options too: see model.py)
n_layer = 6
n_head = 8
n_embd = 256
block_size = 256
dropout = 0.1
attn = 'dot'
pos = 'learned'
# AdamW
learning_rate = 3e-4
max_iters = 5000
weight_decay = 0.1
decay_all = False                   # True: the authors' recipe, decay on every parameter (biases, norms,
                                    # gates, band centres); False: matrices and MOPE's log w, log s only
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0                     # 0 disables
# learning rate: linear warmup, then cosine to min_lr at lr_decay_iters
decay_lr = True
warmup_iters = 200
lr_decay_iters = 0                  # 0: max_iters (a resume with a larger max_iters then stretches the cosine)
min_lr = 3e-5
# system
device = 'auto'                     # auto (cuda, mps, cpu), cpu, cuda, cuda:N, mps
dtype = 'auto'                      # auto: bfloat16 on CUDA where supported, else float16; float32 off CUDA
compile = 'auto'                    # auto: on for CUDA, off elsewhere; True / False
compile_mode = 'default'            # torch.compile's mode: default, reduce-overhead (CUDA graphs),
                                    # max-autotune-no-cudagraphs (runtime.COMPILE_MODES)
attn_impl = 'auto'                  # the attention path: auto, sdpa (fused kernel), flex (FlexAttention:
                                    # CUDA, no dropout), plain (T x T weights written out); model.pick_impl
threads = 0                         # CPU threads per process (torch.set_num_threads); 0: torch's choice. On a
                                    # machine shared with other work, 1 can be many times faster than 2
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
DEFAULTS.update({f.name: f.default for f in fields(GPTConfig)
                 if f.name not in DEFAULTS and f.name != 'vocab_size'})  # vocab comes from meta.json
CHOICES = {**MODEL_CHOICES, 'init_from': ('scratch', 'resume'),
           'dtype': ('auto', 'float32', 'bfloat16', 'float16'), 'compile': ('auto', True, False),
           'attn_impl': IMPLS, 'compile_mode': COMPILE_MODES}
EVAL_SEED = 20240101                # the validation windows: the same for every run and variant
LEAK_MARK = ' [LEAKS: sees future tokens, not a language-modelling result]'
PROGRESS_S = 30.0                   # seconds between progress lines of a long eval
MEDIAN_OF = 50                      # steps behind ms/iter, tok/s and the ETA
STAT_WINDOWS = 4                    # val windows the attention statistics are read on
NEAR = (1, 4, 16)                   # the attention statistics' share of weight on the w nearest keys


@dataclass
class Run:
    """A run's state, in one place: what setup() builds and the loop moves on."""
    c: SimpleNamespace                  # the checked config, as attributes
    p: Procs                            # processes, device, dtype, autocast (runtime.init_processes)
    data_dir: str
    data: dict                          # 'train', 'val': token arrays
    meta: dict                          # prepare.py's meta.json
    evals: dict                         # the fixed eval windows: split -> (tokens, offsets)
    eval_set: str                       # what they are drawn from (runtime.eval_set), in every eval row
    gptconf: GPTConfig
    model: GPT                          # the model itself: its weights, evals and checkpoints
    train_model: torch.nn.Module        # what a step calls: the model compiled and/or under DDP
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    verdict: Audit                      # the start-up causality audit
    iter_num: int = 0
    best_val: float = math.inf
    lock: Optional[OutDirLock] = None   # rank 0's hold on out_dir
    stop: Stop = field(default_factory=Stop)    # SIGINT / SIGTERM, read between steps and batches
    sig: int = 0                        # the signal that stopped the run
    last: Optional[dict] = None         # the last eval's log row
    saved_iter: Optional[int] = None
    eval_s: float = 0.0                 # the last eval's seconds
    t_start: float = 0.0

    ckpt_path = property(lambda r: os.path.join(r.c.out_dir, 'ckpt.pt'))
    log_path = property(lambda r: os.path.join(r.c.out_dir, 'log.jsonl'))
    leak = property(lambda r: '' if r.verdict.causal else LEAK_MARK)
    tokens_per_iter = property(lambda r: r.p.world * r.c.gradient_accumulation_steps * r.c.batch_size
                               * r.c.block_size)


def get_lr(c, it):
    if not c.decay_lr:
        return c.learning_rate
    if it < c.warmup_iters:
        return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
    decay_iters = c.lr_decay_iters or c.max_iters
    if it >= decay_iters:       # also a run no longer than its warmup: no 0/0 below
        return c.min_lr
    ratio = (it - c.warmup_iters) / (decay_iters - c.warmup_iters)
    return c.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c.learning_rate - c.min_lr)


def batch_seed(c, rank, it, micro):
    """The seed of one micro-batch's offsets: a pure function of (seed, rank, iter, micro), so that
    a resumed run draws exactly the batches the uninterrupted one would have."""
    return ((c.seed * 1000003 + rank) * 1000003 + it) * 1000003 + micro


def get_batch(r, micro):
    """The training batch of micro-step `micro` of step r.iter_num: B windows at offsets drawn from
    batch_seed alone, so that a resumed run reads the batches the uninterrupted one would have."""
    T, B = r.c.block_size, r.c.batch_size
    g = torch.Generator().manual_seed(batch_seed(r.c, r.p.rank, r.iter_num, micro) % (2 ** 63))
    offs = torch.randint(len(r.data['train']) - T, (B,), generator=g)   # (B,)
    return windows(r.data['train'], offs, T, r.p.dev)


def windows(data, offsets, T, device):
    """Token windows at the given offsets: x, y of shape (len(offsets), T)."""
    ix = offsets[:, None].numpy() + np.arange(T + 1)            # (B, T+1)
    xy = torch.from_numpy(np.asarray(data[ix], dtype=np.int64))  # (B, T+1)
    x, y = xy[:, :-1].contiguous(), xy[:, 1:].contiguous()
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)

# ----------------------------------------------------------------------------- the code's version
# (a run's log opens with it; bench.py and the lab record it beside their results)


class GitError(Exception):
    pass


def git(*args, cwd=_HERE, check=False, timeout=120):
    """git's stdout in cwd, as it is. check: a git that fails raises GitError with its message (else
    its stdout is returned, '' mostly). A missing git raises OSError."""
    p = subprocess.run(['git', *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode:
        raise GitError(f"git {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def git_commit(with_diff=False, cwd=_HERE, results=os.path.join(_HERE, 'results')):
    """'<commit>' or '<commit>+dirty' of the tree at cwd, the results folder left out (the results
    themselves do not make the tree dirty); with_diff: (that, the change against the commit as a patch,
    untracked files included, or '' when clean). 'unknown' where git cannot tell."""
    try:
        inside = os.path.relpath(results, cwd)
        skip = [] if inside.startswith('..') else [f':(exclude){inside}']
        dirty = git('status', '--porcelain', '--', '.', *skip, cwd=cwd).strip()
        code = (git('rev-parse', '--short', 'HEAD', cwd=cwd).strip() or 'unknown') + ('+dirty' if dirty else '')
        if not with_diff:
            return code
        diff = git('diff', 'HEAD', '--binary', '--', '.', *skip, cwd=cwd) if dirty else ''
        for path in git('ls-files', '--others', '--exclude-standard', '--', '.', *skip, cwd=cwd).split('\n') if dirty \
                else ():
            if path:    # an untracked file, as a patch that creates it
                diff += git('diff', '--no-index', '--binary', '--', os.devnull, path, cwd=cwd)
        return code, diff
    except (OSError, subprocess.SubprocessError):
        return ('unknown', '') if with_diff else 'unknown'


# ----------------------------------------------------------------------------- setup


def setup(cfg):
    """The Run of a checked config dict: the data, then rank 0's hold on out_dir, then (build) the
    model, the optimizer (new, or as out_dir/ckpt.pt left them), the audit and the eval windows."""
    c = SimpleNamespace(**cfg)
    p = init_processes(c)
    data_dir, data, meta = load_data(c)     # checked before out_dir is made
    repeats = eval_repeats(data, c)
    if repeats and p.master:
        print(repeats, file=sys.stderr)
    # the lock before anything of out_dir is read: a resume, an overwrite or an eval started while
    # another run lives there is refused, rather than reading a checkpoint that run is about to replace
    lock = hold_out_dir(c.out_dir) if p.master else None
    try:
        r = build(c, p, data_dir, data, meta)
        r.lock = lock
        if p.master:
            remove_stale_temps(c.out_dir, ('ckpt.pt', 'log.jsonl', 'run.lock'))
            if c.init_from == 'scratch' and not c.eval_only and os.path.exists(r.log_path):
                os.remove(r.log_path)
            elif c.init_from == 'resume' and not c.eval_only:
                trim_log(r.log_path, c, r.iter_num)
    except BaseException:
        if lock:
            lock.release()
        raise
    return r


def hold_out_dir(out_dir):
    try:
        make_dir(out_dir, 'out_dir')
    except PrepareError as e:
        raise TrainError(str(e)) from None
    return OutDirLock(out_dir).acquire()       # one run per out_dir; released by train()


def same_setting(key, a, b):
    """Two values of a GPTConfig field that build the same model: equal, or two spellings of one
    composition (ega_fox, ega+fox, fox+ega)."""
    if key in ('attn', 'pos') and a != b:
        parts = components if key == 'attn' else pos_components
        return parts(a) == parts(b)
    return a == b


def build(c, p, data_dir, data, meta):
    """The Run's model, optimizer and audit: new, or as out_dir/ckpt.pt left them (setup holds the lock)."""
    gptconf, ckpt = model_config(c, meta['vocab_size']), None
    ckpt_path = os.path.join(c.out_dir, 'ckpt.pt')
    if c.init_from == 'resume':
        if not os.path.exists(ckpt_path):
            raise ConfigError(f"init_from=resume but {ckpt_path} does not exist")
        ckpt, saved = load_checkpoint(ckpt_path)
        if c.eval_only and gptconf.ega_norm != saved.ega_norm and 'ega_norm' in attn_options(saved.attn):
            # the same weights under other statistics (docs/variants.md §2): the published EGA evaluated
            # as it can run, causally, with prefix statistics; the audit below judges the form evaluated
            saved = replace(saved, ega_norm=gptconf.ega_norm)
        diff = [f"{k}={getattr(gptconf, k)!r} (checkpoint: {v!r})"
                for k, v in asdict(saved).items() if not same_setting(k, getattr(gptconf, k), v)]
        if diff:
            raise ConfigError(f"the config does not match the checkpoint: {', '.join(diff)}")
        if ckpt['iter_num'] > c.max_iters and not c.eval_only:
            raise ConfigError(f"{ckpt_path} is at iter {ckpt['iter_num']}, past max_iters={c.max_iters}: "
                              f"resume with --max_iters above {ckpt['iter_num']} to train on")
        was = ckpt.get('data', {}).get('sha256')
        if was and was != meta['sha256'] and not c.resume_other_data:
            raise ConfigError(f"{ckpt_path} was trained on other data than {data_dir} holds now (sha256 "
                              f"{was[:12]}, now {meta['sha256'][:12]}): point --data_dir at its data, or pass "
                              f"--resume_other_data=True to train on this")
        gptconf = saved
    torch.manual_seed(c.seed + p.rank)
    random.seed(c.seed + p.rank)
    np.random.seed(c.seed + p.rank)
    model = GPT(gptconf).set_impl(c.attn_impl).to(p.dev)   # on its device before the optimizer
    optimizer = model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2), p.device_type,
                                           decay_all=c.decay_all)
    scaler = torch.amp.GradScaler(p.device_type, enabled=(p.dtype == 'float16'))
    it, best = load_state(ckpt, ckpt_path, model, optimizer, scaler, p, c.eval_only) if ckpt else (0, math.inf)
    compiled = torch.compile(model, mode=c.compile_mode) if p.use_compile else model
    return Run(c=c, p=p, data_dir=data_dir, data=data, meta=meta, evals=eval_windows(data, c, EVAL_SEED),
               eval_set=eval_set(data, c, EVAL_SEED),
               gptconf=gptconf, model=model, train_model=wrap_ddp(p, compiled) if p.ddp else compiled,
               optimizer=optimizer, scaler=scaler, verdict=audit(gptconf, T=gptconf.block_size),  # its own window
               iter_num=it, best_val=best)

# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def estimate_losses(r):
    """Mean loss on the fixed windows of each split, or None when a signal cut it short."""
    n, t0, shown, done = r.c.eval_iters, time.time(), time.time(), 0
    out = {}
    r.model.eval()          # the model itself, eager: evals in eval mode would compile a second graph
    try:
        for name, (d, offs) in r.evals.items():
            losses = torch.zeros(n, device=r.p.dev)     # on the device: read once, not per batch
            for i in range(n):
                if r.stop.sig:
                    return None
                x, y = windows(d, offs[i], r.c.block_size, r.p.dev)
                with r.p.ctx:
                    _, loss = r.model(x, y)
                losses[i] = loss
                done += 1
                if time.time() - shown >= PROGRESS_S:   # at the paper scale on CPU an eval takes minutes
                    shown = time.time()
                    print(f"  eval: {done}/{n * len(r.evals)} batches in {fmt_time(shown - t0)}", flush=True)
            out[name] = losses.mean().item()
    finally:
        r.model.train()
    r.eval_s = time.time() - t0
    return out


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


def eval_row(r, losses, lr):
    """An eval's log row: the losses, the shuffled-val gap, what the model learned, what it attends to."""
    row = dict(kind='eval', iter=r.iter_num, train=losses['train'], val=losses['val'],
               shuffled_val=losses['shuffled'], gap=losses['shuffled'] - losses['val'], best_val=r.best_val,
               lr=lr, leaks=not r.verdict.causal, time=round(time.time() - r.t_start, 1), eval_set=r.eval_set,
               **learned(r.model))
    d, offs = r.evals['val']
    return dict(row, **attention_stats(r.model, windows(d, offs[0][:STAT_WINDOWS], r.c.block_size, r.p.dev)[0]))


def evaluate(r, lr):
    """Evaluate; log the result and save a checkpoint (eval_only: log it as such, save nothing)."""
    losses = estimate_losses(r)
    if losses is None:
        return
    if not all(math.isfinite(v) for v in losses.values()):
        raise TrainError(f"non-finite eval loss {losses} at iter {r.iter_num}; {checkpoint_left(r.ckpt_path)}")
    r.best_val = min(r.best_val, losses['val'])
    r.last = eval_row(r, losses, lr)
    print(f"eval iter {r.iter_num}: train {losses['train']:.4f} | val {losses['val']:.4f} | "
          f"shuffled val {losses['shuffled']:.4f} | gap {r.last['gap']:+.3f}{fmt_bands(r.last.get('bands'))}"
          f"{r.leak}", flush=True)
    if not r.c.eval_only:
        log(r, r.last)
        save(r, 'eval')
    else:       # an evaluation of the run's own checkpoint joins its log, apart from the training evals
        form = {'ega_norm': r.gptconf.ega_norm} if 'ega_norm' in attn_options(r.gptconf.attn) else {}
        log(r, dict(r.last, kind='eval_only', date=time.strftime('%Y-%m-%d %H:%M'), **form))

# ----------------------------------------------------------------------------- checkpoint and log


def save(r, reason):
    ck = {
        'model': r.model.state_dict(),
        'optimizer': r.optimizer.state_dict(),
        'param_names': optimizer_names(r.model, r.optimizer),   # the order of the optimizer's state
        'scaler': r.scaler.state_dict(),
        'model_args': asdict(r.gptconf),
        'iter_num': r.iter_num,
        'best_val_loss': r.best_val,
        'config': vars(r.c),
        'rng': rng_state(r.p.device_type),
        'audit': asdict(r.verdict),
        'data': {'data_dir': os.path.abspath(r.data_dir), 'tokenizer': r.meta.get('tokenizer', 'char'),
                 'vocab_size': r.meta['vocab_size'], 'sha256': r.meta['sha256'],
                 'tokens': [len(r.data['train']), len(r.data['val'])]},
    }
    try:
        save_atomic(ck, r.ckpt_path)        # whole or not at all: the last checkpoint stays loadable
    except OSError as e:
        raise not_written(r.ckpt_path, r.iter_num, e, r.ckpt_path) from None
    r.saved_iter = r.iter_num
    print(f"saved {r.ckpt_path} at iter {r.iter_num} ({reason})", flush=True)


def log(r, record):
    try:
        with open(r.log_path, 'a') as f:
            f.write(json.dumps(record) + '\n')     # a line cut short is skipped on reading and on resume
    except OSError as e:
        raise not_written(r.log_path, r.iter_num, e, r.ckpt_path) from None

# ----------------------------------------------------------------------------- the step


def step(r, lr):
    """One optimizer step over the micro-batches. The mean loss as a tensor on the device (read
    only at log steps: reading it is a device sync), or None when a signal cut it short."""
    c, gas = r.c, r.c.gradient_accumulation_steps
    for group in r.optimizer.param_groups:
        group['lr'] = lr
    if r.p.ddp:     # dropout's stream on each rank a function of (seed, rank, step): a resume is exact on every rank
        torch.manual_seed(c.seed + 7919 * r.p.rank + 1000003 * r.iter_num)
    # under DDP every rank must run every micro-step (the last one all-reduces), so ranks stop
    # only between steps, together; alone, a signal drops the half-accumulated step
    rewind = rng_state(r.p.device_type) if gas > 1 and not r.p.ddp else None
    loss_sum = torch.zeros((), device=r.p.dev)
    for micro in range(gas):
        if rewind and r.stop.sig:
            r.optimizer.zero_grad(set_to_none=True)
            set_rng_state(rewind, r.p.device_type)  # dropout's draws undone: a resume replays this step
            return None
        x, y = get_batch(r, micro)                              # (B, T) each
        if r.p.ddp:
            r.train_model.require_backward_grad_sync = micro == gas - 1
        loss_sum += forward_backward(r.train_model, x, y, r.p.ctx, r.scaler, gas)
    update(r.model, r.optimizer, r.scaler, c.grad_clip)
    return loss_sum


# the step's two halves, which bench.py times as they are: one training step in the repository


def forward_backward(model, x, y, ctx, scaler, gas=1):
    """A micro-step: the loss under ctx (autocast), divided by gas (the micro-steps of one step add
    their gradients), and its backward through the scaler (float16's loss scaling; a no-op otherwise).
    Returns that loss, detached."""
    with ctx:
        _, loss = model(x, y)
        loss = loss / gas
    scaler.scale(loss).backward()
    return loss.detach()


def update(model, optimizer, scaler, grad_clip):
    """The optimizer's step once the gradients are in: unscaled and clipped to a norm of grad_clip
    (0: not), AdamW, then the gradients set to None."""
    if grad_clip > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def report(r, lossf, lr, times):
    # ms/iter, tok/s and the ETA all come from the median of the last MEDIAN_OF steps:
    # robust to compile warm-up and hiccups, and the three agree
    recent = sorted(times[-MEDIAN_OF:])
    med = recent[len(recent) // 2]
    tok_s = r.tokens_per_iter / med
    # until an eval is timed: a batch's forward is ~1/3 of a micro-step's forward and backward
    eval_s = r.eval_s or len(r.evals) * r.c.eval_iters * med / (3 * r.c.gradient_accumulation_steps)
    print(f"iter {r.iter_num}: loss {lossf:.4f}{r.leak and ' [LEAKS]'} | lr {lr:.2e} | "
          f"{med * 1000:.1f} ms/iter, {tok_s:,.0f} tok/s (median of {len(recent)}) | "
          f"eta {fmt_time(eta(r.c, r.iter_num, med, eval_s))}", flush=True)
    log(r, dict(kind='train', iter=r.iter_num, loss=lossf, lr=lr, ms=med * 1000, tok_s=tok_s,
                leaks=not r.verdict.causal))

# ----------------------------------------------------------------------------- the loop


def loop(r):
    c, times, t_log, since = r.c, [], time.time(), 0
    while True:
        lr = get_lr(c, r.iter_num)
        if r.p.master and (due_eval(c, r.iter_num) or c.eval_only):
            evaluate(r, lr)
        if c.eval_only:
            break
        r.sig = stop_signal(r.stop.sig, r.p)
        if r.sig:
            if r.p.master:
                print(f"caught signal {r.sig}: stopping at iter {r.iter_num}", flush=True)
                if r.saved_iter != r.iter_num:     # else the eval just saved this very state
                    save(r, f"signal {r.sig}")
            break
        if r.iter_num >= c.max_iters:
            break
        if since == 0:
            t_log = time.time()     # evals and saves are not step time
        loss = step(r, lr)
        if loss is None:
            since = 0
            continue        # cut short by a signal: the next pass saves and stops
        r.iter_num += 1
        since += 1
        if r.iter_num % c.log_interval == 0:
            # every rank reads its loss here, and only here: the one sync of the device per log line.
            # The steps since the last line share its time (on a GPU a step's own time is not
            # known without a sync).
            lossf = loss.item()
            times += [(time.time() - t_log) / since] * since
            since = 0
            if not math.isfinite(lossf):
                raise TrainError(f"non-finite training loss ({lossf}) at iter {r.iter_num - 1}; stopped: "
                                 f"{checkpoint_left(r.ckpt_path)}")
            if r.p.master:
                report(r, lossf, lr, times)
        elif due_eval(c, r.iter_num) or r.iter_num >= c.max_iters:
            since = 0       # an eval comes next: the steps since the last line go untimed


def train(cfg, files=()):
    """Run training with a checked config dict (files: the config files, for messages).
    Returns a summary dict."""
    r = setup(cfg)
    old_handlers = {s: signal.signal(s, r.stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if r.p.master:
            print_header(r, files, git_commit())    # the log opens with the code, device and versions
        r.t_start = time.time()
        loop(r)
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if r.lock:
            r.lock.release()
    if r.p.ddp:     # all ranks done before any tears down gloo: an early exit can abort a peer
        torch.distributed.barrier()
    if r.p.master and not r.sig:
        print(f"done: best val {r.best_val:.4f} after {r.iter_num} iters; "
              f"audit {r.verdict.verdict}{r.leak}", flush=True)
    return dict(best_val=r.best_val, iter=r.iter_num, audit=r.verdict, last_eval=r.last, signal=r.sig,
                model=r.model)


def main(argv):
    """The command line: --help, or train (the errors a one-line message and an exit code)."""
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS, CHOICES))
        return 0
    return run_cli(train, argv, DEFAULTS, CHOICES)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
