"""
Training throughput of attention variants, measured in one process.

    python bench.py                                  # every registered variant at the CPU study scale
    python bench.py --quick=True                     # a one-minute smoke test of every variant (CI)
    python bench.py --variants=dot,ega:rope --steps=30 --warmup=5
    python bench.py --variants=dot,ega,ega:none:ega_norm=window
    python bench.py --variants=dot,dot:learned:attn_impl=plain   # the fused kernel against the written-out path
    python bench.py --device=cuda --compile=True --variants=dot,dot:learned:compile_mode=reduce-overhead  # CUDA graphs
    python bench.py --compile=True                   # through torch.compile, each variant checked compiled
    python bench.py --variants=dot,fox --dtype=bfloat16   # the forward under autocast (memory: FoX's float32 logit)
    python bench.py --variants=dot,ega --dropout=0.1  # at the paper's training dropout (default: none)
    python bench.py --device=cuda --dtype=float32 --tf32=True   # CUDA, float32 with TF32 (default: bf16 autocast)
    python bench.py --variants=ega,fox --against=ega # the ratio column against ega (default: dot)
    python bench.py --variants=all --deadline_s=600  # done in 10 minutes: fewer steps, the cut said
    python bench.py --variants=dot,fox,conv_paper --kernels=True   # the attention op each step calls
    python bench.py --profile=causal_morlet          # where one variant's training step spends its time
    python bench.py --profile=dot,ega --steps=10 --out=results/bench/profiles.md   # several, written as markdown
    python bench.py --device=cuda --compile=True --profile=dot,ega --out=results/bench/profiles_gpu.md   # the compiled step
    python bench.py --help                           # every key and its default

A variant is `attn`, `attn:pos`, or `attn:pos:key=value:...` with any GPTConfig
option, `attn_impl` (the attention path: auto, sdpa, flex, plain), or `compile_mode`
(torch.compile's, with --compile=True: default, reduce-overhead, max-autotune-no-cudagraphs); `all` is
every registered attention variant with learned positions, then
dot attention with every other positional encoding. Each step is train.py's own
(train.forward_backward, then train.update: the gradients clipped, AdamW) on random
tokens, from 2026-12-04 (earlier tables: no clip); the figure is tokens/s from the median step
time after warm-up. The models are interleaved step by step (A B A B ...), so a
slow patch of the machine hits them all alike. Memory: on CUDA each variant's peak
allocated during a step with only its own model and optimizer on the GPU (a pass
after the timing, one variant at a time); on the CPU the tensors a forward saves for
backward (the activations, which grow with batch and variant, plus the weights the
matmuls keep). The dtype: auto is train.py's, bfloat16 autocast on CUDA (float16
where the GPU lacks bf16) and float32 elsewhere; float32 on CUDA is true float32
unless --tf32=True. On CUDA also the model FLOPs utilisation (MFU) against the GPU's
dense peak at the precision measured (`peak_tflops`, or known GPUs in PEAK_TFLOPS; n/a
where neither). With --compile=True every model is compiled on its own (compile_model)
and each variant's compiled graphs, graph breaks and recompile-limit hits are counted,
printed and written; a variant that ran eager is an error (exit 1). Arguments go
through the same typed configurator as train.py: a mistake is a one-line error with
exit code 2. --deadline_s bounds a bench that must end in time (a GPU command): a variant whose
compile would not fit is not benched, the warm-up and then the timing are cut short (one timed
step at least), and the header and --out say what was cut; --profile skips the variants left and
writes each table as it ends. A SIGTERM (a `timeout`) stops a bench the same way, at once.

The authors' own models, in the same loop beside ours: `python -m lab.authors --script=PATH
--bench=True ...` (lab/authors.py loads them and calls main with them as `extra`).

The tables of committed --out files (results/README.md's throughput table, results/bench/speed.md's
paper-size and authors' tables) and the speed goals they judge are the lab's:
`python -m lab.bench_tables --write=True`.
"""

import contextlib
import inspect
import json
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import types
from dataclasses import fields

import torch

import train
from configurator import ConfigError, coerce, describe, fail, load_config
from model import ATTN, CHOICES, GPT, IMPLS, POS, GPTConfig
from runtime import autocast as runtime_autocast
from runtime import COMPILE_MODES, amp_dtype, check_device, check_output_file, git_commit, resolve_device, versions

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
dropout = 0.0                            # every model's (the paper's training: 0.1, where the paths differ: on
                                         # CUDA flex takes no dropout); compiled, the loss check then is skipped
device = 'cpu'
compile = False
dtype = 'auto'                           # auto: bfloat16 on CUDA (float16 without bf16), float32 elsewhere;
                                         # or float32, bfloat16, float16 (the forward under autocast)
tf32 = False                             # CUDA with float32: TF32 matmuls and convolutions (MFU against the
                                         # TF32 peak); False: true float32
quick = False                            # tiny models, 2 timed steps: does every variant train at all
peak_tflops = 0.0                        # for MFU on CUDA, at the precision measured; 0: PEAK_TFLOPS
out = ''                                 # also write the results here as JSON (the ledger reads results/bench/)
against = 'dot'                          # the variant the ratio column divides by (it is benched too)
profile = ''                             # variants (comma-separated): a per-op table of each one's training
                                         # step (torch.profiler); with --out, written as markdown
top = 15                                 # rows of that table
kernels = False                          # also the attention ops each variant's step calls (kernel column)
deadline_s = 0.0                         # finish within this many seconds of bench.py's start: fewer
                                         # timed steps (and warm-up) than asked, the cut said; 0: no limit
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}
GPT_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
PROGRESS_S = 30.0            # seconds between progress lines on stderr
# what a bench keeps for its end when it has a deadline: after the timing, --kernels steps each model
# once eager and on CUDA the memory pass steps each once more, so FINISH_ROUNDS rounds' time and
# FINISH_S seconds (the JSON, a slow first eager step)
FINISH_ROUNDS, FINISH_S = 4, 10.0
# a compile cannot be cut short, and the variants after dot compile more: a variant starts only with
# COMPILE_MARGIN times the longest first step so far left (and FINISH_S)
COMPILE_MARGIN = 2.0
# CUDA graphs (compile_mode=reduce-overhead): the first call warms up, the second records, the third
# replays; a deadline cuts the warm-up no shorter than this, so that what is timed is a replay
GRAPH_WARMUP = 2
# SIGTERM (a step's `timeout`, 10 s before its SIGKILL) stops a bench as its deadline would, at once:
# set by on_sigterm, read after each step
STOP = {'term': False}
QUICK = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=4, steps=2, warmup=1)
COMPILE_TOL = {'float32': 1e-4, 'bfloat16': 3e-2, 'float16': 1e-2}   # relative, compiled vs eager loss
DTYPES = ('auto', 'float32', 'bfloat16', 'float16')
# dense peak TFLOPS (no sparsity; NVIDIA's datasheets, SXM where the name does not say) at each
# precision the bench measures: an autocast dtype, float32 with TF32 ('tf32'), or true float32. A
# GPU's name picks the longest key it contains (H100 PCIe before H100, L40S before L4)
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
# what dynamo's counters call a recompile-limit hit (torch 2.13: 'Dynamo recompile limit exceeded';
# earlier: 'recompile_limit reached', 'cache_size_limit reached'): the function runs eager after it
LIMIT_HIT = re.compile(r'recompile.?limit|cache.?size.?limit', re.IGNORECASE)


def all_variants():
    return list(ATTN) + [f'dot:{p}' for p in POS if p != 'learned']


def variant_config(spec, c):
    """GPTConfig for one `attn[:pos[:key=value...]]` spec at the bench scale."""
    attn, _, rest = spec.partition(':')
    pos, _, rest = rest.partition(':')
    kw = dict(n_layer=c['n_layer'], n_head=c['n_head'], n_embd=c['n_embd'], block_size=c['block_size'],
              dropout=c['dropout'], attn=attn, pos=pos or 'learned')
    for item in filter(None, rest.split(':')):
        key, eq, value = item.partition('=')
        if key in ('attn_impl', 'compile_mode'):    # the path and torch.compile's mode: not GPTConfig's
            continue
        if key not in GPT_DEFAULTS or not eq:
            raise ConfigError(f"variant {spec!r}: '{item}' is not key=value with a GPTConfig key")
        kw[key] = coerce(key, value, GPT_DEFAULTS[key], CHOICES.get(key), where=f"variant {spec!r}: ", cli=True)
    try:
        return GPTConfig(**kw)
    except ValueError as e:
        raise ConfigError(f"variant {spec!r}: {e}") from None


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


def check_impl(spec, impl, device, dropout=0.0):
    """A path the bench's training step cannot take: FlexAttention's backward runs on CUDA alone, and
    it drops no weights."""
    if impl == 'flex' and not device.startswith('cuda'):
        raise ConfigError(f"variant {spec!r}: attn_impl=flex trains on CUDA only (FlexAttention's backward); "
                          f"here use sdpa or plain")
    if impl == 'flex' and dropout > 0:
        raise ConfigError(f"variant {spec!r}: attn_impl=flex takes no dropout (here {dropout:g}): use auto, "
                          f"sdpa or plain")


def saved_bytes(model, x, y, amp=contextlib.nullcontext, plain=None):
    """Bytes of the tensors one forward (under amp()) saves for backward (each storage once). plain:
    the module whose gradients to clear, where model is a function calling it (compile_model)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with amp():
            _, loss = model(x, y)
    loss.backward()
    (model if plain is None else plain).zero_grad(set_to_none=True)
    return sum(seen.values())


def flops_per_token(cfg, n_params):
    """Training FLOPs per token, the usual estimate: 6 per parameter plus attention's 12 L T C."""
    return 6 * n_params + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def resolve_dtype(dtype, device):
    """--dtype=auto as train.py's (runtime.amp_dtype resolves both): bfloat16 autocast on CUDA (float16
    where the GPU lacks bf16), float32 elsewhere; any other name as given."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is not one of: {', '.join(DTYPES)}")
    return amp_dtype('cuda' if device.startswith('cuda') else 'cpu', dtype)


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
    """The forward's context for --dtype, as a factory: train.py's (runtime.autocast: autocast to it,
    nothing for float32, float16 only on CUDA)."""
    if c['dtype'] not in DTYPES[1:]:
        raise ConfigError(f"dtype={c['dtype']!r} is not one of: {', '.join(DTYPES)}")
    dev_type = 'cuda' if c['device'].startswith('cuda') else 'cpu'
    runtime_autocast(dev_type, c['dtype'])                      # its checks, before any work
    return lambda: runtime_autocast(dev_type, c['dtype'])[1]


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
    """One training step of a run, train.py's own: its micro-step (forward under amp(), backward through
    the loss scaler) and its update (the gradients clipped to train.py's grad_clip, AdamW). Returns the
    loss."""
    loss = train.forward_backward(r['model'], x, y, amp(), r['scaler'])
    train.update(r['plain'], r['opt'], r['scaler'], train.grad_clip)
    return loss


def park(r):
    """Moves a run's weights and optimizer state to the CPU (its gradients are None between steps);
    returns what unpark needs: each state tensor moved and its device (AdamW keeps its step count on
    the CPU unless fused or capturable: that one stays)."""
    moved = []
    for state in r['opt'].state.values():
        for key, v in state.items():
            if torch.is_tensor(v) and v.device.type != 'cpu':
                moved.append((state, key, v.device))
                state[key] = v.to('cpu')
    r['plain'].to('cpu')                  # in place: the optimizer's parameters are the same tensors
    return moved


def unpark(r, device, moved):
    r['plain'].to(device)
    for state, key, dev in moved:
        state[key] = state[key].to(dev)


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


def memory_alone(c, runs, x, y, amp):
    """CUDA: each run's peak memory allocated during a training step with only its own model and
    optimizer on the GPU (every other run parked on the CPU), one run at a time, after the timing.
    Returns them parked."""
    dev = c['device']
    parked = {name: park(r) for name, r in runs.items()}
    torch.cuda.empty_cache()
    for name, r in runs.items():
        unpark(r, dev, parked[name])
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        with tally(r, c['compile']):
            train_step(r, x, y, amp)
        torch.cuda.synchronize(dev)
        r['mem'] = torch.cuda.max_memory_allocated(dev)
        parked[name] = park(r)
        torch.cuda.empty_cache()


def out_of_time(c, started, rounds, warm, least=1):
    """After the rounds run (their seconds), the warm-up rounds to run: `warm`; or the rounds run, to
    time from the next round on, when the deadline (c['deadline_s'] after `started`) leaves no time for
    the rest of the warm-up (but not fewer than `least`); or None to stop now, with at least one round
    timed. A round's cost is the fastest round after the first (which compiles), FINISH_ROUNDS of them
    and FINISH_S kept for the end. A SIGTERM is a deadline passed. The cut is said in c['cut']."""
    done = len(rounds)
    if done >= warm + c['steps'] or done == warm:                   # done == warm: time one round
        return warm
    cost = min(rounds[1:]) if done > 1 else 0.0
    if time_left(c, started) >= cost * (1 + FINISH_ROUNDS) + FINISH_S or done < min(least, warm):
        return warm
    if done < warm:
        say_cut(c, f"warm-up cut at {done} of {c['warmup']} by {why_cut(c)}")
        return done
    say_cut(c, f"timing cut at {done - warm} of {c['steps']} steps by {why_cut(c)}")
    return None


def time_left(c, started):
    """Seconds to the deadline c['deadline_s'] after `started`: inf without one, -inf after a SIGTERM."""
    if STOP['term']:
        return -math.inf
    return c['deadline_s'] - (time.monotonic() - started) if c['deadline_s'] else math.inf


def why_cut(c):
    return 'SIGTERM' if STOP['term'] else f"deadline_s={c['deadline_s']:g}"


def say_cut(c, what):
    """Adds what a deadline cut to c['cut'], the sentence printed in the header and written."""
    c['cut'] = '; '.join(filter(None, [c.get('cut'), what]))


def no_time_to_start(c, started, firsts):
    """Whether a variant's first step (on CUDA, with --compile=True, its compile) might eat into the
    time a deadline keeps for the end (FINISH_S), taking it as COMPILE_MARGIN times the longest first
    step so far; after a SIGTERM, always. The reference is never dropped, nor the first variant."""
    return bool(firsts) and time_left(c, started) < COMPILE_MARGIN * max(firsts) + FINISH_S


def on_sigterm(signum, frame):
    """bench.py's SIGTERM: stop as a deadline would (the variants not started dropped, the warm-up
    then the timing cut, no kernel or memory pass) and write what was measured."""
    STOP['term'] = True


def bench(c, started=None, extra=None):
    """Times every variant of c, interleaved; returns c (settled, with warmup_run and steps_run, and
    `cut` where the deadline, counted from `started`, cut the timing) and the runs. extra: a function
    of the settled config giving more models to time beside them, {name: (model, the GPTConfig its
    FLOPs are counted at)} (lab/authors.py: the authors' own)."""
    started = time.monotonic() if started is None else started
    if c['quick']:
        c = {**c, **QUICK}
    c = settle(c)
    names = all_variants() if c['variants'] == 'all' else [v for v in c['variants'].split(',') if v]
    names += [c['against']] if c['against'] not in names else []      # the reference is always benched
    if not names or c['steps'] < 1 or c['warmup'] < 0 or c['batch_size'] < 1:
        raise ConfigError("need at least one variant, steps >= 1, warmup >= 0 and batch_size >= 1")
    amp = amp_context(c)
    cfgs = {name: variant_config(name, c) for name in names}    # every spec checked before any work
    impls = {name: variant_impl(name) for name in names}
    modes = {name: variant_mode(name, c['compile']) for name in names}
    for name, impl in impls.items():
        check_impl(name, impl, c['device'], cfgs[name].dropout)
    torch.manual_seed(c['seed'])
    models = {name: GPT(cfg).set_impl(impls[name]) for name, cfg in cfgs.items()}
    for name, (model, cfg) in (extra(c) if extra else {}).items():
        models[name], cfgs[name] = model, cfg
    runs = {}
    for name, model in models.items():
        model = model.to(c['device'])
        if isinstance(model, GPT):      # fused AdamW on any CUDA device ('cuda:1' too)
            opt, n_params = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), c['device']), model.num_params()
        else:   # an extra model (the authors'): AdamW over every parameter, as their scripts do
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
            n_params = sum(p.numel() for p in model.parameters())
        runs[name] = dict(plain=model, model=model, opt=opt, times=[], params=n_params,
                          flops=flops_per_token(cfgs[name], n_params), mem=0, scaler=scaler(c))
        if c['compile']:
            runs[name]['model'], c['compile_cache'] = compile_model(model, len(models), len(runs) - 1,
                                                                    modes.get(name, 'default'))
            runs[name].update(dict.fromkeys(COUNTS, 0))
    B, T, V = c['batch_size'], c['block_size'], GPTConfig.vocab_size
    x = torch.randint(V, (B, T), device=c['device'])
    y = torch.randint(V, (B, T), device=c['device'])
    cuda = c['device'].startswith('cuda')
    for r in runs.values():
        if c['compile']:
            with torch.no_grad(), amp():
                r['eager_loss'] = r['plain'](x, y)[1].item()      # before any step
        if not cuda:
            with tally(r, c['compile']):                            # compiled here, on the CPU
                r['mem'] = saved_bytes(r['model'], x, y, amp, r['plain'])
    warm, i, shown, rounds, firsts, dropped = c['warmup'], 0, time.time(), [], [], []
    least = GRAPH_WARMUP if 'reduce-overhead' in modes.values() else 1     # warm-up rounds a cut keeps
    while i < warm + c['steps']:
        if time.time() - shown > PROGRESS_S:   # a long bench says where it is
            shown = time.time()
            print(f"  round {i} of {warm + c['steps']} ({len(runs)} variants each), {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)
        t_round = time.monotonic()
        for name, r in list(runs.items()):
            if i == 0 and name != c['against'] and no_time_to_start(c, started, firsts):
                dropped.append(name)
                park(runs.pop(name))            # off the GPU: the memory pass measures each one alone
                continue
            with tally(r, c['compile']):                            # its counts read outside the timing
                t0 = time.perf_counter()
                loss = train_step(r, x, y, amp)
                if cuda:
                    torch.cuda.synchronize(c['device'])
                dt = time.perf_counter() - t0
            if i >= warm:
                r['times'].append(dt)
            if i == 0:
                firsts.append(dt)
            if i == 0 and c['compile']:
                r['compile_diff'] = abs(loss.item() - r['eager_loss'])
        i += 1
        rounds.append(time.monotonic() - t_round)
        if dropped and i == 1:
            c['dropped'] = dropped
            say_cut(c, f"not benched, by {why_cut(c)}: {', '.join(dropped)} (a first step took up to "
                       f"{max(firsts):.0f} s)")
        now = out_of_time(c, started, rounds, warm, least)
        if now is None:
            break
        warm = now
    c['warmup_run'], c['steps_run'] = warm, len(next(iter(runs.values()))['times'])
    if STOP['term']:                    # the step's SIGKILL comes 10 s after its SIGTERM: write now
        say_cut(c, 'no kernel or memory pass (SIGTERM)')
    for r in runs.values():
        r['tps'] = B * T / statistics.median(r['times'])
        if c['kernels'] and not STOP['term']:
            r['kernel'] = attention_kernels(r, x, y, amp)
        if cuda and STOP['term']:
            r['mem'] = None
    if cuda and not STOP['term']:
        memory_alone(c, runs, x, y, amp)
    return c, runs


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
    cfg, amp = variant_config(spec, c), amp_context(c)
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


def mfu_peak(gpu, prec, given=0.0):
    """The dense peak TFLOPS that MFU divides by at precision `prec` (precision()), and where it
    comes from: --peak_tflops (taken as that precision's), else the row of PEAK_TFLOPS whose key is
    the longest one in the GPU's name; None and why where neither."""
    if given:
        return given, f'--peak_tflops, taken as the {prec} peak'
    keys = [k for k in PEAK_TFLOPS if k in gpu]
    if not keys:
        return None, f"{gpu!r} is not in PEAK_TFLOPS: pass --peak_tflops (the GPU's dense {prec} peak)"
    k = max(keys, key=len)
    return PEAK_TFLOPS[k][prec], f'{k}, dense {prec}'


def mfu(c, r):
    """Model FLOPs utilisation on CUDA against the peak at the precision measured, or None off CUDA
    or where that peak is unknown."""
    if not c['device'].startswith('cuda'):
        return None
    peak, _ = mfu_peak(torch.cuda.get_device_name(c['device']), precision(c), c['peak_tflops'])
    return r['tps'] * r['flops'] / (peak * 1e12) if peak else None


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
        check_output_file(c['out'], '--out')


def main(argv, extra=None, after=None, prog='bench.py'):
    """extra: bench()'s; after: a function of the config and the runs, printing under the table; prog:
    what the command written into --out runs (lab/authors.py drives bench with all three)."""
    started = time.monotonic()                                 # deadline_s counts from here
    STOP['term'] = False
    before = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return run_main(argv, started, extra, after, ' '.join(['python', prog, *argv]))
    finally:
        signal.signal(signal.SIGTERM, before)
        STOP['term'] = False


def run_main(argv, started, extra, after, command):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS))
        return 0
    try:
        c = load_config(DEFAULTS, argv)
        if c['device'].startswith('cuda') and not torch.cuda.is_available():
            raise ConfigError(f"device={c['device']} but CUDA is not available")
        check_bench(c)
        c['device'] = resolve_device(c['device'])              # auto: cuda, mps or cpu
        if c['profile']:
            c = {**c, **QUICK} if c['quick'] else c
            if c['compile'] and c['warmup'] < 1:
                raise ConfigError("--profile with --compile=True compiles in the warm-up: need warmup >= 1")
            names = [v for v in c['profile'].split(',') if v]
            c = settle(c)
            for v in names:
                variant_config(v, c), variant_mode(v, c['compile'])     # every spec checked before any work
            tables, took = [], []
            for k, v in enumerate(names):       # each written as it comes: a cut or a crash keeps the rest
                left = time_left(c, started)
                if took and left < max(took) + FINISH_S:
                    c['cut'] = (f"not profiled, by {why_cut(c)}: {', '.join(names[k:])} "
                                f"(a variant took up to {max(took):.0f} s, {max(left, 0):.0f} s were left)")
                    print(c['cut'])
                    break
                t0 = time.monotonic()
                tables.append(profile_table({**c, 'profile': v}))
                took.append(time.monotonic() - t0)
                print(('\n\n' if k else '') + tables[-1], flush=True)
                if c['out']:
                    write_profiles(c, tables, command, pending=names[k + 1:])
            if c['out'] and c.get('cut'):
                write_profiles(c, tables, command)
            return 0
        c, runs = bench(c, started, extra)
    except ConfigError as e:
        return fail(e)
    cuda = c['device'].startswith('cuda')
    c['precision'] = precision(c)
    c['memory'] = 'peak allocated in a step, alone on the GPU' if cuda else 'saved for backward'
    if cuda:
        c['mfu_peak_tflops'], c['mfu_peak'] = mfu_peak(torch.cuda.get_device_name(c['device']), c['precision'],
                                                       c['peak_tflops'])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {c['device']}, "
          f"B={c['batch_size']} T={c['block_size']} L={c['n_layer']} nh={c['n_head']} C={c['n_embd']}, "
          f"compile={c['compile']}, {describe_precision(c)}, median of {c['steps_run']} steps after "
          f"{c['warmup_run']} warm-up" + (f" ({c['cut']})" if c.get('cut') else ''))
    if cuda:
        print(f"MFU against {c['mfu_peak_tflops']:g} TFLOPS ({c['mfu_peak']})" if c['mfu_peak_tflops'] else
              f"MFU n/a: {c['mfu_peak']}")
    print()
    ref_name = c['against']
    ref = runs[ref_name]['tps']
    mem = 'peak MiB, alone' if cuda else 'saved for backward, MiB'
    counted = ' graphs | graph breaks |' if c['compile'] else ''
    kern = ' attention |' if c['kernels'] else ''
    print(f"| variant | tokens/s | vs {ref_name} | {mem} | MFU ({c['precision']}) | params |{counted}{kern}\n"
          f"|---|---|---|---|---|---|{'---|---|' if counted else ''}{'---|' if kern else ''}")
    for name, r in runs.items():
        r['mfu'] = mfu(c, r)
        u = '-' if not cuda else 'n/a' if r['mfu'] is None else f"{r['mfu']:.1%}"
        mem_mib = '-' if r['mem'] is None else f"{r['mem'] / 2 ** 20:,.1f}"
        print(f"| {name} | {r['tps']:,.0f} | {r['tps'] / ref:.1%} | {mem_mib} | {u} | "
              f"{r['params']:,} |" + (f" {r['graphs']} | {r['graph_breaks']} |" if counted else '')
              + (f" {r.get('kernel', '-')} |" if kern else ''))
    if after:
        after(c, runs)
    error = '; '.join(filter(None, [eager_check(c, runs), compile_check(c, runs)])) if c['compile'] else ''
    if c['out']:
        write_json(c, runs, command)
    if error:
        return fail(error, 1)
    return 0


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


def write_json(c, runs, command):
    os.makedirs(os.path.dirname(os.path.abspath(c['out'])), exist_ok=True)
    code, diff = git_commit(with_diff=True)     # the code the figures are of: the commit and any change
    with open(c['out'], 'w') as f:
        json.dump(dict(command=command, date=time.strftime('%Y-%m-%d'),
                       time=time.strftime('%H:%M'), code=code, **({'diff': diff} if diff else {}),
                       torch=torch.__version__, versions=versions(), threads=torch.get_num_threads(), config=c,
                       variants={k: variant_record(c, r) for k, r in runs.items()}),
                  f, indent=1)
    print(f"wrote {c['out']}")


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
