"""
How fast a variant trains: tokens/s, ms/step, activation memory and MFU through train.py's own step.

    python bench.py                                   # dot and ega at the CPU study scale
    python bench.py --variants=dot,fox,ega:rope --steps=30
    python bench.py --device=cuda --compile=True --n_layer=6 --n_head=8 --n_embd=256 --block_size=256 --batch_size=64
    python bench.py --variants=dot,ega --out=bench.json   # the table as JSON too

A variant is `attn`, `attn:pos` or `attn:pos:key=value:...` with any GPTConfig option. A step is train.py's
(train.forward_backward under train.py's autocast, then train.update: clipped, AdamW) on random tokens; the
variants take their steps in turn (A B A B ...), so a slow patch of the machine hits them alike, and a variant's
figure is its median step after the warm-up. Memory: what one forward saves for backward (the activations). MFU on
CUDA: model FLOPs (6 per parameter and 12 L T C per token) against the GPU's dense peak at the dtype measured
(PEAK_TFLOPS, or --peak_tflops). Compiled, each variant is its own torch.compile (dynamo keeps 8 graphs of a
function: a few variants at a time). The measurement suite (every variant, compile isolation and its checks,
memory alone on the GPU, kernel names, profiles, a deadline) is `python -m lab.bench`.
"""

import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import fields

import torch

import train
from configurator import ConfigError, coerce, describe, fail, load_config
from model import CHOICES, GPT, GPTConfig
from runtime import check_device, check_output_file, git_commit, resolve_device, versions

# -----------------------------------------------------------------------------
variants = 'dot,ega'                     # comma-separated attn[:pos[:key=value...]]
n_layer = 4                              # the CPU study scale (config/cpu.py)
n_head = 4
n_embd = 128
block_size = 128
batch_size = 16
dropout = 0.0
steps = 20                               # timed steps per variant
warmup = 5                               # untimed steps first (a compile happens in the first)
seed = 0
device = 'cpu'                           # cpu, cuda, cuda:N, mps, auto
dtype = 'auto'                           # train.py's: bf16 autocast on CUDA, float32 elsewhere
compile = False
peak_tflops = 0.0                        # MFU's dense peak at the dtype measured; 0: PEAK_TFLOPS by the GPU's name
out = ''                                 # also write the table here as JSON
overwrite = False                        # --out may replace a file git tracks
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
GPT_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
# dense peak TFLOPS (no sparsity; NVIDIA's datasheets, SXM where the name does not say) at each precision: an
# autocast dtype, float32 with TF32 ('tf32'), or true float32. A GPU's name picks the longest key it contains
PEAK_TFLOPS = {
    'H100': {'bfloat16': 989.0, 'float16': 989.0, 'tf32': 495.0, 'float32': 67.0},
    'H100 PCIe': {'bfloat16': 756.0, 'float16': 756.0, 'tf32': 378.0, 'float32': 51.0},
    'H100 NVL': {'bfloat16': 835.0, 'float16': 835.0, 'tf32': 418.0, 'float32': 60.0},
    'H200': {'bfloat16': 989.0, 'float16': 989.0, 'tf32': 495.0, 'float32': 67.0},
    'H200 NVL': {'bfloat16': 835.0, 'float16': 835.0, 'tf32': 418.0, 'float32': 60.0},
    'A100': {'bfloat16': 312.0, 'float16': 312.0, 'tf32': 156.0, 'float32': 19.5},
    'L40S': {'bfloat16': 362.0, 'float16': 362.0, 'tf32': 183.0, 'float32': 91.6},
    'L4': {'bfloat16': 121.0, 'float16': 121.0, 'tf32': 60.0, 'float32': 30.3},
    'A10': {'bfloat16': 125.0, 'float16': 125.0, 'tf32': 62.5, 'float32': 31.2},
}


def variant_config(spec, c):
    """GPTConfig for one `attn[:pos[:key=value...]]` spec at the bench's size (keys attn_impl and compile_mode
    are the lab bench's: lab/bench.py reads them)."""
    attn, _, rest = spec.partition(':')
    pos, _, rest = rest.partition(':')
    kw = dict(n_layer=c['n_layer'], n_head=c['n_head'], n_embd=c['n_embd'], block_size=c['block_size'],
              dropout=c['dropout'], attn=attn, pos=pos or 'learned')
    for item in filter(None, rest.split(':')):
        key, eq, value = item.partition('=')
        if key in ('attn_impl', 'compile_mode'):
            continue
        if key not in GPT_DEFAULTS or not eq:
            raise ConfigError(f"variant {spec!r}: '{item}' is not key=value with a GPTConfig key")
        kw[key] = coerce(key, value, GPT_DEFAULTS[key], CHOICES.get(key), where=f"variant {spec!r}: ", cli=True)
    try:
        return GPTConfig(**kw)
    except ValueError as e:
        raise ConfigError(f"variant {spec!r}: {e}") from None


def flops_per_token(cfg, n_params):
    """Training FLOPs per token, the usual estimate: 6 per parameter plus attention's 12 L T C."""
    return 6 * n_params + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def mfu_peak(gpu, prec, given=0.0):
    """The dense peak TFLOPS MFU divides by at precision prec, and where it comes from: --peak_tflops, else the
    row of PEAK_TFLOPS whose key is the longest one in the GPU's name; None and why where neither."""
    if given:
        return given, f'--peak_tflops, taken as the {prec} peak'
    keys = [k for k in PEAK_TFLOPS if k in gpu]
    if not keys:
        return None, f"{gpu!r} is not in PEAK_TFLOPS: pass --peak_tflops (the GPU's dense {prec} peak)"
    k = max(keys, key=len)
    return PEAK_TFLOPS[k][prec], f'{k}, dense {prec}'


def saved_bytes(model, x, y, ctx=None, plain=None):
    """Bytes of the tensors one forward (under the context ctx, none by default) saves for backward, each
    storage once. plain: the module whose gradients to clear, where model is a function calling it."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx or nullcontext():
        _, loss = model(x, y)
    loss.backward()
    (model if plain is None else plain).zero_grad(set_to_none=True)
    return sum(seen.values())


def bench_record(path):
    """Whether path holds what a bench writes (--out replaces that, and nothing else, without --overwrite)."""
    try:
        with open(path) as f:
            return str(json.load(f).get('command', '')).startswith(('python bench.py', 'python -m lab.bench'))
    except (OSError, ValueError, AttributeError):
        return False


def train_step(model, plain, optimizer, scaler, x, y, ctx):
    """train.py's step: its micro-step (the forward under ctx, the backward through the scaler) and its update
    (clipped to train.py's grad_clip, AdamW) of plain, the module under model. Returns the loss."""
    loss = train.forward_backward(model, x, y, ctx, scaler)
    train.update(plain, optimizer, scaler, train.grad_clip)
    return loss


def bench(c):
    """Every variant of c timed in turn: {spec: row}, and the dtype."""
    dev = c['device']
    dtype, _ = train.autocast(dev.split(':')[0], c['dtype'])
    models = {}
    for spec in dict.fromkeys(v for v in c['variants'].split(',') if v):     # every spec checked before any work
        torch.manual_seed(c['seed'])
        models[spec] = GPT(variant_config(spec, c)).to(dev)
    if not models or c['steps'] < 1 or c['warmup'] < 0:
        raise ConfigError("need at least one variant (--variants=dot,ega), steps >= 1 and warmup >= 0")
    x = torch.randint(GPTConfig.vocab_size, (c['batch_size'], c['block_size']), device=dev)   # (B, T)
    rows = {}
    for spec, m in models.items():
        opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), dev.split(':')[0])
        scaler = torch.amp.GradScaler(dev.split(':')[0], enabled=dtype == 'float16')
        rows[spec] = dict(plain=m, model=torch.compile(m) if c['compile'] else m, opt=opt, scaler=scaler, times=[],
                          params=m.num_params(), mem=saved_bytes(m, x, x, train.autocast(dev.split(':')[0], dtype)[1]),
                          flops=flops_per_token(m.config, m.num_params()))
    for i in range(c['warmup'] + c['steps']):
        for r in rows.values():
            ctx = train.autocast(dev.split(':')[0], dtype)[1]
            t0 = time.perf_counter()
            train_step(r['model'], r['plain'], r['opt'], r['scaler'], x, x, ctx)
            if dev.startswith('cuda'):
                torch.cuda.synchronize(dev)
            if i >= c['warmup']:
                r['times'].append(time.perf_counter() - t0)
    peak = mfu_peak(torch.cuda.get_device_name(dev), dtype, c['peak_tflops'])[0] if dev.startswith('cuda') else None
    for r in rows.values():
        r['ms'] = statistics.median(r['times']) * 1e3
        r['tps'] = c['batch_size'] * c['block_size'] / r['ms'] * 1e3
        r['mfu'] = r['tps'] * r['flops'] / (peak * 1e12) if peak else None
    return rows, dtype


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS))
        return 0
    try:
        c = load_config(DEFAULTS, argv)
        check_device(c['device'])
        c['device'] = resolve_device(c['device'])
        if c['batch_size'] < 1 or c['peak_tflops'] < 0:
            raise ConfigError(f"need batch_size >= 1 and peak_tflops >= 0, got {c['batch_size']}, {c['peak_tflops']}")
        if c['out']:
            c['out'] = os.path.expanduser(c['out'])
            check_output_file(c['out'], '--out', overwrite=c['overwrite'], ours=bench_record)
        rows, dtype = bench(c)
    except ConfigError as e:
        return fail(e)
    first = next(iter(rows.values()))
    print(f"{versions()}, {torch.get_num_threads()} threads, device {c['device']}, {dtype}, compile {c['compile']}, "
          f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, median of "
          f"{c['steps']} steps after {c['warmup']}\n\n| variant | tokens/s | ms/step | vs first | saved for backward, "
          f"MiB | MFU | params |\n|---|---|---|---|---|---|---|")
    for spec, r in rows.items():
        mfu = '-' if r['mfu'] is None else f"{r['mfu']:.1%}"
        print(f"| {spec} | {r['tps']:,.0f} | {r['ms']:.1f} | {r['tps'] / first['tps']:.1%} | {r['mem'] / 2 ** 20:,.1f} "
              f"| {mfu} | {r['params']:,} |")
    if c['out']:
        os.makedirs(os.path.dirname(os.path.abspath(c['out'])), exist_ok=True)
        keep = ('tps', 'ms', 'mem', 'mfu', 'params')
        with open(c['out'], 'w') as f:
            json.dump(dict(command=' '.join(['python', 'bench.py', *argv]), date=time.strftime('%Y-%m-%d %H:%M'),
                           code=git_commit(), versions=versions(), dtype=dtype, config=c,
                           variants={k: {x: r[x] for x in keep} for k, r in rows.items()}), f, indent=1)
        print(f"wrote {c['out']}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
