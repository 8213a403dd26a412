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

The file reads top to bottom as nanoGPT's: the config; the batch, the micro-step and the
update; setup (processes, device and autocast, data, the model, compile, DDP); the
evaluation and the checkpoint; the loop. What keeps a run safe (config checks, data
checks, atomic checkpoints, exact resume, signals, one run per out_dir) is called from
here by name and lives in runtime.py.
"""

import inspect
import json
import math
import os
import random
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, fields
from types import SimpleNamespace

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from causality import attention_stats, audit, learned
from configurator import ConfigError, describe
from model import CHOICES as MODEL_CHOICES, GPT, GPTConfig, IMPLS, attn_options, pos_options
from prepare import remove_stale_temps
# what keeps a run safe (checks, data, atomic checkpoints, exact resume, signals, the lock)
from runtime import (COMPILE_MODES, OutDirLock, Stop, TrainError, checkpoint_left, ddp_env, due_eval, eval_repeats,
                     git_commit, load_data, load_resume, load_state, model_config, not_written, optimizer_names,
                     resolve_device, rng_state, run_cli, save_atomic, scale_note, stop_signal, trim_log, versions)

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


# DDP syncs no buffer in forward: ours are fixed tables, the same on every rank (torch 2.13 renamed the option)
DDP_NO_SYNC = ({'forward_sync_buffers': False} if 'forward_sync_buffers' in inspect.signature(DDP).parameters
               else {'broadcast_buffers': False})


def autocast(device_type, dtype):
    """(the dtype's name, the forward's context): train.py's, bench.py's and sample.py's. dtype=auto is bfloat16
    autocast on CUDA (float16 where the GPU lacks bf16) and float32 elsewhere; float16 needs CUDA."""
    if dtype == 'auto':
        dtype = ('bfloat16' if torch.cuda.is_bf16_supported() else 'float16') if device_type == 'cuda' else 'float32'
    if dtype == 'float16' and device_type != 'cuda':
        raise ConfigError("dtype=float16 needs CUDA; use float32 (or bfloat16) here")
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
    return dtype, nullcontext() if dtype == 'float32' else torch.autocast(device_type=device_type, dtype=ptdtype)


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


def get_batch(r, it, micro):
    """The training batch of micro-step `micro` of step `it`: B windows at offsets drawn from a seed of (seed,
    rank, it, micro) alone, so that a resumed run reads the batches the uninterrupted one would have."""
    T, B = r.c.block_size, r.c.batch_size
    seed = ((r.c.seed * 1000003 + r.rank) * 1000003 + it) * 1000003 + micro
    g = torch.Generator().manual_seed(seed % (2 ** 63))
    offs = torch.randint(len(r.data['train']) - T, (B,), generator=g)   # (B,)
    return windows(r.data['train'], offs, T, r.device)


def windows(data, offsets, T, device):
    """Token windows at the given offsets: x, y of shape (len(offsets), T)."""
    ix = offsets[:, None].numpy() + np.arange(T + 1)            # (B, T+1)
    xy = torch.from_numpy(np.asarray(data[ix], dtype=np.int64))  # (B, T+1)
    x, y = xy[:, :-1].contiguous(), xy[:, 1:].contiguous()
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def eval_windows(data, c, seed):
    """Fixed evaluation windows, the same for every run and variant: {split: (tokens, offsets (eval_iters, B))};
    the shuffled copy of val destroys all order (docs/variants.md §5)."""
    T, B = c.block_size, c.batch_size
    g = torch.Generator().manual_seed(seed)
    val_shuffled = np.asarray(data['val'])[torch.randperm(len(data['val']), generator=g).numpy()]
    evals = {'train': (data['train'], torch.randint(len(data['train']) - T, (c.eval_iters, B), generator=g)),
             'val': (data['val'], torch.randint(len(data['val']) - T, (c.eval_iters, B), generator=g))}
    evals['shuffled'] = (val_shuffled, evals['val'][1])
    return evals


def eval_set(data, c, seed):
    """The evaluation set eval_windows draws, named by everything it depends on: two runs are compared only
    where these are equal (the val offsets follow the train ones from one generator, so another eval_iters
    moves every val window, not only their number)."""
    return (f"{c.eval_iters} x {c.batch_size} windows of {c.block_size} tokens, seed {seed}, "
            f"splits {len(data['train'])}/{len(data['val'])}")


# a step's two halves, which the loop below, bench.py and the lab call as they are: one training step


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

# ----------------------------------------------------------------------------- setup


def setup(cfg):
    """What the loop starts from, as one namespace that nothing changes after: the processes, the
    device and its autocast, the data, rank 0's hold on out_dir, the model (new, or as out_dir/ckpt.pt
    left it), its optimizer, compiled and under DDP, the audit and the eval windows."""
    c = SimpleNamespace(**cfg)
    # processes: one, or one per device under torchrun (DDP)
    launch = ddp_env()                      # (rank, world, local rank), or None without torchrun
    ddp = launch is not None
    rank, world, local_rank = launch or (0, 1, 0)
    master = rank == 0                      # rank 0 alone evaluates, logs and saves
    device = resolve_device(c.device)
    if c.threads:
        torch.set_num_threads(c.threads)
    if ddp:
        if device.startswith('cuda'):
            device = f'cuda:{local_rank}'
            torch.cuda.set_device(device)
        torch.distributed.init_process_group(backend='nccl' if device.startswith('cuda') else 'gloo')
    device_type = device.split(':')[0]
    if device_type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True    # TF32 for float32 matmuls and convolutions
        torch.backends.cudnn.allow_tf32 = True
    dtype, ctx = autocast(device_type, c.dtype)         # bf16 autocast on CUDA; float32 elsewhere
    use_compile = device_type == 'cuda' if c.compile == 'auto' else c.compile
    if c.compile_mode != 'default' and not use_compile:
        raise ConfigError(f"compile_mode={c.compile_mode} is torch.compile's: it needs compile on "
                          f"(here compile={c.compile} on {device_type})")
    # the data, checked before out_dir is made
    data_dir, data, meta = load_data(c)
    repeats = eval_repeats(data, c)
    if repeats and master:
        print(repeats, file=sys.stderr)
    # the lock before anything of out_dir is read: a resume, an overwrite or an eval started while
    # another run lives there is refused, rather than reading a checkpoint that run is about to replace
    lock = OutDirLock(c.out_dir).acquire() if master else None
    try:
        gptconf, ckpt = model_config(c, meta['vocab_size']), None
        ckpt_path = os.path.join(c.out_dir, 'ckpt.pt')
        if c.init_from == 'resume':     # the checkpoint, where it fits this config and this data
            ckpt, gptconf = load_resume(ckpt_path, c, gptconf, meta, data_dir)
        torch.manual_seed(c.seed + rank)
        random.seed(c.seed + rank)
        np.random.seed(c.seed + rank)
        model = GPT(gptconf).set_impl(c.attn_impl).to(device)   # on its device before the optimizer
        optimizer = model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2), device_type,
                                               decay_all=c.decay_all)
        scaler = torch.amp.GradScaler(device_type, enabled=(dtype == 'float16'))
        it, best = load_state(ckpt, ckpt_path, model, optimizer, scaler, ddp, device_type, c.eval_only) \
            if ckpt else (0, math.inf)
        train_model = torch.compile(model, mode=c.compile_mode) if use_compile else model
        if ddp:
            train_model = DDP(train_model, device_ids=[local_rank] if device_type == 'cuda' else None, **DDP_NO_SYNC)
        if master:
            remove_stale_temps(c.out_dir, ('ckpt.pt', 'log.jsonl', 'run.lock'))
            log_path = os.path.join(c.out_dir, 'log.jsonl')
            if c.init_from == 'scratch' and not c.eval_only and os.path.exists(log_path):
                os.remove(log_path)
            elif c.init_from == 'resume' and not c.eval_only:
                trim_log(log_path, c, it)
    except BaseException:
        if lock:
            lock.release()
        raise
    return SimpleNamespace(
        c=c, ddp=ddp, rank=rank, world=world, master=master, device=device, device_type=device_type, dtype=dtype,
        ctx=ctx, use_compile=use_compile, data_dir=data_dir, data=data, meta=meta, lock=lock, stop=Stop(),
        gptconf=gptconf, model=model, train_model=train_model, optimizer=optimizer, scaler=scaler,
        verdict=audit(gptconf, T=gptconf.block_size),   # the start-up causality audit, at its own window
        evals=eval_windows(data, c, EVAL_SEED), eval_set=eval_set(data, c, EVAL_SEED), iter_num=it, best_val=best,
        tokens_per_iter=world * c.gradient_accumulation_steps * c.batch_size * c.block_size)


def print_header(r, files=()):
    """The log's first lines: the code and versions (a replay's ground), the model, the audit, the
    evaluation set (what the tables compare runs on: lab/logs.py alike) and the device."""
    g = r.gptconf
    opts = ''.join(f" {o}={getattr(g, o)}" for o in attn_options(g.attn) + pos_options(g.pos))
    print(f"code {git_commit()}, {versions()}")
    print(f"model: {r.model.num_params() / 1e6:.2f}M parameters, attn={g.attn} pos={g.pos}{opts}")
    print(f"audit: {r.verdict}")
    print(f"eval set: {r.eval_set}")
    # the CPU's vector kernels ('AVX2', ...): float32 sums differ between them, so a replay reads them here
    kernels = f" ({torch.backends.cpu.get_cpu_capability()} kernels)" if r.device_type == 'cpu' else ''
    mode = f" ({r.c.compile_mode})" if r.use_compile and r.c.compile_mode != 'default' else ''
    print(f"device {r.device}{kernels}, {r.dtype}, compile {r.use_compile}{mode}, {r.world} process(es) of "
          f"{torch.get_num_threads()} thread(s), {r.tokens_per_iter:,} tokens/iter, start at iter {r.iter_num}",
          flush=True)
    note = scale_note(r.model.num_params(), r.tokens_per_iter, files) if r.device_type == 'cpu' else ''
    if note:
        print(note, flush=True)

# ----------------------------------------------------------------------------- evaluation, checkpoint, log


@torch.no_grad()
def estimate_losses(r):
    """Mean loss on the fixed windows of each split, or None when a signal cut it short."""
    n, t0, shown, done = r.c.eval_iters, time.time(), time.time(), 0
    out = {}
    r.model.eval()          # the model itself, eager: evals in eval mode would compile a second graph
    try:
        for name, (d, offs) in r.evals.items():
            losses = torch.zeros(n, device=r.device)    # on the device: read once, not per batch
            for i in range(n):
                if r.stop.sig:
                    return None
                x, y = windows(d, offs[i], r.c.block_size, r.device)
                with r.ctx:
                    _, loss = r.model(x, y)
                losses[i] = loss
                done += 1
                if time.time() - shown >= PROGRESS_S:   # at the paper scale on CPU an eval takes minutes
                    shown = time.time()
                    print(f"  eval: {done}/{n * len(r.evals)} batches in {fmt_time(shown - t0)}", flush=True)
            out[name] = losses.mean().item()
    finally:
        r.model.train()
    return out


def eval_row(r, it, losses, best_val, lr, elapsed):
    """An eval's log row: the losses, the shuffled-val gap, what the model learned and what it attends
    to (causality.py's diagnostics, which the studies read)."""
    d, offs = r.evals['val']
    x, _ = windows(d, offs[0][:STAT_WINDOWS], r.c.block_size, r.device)
    return dict(kind='eval', iter=it, train=losses['train'], val=losses['val'], shuffled_val=losses['shuffled'],
                gap=losses['shuffled'] - losses['val'], best_val=best_val, lr=lr, leaks=not r.verdict.causal,
                time=round(elapsed, 1), eval_set=r.eval_set, **learned(r.model), **attention_stats(r.model, x))


def fmt_bands(bands):
    """' | periods 0.0=32.0 0.1=50.0/26.0/10.0/5.0 ...' for the eval line ('' without bands)."""
    if not bands:
        return ''
    return ' | periods ' + ' '.join(f"{k}={'/'.join(f'{x:.1f}' for x in v) if isinstance(v, list) else f'{v:.1f}'}"
                                    for k, v in bands.items())


def save(r, it, best_val, reason):
    ck = {
        'model': r.model.state_dict(),
        'optimizer': r.optimizer.state_dict(),
        'param_names': optimizer_names(r.model, r.optimizer),   # the order of the optimizer's state
        'scaler': r.scaler.state_dict(),
        'model_args': asdict(r.gptconf),
        'iter_num': it,
        'best_val_loss': best_val,
        'config': vars(r.c),
        'rng': rng_state(r.device_type),
        'audit': asdict(r.verdict),
        'data': {'data_dir': os.path.abspath(r.data_dir), 'tokenizer': r.meta.get('tokenizer', 'char'),
                 'vocab_size': r.meta['vocab_size'], 'sha256': r.meta['sha256'], 'meta_sha256': r.meta['meta_sha256'],
                 'tokens': [len(r.data['train']), len(r.data['val'])]},
    }
    path = os.path.join(r.c.out_dir, 'ckpt.pt')
    try:
        save_atomic(ck, path)               # whole or not at all: the last checkpoint stays loadable
    except OSError as e:
        raise not_written(path, it, e, path) from None
    print(f"saved {path} at iter {it} ({reason})", flush=True)


def log(r, it, record):
    path = os.path.join(r.c.out_dir, 'log.jsonl')
    try:
        with open(path, 'a') as f:
            f.write(json.dumps(record) + '\n')     # a line cut short is skipped on reading and on resume
    except OSError as e:
        raise not_written(path, it, e, os.path.join(r.c.out_dir, 'ckpt.pt')) from None

# ----------------------------------------------------------------------------- the loop


def eta(c, it, step_s, eval_s):
    """Seconds to the end: the steps left, and the evals left (the final one at max_iters included)."""
    evals = 0 if it >= c.max_iters else \
        c.max_iters // c.eval_interval - it // c.eval_interval + (c.max_iters % c.eval_interval != 0)
    return step_s * max(0, c.max_iters - it) + eval_s * evals


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def train(cfg, files=()):
    """Run training with a checked config dict (files: the config files, for messages).
    Returns a summary dict."""
    r = setup(cfg)
    c, model, optimizer, scaler = r.c, r.model, r.optimizer, r.scaler
    gas = c.gradient_accumulation_steps
    it, best_val, last, saved_iter, sig = r.iter_num, r.best_val, None, None, 0
    leak = '' if r.verdict.causal else LEAK_MARK
    ckpt_path = os.path.join(c.out_dir, 'ckpt.pt')
    old_handlers = {s: signal.signal(s, r.stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if r.master:
            print_header(r, files)      # the log opens with the code, device and versions
        t_start = t_log = time.time()
        times, since, eval_s = [], 0, 0.0   # step times; steps since the last log line; an eval's seconds
        while True:
            lr = get_lr(c, it)
            # evaluate on the fixed windows; log; checkpoint (eval_only: log it as such, save nothing)
            if r.master and (due_eval(c, it) or c.eval_only):
                t0 = time.time()
                losses = estimate_losses(r)
                if losses is not None:      # else a signal cut it short: the run stops below
                    eval_s = time.time() - t0
                    if not all(math.isfinite(v) for v in losses.values()):
                        raise TrainError(f"non-finite eval loss {losses} at iter {it}; {checkpoint_left(ckpt_path)}")
                    best_val = min(best_val, losses['val'])
                    last = eval_row(r, it, losses, best_val, lr, time.time() - t_start)
                    print(f"eval iter {it}: train {losses['train']:.4f} | val {losses['val']:.4f} | "
                          f"shuffled val {losses['shuffled']:.4f} | gap {last['gap']:+.3f}"
                          f"{fmt_bands(last.get('bands'))}{leak}", flush=True)
                    if not c.eval_only:
                        log(r, it, last)
                        save(r, it, best_val, 'eval')
                        saved_iter = it
                    else:   # an evaluation of the run's own checkpoint joins its log, apart from its evals
                        form = {'ega_norm': r.gptconf.ega_norm} if 'ega_norm' in attn_options(r.gptconf.attn) else {}
                        log(r, it, dict(last, kind='eval_only', date=time.strftime('%Y-%m-%d %H:%M'), **form))
            if c.eval_only:
                break
            # SIGINT / SIGTERM: every rank stops at this step, and rank 0 saves once
            sig = stop_signal(r.stop.sig, r.ddp, r.device)
            if sig:
                if r.master:
                    print(f"caught signal {sig}: stopping at iter {it}", flush=True)
                    if saved_iter != it:     # else the eval just saved this very state
                        save(r, it, best_val, f"signal {sig}")
                break
            if it >= c.max_iters:
                break
            if since == 0:
                t_log = time.time()     # evals and saves are not step time
            # the step: gas micro-steps add their gradients, then one update
            for group in optimizer.param_groups:
                group['lr'] = lr
            if r.ddp:   # dropout's stream on each rank a function of (seed, rank, step): a resume is exact on each
                torch.manual_seed(c.seed + 7919 * r.rank + 1000003 * it)
            loss = torch.zeros((), device=r.device)
            for micro in range(gas):
                x, y = get_batch(r, it, micro)                      # (B, T) each
                if r.ddp:   # the gradients all-reduce once, at the last micro-step
                    r.train_model.require_backward_grad_sync = micro == gas - 1
                loss += forward_backward(r.train_model, x, y, r.ctx, scaler, gas)
            update(model, optimizer, scaler, c.grad_clip)
            it += 1
            since += 1
            if it % c.log_interval == 0:
                # every rank reads its loss here, and only here: the one sync of the device per log line.
                # The steps since the last line share its time (on a GPU a step's own time is not known
                # without a sync)
                lossf = loss.item()
                times += [(time.time() - t_log) / since] * since
                since = 0
                if not math.isfinite(lossf):
                    raise TrainError(f"non-finite training loss ({lossf}) at iter {it - 1}; stopped: "
                                     f"{checkpoint_left(ckpt_path)}")
                if r.master:
                    # ms/iter, tok/s and the ETA all come from the median of the last MEDIAN_OF steps:
                    # robust to compile warm-up and hiccups, and the three agree
                    recent = sorted(times[-MEDIAN_OF:])
                    med = recent[len(recent) // 2]
                    tok_s = r.tokens_per_iter / med
                    # until an eval is timed: a batch's forward is ~1/3 of a micro-step's forward and backward
                    ev = eval_s or len(r.evals) * c.eval_iters * med / (3 * gas)
                    print(f"iter {it}: loss {lossf:.4f}{leak and ' [LEAKS]'} | lr {lr:.2e} | "
                          f"{med * 1000:.1f} ms/iter, {tok_s:,.0f} tok/s (median of {len(recent)}) | "
                          f"eta {fmt_time(eta(c, it, med, ev))}", flush=True)
                    log(r, it, dict(kind='train', iter=it, loss=lossf, lr=lr, ms=med * 1000, tok_s=tok_s,
                                    leaks=not r.verdict.causal))
            elif due_eval(c, it) or it >= c.max_iters:
                since = 0       # an eval comes next: the steps since the last line go untimed
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if r.lock:
            r.lock.release()
    if r.ddp:     # all ranks done before any tears down gloo: an early exit can abort a peer
        torch.distributed.barrier()
    if r.master and not sig:
        print(f"done: best val {best_val:.4f} after {it} iters; audit {r.verdict.verdict}{leak}", flush=True)
    return dict(best_val=best_val, iter=it, audit=r.verdict, last_eval=last, signal=sig, model=model)


def main(argv):
    """The command line: --help, or train (the errors a one-line message and an exit code)."""
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS, CHOICES))
        return 0
    return run_cli(train, argv, DEFAULTS, CHOICES)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
