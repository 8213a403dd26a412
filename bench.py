"""
Training throughput of attention variants, measured in one process.

    python bench.py                                  # dot, ega, dot:mope, ega:mope at the CPU study scale
    python bench.py --variants=dot,ega:rope --steps=30 --warmup=5
    python bench.py --variants=dot,ega,ega:none:ega_norm=window
    python bench.py --compile=True                   # the same through torch.compile
    python bench.py --help                           # every key and its default

A variant is `attn`, `attn:pos`, or `attn:pos:key=value:...` with any GPTConfig
option. Each step is forward, backward and an AdamW step on random tokens; the
figure is tokens/s from the median step time after warm-up. The models are
interleaved step by step (A B A B ...), so a slow patch of the machine hits them
all alike. Arguments go through the same typed configurator as train.py: a
mistake is a one-line error with exit code 2.
"""

import statistics
import sys
import time
from dataclasses import fields

import torch

from configurator import ConfigError, coerce, describe, load_config
from model import CHOICES, GPT, GPTConfig

# -----------------------------------------------------------------------------
# the CPU study scale (config/cpu.py)
variants = 'dot,ega,dot:mope,ega:mope'   # comma-separated attn[:pos[:key=value...]]
n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
batch_size = 16
steps = 25                               # timed steps per variant
warmup = 5                               # untimed steps first
seed = 0
device = 'cpu'
compile = False
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
GPT_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}


def variant_config(spec, c):
    """GPTConfig for one `attn[:pos[:key=value...]]` spec at the bench scale."""
    attn, _, rest = spec.partition(':')
    pos, _, rest = rest.partition(':')
    kw = dict(n_layer=c['n_layer'], n_head=c['n_head'], n_embd=c['n_embd'], block_size=c['block_size'],
              dropout=0.0, attn=attn, pos=pos or 'learned')
    for item in filter(None, rest.split(':')):
        key, eq, value = item.partition('=')
        if key not in GPT_DEFAULTS or not eq:
            raise ConfigError(f"variant {spec!r}: '{item}' is not key=value with a GPTConfig key")
        kw[key] = coerce(key, value, GPT_DEFAULTS[key], CHOICES.get(key), where=f"variant {spec!r}: ", cli=True)
    try:
        return GPTConfig(**kw)
    except ValueError as e:
        raise ConfigError(f"variant {spec!r}: {e}") from None


def bench(c):
    names = [v for v in c['variants'].split(',') if v]
    if not names or c['steps'] < 1 or c['warmup'] < 0:
        raise ConfigError("need at least one variant, steps >= 1 and warmup >= 0")
    cfgs = {name: variant_config(name, c) for name in names}    # every spec checked before any work
    torch.manual_seed(c['seed'])
    runs = {}
    for name, cfg in cfgs.items():
        model = GPT(cfg).to(c['device'])
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), c['device'])
        runs[name] = (torch.compile(model) if c['compile'] else model, opt, [], model.num_params())
    B, T, V = c['batch_size'], c['block_size'], GPTConfig.vocab_size
    x = torch.randint(V, (B, T), device=c['device'])
    y = torch.randint(V, (B, T), device=c['device'])
    for i in range(c['warmup'] + c['steps']):
        for model, opt, times, _ in runs.values():
            t0 = time.perf_counter()
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if c['device'].startswith('cuda'):
                torch.cuda.synchronize()
            if i >= c['warmup']:
                times.append(time.perf_counter() - t0)
    return {name: (B * T / statistics.median(times), n) for name, (_, _, times, n) in runs.items()}


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS))
        return 0
    try:
        c = load_config(DEFAULTS, argv)
        if c['device'].startswith('cuda') and not torch.cuda.is_available():
            raise ConfigError(f"device={c['device']} but CUDA is not available")
        res = bench(c)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {c['device']}, "
          f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, "
          f"compile={c['compile']}, median of {c['steps']} steps after {c['warmup']} warm-up\n")
    first = next(iter(res))
    print(f"| variant | tokens/s | vs {first} | params |\n|---|---|---|---|")
    for name, (tps, n) in res.items():
        print(f"| {name} | {tps:,.0f} | {tps / res[first][0]:.1%} | {n:,} |")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
