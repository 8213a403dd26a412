"""
Training throughput of attention variants, measured in one process.

    python bench.py                                  # every registered variant at the CPU study scale
    python bench.py --quick=True                     # a one-minute smoke test of every variant (CI)
    python bench.py --variants=dot,ega:rope --steps=30 --warmup=5
    python bench.py --variants=dot,ega,ega:none:ega_norm=window
    python bench.py --compile=True                   # the same through torch.compile
    python bench.py --variants=dot,fox --dtype=bfloat16   # the forward under autocast (memory: FoX's T x T bias)
    python bench.py --variants=ega,fox --against=ega # the ratio column against ega (default: dot)
    python bench.py --profile=causal_morlet          # where one variant's training step spends its time
    python bench.py --profile=dot,ega --steps=10 --out=docs/profiles.md   # several, written as markdown
    python bench.py --readme=True                    # README's throughput table from the runs below
    python bench.py --variants=dot,ega --authors=PATH  # beside the authors' own dot and EGA (PATH: below)
    python bench.py --help                           # every key and its default

A variant is `attn`, `attn:pos`, or `attn:pos:key=value:...` with any GPTConfig
option; `all` is every registered attention variant with learned positions, then
dot attention with every other positional encoding. Each step is forward, backward
and an AdamW step on random tokens; the figure is tokens/s from the median step
time after warm-up. The models are interleaved step by step (A B A B ...), so a
slow patch of the machine hits them all alike. Memory: on CUDA the peak allocated
during a step; on the CPU the tensors a forward saves for backward (the
activations, which grow with batch and variant, plus the weights the matmuls keep).
On CUDA also the model FLOPs utilisation (MFU) against the GPU's dense bf16 peak
(`peak_tflops`, or known GPUs). Arguments go through the same typed configurator as
train.py: a mistake is a one-line error with exit code 2.

--authors=PATH benches the authors' own models beside ours, in the same loop
(rows `authors:dot`, `authors:ega`): PATH is their EGA + MOPE paper's training
script, loaded as authors.py says (only its definitions run; dropout 0).
"""

import contextlib
import functools
import json
import os
import statistics
import sys
import time
from dataclasses import fields

import torch

from configurator import ConfigError, coerce, describe, load_config
from model import ATTN, CHOICES, GPT, GPTConfig, POS
from runtime import check_device, check_output_file, resolve_device

# -----------------------------------------------------------------------------
# the CPU study scale (config/cpu.py)
variants = 'all'                         # comma-separated attn[:pos[:key=value...]], or all
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
dtype = 'float32'                        # or bfloat16, float16: the forward under autocast
quick = False                            # tiny models, 2 timed steps: does every variant train at all
peak_tflops = 0.0                        # for MFU on CUDA; 0: look the GPU up in PEAK_TFLOPS
out = ''                                 # also write the results here as JSON (the ledger reads results/bench/)
against = 'dot'                          # the variant the ratio column divides by (it is benched too)
profile = ''                             # variants (comma-separated): a per-op table of each one's training
                                         # step (torch.profiler); with --out, written as markdown
top = 15                                 # rows of that table
readme = False                           # write README's throughput table from EAGER, COMPILED, REPEATS; no bench
authors = ''                             # the authors' training script: their dot and EGA benched beside ours
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
GPT_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
PROGRESS_S = 30.0            # seconds between progress lines on stderr
QUICK = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, steps=2, warmup=1)
# README's throughput table: idle eager runs (EAGER, REPEATS) and one compiled run of every
# variant, each written by --out, and each eager ratio to dot beside its goal (issue 23; CPU
# study scale)
EAGER = 'results/bench/cpu.json'                # python bench.py --steps=60 --warmup=3 --out=...
COMPILED = 'results/bench/cpu_compile.json'     # the same with --compile=True --steps=10
# earlier idle eager runs of the same model code (each records its commit), beside EAGER's ratios:
# between idle runs of one code on this machine a ratio moves by several points
REPEATS = 'results/bench/cpu_repeats'
GOALS = {'ega': 95, 'ega_fox': 92, 'fox': 95, 'flux': 85, 'phase': 85, 'ega_morlet': 90, 'daub': 90,
         'conv': 90, 'causal_morlet': 80, 'causal_gauss': 90, 'causal_mexhat': 90, 'fourier_qk_causal': 80,
         'multi_fourier_qk': 65, 'dot:mope_rel': 95, 'dot:alibi': 95, 'dot:rope': 95}
COMPILE_TOL = {'float32': 1e-4, 'bfloat16': 3e-2, 'float16': 1e-2}   # relative, compiled vs eager loss
THROUGHPUT = ('<!-- throughput: python bench.py --readme=True -->', '<!-- /throughput -->')
PEAK_TFLOPS = {'H100': 989.0, 'H200': 989.0, 'A100': 312.0, 'L4': 121.0, 'A10': 125.0}   # dense bf16


def all_variants():
    return list(ATTN) + [f'dot:{p}' for p in POS if p != 'learned']


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


def saved_bytes(model, x, y, amp=contextlib.nullcontext):
    """Bytes of the tensors one forward (under amp()) saves for backward (each storage once)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with amp():
            _, loss = model(x, y)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def flops_per_token(cfg, n_params):
    """Training FLOPs per token, the usual estimate: 6 per parameter plus attention's 12 L T C."""
    return 6 * n_params + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def autocast(c):
    """The forward's context for --dtype: autocast to it, or nothing for float32."""
    if c['dtype'] not in ('float32', 'bfloat16', 'float16'):
        raise ConfigError(f"dtype={c['dtype']!r} is not one of: float32, bfloat16, float16")
    dev_type = 'cuda' if c['device'].startswith('cuda') else 'cpu'
    return functools.partial(torch.autocast, dev_type, dtype=getattr(torch, c['dtype']),
                             enabled=c['dtype'] != 'float32')


def authors_models(c):
    """The authors' GPT with each of their attention classes (authors.CLASSES), at the bench
    scale, from their script (--authors; authors.py loads its definitions alone)."""
    from authors import CLASSES, AuthorsError, load
    try:
        names = load(c['authors'], c['n_embd'], c['n_head'], c['n_layer'], c['block_size'],
                     GPTConfig.vocab_size, c['device'])
    except AuthorsError as e:
        raise ConfigError(f"--authors={e}") from None
    torch.manual_seed(c['seed'])
    return {f'authors:{ours}': names['GPT'](names[theirs]) for ours, theirs in CLASSES.items()}


def bench(c):
    if c['quick']:
        c = {**c, **QUICK}
    names = all_variants() if c['variants'] == 'all' else [v for v in c['variants'].split(',') if v]
    names += [c['against']] if c['against'] not in names else []      # the reference is always benched
    if not names or c['steps'] < 1 or c['warmup'] < 0 or c['batch_size'] < 1:
        raise ConfigError("need at least one variant, steps >= 1, warmup >= 0 and batch_size >= 1")
    amp = autocast(c)
    cfgs = {name: variant_config(name, c) for name in names}    # every spec checked before any work
    torch.manual_seed(c['seed'])
    models = {name: GPT(cfg) for name, cfg in cfgs.items()}
    models.update(authors_models(c) if c['authors'] else {})
    runs = {}
    for name, model in models.items():
        model = model.to(c['device'])
        if isinstance(model, GPT):
            opt, n_params = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), c['device']), model.num_params()
        else:   # the authors': their scripts' AdamW over every parameter
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
            n_params = sum(p.numel() for p in model.parameters())
        cfg = cfgs[name] if name in cfgs else variant_config(name.split(':')[1], c)
        runs[name] = dict(plain=model, model=torch.compile(model) if c['compile'] else model, opt=opt,
                          times=[], params=n_params, flops=flops_per_token(cfg, n_params), mem=0)
    B, T, V = c['batch_size'], c['block_size'], GPTConfig.vocab_size
    x = torch.randint(V, (B, T), device=c['device'])
    y = torch.randint(V, (B, T), device=c['device'])
    cuda = c['device'].startswith('cuda')
    for r in runs.values():
        r['mem'] = 0 if cuda else saved_bytes(r['model'], x, y, amp)
        if c['compile']:
            with torch.no_grad(), amp():
                r['eager_loss'] = r['plain'](x, y)[1].item()      # before any step
    n, t_start, shown = c['warmup'] + c['steps'], time.time(), time.time()
    for i in range(n):
        if time.time() - shown > PROGRESS_S:   # a long bench says where it is
            shown = time.time()
            print(f"  round {i} of {n} ({len(runs)} variants each), {shown - t_start:.0f} s", file=sys.stderr,
                  flush=True)
        for r in runs.values():
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            with amp():
                _, loss = r['model'](x, y)
            loss.backward()
            r['opt'].step()
            r['opt'].zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
                r['mem'] = max(r['mem'], torch.cuda.max_memory_allocated())
            if i >= c['warmup']:
                r['times'].append(time.perf_counter() - t0)
            if i == 0 and c['compile']:
                r['compile_diff'] = abs(loss.item() - r['eager_loss'])
    for r in runs.values():
        r['tps'] = B * T / statistics.median(r['times'])
    return c, runs


def compile_check(c, runs):
    """With --compile: each compiled model's first loss against the same model's eager one (the
    same weights and batch), so a compiled run checks that every variant compiles to the same
    function. Returns an error message, or '' where every one agrees."""
    tol = COMPILE_TOL[c['dtype']]
    bad = [f"{name} by {r['compile_diff']:.2g}" for name, r in runs.items()
           if not r['compile_diff'] <= tol * max(1.0, abs(r['eager_loss']))]
    worst = max(runs, key=lambda n: runs[n]['compile_diff'])
    print(f"compiled against eager, the first step's loss: largest difference "
          f"{runs[worst]['compile_diff']:.2g} ({worst})")
    return f"compiled and eager losses differ beyond {tol:g}: {', '.join(bad)}" if bad else ''


def profile_table(c):
    """The ops of one variant's training step (forward, backward, AdamW) by self CPU time, summed
    over `steps` steps after `warmup`, as a markdown table: where a variant's time goes."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    cfg, amp = variant_config(c['profile'], c), autocast(c)
    torch.manual_seed(c['seed'])
    model = GPT(cfg).to(c['device'])
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), c['device'])
    x = torch.randint(GPTConfig.vocab_size, (c['batch_size'], c['block_size']), device=c['device'])

    def step():
        with amp():
            _, loss = model(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(c['warmup']):
        step()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if c['device'].startswith('cuda') else [])
    with torch_profile(activities=acts) as prof:
        for _ in range(c['steps']):
            step()
    ev = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ev) or 1
    # every aten op call, nested ones included: on the CPU each costs microseconds of dispatch
    # and autograd bookkeeping whatever its size, which is what many small ops add up to
    calls = sum(e.count for e in ev if e.key.startswith('aten::')) // c['steps']
    rows = [f"| {e.key} | {e.count // c['steps']} | {e.self_cpu_time_total / c['steps'] / 1e3:.2f} | "
            f"{e.self_cpu_time_total / total:.1%} |" for e in ev[:c['top']]]
    return '\n'.join([f"{c['profile']}: self CPU time per training step, top {c['top']} ops of "
                       f"{len(ev)} ({total / c['steps'] / 1e3:.1f} ms in all; {calls:,} aten op calls)", '',
                       '| op | calls per step | ms per step | share |', '|---|---|---|---|'] + rows)


def mfu(c, r):
    """Model FLOPs utilisation on CUDA, or None where the GPU's peak is unknown."""
    if not c['device'].startswith('cuda'):
        return None
    peak = c['peak_tflops'] or next((v for k, v in PEAK_TFLOPS.items()
                                     if k in torch.cuda.get_device_name(c['device'])), 0.0)
    return r['tps'] * r['flops'] / (peak * 1e12) if peak else None


def readme_table(eager, compiled, repeats=()):
    """README's throughput table from --out files' contents: each variant's eager tokens/s and
    ratio to dot, its ratio in the repeated idle runs, its goal, judged on the median ratio of
    all those runs, what it saves for backward, and the compiled run's tokens/s and ratio to eager."""
    runs = [eager, *repeats]
    diffs = {k: r['compile_diff'] for k, r in compiled['variants'].items() if 'compile_diff' in r}
    worst = max(diffs, key=diffs.get) if diffs else None
    check = (f" Each compiled model's first loss against its eager one: largest difference "
             f"{diffs[worst]:.1g} ({worst}), of {len(diffs)} variants." if diffs else '')

    def at(r):                                                  # runs before 2026-12-01 did not record it
        return f", at {r['code']}" if 'code' in r else ''
    listed = ', '.join(f"`{r['command']}` ({r['date']}{at(r)})" for r in repeats)
    again = (f" Repeated idle eager runs of the same model code ({listed}): their ratios in the column "
             f"after, and each goal judged on the median over the {len(runs)} runs." if repeats else '')
    out = [f"Eager: `{eager['command']}` ({eager['date']}{at(eager)}, torch {eager['torch']}, "
           f"{eager['threads']} threads). Compiled: `{compiled['command']}` ({compiled['date']})."
           f"{check}{again}", '',
           '| variant | tokens/s | vs dot | vs dot, repeated runs | goal | saved for backward, MiB | '
           'compiled, tokens/s | compiled / eager | params |', '|---|---|---|---|---|---|---|---|---|']
    for name, r in eager['variants'].items():
        ratios = [run['variants'][name]['tps'] / run['variants']['dot']['tps'] for run in runs
                  if name in run['variants']]
        goal, comp = GOALS.get(name), compiled['variants'].get(name)
        met = round(100 * statistics.median(ratios), 1) >= goal if goal else None   # as the ratios show
        goal = '-' if goal is None else f"{goal}%: {'met' if met else '**not met**'}"
        comp = '- | -' if comp is None else f"{comp['tps']:,.0f} | {comp['tps'] / r['tps']:.2f}x"
        others = ', '.join(f"{x:.1%}" for x in ratios[1:]) or '-'
        out.append(f"| {name} | {r['tps']:,.0f} | {ratios[0]:.1%} | {others} | {goal} | "
                   f"{r['mem'] / 2 ** 20:,.1f} | {comp} | {r['params']:,} |")
    return '\n'.join(out)


def readme_runs():
    """The committed runs README's table is made from, checked: EAGER, COMPILED and the REPEATS
    (a list), each an eager or compiled run of every variant (all_variants(): the table is written only
    from complete runs), all at one scale."""
    here = os.path.dirname(os.path.abspath(__file__))
    runs, want = [], all_variants()
    repeats = sorted(os.path.join(REPEATS, f) for f in os.listdir(os.path.join(here, REPEATS))
                     if f.endswith('.json')) if os.path.isdir(os.path.join(here, REPEATS)) else []
    plan = [(EAGER, ' --steps=60', False), (COMPILED, ' --compile=True --steps=10', True)]
    for path, how, compiled in plan + [(p, ' --steps=60', False) for p in repeats]:
        redo = f"python bench.py{how} --warmup=3 --out={path}"
        try:
            with open(os.path.join(here, path)) as f:
                run = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path} is missing: {redo}") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not JSON ({e}): {redo}") from None
        cfg = run.get('config', {})
        if cfg.get('compile') is not compiled or 'dot' not in run.get('variants', {}):
            raise ConfigError(f"{path} is not a{' compiled' if compiled else 'n eager'} run with dot: {redo}")
        missing = [v for v in want if v not in run['variants']]
        if missing:     # a run of some variants (--variants=dot,ega) would shrink the table to its rows
            raise ConfigError(f"{path} lacks {len(missing)} of the {len(want)} variants the table needs "
                              f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): {redo}")
        runs.append(run)
    scales = [{k: r['config'][k] for k in ('n_layer', 'n_head', 'n_embd', 'block_size', 'batch_size', 'dtype')
               if k in r['config']} for r in runs]
    for path, scale in zip([COMPILED] + repeats, scales[1:]):
        if scale != scales[0]:
            raise ConfigError(f"{EAGER} and {path} were run at different scales: {scales[0]} and {scale}")
    return runs[0], runs[1], runs[2:]


def write_readme():
    """README's throughput block, from the committed runs (readme_runs)."""
    from study import StudyError, write_block
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        write_block(os.path.join(here, 'README.md'), THROUGHPUT, readme_table(*readme_runs()))
    except StudyError as e:
        raise ConfigError(str(e)) from None
    print('wrote the throughput table of README.md')


def check_options(c):
    """The values and --out, before any work: a mistake found after the bench loses it."""
    check_device(c['device'])
    if not c['variants'].replace(',', '').strip():
        raise ConfigError("variants is empty: name at least one (--variants=dot,ega), or all")
    if c['profile'] and not c['profile'].replace(',', '').strip():
        raise ConfigError("profile names no variant: --profile=dot,ega")
    for k, least in (('steps', 1), ('warmup', 0), ('top', 1), ('batch_size', 1)):
        if c[k] < least:
            raise ConfigError(f"need {k} >= {least}, got {c[k]}")
    if c['out']:
        check_output_file(c['out'], '--out')


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS))
        return 0
    try:
        c = load_config(DEFAULTS, argv)
        if c['device'].startswith('cuda') and not torch.cuda.is_available():
            raise ConfigError(f"device={c['device']} but CUDA is not available")
        check_options(c)
        c['device'] = resolve_device(c['device'])              # auto: cuda, mps or cpu
        if c['readme']:
            write_readme()
            return 0
        if c['profile']:
            c = {**c, **QUICK} if c['quick'] else c
            if c['compile']:
                raise ConfigError("--profile runs eager: drop --compile=True")
            names = [v for v in c['profile'].split(',') if v]
            autocast(c)
            for v in names:
                variant_config(v, c)                            # every spec checked before any work
            tables = [profile_table({**c, 'profile': v}) for v in names]
            print('\n\n'.join(tables))
            if c['out']:
                write_profiles(c, tables, argv)
            return 0
        c, runs = bench(c)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {c['device']}, "
          f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, "
          f"compile={c['compile']}, {c['dtype']}, median of {c['steps']} steps after {c['warmup']} warm-up\n")
    ref_name = c['against']
    ref = runs[ref_name]['tps']
    mem = 'peak MiB' if c['device'].startswith('cuda') else 'saved for backward, MiB'
    print(f"| variant | tokens/s | vs {ref_name} | {mem} | MFU | params |\n|---|---|---|---|---|---|")
    for name, r in runs.items():
        u = mfu(c, r)
        print(f"| {name} | {r['tps']:,.0f} | {r['tps'] / ref:.1%} | {r['mem'] / 2 ** 20:,.1f} | "
              f"{'-' if u is None else f'{u:.1%}'} | {r['params']:,} |")
    for name, r in runs.items():
        theirs = f"authors:{name.split(':')[0]}"
        if theirs in runs and name != theirs:
            print(f"{name} against {theirs}: {r['tps'] / runs[theirs]['tps']:.2f}x the tokens/s")
    error = compile_check(c, runs) if c['compile'] else ''
    if c['out']:
        write_json(c, runs, argv)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def write_profiles(c, tables, argv):
    """--profile with --out: the tables as a markdown file, headed by the command and the date."""
    os.makedirs(os.path.dirname(os.path.abspath(c['out'])), exist_ok=True)
    with open(c['out'], 'w') as f:
        f.write(f"# Where each step's time goes\n\n`{' '.join(['python', 'bench.py', *argv])}` "
                f"({time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
                f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, "
                f"eager, {c['dtype']}): self time of each op, summed over {c['steps']} training steps "
                f"(forward, backward, AdamW) after {c['warmup']} untimed.\n\n" + '\n\n'.join(tables) + '\n')
    print(f"wrote {c['out']}")


def write_json(c, runs, argv):
    os.makedirs(os.path.dirname(os.path.abspath(c['out'])), exist_ok=True)
    with open(c['out'], 'w') as f:
        from study import git_commit
        json.dump(dict(command=' '.join(['python', 'bench.py', *argv]), date=time.strftime('%Y-%m-%d'),
                       time=time.strftime('%H:%M'), code=git_commit(),
                       torch=torch.__version__, threads=torch.get_num_threads(), config=c,
                       variants={k: {x: r[x] for x in ('tps', 'mem', 'params', 'compile_diff') if x in r}
                                 for k, r in runs.items()}),
                  f, indent=1)
    print(f"wrote {c['out']}")


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
