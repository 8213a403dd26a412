"""
How fast a variant trains: tokens/s, ms/step, activation memory and MFU through train.py's own step.

    python bench.py                                   # dot and ega at the CPU study scale
    python bench.py --variants=dot,fox,ega:rope --steps=30
    python bench.py --device=cuda --compile=True --n_layer=6 --n_head=8 --n_embd=256 --block_size=256 --batch_size=64
    python bench.py --variants=dot,ega --as_json=True > bench.json   # the record as JSON, not the table

A variant is `attn`, `attn:pos` or `attn:pos:key=value:...` (any GPTConfig option). The variants take train.py's
step (train.forward_backward under train.autocast, then train.update) in turn, A B A B ..., on random tokens; a
figure is the median step after the warm-up. Memory: what one forward saves for backward. MFU (CUDA): 6 FLOPs per
parameter and 12 L T C per token against the dense peak at the dtype measured (PEAK_TFLOPS, or --peak_tflops).
The measurement suite (every variant, compile isolation, memory alone, kernels, profiles) is `python -m lab.bench`.
"""

import json
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import fields

import torch

import train
from configurator import ConfigError, coerce, describe, fail, load_config
from model import CHOICES, GPT, GPTConfig
from runtime import check_device, git_commit, resolve_device, versions

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
as_json = False                          # print the record as JSON (command, code, versions, rows), not the table
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
GPT_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
# dense peak TFLOPS (no sparsity; NVIDIA's datasheets, SXM where the name does not say) as (bfloat16 and float16,
# float32 with TF32, true float32). A GPU's name picks the longest key it contains
PEAK_TFLOPS = {'H100': (989, 495, 67), 'H100 PCIe': (756, 378, 51), 'H100 NVL': (835, 418, 60),
               'H200': (989, 495, 67), 'H200 NVL': (835, 418, 60), 'A100': (312, 156, 19.5),
               'L40S': (362, 183, 91.6), 'L4': (121, 60, 30.3), 'A10': (125, 62.5, 31.2)}


def variant_config(spec, c):
    """GPTConfig for one `attn[:pos[:key=value...]]` at the bench's size (attn_impl, compile_mode: lab.bench's)."""
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
    """(MFU's peak TFLOPS at precision prec, whence): --peak_tflops, else the GPU's row of PEAK_TFLOPS, else None."""
    if given:
        return given, f'--peak_tflops, taken as the {prec} peak'
    keys = [k for k in PEAK_TFLOPS if k in gpu]
    if not keys:
        return None, f"{gpu!r} is not in PEAK_TFLOPS: pass --peak_tflops (the GPU's dense {prec} peak)"
    k = max(keys, key=len)
    return float(PEAK_TFLOPS[k][{'bfloat16': 0, 'float16': 0, 'tf32': 1, 'float32': 2}[prec]]), f'{k}, dense {prec}'


def saved_bytes(model, x, y, ctx=None, plain=None):
    """Bytes one forward (under ctx) saves for backward, each storage once. plain: the module model calls."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx or nullcontext():
        _, loss = model(x, y)
    loss.backward()
    (model if plain is None else plain).zero_grad(set_to_none=True)
    return sum(seen.values())


def bench(c):
    """Every variant of c timed in turn: {spec: row}, and the dtype."""
    dev, dev_type = c['device'], c['device'].split(':')[0]
    dtype, _ = train.autocast(dev_type, c['dtype'])
    specs = list(dict.fromkeys(v for v in c['variants'].split(',') if v))
    cfgs = {spec: variant_config(spec, c) for spec in specs}            # every spec checked before any work
    if not specs or c['steps'] < 1 or c['warmup'] < 0 or c['batch_size'] < 1 or c['peak_tflops'] < 0:
        raise ConfigError(f"need at least one variant (--variants=dot,ega), steps >= 1, warmup >= 0, batch_size >= 1 "
                          f"and peak_tflops >= 0; got {len(specs)}, {c['steps']}, {c['warmup']}, {c['batch_size']} and "
                          f"{c['peak_tflops']:g}")
    torch.manual_seed(c['seed'])
    x = torch.randint(GPTConfig.vocab_size, (c['batch_size'], c['block_size']), device=dev)   # (B, T)
    rows = {}
    for spec, cfg in cfgs.items():
        torch.manual_seed(c['seed'])
        m = GPT(cfg).to(dev)
        rows[spec] = dict(plain=m, model=torch.compile(m) if c['compile'] else m, times=[],
                          opt=m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), dev_type),
                          scaler=torch.amp.GradScaler(dev_type, enabled=dtype == 'float16'), params=m.num_params(),
                          mem=saved_bytes(m, x, x, train.autocast(dev_type, dtype)[1]))
    for i in range(c['warmup'] + c['steps']):
        for r in rows.values():
            ctx = train.autocast(dev_type, dtype)[1]
            t0 = time.perf_counter()
            train.forward_backward(r['model'], x, x, ctx, r['scaler'])        # train.py's step: the micro-step,
            train.update(r['plain'], r['opt'], r['scaler'], train.grad_clip)     # then the clipped AdamW update
            if dev_type == 'cuda':
                torch.cuda.synchronize(dev)
            if i >= c['warmup']:
                r['times'].append(time.perf_counter() - t0)
    peak = mfu_peak(torch.cuda.get_device_name(dev), dtype, c['peak_tflops'])[0] if dev_type == 'cuda' else None
    for r in rows.values():
        r['ms'] = statistics.median(r['times']) * 1e3
        r['tps'] = c['batch_size'] * c['block_size'] / r['ms'] * 1e3
        r['mfu'] = r['tps'] * flops_per_token(r['plain'].config, r['params']) / (peak * 1e12) if peak else None
    return {spec: {k: r[k] for k in ('tps', 'ms', 'mem', 'mfu', 'params')} for spec, r in rows.items()}, dtype


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS))
        return 0
    try:
        c = load_config(DEFAULTS, argv)
        check_device(c['device'])
        c['device'] = resolve_device(c['device'])
        rows, dtype = bench(c)
    except ConfigError as e:
        return fail(e)
    if c['as_json']:
        print(json.dumps(dict(command=' '.join(['python', 'bench.py', *argv]), date=time.strftime('%Y-%m-%d %H:%M'),
                              code=git_commit(), versions=versions(), dtype=dtype, config=c, variants=rows), indent=1))
        return 0
    first = next(iter(rows.values()))
    print(f"{versions()}, {torch.get_num_threads()} threads, device {c['device']}, {dtype}, compile {c['compile']}, "
          f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, median of "
          f"{c['steps']} steps after {c['warmup']}\n\n| variant | tokens/s | ms/step | vs first | saved for backward, "
          f"MiB | MFU | params |\n|---|---|---|---|---|---|---|")
    for spec, r in rows.items():
        mfu = '-' if r['mfu'] is None else f"{r['mfu']:.1%}"
        print(f"| {spec} | {r['tps']:,.0f} | {r['ms']:.1f} | {r['tps'] / first['tps']:.1%} | {r['mem'] / 2 ** 20:,.1f} "
              f"| {mfu} | {r['params']:,} |")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
