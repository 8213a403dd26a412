"""
The lab bench's parts (lab/bench.py is the command): the variant specs' paths and modes, the dtype and its
autocast (train.py's), torch.compile per model with its graphs counted, train.py's step on a run, the attention
kernels a step calls, the per-op profile, MFU, the compile checks and what --out records of a variant.
"""

import contextlib
import inspect
import json
import os
import re
import sys
import tempfile
import time
import types

import torch

import bench as root_bench
import train
from configurator import ConfigError
from model import ATTN, GPT, IMPLS, POS, GPTConfig, components, flex_refusal
from runtime import COMPILE_MODES, check_device
from lab import paths
from train import autocast

QUICK = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, steps=2, warmup=1)

COMPILE_TOL = {'float32': 1e-4, 'bfloat16': 3e-2, 'float16': 1e-2}   # relative, compiled vs eager loss

DTYPES = ('auto', 'float32', 'bfloat16', 'float16')

# what dynamo's counters call a recompile-limit hit (torch 2.13: 'Dynamo recompile limit exceeded';
# earlier: 'recompile_limit reached', 'cache_size_limit reached'): the function runs eager after it
LIMIT_HIT = re.compile(r'recompile.?limit|cache.?size.?limit', re.IGNORECASE)

def all_variants():
    return list(ATTN) + [f'dot:{p}' for p in POS if p != 'learned']

def variant_impl(spec):
    """The attention path a spec asks for (`...:attn_impl=plain`; model.pick_impl), auto if none."""
    impl = dict(item.partition('=')[::2] for item in spec.split(':')[2:]).get('attn_impl', 'auto')
    if impl not in IMPLS:
        raise ConfigError(f"variant {spec!r}: attn_impl={impl!r} is not one of: {', '.join(IMPLS)}")
    return impl

def variant_mode(spec, compiled):
    """torch.compile's mode a spec asks for (`dot:learned:compile_mode=reduce-overhead`, CUDA graphs;
    runtime.COMPILE_MODES), default if none: so that one bench times the modes interleaved."""
    mode = dict(item.partition('=')[::2] for item in spec.split(':')[2:]).get('compile_mode', 'default')
    if mode not in COMPILE_MODES:
        raise ConfigError(f"variant {spec!r}: compile_mode={mode!r} is not one of: {', '.join(COMPILE_MODES)}")
    if mode != 'default' and not compiled:
        raise ConfigError(f"variant {spec!r}: compile_mode={mode} needs --compile=True")
    return mode

def check_impl(spec, impl, device, dropout=0.0, attn='dot'):
    """A path the bench's training step cannot take (model.flex_refusal: FlexAttention's backward runs on
    CUDA alone, and it drops no weights), or that it would time under another's label: a logit map has no SDPA
    form, so attn_impl=sdpa runs attend_plain (model.pick_impl)."""
    why = flex_refusal(dropout, device.startswith('cuda'), True) if impl == 'flex' else ''
    if why:
        raise ConfigError(f"variant {spec!r}: {why}: use auto, sdpa or plain")
    maps = [n for n in components(attn) if ATTN[n].slot == 'logits']
    if impl == 'sdpa' and maps:
        raise ConfigError(f"variant {spec!r}: attn_impl=sdpa: {maps[0]}'s logit map has no SDPA form, so the step "
                          f"would run attend_plain under the sdpa label; name attn_impl=plain (or auto)")


def resolve_dtype(dtype, device):
    """--dtype=auto as train.py's (train.autocast resolves both): bfloat16 autocast on CUDA (float16
    where the GPU lacks bf16), float32 elsewhere; any other name as given."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is not one of: {', '.join(DTYPES)}")
    if dtype == 'float16' and not device.startswith('cuda'):
        return dtype                            # refused by amp_context, with its reason
    return autocast('cuda' if device.startswith('cuda') else 'cpu', dtype)[0]

def precision(c):
    """What the matmuls run in, the key of PEAK_TFLOPS: the autocast dtype, 'tf32' for float32 with
    --tf32=True, or 'float32'."""
    return 'tf32' if c['dtype'] == 'float32' and c.get('tf32') else c['dtype']

def describe_precision(c):
    return {'float32': 'float32', 'tf32': 'float32 with TF32 matmuls'}.get(precision(c), f"{c['dtype']} autocast")

def settle(c):
    """The config with --dtype resolved (auto) and --tf32 checked; on CUDA the float32 matmul and
    convolution precision set to match (true float32 unless --tf32=True: torch's own default lets
    cuDNN convolutions take TF32)."""
    cuda = c['device'].startswith('cuda')
    c = {**c, 'dtype': resolve_dtype(c['dtype'], c['device'])}
    if c.get('tf32') and not (cuda and c['dtype'] == 'float32'):
        raise ConfigError(f"tf32=True is for float32 on CUDA, not {c['dtype']} on {c['device']}")
    if cuda:
        torch.set_float32_matmul_precision('high' if c.get('tf32') else 'highest')
        torch.backends.cudnn.allow_tf32 = bool(c.get('tf32'))
    return c

def amp_context(c):
    """The forward's context for --dtype, as a factory: train.py's (train.autocast: autocast to it,
    nothing for float32, float16 only on CUDA)."""
    if c['dtype'] not in DTYPES[1:]:
        raise ConfigError(f"dtype={c['dtype']!r} is not one of: {', '.join(DTYPES)}")
    dev_type = 'cuda' if c['device'].startswith('cuda') else 'cpu'
    autocast(dev_type, c['dtype'])                              # its checks, before any work
    return lambda: autocast(dev_type, c['dtype'])[1]

def scaler(c):
    """train.py's loss scaler: on for float16 (CUDA) alone."""
    return torch.amp.GradScaler('cuda' if c['device'].startswith('cuda') else 'cpu', enabled=c['dtype'] == 'float16')

def compile_model(model, n, index, mode='default'):
    """torch.compile for model `index` of n timed in one process. They all run GPT.forward, and by
    default dynamo keeps a function's compiled graphs in one cache, capped at recompile_limit (8):
    from the ninth model on, GPT.forward ran eager. Here each model gets a cache of its own, with its
    own limit, and a call looks through its own model's graphs alone, as in a run of that variant by
    itself: the interleaved step is each variant's solo compiled step. Where torch.compile has
    isolate_recompiles (torch 2.13) that is its own region ('isolated'); elsewhere the model is
    called through a function whose code object is its own (dynamo caches per code object), with
    the limits raised to 8 per model for what runs below it ('distinct'). Not a shared cache with a
    raised limit: in an A B C ... interleave each call would first fail the guards of every other
    model's graphs, and a variant could run another's graph (dot's serves scale_init) and compile
    none of its own, which the count could not tell from running eager. Not _dynamo.reset() between
    variants (it throws away the others' graphs), nor one variant at a time (no interleaving).
    mode: torch.compile's (variant_mode). Returns the compiled callable and 'isolated' or 'distinct'."""
    cfg = torch._dynamo.config
    least = max(8, 8 * n)
    for key in ('accumulated_recompile_limit', 'accumulated_cache_size_limit'):   # the cap over all caches
        if hasattr(cfg, key):
            setattr(cfg, key, max(getattr(cfg, key), least))
            break
    try:
        isolated = 'isolate_recompiles' in inspect.signature(torch.compile).parameters
    except (TypeError, ValueError):
        isolated = False
    if isolated:
        return torch.compile(model, mode=mode, isolate_recompiles=True), 'isolated'
    for key in ('recompile_limit', 'cache_size_limit'):                  # torch < 2.6: cache_size_limit
        if hasattr(cfg, key):
            setattr(cfg, key, max(getattr(cfg, key), least))
            break

    def call(x, y):
        return model(x, y)
    code = call.__code__.replace(co_name=f'bench_variant_{index}')
    own = types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)
    return torch.compile(own, mode=mode), 'distinct'

def dynamo_counts():
    """Dynamo's running totals in this process: graphs compiled, graph breaks, and recompile-limit
    hits (after one, the function runs eager)."""
    from torch._dynamo.utils import counters
    return (counters['stats']['unique_graphs'], sum(counters['graph_break'].values()),
            sum(n for k, n in counters['unimplemented'].items() if LIMIT_HIT.search(k)))

COUNTS = ('graphs', 'graph_breaks', 'limit_hits')

@contextlib.contextmanager
def tally(r, on=True):
    """Charges to run r what dynamo compiles while the block runs (one model runs at a time)."""
    before = dynamo_counts() if on else None
    yield
    if on:
        for key, b, a in zip(COUNTS, before, dynamo_counts()):
            r[key] += a - b

def ran_eager(r):
    """Why a --compile=True run's variant ran eager, or '': no graph compiled for it, or a recompile
    limit hit (dynamo then runs the function eager from there on)."""
    if r.get('limit_hits'):
        return 'recompile limit hit'
    return '' if r.get('graphs') else 'no graph compiled'

def train_step(r, x, y, amp):
    """One training step of a run, train.py's own (as bench.py's: its micro-step under amp(), then its update,
    clipped to train.py's grad_clip, of the plain module). Returns the loss."""
    loss = train.forward_backward(r['model'], x, y, amp(), r['scaler'])
    train.update(r['plain'], r['opt'], r['scaler'], train.grad_clip)
    return loss


def bench_record(path):
    """Whether path holds what a bench writes (--out replaces that, and nothing else, without --overwrite)."""
    try:
        with open(path) as f:
            return str(json.load(f).get('command', '')).startswith(('python bench.py', 'python -m lab.bench'))
    except (OSError, ValueError, AttributeError):
        return False

# the attention ops a step may call, by what they are: SDPA's fused kernels (no T x T weights), its math
# fallback (which forms them), FlexAttention; none of them: the weights written out, or inductor's code
ATTENTION_OPS = (('cudnn', 'scaled_dot_product_cudnn_attention'), ('flash', 'scaled_dot_product_flash_attention'),
                 ('efficient', 'scaled_dot_product_efficient_attention'),
                 ('math', 'scaled_dot_product_attention_math'), ('flex', 'flex_attention'))

def attention_kernels(r, x, y, amp):
    """The attention ops one training step of run r's model, eager, calls, from torch.profiler's op
    names: '+'-joined ATTENTION_OPS names, or 'none'. Eager: compiled, SDPA picks its kernel for the
    same inputs, but inductor writes the math fallback out as plain ops that name no attention, and a
    CUDA graph's replay names no op at all."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    with native_stderr_without('USDT:'), torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        train_step({**r, 'model': r['plain']}, x, y, amp)
    names = [e.key for e in prof.key_averages()]
    return '+'.join(k for k, op in ATTENTION_OPS if any(op in n for n in names)) or 'none'

def time_key(events, cuda):
    """The profiler field the ops are ranked by, and what it times: on CUDA self device time, where
    the step's time goes (self_device_time_total in torch >= 2.4, self_cuda_time_total before), on
    the CPU (or a torch with neither) self CPU time."""
    if cuda:
        for key in ('self_device_time_total', 'self_cuda_time_total'):
            if all(hasattr(e, key) for e in events):
                return key, 'CUDA'
    return 'self_cpu_time_total', 'CPU'

def device_events(events, cuda):
    """The events a profile ranks and sums: on CUDA the GPU's own (kernels, copies), as torch's own
    table sums them (the CPU op that launched a kernel, and a user annotation around it, carry its
    time again); elsewhere every op."""
    if not cuda:
        return list(events)
    return [e for e in events if getattr(e.device_type, 'name', '') == 'CUDA'
            and not getattr(e, 'is_user_annotation', False)]

@contextlib.contextmanager
def native_stderr_without(prefix):
    """Standard error at the file descriptor (C++ writes there too), less the lines that start with
    prefix: the profiler's own 'USDT: ... profiler_start' lines, which opened every --profile."""
    sys.stderr.flush()
    saved, tmp = os.dup(2), tempfile.TemporaryFile()
    os.dup2(tmp.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        tmp.seek(0)
        kept = [l for l in tmp.read().decode(errors='replace').splitlines(True) if not l.startswith(prefix)]
        tmp.close()
        sys.stderr.write(''.join(kept))

# the runtime calls that launch work on the GPU: one per kernel, or one per CUDA graph replayed
LAUNCHES = ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cuLaunchKernelEx', 'cudaGraphLaunch')

def profile_table(c):
    """The ops of one variant's training step (forward, backward, AdamW) by self time (CUDA time on
    CUDA, else CPU time), summed over `steps` steps after `warmup`, as a markdown table: where a
    variant's time goes. With --compile=True the compiled step (compiled in the warm-up). On CUDA
    also the launches per step and the GPU's busy time against the wall time: the rest is the
    host's (launch overhead, Python, syncs), what CUDA graphs take away."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    c = settle(c)
    spec = c['profile']
    cfg, amp = root_bench.variant_config(spec, c), amp_context(c)
    torch.manual_seed(c['seed'])
    model = GPT(cfg).set_impl(variant_impl(spec)).to(c['device'])
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), c['device'])
    x = torch.randint(GPTConfig.vocab_size, (c['batch_size'], c['block_size']), device=c['device'])
    run = dict(model=model, plain=model, opt=opt, scaler=scaler(c))
    if c['compile']:
        run['model'], _ = compile_model(model, 1, 0, variant_mode(spec, True))
    cuda = c['device'].startswith('cuda')

    def steps(n):
        for _ in range(n):
            train_step(run, x, x, amp)
        if cuda:
            torch.cuda.synchronize(c['device'])
    steps(c['warmup'])
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with native_stderr_without('USDT:'), torch_profile(activities=acts) as prof:
        t0 = time.perf_counter()
        steps(c['steps'])
        wall = (time.perf_counter() - t0) / c['steps'] * 1e3             # ms per step, under the profiler
    every = list(prof.key_averages())
    key, what = time_key(every, cuda)
    ev = sorted(device_events(every, what == 'CUDA'), key=lambda e: getattr(e, key), reverse=True)
    total = sum(getattr(e, key) for e in ev) or 1
    # every aten op call, nested ones included: on the CPU each costs microseconds of dispatch
    # and autograd bookkeeping whatever its size, which is what many small ops add up to
    calls = sum(e.count for e in every if e.key.startswith('aten::')) // c['steps']
    busy = total / c['steps'] / 1e3
    gpu = ''
    if cuda and what == 'CUDA':
        launches = sum(e.count for e in every if e.key in LAUNCHES) // c['steps']
        gpu = (f"; {launches:,} launches; the GPU busy {busy:.1f} of {wall:.1f} ms wall, "
               f"{max(wall - busy, 0.0):.1f} ms of host time around it")
    rows = [f"| {e.key} | {e.count // c['steps']} | {getattr(e, key) / c['steps'] / 1e3:.2f} | "
            f"{getattr(e, key) / total:.1%} |" for e in ev[:c['top']]]
    return '\n'.join([f"{spec}: self {what} time per training step, top {c['top']} ops of "
                       f"{len(ev)} ({busy:.1f} ms in all; {calls:,} aten op calls{gpu})", '',
                       '| op | calls per step | ms per step | share |', '|---|---|---|---|'] + rows)

def mfu(c, r):
    """Model FLOPs utilisation on CUDA against the peak at the precision measured, or None off CUDA
    or where that peak is unknown."""
    if not c['device'].startswith('cuda'):
        return None
    peak, _ = root_bench.mfu_peak(torch.cuda.get_device_name(c['device']), precision(c), c['peak_tflops'])
    return r['tps'] * r['flops'] / (peak * 1e12) if peak else None

def compile_check(c, runs):
    """With --compile: each compiled model's first loss against the same model's eager one (the
    same weights and batch), so a compiled run checks that every variant compiles to the same
    function. Returns an error message, or '' where every one agrees."""
    if c['dropout'] > 0:
        print(f"compiled against eager, the first step's loss: not checked at dropout={c['dropout']:g} "
              f"(the two draw different masks)")
        return ''
    tol = COMPILE_TOL[c['dtype']]
    bad = [f"{name} by {r['compile_diff']:.2g}" for name, r in runs.items()
           if not r['compile_diff'] <= tol * max(1.0, abs(r['eager_loss']))]
    worst = max(runs, key=lambda n: runs[n]['compile_diff'])
    print(f"compiled against eager, the first step's loss: largest difference "
          f"{runs[worst]['compile_diff']:.2g} ({worst})")
    return f"compiled and eager losses differ beyond {tol:g}: {', '.join(bad)}" if bad else ''

def eager_check(c, runs):
    """With --compile: each variant's compiled graphs, graph breaks and recompile-limit hits, one line;
    returns an error message naming the variants that ran eager, or '' where every one compiled."""
    eager = {name: ran_eager(r) for name, r in runs.items() if ran_eager(r)}
    print(f"compiled ({c.get('compile_cache', '?')} caches): {sum(r['graphs'] for r in runs.values())} graphs, "
          f"{sum(r['graph_breaks'] for r in runs.values())} graph breaks, "
          f"{sum(r['limit_hits'] for r in runs.values())} recompile-limit hits; "
          f"{len(runs) - len(eager)} of {len(runs)} variants compiled")
    return (f"{len(eager)} of {len(runs)} variants ran eager under --compile=True: "
            f"{', '.join(f'{k} ({why})' for k, why in eager.items())}") if eager else ''

def device_name(dev):
    return torch.cuda.get_device_name(dev) if dev.startswith('cuda') else dev

def write_profiles(c, tables, command, pending=()):
    """--profile with --out: the tables as a markdown file, headed by the command and the date, and
    what a deadline left out (c['cut']). pending: the variants still to come (a write as each one
    ends, so a crash keeps those done; the file says so); the last write has none and is printed."""
    os.makedirs(os.path.dirname(os.path.abspath(c['out'])), exist_ok=True)
    with open(c['out'], 'w') as f:
        f.write(f"# Where each step's time goes\n\n`{command}` "
                f"({time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
                f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, "
                f"{'compiled' if c['compile'] else 'eager'}, {c['dtype']}, {device_name(c['device'])}): self time "
                f"of each op, summed over {c['steps']} training steps "
                f"(forward, backward, AdamW) after {c['warmup']} untimed.\n\n" + '\n\n'.join(tables) + '\n'
                + (f"\n{c['cut'][0].upper()}{c['cut'][1:]}.\n" if c.get('cut') else '')
                + (f"\nNot profiled yet (the command was still running): {', '.join(pending)}.\n" if pending else ''))
    if not pending:
        print(f"wrote {c['out']}")

def variant_record(c, r):
    """One variant's entry in --out: tokens/s, memory (config's `memory` says which), parameters, MFU
    on CUDA; compiled: the loss check, its graphs, graph breaks, recompile-limit hits, whether it ran eager."""
    out = {x: r[x] for x in ('tps', 'mem', 'params', 'mfu', 'compile_diff', 'kernel', *COUNTS)
           if r.get(x) is not None}
    return {**out, 'eager': bool(ran_eager(r))} if c['compile'] else out


def check_bench(c):
    """The values and --out, before any work: a mistake found after the bench loses it."""
    check_device(c['device'])
    resolve_dtype(c['dtype'], 'cpu')
    if not c['variants'].replace(',', '').strip():
        raise ConfigError("variants is empty: name at least one (--variants=dot,ega), or all")
    if c['profile'] and not c['profile'].replace(',', '').strip():
        raise ConfigError("profile names no variant: --profile=dot,ega")
    for k in ('deadline_s', 'peak_tflops'):
        if c[k] < 0:
            raise ConfigError(f"need {k} >= 0 (0: {'no limit' if k == 'deadline_s' else 'PEAK_TFLOPS'}), got {c[k]:g}")
    for k, least in (('steps', 1), ('warmup', 0), ('top', 1), ('batch_size', 1)):
        if c[k] < least:
            raise ConfigError(f"need {k} >= {least}, got {c[k]}")
    if not 0.0 <= c['dropout'] < 1.0:
        raise ConfigError(f"need 0 <= dropout < 1, got {c['dropout']}")
    if c['out']:
        c['out'] = os.path.expanduser(c['out'])
        paths.check_output_file(c['out'], '--out', overwrite=c.get('overwrite', False),
                                ours=None if c['profile'] else bench_record)
