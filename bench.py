"""
Training throughput of attention variants, measured in one process.

    python bench.py                         # dot, ega, dot+mope, ega+mope at the CPU study scale
    python bench.py --variants=dot,ega:rope --steps=30 --warmup=5
    python bench.py --compile=1             # the same through torch.compile (CPU inductor)

Each step is forward, backward and an AdamW step on random tokens; the figure is
tokens/s from the median step time after warm-up. Variants are `attn` or
`attn:pos`. The models are interleaved step by step, so a slow patch of the
machine hits them all alike.
"""

import statistics
import sys
import time

import torch

from model import GPT, GPTConfig

# the CPU study scale (config/cpu.py)
n_layer, n_head, n_embd, block_size, batch_size = 4, 4, 128, 128, 16
variants = 'dot,ega,dot:mope,ega:mope'
steps, warmup, seed, compiled = 25, 5, 0, 0


def main(argv):
    args = dict(a[2:].split('=', 1) for a in argv if a.startswith('--') and '=' in a)
    bad = [a for a in argv if not (a.startswith('--') and '=' in a)] + \
          [k for k in args if k not in ('variants', 'steps', 'warmup', 'compile')]
    if bad:
        sys.exit(f"error: unknown argument(s) {bad}; use --variants=a,b:pos --steps=N --warmup=N --compile=0|1")
    names = args.get('variants', variants).split(',')
    n_steps, n_warm = int(args.get('steps', steps)), int(args.get('warmup', warmup))
    use_compile = bool(int(args.get('compile', compiled)))
    torch.manual_seed(seed)
    runs = {}
    for name in names:
        attn, _, pos = name.partition(':')
        cfg = GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                        dropout=0.0, attn=attn, pos=pos or 'learned')
        model = GPT(cfg)
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu')
        runs[name] = (torch.compile(model) if use_compile else model, opt, [])
    x = torch.randint(cfg.vocab_size, (batch_size, block_size))
    y = torch.randint(cfg.vocab_size, (batch_size, block_size))
    for i in range(n_warm + n_steps):
        for name, (model, opt, times) in runs.items():
            t0 = time.perf_counter()
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i >= n_warm:
                times.append(time.perf_counter() - t0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"B={batch_size} T={block_size} L={n_layer} nh={n_head} C={n_embd}, compile={use_compile}, "
          f"median of {n_steps} steps after {n_warm} warm-up")
    base = None
    for name, (model, _, times) in runs.items():
        tps = batch_size * block_size / statistics.median(times)
        base = base or tps
        print(f"{name:12s} {tps:10,.0f} tokens/s  {tps / base:6.1%} of {names[0]}  "
              f"({sum(p.numel() for p in model.parameters()):,} params)")


if __name__ == '__main__':
    main(sys.argv[1:])
