"""
Train a GPT with any attention variant of model.py.

    python train.py config/ega_mope.py                  # paper scale (GPU)
    python train.py config/ega_mope.py config/cpu.py    # the CPU study scale
    python train.py config/cpu.py --attn=ega --max_iters=500
    torchrun --standalone --nproc_per_node=4 train.py config/ega_mope.py
    python train.py --help                              # every key, default and choice

Every eval reports val loss on fixed windows, the loss on globally shuffled val
text and the gap between them; the start-up causality audit decides whether the
model can see the future, and a leaking model's losses carry a LEAKS mark.
"""

import io
import json
import math
import os
import pickle
import random
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, fields
from types import SimpleNamespace

import numpy as np
import torch

from configurator import ConfigError, describe, load_config
from model import ATTN, EGA_NORM, MOPE_INIT, POS, GPT, GPTConfig, audit
from prepare import write_atomic

# -----------------------------------------------------------------------------
# default config values: the paper scale of SPEC section 0 with plain dot attention
# I/O
out_dir = 'out'
data_dir = 'data/shakespeare_char'  # train.bin, val.bin, meta.pkl written by prepare.py
eval_interval = 250
log_interval = 10
eval_iters = 50                     # fixed validation batches per eval (the papers used 50)
eval_only = False                   # evaluate once and exit
init_from = 'scratch'               # 'scratch' or 'resume' (from out_dir/ckpt.pt)
seed = 1337
# data
batch_size = 64                     # per process and micro-step
gradient_accumulation_steps = 1     # in total, split over DDP processes
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
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0                     # 0 disables
# learning rate: linear warmup, then cosine to min_lr at lr_decay_iters
decay_lr = True
warmup_iters = 200
lr_decay_iters = 5000
min_lr = 3e-5
# system
device = 'auto'                     # auto (cuda, mps, cpu), cpu, cuda, cuda:N, mps
dtype = 'auto'                      # auto: bfloat16 on CUDA where supported, else float16; float32 off CUDA
compile = 'auto'                    # auto: on for CUDA, off elsewhere; True / False
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
DEFAULTS.update({f.name: f.default for f in fields(GPTConfig)
                 if f.name not in DEFAULTS and f.name != 'vocab_size'})  # vocab comes from meta.pkl
CHOICES = {'attn': ATTN, 'pos': POS, 'ega_norm': EGA_NORM, 'mope_init': MOPE_INIT,
           'init_from': ('scratch', 'resume'), 'dtype': ('auto', 'float32', 'bfloat16', 'float16'),
           'compile': ('auto', True, False)}
EVAL_SEED = 20240101                # the validation windows: the same for every run and variant
LEAK_MARK = ' [LEAKS: sees future tokens, not a language-modelling result]'


class TrainError(Exception):
    pass


def model_config(c, vocab_size=GPTConfig.vocab_size):
    try:
        return GPTConfig(vocab_size=vocab_size, **{f.name: getattr(c, f.name)
                                                   for f in fields(GPTConfig) if f.name != 'vocab_size'})
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_config(c):
    """Errors that would otherwise surface deep in a run."""
    model_config(c)
    for k in ('batch_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval', 'eval_iters'):
        if getattr(c, k) < 1:
            raise ConfigError(f"{k} must be >= 1, got {getattr(c, k)}")
    if c.max_iters < 0:
        raise ConfigError(f"max_iters must be >= 0, got {c.max_iters}")
    if c.learning_rate <= 0 or c.min_lr < 0:
        raise ConfigError("learning_rate must be > 0 and min_lr >= 0")
    if c.decay_lr and c.lr_decay_iters <= c.warmup_iters:
        raise ConfigError(f"lr_decay_iters ({c.lr_decay_iters}) must exceed warmup_iters ({c.warmup_iters})")
    dev = c.device
    if not (dev in ('auto', 'cpu', 'cuda', 'mps') or (dev.startswith('cuda:') and dev[5:].isdigit())):
        raise ConfigError(f"device={dev!r} is not one of: auto, cpu, cuda, cuda:N, mps")


def resolve_device(dev):
    if dev == 'auto':
        mps = getattr(torch.backends, 'mps', None)
        dev = 'cuda' if torch.cuda.is_available() else 'mps' if mps and mps.is_available() else 'cpu'
    if dev.startswith('cuda') and not torch.cuda.is_available():
        raise ConfigError(f"device={dev} but CUDA is not available")
    return dev


def autocast(device_type, dtype):
    """The dtype name and the autocast context: fp32 off CUDA unless asked otherwise."""
    if dtype == 'auto':
        dtype = ('bfloat16' if torch.cuda.is_bf16_supported() else 'float16') if device_type == 'cuda' else 'float32'
    if dtype == 'float16' and device_type != 'cuda':
        raise ConfigError("dtype=float16 needs CUDA; use float32 (or bfloat16) here")
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
    return dtype, nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type, dtype=ptdtype)


def get_lr(c, it):
    if not c.decay_lr:
        return c.learning_rate
    if it < c.warmup_iters:
        return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
    if it > c.lr_decay_iters:
        return c.min_lr
    ratio = (it - c.warmup_iters) / (c.lr_decay_iters - c.warmup_iters)
    return c.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c.learning_rate - c.min_lr)


def load_data(c):
    paths = {s: os.path.join(c.data_dir, f'{s}.bin') for s in ('train', 'val')}
    meta_path = os.path.join(c.data_dir, 'meta.pkl')
    for p in (*paths.values(), meta_path):
        if not os.path.exists(p):
            raise ConfigError(f"{p} not found: run `python prepare.py` (or set data_dir)")
    with open(meta_path, 'rb') as f:
        meta = pickle.load(f)
    data = {s: np.memmap(p, dtype=np.uint16, mode='r') for s, p in paths.items()}
    for s, d in data.items():
        if len(d) <= c.block_size:
            raise ConfigError(f"{paths[s]} has {len(d)} tokens, too few for block_size={c.block_size}")
    return data, meta


def windows(data, offsets, T, device):
    """Token windows at the given offsets: x, y of shape (len(offsets), T)."""
    ix = offsets[:, None].numpy() + np.arange(T + 1)            # (B, T+1)
    xy = torch.from_numpy(np.asarray(data[ix], dtype=np.int64))  # (B, T+1)
    x, y = xy[:, :-1].contiguous(), xy[:, 1:].contiguous()
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def batch_offsets(n, T, B, seed):
    g = torch.Generator().manual_seed(seed % (2 ** 63))
    return torch.randint(n - T, (B,), generator=g)


def save_atomic(obj, path):
    buf = io.BytesIO()
    torch.save(obj, buf)
    write_atomic({path: buf.getvalue()})    # a crash mid-write never leaves half a checkpoint


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def train(cfg):
    """Run training with a checked config dict. Returns a summary dict."""
    c = SimpleNamespace(**cfg)
    # processes and device
    ddp = int(os.environ.get('RANK', -1)) != -1
    rank, world = (int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])) if ddp else (0, 1)
    master = rank == 0
    dev = resolve_device(c.device)
    if ddp:
        if dev.startswith('cuda'):
            dev = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(dev)
        torch.distributed.init_process_group(backend='nccl' if dev.startswith('cuda') else 'gloo')
    device_type = dev.split(':')[0]
    if c.gradient_accumulation_steps % world:
        raise ConfigError(f"gradient_accumulation_steps={c.gradient_accumulation_steps} "
                          f"is not divisible by the {world} DDP processes")
    gas = c.gradient_accumulation_steps // world
    dtype, ctx = autocast(device_type, c.dtype)
    use_compile = device_type == 'cuda' if c.compile == 'auto' else c.compile
    if device_type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    data, meta = load_data(c)
    ckpt_path = os.path.join(c.out_dir, 'ckpt.pt')
    log_path = os.path.join(c.out_dir, 'log.jsonl')
    ckpt = None
    if c.init_from == 'resume':
        if not os.path.exists(ckpt_path):
            raise ConfigError(f"init_from=resume but {ckpt_path} does not exist")
        ckpt = torch.load(ckpt_path, map_location='cpu', weights_only=False)
        gptconf = GPTConfig(**ckpt['model_args'])
        mine = model_config(c, meta['vocab_size'])
        diff = [f"{k}={getattr(mine, k)!r} (checkpoint: {v!r})" for k, v in ckpt['model_args'].items()
                if getattr(mine, k) != v]
        if diff:
            raise ConfigError(f"the config does not match the checkpoint: {', '.join(diff)}")
    else:
        gptconf = model_config(c, meta['vocab_size'])

    torch.manual_seed(c.seed + rank)
    random.seed(c.seed + rank)
    np.random.seed(c.seed + rank)
    model = GPT(gptconf).to(dev)   # on its device before the optimizer, whose state follows it
    verdict = audit(gptconf)
    leak = '' if verdict.causal else LEAK_MARK
    optimizer = model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2), device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=(dtype == 'float16'))
    iter_num, best_val = 0, float('inf')
    if ckpt is not None:
        model.load_state_dict({k.removeprefix('_orig_mod.'): v for k, v in ckpt['model'].items()})
        optimizer.load_state_dict(ckpt['optimizer'])
        scaler.load_state_dict(ckpt['scaler'])
        iter_num, best_val = ckpt['iter_num'], ckpt['best_val_loss']
        if rank == 0:   # the saved generators are rank 0's; other ranks get a fresh, distinct stream
            random.setstate(ckpt['rng']['python'])
            np.random.set_state(ckpt['rng']['numpy'])
            torch.set_rng_state(ckpt['rng']['torch'])
            if device_type == 'cuda' and ckpt['rng']['cuda'] is not None:
                torch.cuda.set_rng_state_all(ckpt['rng']['cuda'])
        else:
            torch.manual_seed(c.seed + rank + 1000003 * iter_num)
        ckpt = None     # free the memory
    raw_model = model
    if use_compile:
        model = torch.compile(model)
    train_model = model
    if ddp:
        # buffers are fixed tables, identical on every rank: nothing to broadcast
        train_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[int(os.environ['LOCAL_RANK'])] if device_type == 'cuda' else None,
            broadcast_buffers=False)

    T, B = c.block_size, c.batch_size
    tokens_per_iter = gas * world * B * T
    # fixed evaluation windows; the shuffled copy of val destroys all order (SPEC section 5)
    g = torch.Generator().manual_seed(EVAL_SEED)
    val_shuffled = np.asarray(data['val'])[torch.randperm(len(data['val']), generator=g).numpy()]
    evals = {'train': (data['train'], torch.randint(len(data['train']) - T, (c.eval_iters, B), generator=g)),
             'val': (data['val'], torch.randint(len(data['val']) - T, (c.eval_iters, B), generator=g))}
    evals['shuffled'] = (val_shuffled, evals['val'][1])

    @torch.no_grad()
    def estimate_losses():
        model.eval()
        out = {}
        for name, (d, offs) in evals.items():
            losses = torch.zeros(c.eval_iters)
            for i in range(c.eval_iters):
                x, y = windows(d, offs[i], T, dev)
                with ctx:
                    _, loss = model(x, y)
                losses[i] = loss.item()
            out[name] = losses.mean().item()
        model.train()
        return out

    def save(reason):
        ck = {
            'model': raw_model.state_dict(),
            'optimizer': optimizer.state_dict(),
            'scaler': scaler.state_dict(),
            'model_args': asdict(gptconf),
            'iter_num': iter_num,
            'best_val_loss': best_val,
            'config': dict(cfg),
            'rng': {'python': random.getstate(), 'numpy': np.random.get_state(),
                    'torch': torch.get_rng_state(),
                    'cuda': torch.cuda.get_rng_state_all() if device_type == 'cuda' else None},
            'audit': asdict(verdict),
            'data': {'data_dir': os.path.abspath(c.data_dir), 'tokenizer': meta.get('tokenizer', 'char'),
                     'vocab_size': meta['vocab_size']},
        }
        save_atomic(ck, ckpt_path)
        print(f"saved {ckpt_path} at iter {iter_num} ({reason})", flush=True)

    def log(record):
        with open(log_path, 'a') as f:
            f.write(json.dumps(record) + '\n')

    if master:
        os.makedirs(c.out_dir, exist_ok=True)
        if c.init_from == 'scratch' and os.path.exists(log_path):
            os.remove(log_path)
        print(f"model: {raw_model.num_params() / 1e6:.2f}M parameters, attn={gptconf.attn} "
              f"pos={gptconf.pos}" + (f" ega_norm={gptconf.ega_norm}" if gptconf.attn == 'ega' else ''))
        print(f"audit: {verdict}")
        print(f"device {dev}, {dtype}, compile {use_compile}, {world} process(es), "
              f"{tokens_per_iter:,} tokens/iter, start at iter {iter_num}", flush=True)

    stop = {'sig': 0}

    def on_signal(signum, frame):
        if stop['sig']:
            raise KeyboardInterrupt     # a second signal: leave now
        stop['sig'] = signum
        print(f"\ncaught signal {signum}: saving a checkpoint at the end of this step", flush=True)

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    times, t_start, last, sig = [], time.time(), None, 0
    try:
        while True:
            lr = get_lr(c, iter_num)
            for group in optimizer.param_groups:
                group['lr'] = lr
            if master and (iter_num % c.eval_interval == 0 or iter_num == c.max_iters or c.eval_only):
                losses = estimate_losses()
                if not all(math.isfinite(v) for v in losses.values()):
                    raise TrainError(f"non-finite eval loss {losses} at iter {iter_num}; "
                                     f"the last good checkpoint {ckpt_path} is left as it was")
                gap = losses['shuffled'] - losses['val']
                best_val = min(best_val, losses['val'])
                last = dict(kind='eval', iter=iter_num, train=losses['train'], val=losses['val'],
                            shuffled_val=losses['shuffled'], gap=gap, best_val=best_val, lr=lr,
                            leaks=not verdict.causal, time=round(time.time() - t_start, 1))
                print(f"eval iter {iter_num}: train {losses['train']:.4f} | val {losses['val']:.4f} | "
                      f"shuffled val {losses['shuffled']:.4f} | gap {gap:+.3f}{leak}", flush=True)
                if not c.eval_only:
                    log(last)
                    save('eval')
            if iter_num >= c.max_iters or c.eval_only:
                break
            sig = stop['sig']
            if ddp:     # every rank stops at the same step
                flag = torch.tensor([sig], device=dev)
                torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
                sig = int(flag.item())
            if sig:
                if master:
                    save(f"signal {sig}")
                break

            t0 = time.time()
            loss_sum = torch.zeros((), device=dev)
            for micro in range(gas):
                # each batch is a pure function of (seed, rank, iter, micro): resuming replays the stream
                offs = batch_offsets(len(data['train']), T, B,
                                     ((c.seed * 1000003 + rank) * 1000003 + iter_num) * 1000003 + micro)
                x, y = windows(data['train'], offs, T, dev)
                if ddp:
                    train_model.require_backward_grad_sync = micro == gas - 1
                with ctx:
                    _, loss = train_model(x, y)
                    loss = loss / gas
                scaler.scale(loss).backward()
                loss_sum += loss.detach()
            if c.grad_clip > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), c.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            lossf = loss_sum.item()
            if not math.isfinite(lossf):
                raise TrainError(f"non-finite training loss ({lossf}) at iter {iter_num}; stopped. "
                                 f"The last good checkpoint {ckpt_path} is left as it was")
            iter_num += 1
            dt = time.time() - t0
            times.append(dt)
            if master and iter_num % c.log_interval == 0:
                recent = sorted(times[-50:])[len(times[-50:]) // 2]     # median: robust to eval pauses
                eta = recent * (c.max_iters - iter_num)
                print(f"iter {iter_num}: loss {lossf:.4f}{leak and ' [LEAKS]'} | lr {lr:.2e} | "
                      f"{dt * 1000:.1f} ms/iter | {tokens_per_iter / recent:,.0f} tok/s | "
                      f"eta {fmt_time(eta)}", flush=True)
                log(dict(kind='train', iter=iter_num, loss=lossf, lr=lr, ms=dt * 1000,
                         tok_s=tokens_per_iter / recent, leaks=not verdict.causal))
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
    if master and not sig:
        print(f"done: best val {best_val:.4f} after {iter_num} iters; audit {verdict.verdict}{leak}", flush=True)
    return dict(best_val=best_val, iter=iter_num, audit=verdict, last_eval=last, signal=sig, model=raw_model)


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS, CHOICES))
        return 0
    try:
        cfg = load_config(DEFAULTS, argv, CHOICES)
        check_config(SimpleNamespace(**cfg))
        summary = train(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 128 + summary['signal'] if summary['signal'] else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
