"""
Training throughput of attention variants, measured in one process.

    python -m lab.bench                                  # every registered variant at the CPU study scale
    python -m lab.bench --quick=True                     # a one-minute smoke test of every variant (CI)
    python -m lab.bench --variants=dot,dot:learned:attn_impl=plain   # the fused kernel against the written-out path
    python -m lab.bench --device=cuda --compile=True --variants=dot,dot:learned:compile_mode=reduce-overhead  # CUDA graphs
    python -m lab.bench --compile=True                   # through torch.compile, each variant checked compiled
    python -m lab.bench --variants=dot,fox --dtype=bfloat16   # the forward under autocast (memory: FoX's float32 logit)
    python -m lab.bench --device=cuda --dtype=float32 --tf32=True   # CUDA, float32 with TF32 (default: bf16 autocast)
    python -m lab.bench --variants=all --deadline_s=600  # done in 10 minutes: fewer steps, the cut said
    python -m lab.bench --variants=dot,fox,conv_paper --kernels=True   # the attention op each step calls
    python -m lab.bench --profile=causal_morlet          # where one variant's training step spends its time
    python -m lab.bench --profile=dot,ega --steps=10 --out=results/bench/profiles.md   # several, written as markdown
    python -m lab.bench --device=cuda --compile=True --profile=dot,ega --out=results/bench/profiles_gpu.md   # the compiled step

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

import json
import math
import os
import signal
import statistics
import sys
import time

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from bench import flops_per_token, mfu_peak, saved_bytes, variant_config
from configurator import ConfigError, describe, fail, load_config
from lab.bench_parts import (COUNTS, QUICK, all_variants, amp_context, attention_kernels, check_bench, check_impl,
                             compile_check,
                             compile_model, describe_precision, eager_check, mfu, precision, profile_table,
                             scaler, settle, tally, train_step, variant_impl, variant_mode,
                             variant_record, write_profiles)
from model import GPT, GPTConfig
from lab.provenance import code_and_diff
from runtime import resolve_device, versions

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
overwrite = False                        # --out may replace a committed file (results/bench/...)
against = 'dot'                          # the variant the ratio column divides by (it is benched too)
profile = ''                             # variants (comma-separated): a per-op table of each one's training
                                         # step (torch.profiler); with --out, written as markdown
top = 15                                 # rows of that table
kernels = False                          # also the attention ops each variant's step calls (kernel column)
deadline_s = 0.0                         # finish within this many seconds of bench.py's start: fewer
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str))}

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
        check_impl(name, impl, c['device'], cfgs[name].dropout, cfgs[name].attn)
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
                r['mem'] = saved_bytes(r['model'], x, y, amp(), r['plain'])
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

def main(argv, extra=None, after=None, prog='-m lab.bench'):
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

def write_json(c, runs, command):
    os.makedirs(os.path.dirname(os.path.abspath(c['out'])), exist_ok=True)
    code, diff = code_and_diff()        # the code the figures are of: the commit and any change
    with open(c['out'], 'w') as f:
        json.dump(dict(command=command, date=time.strftime('%Y-%m-%d'),
                       time=time.strftime('%H:%M'), code=code, **({'diff': diff} if diff else {}),
                       torch=torch.__version__, versions=versions(), threads=torch.get_num_threads(), config=c,
                       variants={k: variant_record(c, r) for k, r in runs.items()}),
                  f, indent=1)
    print(f"wrote {c['out']}")


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
