"""
The first command on a GPU: one prepared run that cannot waste its minutes.

    bash scripts/gpu_first.sh                          # on the GPU machine ($OUT receives the report)
    python3 -m lab.gpu_first --plan_only=True          # the timeline it would follow, and its budget check
    python3 -m lab.gpu_first --device=cpu --toy=True --data_dir=data/shakespeare_char   # every phase, tiny, CPU
    bash scripts/gpu_first.sh --phases=env,probe,plan --probe_iters=5000 --probe_eval_interval=250
                                                       # a second command: the paper runs themselves
                                                       # (plan.json names the ones that fit, with all keys)

No CUDA line of this repository had run on a GPU before this command. It finishes inside
`deadline_s` (570 s) of its own start: every phase looks at the time left before it starts
anything, and skips, with a line in the report, what would not fit; a watchdog writes the report
and ends the command at the deadline whatever is running. In order:

1. env: python, torch, triton, CUDA and cuDNN versions, the GPU, its free and total memory, the
   SDPA backends enabled, the CPU cores.
2. preflight (at most `preflight_s`, 150 s):
   - workers: one process per run of study.py's 'paper' study (dot, ega, ega_mope, fox, causal_gauss,
     fox_mope_rel) compiles that run's training step at the paper scale (6 x 8 x 256, T = 256, batch 64,
     bf16 autocast, torch.compile, fused AdamW: train.py's own step), and one more compiles a few forms
     (compiled against eager: first loss, logits and gradients). They compile while the main process
     runs the two eager checks below; then each speed worker times its steps alone (ms/step, peak
     memory), and all of them at once (what the probe's runs will see when they share the GPU).
   - kernels: which SDPA kernel every variant gets in one bf16 training step (torch.profiler's op and
     kernel names: flash, efficient, cudnn, or the math path with full T x T weights); every registered
     attention with learned positions, dot with every other encoding, and a few compositions.
   - fused: logits and parameter gradients through model.attend (the fused kernel) against
     model.attend_plain (the same formula with explicit T x T weights), float32 and bf16 autocast, for
     every registered form with a few encodings: PASS / FAIL against a tolerance.
3. probe: the paper study's runs through train.py itself, all at once on the one GPU, as many steps as
   the measured step time and compile time leave room for (lr schedule of the 5000-step run, so the
   probe is the start of a paper run). Their checkpoints go to `scratch` (never under --out).
4. plan: from the measured numbers, the second command: how many steps of the six runs fit in one
   command, and how many commands the full 5000 steps take.

Writes six small files to --out, rewritten after every phase: env.json, preflight.json,
probe_logs.json (every run's log rows and console tail), plan.json, GPU.md (the report) and
console.txt. `--toy=True` runs every phase at tiny sizes on a CPU (a minute on an idle 2-core machine).
"""

import hashlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from configurator import ConfigError, describe, load_config  # noqa: E402

# -----------------------------------------------------------------------------
out = 'out-gpu-first'           # the report's folder ($OUT on the device machine): six small files
device = 'auto'                 # auto (cuda if there, else cpu), cpu, cuda, cuda:N
toy = False                     # tiny sizes everywhere (the CPU tests): every phase end to end in about a minute
plan_only = False               # print the phase budgets and the timeline, check them against deadline_s, exit
deadline_s = 570.0              # hard deadline, from this module's start (the device command's limit is 600 s)
preflight_s = 150.0             # cap of the preflight (workers, kernels, fused)
final_s = 20.0                  # kept at the end: stopping the runs still going (10 s grace), the last report
phases = 'env,kernels,fused,compile,speed,probe,plan'
data_dir = 'data/shakespeare_char'
scratch = '/tmp/gpu_first_runs'  # the probe's out_dirs (checkpoints) and the workers' files: never under --out
seed = 1337
variants = ''                   # kernels and fused: only these attention names (comma-separated); '' = all
fused_pos = 'learned,rope,alibi,mope_rel'   # the encodings each form is checked with (fused vs plain)
compile_forms = 'dot,ega,fox,causal_gauss'  # compiled against eager (attn or attn:pos)
speed_runs = ''                 # the paper study's runs to time at the paper scale; '' = all six
probe_runs = ''                 # the paper study's runs the probe trains; '' = all six
probe_parallel = 0              # probe runs at once on the GPU; 0 = all
probe_iters = 0                 # steps of each probe run; 0 = sized from the measurements
probe_min_iters = 100           # below this the probe is skipped (it would measure nothing)
probe_max_iters = 5000          # the paper runs' length: where the whole run fits, the probe is the study
probe_eval_interval = 0         # 0 = the paper's 250 from 1000 steps on, else a quarter of the run
probe_eval_iters = 10           # batches per split per eval (the paper's runs: 50)
probe_decay_iters = 5000        # lr_decay_iters of the probe runs: the paper run's schedule
worker = ''                     # internal: a worker's job file (the preflight's processes)
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith('_') and isinstance(v, (bool, int, float, str)) and k != 'REPO'}
PHASES = ('env', 'kernels', 'fused', 'compile', 'speed', 'probe', 'plan')
FILES = ('env.json', 'preflight.json', 'probe_logs.json', 'plan.json', 'GPU.md', 'console.txt')
STUDY = 'paper'
# compositions the kernel table adds to every attention (learned positions) and dot with each encoding
COMPOSITIONS = ('ega+fox', 'fox+conv_paper', 'fox+dconv', 'fox+causal_gauss', 'ega:mope', 'fox:mope_rel')
# fused against plain: (logits, gradients, floor), each difference relative to the plain formula in
# float32 (logits: their largest; gradients: per parameter, its largest, floored at `floor` x the largest
# of all): float32 tight (the mem-efficient kernel may use TF32), bf16 loose
TOL = {'float32': (2e-3, 1e-2, 1e-3), 'bfloat16': (5e-2, 0.15, 1e-2)}
COMPILE_TOL = {'loss': 3e-2, 'logits': 5e-2, 'grads': 1e-1}     # compiled vs eager under bf16 autocast
# the sizes: real (the GPU) and toy (the CPU tests)
SIZES = {
    False: dict(kernel=dict(n_layer=1, n_head=8, n_embd=256, block_size=256, batch=4),
                fused=dict(n_layer=1, n_head=8, n_embd=256, block_size=256, batch=2),
                compile=dict(n_layer=1, n_head=8, n_embd=256, block_size=256, batch=8),
                speed=dict(), warm=3, alone_steps=30, shared_s=5.0, backend='inductor', speed_backend='inductor',
                log_interval=10,
                kernels_cap=25.0, fused_cap=40.0, measure_cap=25.0, threads=2),
    True: dict(kernel=dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch=2),
               fused=dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch=2),
               compile=dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch=2),
               speed=dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4),
               warm=1, alone_steps=3, shared_s=1.0, backend='eager', speed_backend='', log_interval=1,
               kernels_cap=15.0, fused_cap=10.0, measure_cap=30.0, threads=1),
}
TOY_TRAIN = ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=16', '--batch_size=4',
             '--warmup_iters=2', '--compile=False']
# what the timeline assumes where nothing is measured yet (plan_only, and the probe's sizing where a
# measurement is missing); each is named as an assumption wherever it is used
ASSUMED = {
    False: dict(env_s=15.0, launch_s=3.0, worker_start_s=15.0, compile_s=60.0, kernel_s=0.5, fused_s=0.15,
                step_ms=25.0, share_gain=1.0, train_start_s=20.0, eval_compile_frac=0.6, stop_grace_s=10.0),
    True: dict(env_s=5.0, launch_s=1.0, worker_start_s=15.0, compile_s=3.0, kernel_s=0.3, fused_s=0.1,
               step_ms=30.0, share_gain=1.0, train_start_s=10.0, eval_compile_frac=0.0, stop_grace_s=10.0),
}
ASSUMPTION_TEXT = {
    'env_s': 'seconds to import torch and start CUDA',
    'worker_start_s': 'seconds for a worker process to start (python, torch, CUDA)',
    'compile_s': "seconds to compile a paper-scale training step, with the other workers compiling too",
    'step_ms': 'ms per paper-scale training step, compiled, alone on the GPU',
    'share_gain': 'throughput gain of runs sharing the GPU (1: P runs at once each run P times slower)',
    'train_start_s': "seconds from train.py's launch to its first eval, compile aside (python, torch, "
                     "data, the causality audit)",
    'eval_compile_frac': "train.py's eval graph compiles in this fraction of the training graph's time",
}
PAPER_STEPS, PAPER_EVAL_INTERVAL, PAPER_EVAL_ITERS = 5000, 250, 50
DEVICE_TIMEOUT_S = 590


class Refused(Exception):
    """A budget that cannot hold the plan: a one-line error, exit 2."""


# ----------------------------------------------------------------------------- small helpers


class Clock:
    def __init__(self, budget):
        self.t0, self.budget = time.time(), budget

    def now(self):
        return time.time() - self.t0

    def left(self):
        return self.budget - self.now()


def first_line(e):
    text = f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else str(e)
    return (text.strip().splitlines() or [''])[0][:300]


def csv(s):
    return [x.strip() for x in s.split(',') if x.strip()]


def write_atomic(path, text):
    tmp = os.path.join(os.path.dirname(path), '.' + os.path.basename(path) + '.tmp')
    with open(tmp, 'w') as f:
        f.write(text)
    os.replace(tmp, path)


def dumps(obj, limit=15 << 20, indent=1):
    """JSON, shrunk under `limit` bytes (the device returns files of at most 16 MiB): the per-lag
    attention weights go first, then the console tails."""
    text = json.dumps(obj, indent=indent, default=str)
    if len(text) > limit:
        obj = json.loads(text)
        for run in obj.get('runs', []):
            for row in run.get('rows', []):
                row.pop('attn_lag', None)
            run['shrunk'] = 'attn_lag dropped: the file would pass 15 MiB'
        text = json.dumps(obj, indent=indent, default=str)
    if len(text) > limit:
        for run in obj.get('runs', []):
            run['tail'] = run.get('tail', [])[-5:]
            run['rows'] = [r for r in run.get('rows', []) if r.get('kind') != 'train' or r['iter'] % 100 == 0]
        text = json.dumps(obj, indent=indent, default=str)
    return text


def spec_label(attn, pos):
    return attn if pos == 'learned' else f"{attn}:{pos}"


def parse_spec(spec):
    attn, _, pos = spec.partition(':')
    return attn, pos or 'learned'


def paper_runs(names=''):
    """study.py's 'paper' runs as (name, config files, overrides, seed), in the study's order."""
    import study
    runs = [(name, list(cf), list(ov), own[0]) for name, cf, ov, own in study.STUDIES[STUDY]['runs']]
    if names:
        known = [r[0] for r in runs]
        bad = [n for n in csv(names) if n not in known]
        if bad:
            raise ConfigError(f"{bad[0]!r} is not a run of study '{STUDY}': one of {', '.join(known)}")
        runs = [r for r in runs if r[0] in csv(names)]
    return runs


def run_config(run):
    """train.py's config of a paper run (defaults, its config files, its overrides), as a dict."""
    import train
    _, files, overrides, _ = run
    return load_config(train.DEFAULTS, [os.path.join(REPO, f) for f in files] + overrides, train.CHOICES)


def gpt_fields(cfg):
    from dataclasses import fields
    from model import GPTConfig
    return {f.name: cfg[f.name] for f in fields(GPTConfig) if f.name in cfg and f.name != 'vocab_size'}


def kernel_specs(only=''):
    """The kernel table's rows: every attention with learned positions, dot with every other encoding,
    then COMPOSITIONS (each 'attn' or 'attn:pos')."""
    from model import ATTN, POS
    specs = [a for a in ATTN] + [f'dot:{p}' for p in POS if p != 'learned'] + list(COMPOSITIONS)
    if only:
        keep = set(csv(only))
        specs = [s for s in specs if set(parse_spec(s)[0].split('+')) & keep]
    return specs


def attn_forms(only=''):
    """Every form of each registered attention: its name and each combination of the options it reads
    that have a fixed set of values (as tests/test_model.py's forms('attn')). {key: GPTConfig fields}."""
    from itertools import product
    from model import ATTN, CHOICES
    out_ = {}
    for name, v in ATTN.items():
        if only and name not in csv(only):
            continue
        opts = [o for o in v.options if o in CHOICES]
        for vals in product(*(CHOICES[o] for o in opts)):
            key = ' '.join([name] + [f'{o}={x}' for o, x in zip(opts, vals)])
            out_[key] = {'attn': name, **dict(zip(opts, vals))}
    return out_


def code_ids():
    """The code this command ran: git HEAD where there is a .git, and short sha256 of the files that
    matter (the device gets a copy of the working tree, maybe without .git)."""
    ids = {}
    try:
        head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], cwd=REPO,
                               capture_output=True, text=True, timeout=5)
        if head.returncode == 0:
            ids['git'] = head.stdout.strip() + ('+dirty' if dirty.stdout.strip() else '')
    except (OSError, subprocess.SubprocessError):
        pass
    for f in ('model.py', 'train.py', 'runtime.py', 'causality.py', 'lab/gpu_first.py'):
        try:
            with open(os.path.join(REPO, f), 'rb') as fh:
                ids[f] = hashlib.sha256(fh.read()).hexdigest()[:12]
        except OSError:
            ids[f] = 'missing'
    return ids


# ----------------------------------------------------------------------------- the context


class Ctx:
    """Everything a phase reads and writes: the config, the clock, the report's data, the children."""

    def __init__(self, c, clock):
        self.c, self.clock = c, clock
        self.size, self.assumed = SIZES[c.toy], ASSUMED[c.toy]
        self.phases = csv(c.phases)
        self.status = {}            # phase -> dict(status, note, start_s, seconds)
        self.env, self.kernels, self.fused, self.compile, self.speed = {}, [], [], [], []
        self.shared = {}
        self.probe = {}
        self.plan = {}
        self.children = []          # Popen of every process this command started
        self.workers = {}           # name -> dict(proc, job, dir)
        self.dev = 'cpu'
        self.lock = threading.RLock()     # the SIGTERM handler may write while the main thread does
        self.current, self.current_start = '', 0.0
        self.ended = False

    def say(self, msg):
        print(f"[{self.clock.now():6.1f}s] {msg}", flush=True)

    def record(self, phase, status, note='', start=None):
        self.status[phase] = dict(status=status, note=note, start_s=round(start if start is not None
                                                                         else self.clock.now(), 1),
                                  seconds=round(self.clock.now() - start, 1) if start is not None else 0.0)

    def kill_children(self, grace=0.0):
        for p in self.children:
            if p.poll() is None:
                try:
                    p.terminate() if grace else p.kill()
                except OSError:
                    pass
        t = time.time()
        for p in self.children:
            try:
                p.wait(timeout=max(0.1, grace - (time.time() - t)))
            except subprocess.TimeoutExpired:
                p.kill()
            except OSError:
                pass


def run_phase(ctx, name, fn, need_s=0.0):
    """Run one phase unless it is not asked for or cannot fit; record its status; an exception is
    recorded as FAILED with its first line (the traceback goes to the console) and the next phase
    runs. The report is rewritten after every phase."""
    c = ctx.c
    if name not in ctx.phases:
        ctx.record(name, 'skipped', 'not asked for (--phases)')
        return
    left = ctx.clock.left() - c.final_s
    if left < need_s:
        ctx.record(name, 'skipped', f"needs about {need_s:.0f} s, {max(left, 0):.0f} s were left")
        ctx.say(f"{name}: skipped, needs about {need_s:.0f} s, {max(left, 0):.0f} s left")
        write_all(ctx)
        return
    start = ctx.clock.now()
    ctx.current, ctx.current_start = name, start
    ctx.say(f"{name}: start ({ctx.clock.left():.0f} s left)")
    try:
        note = fn(ctx) or ''
        status = next((k for k in ('partial', 'skipped') if note.startswith(k + ': ')), 'ok')
        note = note[len(status) + 2:] if status != 'ok' else note
    except Exception as e:      # noqa: BLE001 - one phase failing must not end the command
        traceback.print_exc()
        status, note = 'FAILED', first_line(e)
    ctx.record(name, status, note, start)
    ctx.say(f"{name}: {status} in {ctx.clock.now() - start:.1f} s{': ' + note if note else ''}")
    ctx.current = ''
    write_all(ctx)


# ----------------------------------------------------------------------------- 1. environment


def phase_env(ctx):
    import platform
    import torch
    c, e = ctx.c, {}
    e['python'] = platform.python_version()
    e['executable'] = sys.executable
    e['torch'] = torch.__version__
    e['cuda'] = torch.version.cuda
    try:
        import triton
        e['triton'] = triton.__version__
    except Exception as ex:     # noqa: BLE001
        e['triton'] = f'absent ({first_line(ex)})'
    e['cpu_cores'] = os.cpu_count()
    try:
        e['usable_cores'] = len(os.sched_getaffinity(0))
    except AttributeError:
        e['usable_cores'] = os.cpu_count()
    e['torch_threads'] = torch.get_num_threads()
    e['device'] = ctx.dev
    e['cuda_available'] = torch.cuda.is_available()
    e['inductor_cache'] = os.environ.get('TORCHINDUCTOR_CACHE_DIR', '(default: /tmp/torchinductor_<user>)')
    if ctx.dev.startswith('cuda'):
        i = torch.device(ctx.dev).index or 0
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        e.update(gpu=torch.cuda.get_device_name(i), capability='.'.join(map(str, torch.cuda.get_device_capability(i))),
                 sm_count=p.multi_processor_count, mem_free_mib=round(free / 2**20), mem_total_mib=round(total / 2**20),
                 gpus=torch.cuda.device_count(), bf16=torch.cuda.is_bf16_supported(),
                 cudnn=torch.backends.cudnn.version())
        sdpa = {}
        for name in ('flash_sdp_enabled', 'mem_efficient_sdp_enabled', 'math_sdp_enabled', 'cudnn_sdp_enabled',
                     'is_flash_attention_available'):
            fn = getattr(torch.backends.cuda, name, None)
            sdpa[name] = fn() if fn else 'absent in this torch'
        e['sdpa'] = sdpa
        e['tf32'] = dict(matmul=torch.backends.cuda.matmul.allow_tf32, cudnn=torch.backends.cudnn.allow_tf32)
        try:
            smi = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,memory.total,clocks.max.sm,'
                                  'power.limit', '--format=csv,noheader'], capture_output=True, text=True, timeout=10)
            e['nvidia_smi'] = smi.stdout.strip() or smi.stderr.strip()[:200]
        except (OSError, subprocess.SubprocessError) as ex:
            e['nvidia_smi'] = f'not run: {first_line(ex)}'
    try:
        du = shutil.disk_usage(os.path.dirname(os.path.abspath(c.scratch)) or '/')
        e['scratch_free_gib'] = round(du.free / 2**30, 1)
    except OSError:
        pass
    e['code'] = code_ids()
    ctx.env.update(e)
    ctx.say(f"env: python {e['python']}, torch {e['torch']}, CUDA {e['cuda']}, triton {e['triton']}, "
            f"{e.get('gpu', 'no GPU')}, {e['cpu_cores']} cores"
            + (f", {e['mem_free_mib']:,} of {e['mem_total_mib']:,} MiB free, SDPA {e['sdpa']}" if 'gpu' in e else ''))


# ----------------------------------------------------------------------------- 2a. workers (compile, speed)


def launch_workers(ctx):
    """Start the preflight's worker processes: one per paper run to time (speed) and one for the
    compiled-against-eager check. They compile while the main process runs kernels and fused."""
    c, size = ctx.c, ctx.size
    wdir = os.path.join(c.scratch, 'preflight')
    if os.path.isdir(wdir):
        shutil.rmtree(wdir)
    os.makedirs(wdir)
    jobs = []
    deadline = time.time() + ctx.clock.left() - c.final_s
    if 'speed' in ctx.phases:
        names = c.speed_runs or ('dot,fox_mope_rel' if c.toy else '')
        for run in paper_runs(names):
            cfg = run_config(run)
            train_keys = dict(batch_size=cfg['batch_size'], learning_rate=cfg['learning_rate'],
                              weight_decay=cfg['weight_decay'], beta1=cfg['beta1'], beta2=cfg['beta2'],
                              grad_clip=cfg['grad_clip'])
            g = gpt_fields(cfg)
            g.update({k: v for k, v in size['speed'].items() if k in g})
            train_keys.update({k: v for k, v in size['speed'].items() if k in train_keys})
            jobs.append(dict(kind='speed', name=run[0], cfg=g, train=train_keys))
    if 'compile' in ctx.phases:
        forms = csv(c.compile_forms)
        if c.toy and c.compile_forms == DEFAULTS['compile_forms']:
            forms = forms[:1]
        jobs.append(dict(kind='check', name='compile_check', forms=forms, cfg=dict(size['compile'])))
    n = len(jobs)
    cores = ctx.env.get('usable_cores') or os.cpu_count() or 2
    for job in jobs:
        job.update(dir=wdir, device=ctx.dev, seed=c.seed, warm=size['warm'],
                   backend=size['speed_backend'] if job['kind'] == 'speed' else size['backend'],
                   alone_steps=size['alone_steps'], threads=size['threads'], deadline=deadline,
                   vocab_size=65)
        path = os.path.join(wdir, f"{job['name']}.job.json")
        with open(path, 'w') as f:
            json.dump(job, f)
        env = dict(os.environ, PYTHONUNBUFFERED='1', TORCHINDUCTOR_COMPILE_THREADS=str(max(2, cores // max(n, 1))))
        log = open(os.path.join(wdir, f"{job['name']}.console.txt"), 'w')
        proc = subprocess.Popen([sys.executable, '-m', 'lab.gpu_first', f'--worker={path}'], cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        ctx.children.append(proc)
        ctx.workers[job['name']] = dict(proc=proc, job=job, dir=wdir, t0=ctx.clock.now())
    ctx.say(f"workers: started {n} ({', '.join(ctx.workers)}), compile threads {max(2, cores // max(n, 1))} each")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def worker_tail(w, n=3):
    try:
        with open(os.path.join(w['dir'], f"{w['job']['name']}.console.txt")) as f:
            lines = [x.rstrip() for x in f if x.strip() and 'USDT' not in x]
        return lines[-n:]
    except OSError:
        return []


def worker_error(w):
    err = read_json(os.path.join(w['dir'], f"{w['job']['name']}.error.json"))
    if err:
        return err['error']
    tail = worker_tail(w, 1)
    return f"exit {w['proc'].returncode}" + (f": {tail[-1]}" if tail else '')


def collect_workers(ctx, preflight_end):
    """Wait for the workers' compiles (until the preflight's end less the measuring time), then time
    each speed worker alone and all of them at once; collect the compile check."""
    c, size = ctx.c, ctx.size
    if not ctx.workers:
        return 'no workers were started'
    speed = {n: w for n, w in ctx.workers.items() if w['job']['kind'] == 'speed'}
    check = ctx.workers.get('compile_check')
    ready_by = min(preflight_end - size['measure_cap'], ctx.clock.budget - c.final_s - 5)

    def ready(n, w):
        return os.path.exists(os.path.join(w['dir'], f'{n}.ready.json'))

    while ctx.clock.now() < ready_by:
        waiting = [n for n, w in speed.items() if not ready(n, w) and w['proc'].poll() is None]
        check_running = check is not None and check['proc'].poll() is None
        if not waiting and not check_running:
            break
        time.sleep(0.2)
    # each speed worker: its compile, then alone, one after another
    notes = []
    for n, w in speed.items():
        row = dict(run=n, cfg={k: w['job']['cfg'].get(k) for k in ('attn', 'pos', 'n_layer', 'n_embd',
                                                                   'block_size', 'dropout')},
                   batch_size=w['job']['train']['batch_size'])
        ctx.speed.append(row)
        r = read_json(os.path.join(w['dir'], f'{n}.ready.json'))
        if r is None:
            if w['proc'].poll() is None:
                row['status'] = f"compile not finished in {ctx.clock.now() - w['t0']:.0f} s (the preflight cap)"
                w['proc'].kill()
            else:
                row['status'] = 'FAILED: ' + worker_error(w)
            notes.append(f"{n}: {row['status']}")
            continue
        row.update(r)
        if ctx.clock.now() > preflight_end - 2:
            row['status'] = 'compiled; not timed (the preflight cap)'
            continue
        open(os.path.join(w['dir'], f'{n}.go'), 'w').close()
        until = time.time() + max(5.0, min(20.0, preflight_end - ctx.clock.now() - 2))
        while time.time() < until and w['proc'].poll() is None and \
                not os.path.exists(os.path.join(w['dir'], f'{n}.alone.json')):
            time.sleep(0.05)
        a = read_json(os.path.join(w['dir'], f'{n}.alone.json'))
        if a is None:
            row['status'] = 'FAILED: ' + (worker_error(w) if w['proc'].poll() is not None
                                          else 'no alone timing in time')
            notes.append(f"{n}: {row['status']}")
            continue
        row.update(a)
        row['status'] = 'ok'
        ctx.say(f"speed {n}: compile {row['compile_s']:.1f} s, {row['ms']:.1f} ms/step alone, "
                f"peak {row['peak_mib']:,.0f} MiB")
        write_all(ctx)
    # all at once
    timed = [r['run'] for r in ctx.speed if r.get('status') == 'ok']
    go = os.path.join(next(iter(ctx.workers.values()))['dir'], 'all.go')
    if len(timed) >= 2 and ctx.clock.now() + size['shared_s'] + 3 < preflight_end + 5:
        t_start = time.time() + 0.5
        with open(go + '.tmp', 'w') as f:
            json.dump(dict(t_start=t_start, dur=size['shared_s']), f)
        os.replace(go + '.tmp', go)
        until = t_start + size['shared_s'] + 10
        while time.time() < until and not all(
                os.path.exists(os.path.join(ctx.workers[n]['dir'], f'{n}.shared.json')) or
                ctx.workers[n]['proc'].poll() is not None for n in timed):
            time.sleep(0.05)
        steps, serial_s = 0, 0.0
        for row in ctx.speed:
            s = read_json(os.path.join(ctx.workers[row['run']]['dir'], f"{row['run']}.shared.json")) \
                if row['run'] in timed else None
            if s and s['steps']:
                row['shared_ms'], row['shared_steps'] = s['ms'], s['steps']
                steps += s['steps']
                serial_s += s['steps'] * row['ms'] / 1000       # the same steps one run after another
        ctx.shared = dict(runs=len(timed), seconds=size['shared_s'], steps=steps,
                          steps_per_s=round(steps / size['shared_s'], 2),
                          gain=round(serial_s / size['shared_s'], 2) if serial_s else None)
        ctx.say(f"speed, {len(timed)} at once: {steps} steps in {size['shared_s']:g} s; one after another "
                f"they take {serial_s:.1f} s (gain x{ctx.shared['gain']}, measured)")
    else:
        if len(timed) >= 2:
            notes.append('shared timing skipped: the preflight cap')
        open(go, 'w').close()           # an empty go: the workers leave
    # the compile check
    if check is not None:
        until = max(ctx.clock.t0 + preflight_end, time.time() + 1)
        while time.time() < until and check['proc'].poll() is None:
            time.sleep(0.1)
        res = read_json(os.path.join(check['dir'], 'compile_check.check.json')) or []
        done = {r['form'] for r in res}
        ctx.compile.extend(res)
        for f in check['job']['forms']:
            if f not in done:
                ctx.compile.append(dict(form=f, status='not finished by the preflight cap' if check['proc'].poll()
                                        is None else 'FAILED: ' + worker_error(check)))
        if check['proc'].poll() is None:
            check['proc'].kill()
            notes.append('compile check: stopped at the preflight cap')
    # what they had to give is read: none may hold the GPU or the cores through the probe
    until = time.time() + 1.0
    while time.time() < until and any(w['proc'].poll() is None for w in ctx.workers.values()):
        time.sleep(0.05)
    for w in ctx.workers.values():
        if w['proc'].poll() is None:
            w['proc'].kill()
            w['proc'].wait()
    return ('partial: ' + '; '.join(notes)) if notes else ''


# ----------------------------------------------------------------------------- the workers themselves


def grads_of(m):
    return {n: p.grad.detach().float().clone() for n, p in m.named_parameters() if p.grad is not None}


def rel_diff(a, b, ref=None):
    """max |a - b| relative to max |ref| (default b)."""
    ref = b if ref is None else ref
    d = (a - b).abs().max().item()
    return d / max(ref.abs().max().item(), 1e-6) if math.isfinite(d) else float('inf')


def grad_diff(ga, gb, ref=None, floor=0.0):
    """The worst parameter's max |ga - gb|, relative to its largest gradient in `ref` (default gb),
    floored at `floor` (round-off of a gradient that cancels to about 0, such as the bias of EGA's
    z-normalised energy, is not a difference); (value, parameter name). A parameter with a gradient on
    one side only is infinite."""
    ref = gb if ref is None else ref
    if set(ga) != set(gb):
        return float('inf'), sorted(set(ga) ^ set(gb))[0]
    worst, name = 0.0, ''
    for n, g in gb.items():
        d = (ga[n] - g).abs().max().item()
        r = d / max(ref[n].abs().max().item(), floor, 1e-12) if math.isfinite(d) else float('inf')
        if r > worst or not math.isfinite(r):
            worst, name = r, n
    return worst, name


def worker_main(path):
    """A preflight worker: 'speed' (a paper run's compiled training step, timed alone and with the
    others) or 'check' (compiled against eager, form by form). Talks to the main process by files."""
    with open(path) as f:
        job = json.load(f)
    d, name = job['dir'], job['name']
    try:
        (speed_worker if job['kind'] == 'speed' else check_worker)(job)
        return 0
    except Exception as e:      # noqa: BLE001
        traceback.print_exc()
        with open(os.path.join(d, f'{name}.error.json'), 'w') as f:
            json.dump(dict(error=first_line(e)), f)
        return 1


def wait_for(path, deadline, poll=0.02):
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError(f"no {os.path.basename(path)} before the deadline")
        time.sleep(poll)


def setup_torch(job):
    import torch
    from runtime import autocast
    torch.set_num_threads(job['threads'])
    dev = job['device']
    dtype_name, _ = autocast(dev.split(':')[0], 'auto')
    if dev.startswith('cuda'):
        torch.backends.cuda.matmul.allow_tf32 = True        # as train.py
        torch.backends.cudnn.allow_tf32 = True
    return torch, dev, dtype_name


def amp_ctx(torch, dev, dtype_name):
    import contextlib
    if dtype_name == 'float32':
        return contextlib.nullcontext()
    return torch.autocast(dev.split(':')[0], dtype=getattr(torch, dtype_name))


def sync(torch, dev):
    if dev.startswith('cuda'):
        torch.cuda.synchronize()


def graph_breaks():
    try:
        from torch._dynamo.utils import counters
        return sum(counters['graph_break'].values())
    except Exception:       # noqa: BLE001
        return None


def speed_worker(job):
    """train.py's training step of one paper run (the same model, AdamW, autocast, clip, compile), its
    first step (compile) timed, then `alone_steps` steps when the main process says go, then as many
    steps as fit in the shared window, all workers at once."""
    torch, dev, dtype_name = setup_torch(job)
    from model import GPT, GPTConfig
    d, name, t = job['dir'], job['name'], job['train']
    cuda = dev.startswith('cuda')
    cfg = GPTConfig(vocab_size=job['vocab_size'], **job['cfg'])
    torch.manual_seed(job['seed'])
    raw = GPT(cfg).to(dev)
    opt = raw.configure_optimizers(t['weight_decay'], t['learning_rate'], (t['beta1'], t['beta2']), dev.split(':')[0])
    scaler = torch.amp.GradScaler(dev.split(':')[0], enabled=dtype_name == 'float16')
    m = torch.compile(raw, backend=job['backend']) if job['backend'] else raw
    B, T = t['batch_size'], cfg.block_size
    g = torch.Generator().manual_seed(job['seed'])
    x = torch.randint(cfg.vocab_size, (B, T), generator=g).to(dev)
    y = torch.randint(cfg.vocab_size, (B, T), generator=g).to(dev)

    def step():
        with amp_ctx(torch, dev, dtype_name):
            _, loss = m(x, y)
        scaler.scale(loss).backward()
        if t['grad_clip'] > 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(raw.parameters(), t['grad_clip'])
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.item()          # a sync, as train.py's loss_sum.item()

    t0 = time.perf_counter()
    first = step()
    sync(torch, dev)
    compile_s = time.perf_counter() - t0
    for _ in range(job['warm']):
        step()
    first_peak = 0.0
    if cuda:
        first_peak = round(torch.cuda.max_memory_allocated() / 2**20, 1)      # compile and warm-up steps
        torch.cuda.reset_peak_memory_stats()
    with open(os.path.join(d, f'{name}.ready.json.tmp'), 'w') as f:
        json.dump(dict(compile_s=round(compile_s, 2), first_loss=first, dtype=dtype_name,
                       params=raw.num_params(), graph_breaks=graph_breaks(), first_peak_mib=first_peak), f)
    os.replace(os.path.join(d, f'{name}.ready.json.tmp'), os.path.join(d, f'{name}.ready.json'))
    wait_for(os.path.join(d, f'{name}.go'), job['deadline'])
    times = []
    for _ in range(job['alone_steps']):
        t1 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t1)
    ms = statistics.median(times) * 1000
    alone = dict(ms=round(ms, 2), tok_s=round(B * T / ms * 1000), steps=len(times))
    if cuda:
        alone.update(peak_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1),
                     reserved_mib=round(torch.cuda.max_memory_reserved() / 2**20, 1))
    else:
        alone.update(peak_mib=0.0, reserved_mib=0.0)
    with open(os.path.join(d, f'{name}.alone.json.tmp'), 'w') as f:
        json.dump(alone, f)
    os.replace(os.path.join(d, f'{name}.alone.json.tmp'), os.path.join(d, f'{name}.alone.json'))
    wait_for(os.path.join(d, 'all.go'), job['deadline'])
    go = read_json(os.path.join(d, 'all.go'))
    if not go:
        return
    while time.time() < go['t_start']:
        time.sleep(0.001)
    times = []
    while time.time() < go['t_start'] + go['dur']:
        t1 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t1)
    with open(os.path.join(d, f'{name}.shared.json'), 'w') as f:
        json.dump(dict(steps=len(times), ms=round(statistics.median(times) * 1000, 2) if times else None), f)


def check_worker(job):
    """Compiled against eager, form by form: the same weights and batch through the eager model and
    torch.compile (first call: compile and one forward and backward, timed), its loss, logits and
    gradients compared; then one more compiled step and one eager step, timed. dropout 0 (compiled and
    eager dropout draw different masks). Results appended to compile_check.check.json as they come."""
    torch, dev, dtype_name = setup_torch(job)
    from model import GPT, GPTConfig
    d = job['dir']
    size = dict(job['cfg'])
    B = size.pop('batch')
    results = []
    for form in job['forms']:
        attn, pos = parse_spec(form)
        row = dict(form=form, dtype=dtype_name)
        try:
            torch.manual_seed(job['seed'])
            cfg = GPTConfig(attn=attn, pos=pos, dropout=0.0, vocab_size=job['vocab_size'], **size)
            m = GPT(cfg).to(dev).train()
            g = torch.Generator().manual_seed(job['seed'])
            x = torch.randint(cfg.vocab_size, (B, cfg.block_size), generator=g).to(dev)
            y = torch.randint(cfg.vocab_size, (B, cfg.block_size), generator=g).to(dev)

            def run(model):
                m.zero_grad(set_to_none=True)
                with amp_ctx(torch, dev, dtype_name):
                    logits, loss = model(x, y)
                loss.backward()
                sync(torch, dev)
                return logits.detach().float(), loss.item(), grads_of(m)
            le, loss_e, ge = run(m)
            t1 = time.perf_counter()
            run(m)
            eager_ms = (time.perf_counter() - t1) * 1000
            breaks = graph_breaks()
            cm = torch.compile(m, backend=job['backend']) if job['backend'] else m
            t0 = time.perf_counter()
            lc, lossc, gc = run(cm)
            row['compile_s'] = round(time.perf_counter() - t0, 2)
            t1 = time.perf_counter()
            run(cm)
            row['step_ms'] = round((time.perf_counter() - t1) * 1000, 2)
            row['eager_ms'] = round(eager_ms, 2)
            b2 = graph_breaks()
            row['graph_breaks'] = None if breaks is None or b2 is None else b2 - breaks
            row['loss_eager'], row['loss_compiled'] = loss_e, lossc
            row['loss_rel'] = abs(lossc - loss_e) / max(abs(loss_e), 1e-6)
            row['logits_rel'] = rel_diff(lc, le)
            row['grads_rel'], row['grads_worst'] = grad_diff(gc, ge, ge, 1e-2 * max(
                (v.abs().max().item() for v in ge.values()), default=0.0))
            ok = (row['loss_rel'] <= COMPILE_TOL['loss'] and row['logits_rel'] <= COMPILE_TOL['logits']
                  and row['grads_rel'] <= COMPILE_TOL['grads'])
            row['status'] = 'PASS' if ok else 'FAIL'
            del m, cm
        except Exception as e:      # noqa: BLE001
            traceback.print_exc()
            row['status'] = 'FAILED: ' + first_line(e)
        results.append(row)
        with open(os.path.join(d, 'compile_check.check.json.tmp'), 'w') as f:
            json.dump(results, f)
        os.replace(os.path.join(d, 'compile_check.check.json.tmp'), os.path.join(d, 'compile_check.check.json'))
        if dev.startswith('cuda'):
            torch.cuda.empty_cache()
        if time.time() > job['deadline']:
            break


# ----------------------------------------------------------------------------- 2b. kernels


SDPA_OPS = (('cudnn', ('_scaled_dot_product_cudnn_attention', '_cudnn_attention')),
            ('flash_cpu', ('_scaled_dot_product_flash_attention_for_cpu',)),
            ('flash', ('_scaled_dot_product_flash_attention', '_flash_attention_forward')),
            ('efficient', ('_scaled_dot_product_efficient_attention', '_efficient_attention_forward')),
            ('math', ('_scaled_dot_product_attention_math',)))
FUSED = ('flash', 'efficient', 'cudnn', 'flash_cpu')


def classify(keys):
    """The SDPA backends named by a profile's op keys: a tuple of FUSED / 'math', or ('plain',) where
    no SDPA call ran but a softmax did (attend_plain: explicit T x T), or ('none',) (no attention)."""
    found = []
    for label, needles in SDPA_OPS:
        for k in keys:
            if any(n in k for n in needles) and not (label == 'flash' and 'for_cpu' in k):
                found.append(label)
                break
    if found:
        return tuple(found)
    if any(k in ('aten::softmax', 'aten::_softmax', 'aten::_safe_softmax') for k in keys):
        return ('plain',)
    return ('none',)


def backend_note(backends):
    if 'math' in backends:
        return 'MATH PATH: full T x T weights (no fused kernel took it)'
    if backends == ('plain',):
        return 'attend_plain: explicit T x T weights (a logit map, by design)'
    if backends == ('none',):
        return 'no attention (token mixer)'
    return 'fused: no T x T weights'


def phase_kernels(ctx):
    import torch
    from torch.profiler import ProfilerActivity, profile
    from model import GPT, GPTConfig
    c, size = ctx.c, dict(ctx.size['kernel'])
    B = size.pop('batch')
    cuda = ctx.dev.startswith('cuda')
    dtype = 'bfloat16' if cuda and torch.cuda.is_bf16_supported() else ('float16' if cuda else 'bfloat16')
    stop = ctx.clock.now() + ctx.size['kernels_cap']
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    specs = kernel_specs(c.variants)
    for spec in specs:
        attn, pos = parse_spec(spec)
        row = dict(variant=spec, attn=attn, pos=pos, dtype=dtype)
        ctx.kernels.append(row)
        t_row = time.time()
        if ctx.clock.now() > stop:
            row.update(backend='-', status='skipped: the kernels cap', note='')
            continue
        try:
            torch.manual_seed(c.seed)
            m = GPT(GPTConfig(attn=attn, pos=pos, dropout=0.1, **size)).to(ctx.dev).train()
            x = torch.randint(65, (B, size['block_size']), device=ctx.dev)

            def step():
                with torch.autocast(ctx.dev.split(':')[0], dtype=getattr(torch, dtype)):
                    _, loss = m(x, x)
                loss.backward()
                m.zero_grad(set_to_none=True)
            step()                              # lazy inits (cuFFT plans, workspaces) outside the profile
            try:
                with profile(activities=acts) as prof:
                    step()
                    sync(torch, ctx.dev)
            except Exception as e:      # noqa: BLE001 - CUPTI missing: the op names still tell
                if len(acts) == 1:
                    raise
                acts = [ProfilerActivity.CPU]
                row['profiler'] = f'CPU only ({first_line(e)})'
                with profile(activities=acts) as prof:
                    step()
                    sync(torch, ctx.dev)
            keys = sorted({e.key for e in prof.key_averages()})
            ops = [k for k in keys if 'scaled_dot_product' in k or 'attention' in k.lower()
                   and k.startswith('aten::')]
            kernels = [k[:90] for k in keys if not k.startswith('aten::') and any(
                w in k.lower() for w in ('flash', 'fmha', 'attention', 'cudnn', 'sdpa'))]
            b = classify(keys)
            row.update(backend='+'.join(b), ops=ops or [k for k in keys if 'softmax' in k][:3],
                       kernels=kernels[:4], note=backend_note(b), status='ok', s=round(time.time() - t_row, 2))
            del m
        except Exception as e:      # noqa: BLE001
            row.update(backend='-', status='FAILED: ' + first_line(e), note='')
    if cuda:
        torch.cuda.empty_cache()
    math_rows = [r['variant'] for r in ctx.kernels if 'math' in r.get('backend', '')]
    for r in ctx.kernels:
        if 'math' in r.get('backend', ''):
            ctx.say(f"kernels: {r['variant']} falls back to the MATH path (full T x T weights)")
    ctx.say(f"kernels: {len(ctx.kernels)} variants; " + ', '.join(
        f"{k} {sum(r.get('backend') == k for r in ctx.kernels)}" for k in
        sorted({r.get('backend', '-') for r in ctx.kernels})))
    bad = [r for r in ctx.kernels if r['status'] != 'ok']
    if bad:
        return f"partial: {len(bad)} of {len(ctx.kernels)} not profiled ({bad[0]['variant']}: {bad[0]['status']})"
    return f"{len(math_rows)} on the math path" if math_rows else ''


# ----------------------------------------------------------------------------- 2c. fused vs plain


def fused_pairs(only, pos_list):
    """(form key, GPTConfig fields, pos) in the order a cap cuts least: every form with the first
    encoding, then each attention's default form with the others, then the other forms with them."""
    from model import FNET_POS
    forms = attn_forms(only)
    first_form = {}
    for key, f in forms.items():
        first_form.setdefault(f['attn'], key)
    pairs = [(k, f, p) for k, f in forms.items() for p in pos_list if f['attn'] != 'fnet' or p in FNET_POS]

    def rank(x):
        k, f, p = x
        return (0 if p == pos_list[0] else 1 if first_form[f['attn']] == k else 2)
    return sorted(pairs, key=rank)      # stable: the registry's order inside each rank


def fused_check(ctx, form, pos, size, B):
    """One (form, pos): logits and gradients through model.attend and through model.attend_plain,
    float32 then bf16 autocast, on one model with perturbed weights. {dtype: dict(logits, grads,
    worst)} and the verdict against TOL."""
    import torch
    import model
    from model import GPT, GPTConfig
    c, dev_type = ctx.c, ctx.dev.split(':')[0]
    torch.manual_seed(c.seed)
    m = GPT(GPTConfig(pos=pos, dropout=0.0, **form, **size)).to(ctx.dev).train()
    g = torch.Generator().manual_seed(c.seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g).to(p.device))
    idx = torch.randint(65, (B, size['block_size']), generator=g).to(ctx.dev)
    tgt = torch.randint(65, (B, size['block_size']), generator=g).to(ctx.dev)

    def run(dtype, plain):
        m.zero_grad(set_to_none=True)
        model.attend = model.attend_plain if plain else attend     # as tests/test_model.py does on the CPU
        try:
            with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=dtype == 'bfloat16'):
                logits, loss = m(idx, tgt)
            loss.backward()
        finally:
            model.attend = attend
        return logits.detach().float(), grads_of(m)
    attend = model.attend
    ref_l, ref_g = run('float32', True)     # the reference: the plain formula in float32
    top = max((g.abs().max().item() for g in ref_g.values()), default=0.0)
    out_, verdict = {}, 'PASS'
    for dtype in ('float32', 'bfloat16'):
        lf, gf = run(dtype, False)
        lp, gp = (ref_l, ref_g) if dtype == 'float32' else run(dtype, True)
        tl, tg, floor = TOL[dtype]
        row = dict(logits=rel_diff(lf, lp, ref_l), grads=None, worst='')
        row['grads'], row['worst'] = grad_diff(gf, gp, ref_g, floor * top)
        ok = row['grads'] <= tg
        if dtype != 'float32':      # each path against the float32 reference: is the kernel less exact?
            row['fused_vs_f32'] = grad_diff(gf, ref_g, ref_g, floor * top)[0]
            row['plain_vs_f32'] = grad_diff(gp, ref_g, ref_g, floor * top)[0]
            # a gradient that bf16 rounds away on both paths (a bias that z-normalisation cancels) differs
            # by round-off: the fused path passes where it is no further from float32 than the plain one
            ok = ok or row['fused_vs_f32'] <= 1.5 * row['plain_vs_f32'] + 0.02
        out_[dtype] = row
        if not (row['logits'] <= tl and ok):
            verdict = 'FAIL'
    return out_, verdict


def phase_fused(ctx):
    import torch
    import model
    c, size = ctx.c, dict(ctx.size['fused'])
    B = size.pop('batch')
    stop = ctx.clock.now() + ctx.size['fused_cap']
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False           # float32 as float32
    attend = model.attend
    pos_list = csv(c.fused_pos)
    if c.toy and c.fused_pos == DEFAULTS['fused_pos']:
        pos_list = ['learned']
    try:
        for key, form, pos in fused_pairs(c.variants, pos_list):
            row = dict(form=key, pos=pos)
            ctx.fused.append(row)
            if ctx.clock.now() > stop:
                row['status'] = 'skipped: the fused cap'
                continue
            try:
                res, row['status'] = fused_check(ctx, form, pos, size, B)
                row.update(res)
            except Exception as e:      # noqa: BLE001
                row['status'] = 'FAILED: ' + first_line(e)
    finally:
        model.attend = attend
        torch.backends.cuda.matmul.allow_tf32 = tf32
        if ctx.dev.startswith('cuda'):
            torch.cuda.empty_cache()
    fails = [f"{r['form']} pos={r['pos']}" for r in ctx.fused if r['status'] != 'PASS'
             and not r['status'].startswith('skipped')]
    skipped = sum(r['status'].startswith('skipped') for r in ctx.fused)
    ctx.say(f"fused vs plain: {sum(r['status'] == 'PASS' for r in ctx.fused)} PASS of {len(ctx.fused)}"
            + (f"; not PASS: {', '.join(fails[:6])}" if fails else '')
            + (f"; {skipped} skipped (cap)" if skipped else ''))
    if skipped:
        return f"partial: {skipped} of {len(ctx.fused)} not checked (the cap)"
    return f"{len(fails)} not PASS" if fails else ''


# ----------------------------------------------------------------------------- 3. probe


def probe_inputs(ctx, runs):
    """The numbers the probe's length comes from, each 'measured' or 'assumed': per run the step time
    with all P runs on the GPU, and its start (python, audit, eval-graph and training-graph compiles)."""
    A, c = ctx.assumed, ctx.c
    P = c.probe_parallel or len(runs)
    by = {r['run']: r for r in ctx.speed if r.get('status') == 'ok'}
    shared_n = ctx.shared.get('runs') or 0
    out_ = {}
    for name, *_ in runs:
        r = by.get(name)
        src = []
        if r and r.get('shared_ms') and shared_n:
            # measured with shared_n at once; P at once: linear in the count (time slicing)
            step = r['shared_ms'] / 1000 * P / shared_n
            src.append(f"step: measured {r['shared_ms']:.1f} ms with {shared_n} at once, x {P}/{shared_n}")
        elif r:
            step = r['ms'] / 1000 * P / A['share_gain']
            src.append(f"step: measured {r['ms']:.1f} ms alone, x {P} runs / gain {A['share_gain']} (assumed)")
        else:
            ms = max([x['ms'] for x in by.values()], default=A['step_ms'])
            step = ms / 1000 * P / A['share_gain']
            src.append(f"step: {'the slowest measured' if by else 'assumed'} {ms:.1f} ms alone, x {P} runs")
        comp = r['compile_s'] if r and 'compile_s' in r else max([x['compile_s'] for x in by.values()],
                                                                  default=A['compile_s'])
        src.append(f"compile: {'measured' if r else ('slowest measured' if by else 'assumed')} {comp:.0f} s, "
                   f"+ {A['eval_compile_frac']:.0%} for the eval graph (assumed)")
        start = A['train_start_s'] + comp * (1 + A['eval_compile_frac'])
        src.append(f"start: {A['train_start_s']:.0f} s (assumed) + the compiles")
        out_[name] = dict(step_s=step, start_s=start, how=src)
    return out_, P


def eval_every(N, c):
    """The probe's eval interval: --probe_eval_interval, else the paper's 250 from 1000 steps on (the val
    curve on the paper's grid), else a quarter of the run (toy: half)."""
    if c.probe_eval_interval:
        return c.probe_eval_interval
    if N >= 1000:
        return PAPER_EVAL_INTERVAL
    return max(1, N // (2 if c.toy else 4))


def size_probe(left, inputs, K, c, A):
    """Steps N of each probe run in `left` seconds: the slowest run's start, N steps and its evals (each
    3 K forward passes of a third of a step, and a checkpoint), in 90% of the time less the grace for
    stopping. Returns (N, seconds the slowest needs)."""
    step = max(v['step_s'] for v in inputs.values())
    start = max(v['start_s'] for v in inputs.values())
    usable = 0.9 * (left - A['stop_grace_s'])

    def need(n):
        return start + n * step + (n // eval_every(n, c) + 2) * (K * step + 0.5)
    n = max(0, min(c.probe_max_iters, int((usable - start) / step) if step > 0 else c.probe_max_iters))
    while n > 0 and need(n) > usable:
        n -= 1
    if not c.toy and n > 20:
        n -= n % 20
    return n, need(n)


def phase_probe(ctx):
    c, size, A = ctx.c, ctx.size, ctx.assumed
    runs = paper_runs(c.probe_runs or ('dot,fox_mope_rel' if c.toy else ''))
    K = c.probe_eval_iters if not (c.toy and c.probe_eval_iters == DEFAULTS['probe_eval_iters']) else 2
    left = ctx.clock.left() - c.final_s
    inputs, P = probe_inputs(ctx, runs)
    P = min(P, len(runs))
    if c.probe_iters:
        N, need = c.probe_iters, None
        how = f'--probe_iters={c.probe_iters}'
    else:
        N, need = size_probe(left, inputs, K, c, A)
        how = 'sized from the preflight'
        if c.toy:
            N, need, how = min(max(N, 4), 6), None, 'toy: 4 to 6 steps'
    ctx.probe['sizing'] = dict(N=N, how=how, parallel=P, left_s=round(left), planned_s=round(need) if need else None,
                               inputs={k: dict(step_ms=round(v['step_s'] * 1000, 1), start_s=round(v['start_s']),
                                               how=v['how']) for k, v in inputs.items()})
    if N < (c.probe_min_iters if not c.toy and not c.probe_iters else 1):
        return f"skipped: {N} steps fit in the {left:.0f} s left (at least {c.probe_min_iters} wanted)"
    E = eval_every(N, c)
    L = size['log_interval']
    cores = ctx.env.get('usable_cores') or os.cpu_count() or 2
    pdir = os.path.join(c.scratch, 'probe')
    os.makedirs(pdir, exist_ok=True)
    data = os.path.abspath(c.data_dir)
    ctx.probe['runs'] = []
    queue = []
    for run in runs:
        name, files, overrides, seed_ = run
        cmd = ([sys.executable, 'train.py', *files, *overrides, f'--seed={seed_}',
                f'--out_dir={os.path.join(pdir, name)}', f'--data_dir={data}', f'--max_iters={N}',
                f'--lr_decay_iters={c.probe_decay_iters}', f'--eval_interval={E}', f'--eval_iters={K}',
                f'--log_interval={L}', '--overwrite=True', f'--threads={size["threads"]}', f'--device={ctx.dev}']
               + (TOY_TRAIN if c.toy else []))
        rec = dict(run=name, cmd=' '.join(['python3'] + cmd[1:]), status='not started', lines=[])
        ctx.probe['runs'].append(rec)
        queue.append((rec, cmd))
    ctx.say(f"probe: {len(runs)} runs of {N} steps, {P} at once, eval every {E} on {K} batches "
            f"({ctx.probe['sizing']['planned_s'] or '?'} s planned, {left:.0f} s left)")
    env = dict(os.environ, PYTHONUNBUFFERED='1', TORCHINDUCTOR_COMPILE_THREADS=str(max(2, cores // max(P, 1))))
    stop_at = ctx.clock.budget - c.final_s
    live = []
    while queue or live:
        while queue and len(live) < P and ctx.clock.now() < stop_at - 30:
            rec, cmd = queue.pop(0)
            launch_run(ctx, rec, cmd, env)
            live.append(rec)
        if not live:
            for rec, _ in queue:
                rec['status'] = 'not started: no time left'
            break
        time.sleep(0.25)
        now = ctx.clock.now()
        for rec in list(live):
            p = rec['proc']
            if p.poll() is None and now >= stop_at and not rec.get('stopping'):
                rec['stopping'] = now
                p.send_signal(signal.SIGTERM)       # train.py saves its checkpoint and stops
                ctx.say(f"probe {rec['run']}: stopped at the deadline (SIGTERM)")
            if p.poll() is None and rec.get('stopping') and now - rec['stopping'] > A['stop_grace_s']:
                p.kill()
            if p.poll() is not None:
                rec['reader'].join(timeout=2)
                finish_run(ctx, rec, pdir)
                live.remove(rec)
                ctx.say(f"probe {rec['run']}: {rec['status']}")
                write_all(ctx)
    bad = [r for r in ctx.probe['runs'] if r['status'] != 'finished']
    return f"partial: {len(bad)} of {len(runs)} not finished" if bad else ''


def launch_run(ctx, rec, cmd, env):
    rec['started_s'] = round(ctx.clock.now(), 1)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True, bufsize=1)
    ctx.children.append(proc)
    rec['proc'] = proc
    rec['status'] = 'running'

    def read():
        for line in proc.stdout:
            line = line.rstrip()
            if not line or 'USDT' in line:
                continue
            t = round(ctx.clock.now(), 1)
            rec['lines'].append([t, line])
            if line.startswith('eval iter 0:') and 'first_eval_s' not in rec:
                rec['first_eval_s'] = t
            elif line.startswith('iter ') and 'first_iter_s' not in rec:
                rec['first_iter_s'] = t
            if line.startswith(('eval iter', 'error', 'done', 'Traceback', 'caught signal')) or 'Error' in line:
                ctx.say(f"  {rec['run']}: {line[:200]}")
    rec['reader'] = threading.Thread(target=read, daemon=True)
    rec['reader'].start()


def finish_run(ctx, rec, pdir):
    """A probe run that has ended: its status, log rows, and the times the plan needs."""
    p = rec.pop('proc')
    rec.pop('reader', None)
    rec['ended_s'] = round(ctx.clock.now(), 1)
    rec['returncode'] = p.returncode
    rows = []
    try:
        with open(os.path.join(pdir, rec['run'], 'log.jsonl')) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    rec['rows'] = rows
    trains = [r for r in rows if r.get('kind') == 'train']
    evals = [r for r in rows if r.get('kind') == 'eval']
    rec['iters'] = max([r['iter'] for r in trains], default=0)
    N = int(next((a.split('=')[1] for a in rec['cmd'].split() if a.startswith('--max_iters=')), 0))
    if evals and evals[-1]['iter'] == N and p.returncode == 0:
        rec['status'] = 'finished'
    elif rec.get('stopping'):
        rec['status'] = f"stopped at the deadline at iter {rec['iters']}"
    else:
        last = next((ln for _, ln in reversed(rec['lines']) if ln.startswith('error') or 'Error' in ln),
                    rec['lines'][-1][1] if rec['lines'] else '')
        rec['status'] = f"FAILED (exit {p.returncode}): {last[:200]}"
    steady = [r['ms'] for r in trains if r['iter'] >= 60] or [r['ms'] for r in trains]
    rec['ms'] = round(statistics.median(steady), 2) if steady else None
    if 'first_iter_s' in rec and rec['ms']:
        L = ctx.size['log_interval']
        rec['start_s'] = round(rec['first_iter_s'] - rec['started_s'] - L * rec['ms'] / 1000, 1)
    if len(evals) >= 3 and rec['ms']:
        # a steady eval: the time between two later evals less their steps
        gaps = [(b['time'] - a['time']) - (b['iter'] - a['iter']) * rec['ms'] / 1000
                for a, b in zip(evals[1:], evals[2:])]
        rec['eval_s'] = round(max(0.0, statistics.median(gaps)), 2)
        rec['eval_iters'] = int(next((a.split('=')[1] for a in rec['cmd'].split() if a.startswith('--eval_iters=')), 0))
    rec['val'] = [[r['iter'], round(r['val'], 4)] for r in evals]
    rec['last_loss'] = trains[-1]['loss'] if trains else None
    rec['tail'] = [ln for _, ln in rec['lines'][-40:]]
    keep = [ln for ln in rec['lines'] if not ln[1].startswith('iter ')][:40]
    rec['lines'] = keep     # the start-up, eval and end lines, with their times


# ----------------------------------------------------------------------------- 4. plan


def plan_second(ctx):
    """The second command from the measured numbers: how many steps of all the paper runs fit in one
    command at once, and how many commands the full 5000 steps take with P runs a command (each run
    whole inside one command: a checkpoint cannot travel between commands, 58 MB against 16 MiB a file)."""
    c, A = ctx.c, ctx.assumed
    runs = [r[0] for r in paper_runs()]
    probe = {r['run']: r for r in ctx.probe.get('runs', [])}
    speed = {r['run']: r for r in ctx.speed if r.get('status') == 'ok'}
    P_meas = ctx.probe.get('sizing', {}).get('parallel') or 0
    facts, assumed = [], []
    per = {}
    for n in runs:
        pr, sp = probe.get(n, {}), speed.get(n)
        s1 = sp['ms'] / 1000 if sp else None
        sP = pr.get('ms') / 1000 if pr.get('ms') and P_meas else None
        if sP is None and sp and sp.get('shared_ms') and ctx.shared.get('runs'):
            sP, P_at = sp['shared_ms'] / 1000, ctx.shared['runs']
        else:
            P_at = P_meas
        start = pr.get('start_s')
        e_K = pr.get('eval_s')
        per[n] = dict(s1=s1, sP=sP, P_at=P_at, start=start,
                      eval50=(e_K * PAPER_EVAL_ITERS / pr['eval_iters']) if e_K is not None and pr.get('eval_iters')
                      else None)
    known = [v for v in per.values() if v['s1'] or v['sP']]
    if not known:
        return dict(status='no measurement: nothing to plan from')
    for n, v in per.items():
        if v['s1'] is None and v['sP'] is None:
            # an unmeasured run: the slowest measured one's numbers
            slow = max(known, key=lambda x: (x['sP'] or 0, x['s1'] or 0))
            v.update({k: slow[k] for k in ('s1', 'sP', 'P_at')}, borrowed=True)
            assumed.append(f"{n}: not measured; the slowest measured run's step times")

    def step_at(v, P):
        """Seconds a step with P runs at once: linear between alone (s1) and P_at at once (sP)."""
        if v['s1'] and v['sP'] and v['P_at'] > 1:
            return v['s1'] + (P - 1) / (v['P_at'] - 1) * (v['sP'] - v['s1'])
        if v['sP'] and v['P_at']:
            return v['sP'] * P / v['P_at']
        return v['s1'] * P / A['share_gain']
    if any(v['s1'] and v['sP'] for v in per.values()):
        assumed.append('step time with P runs at once: linear in P between the two measured points '
                       '(alone, and all at once)')
    else:
        assumed.append(f"step time with P runs at once: P x alone / {A['share_gain']} (no overlap gain)")
    default_start = A['train_start_s'] + max([s['compile_s'] for s in speed.values()], default=A['compile_s']) \
        * (1 + A['eval_compile_frac'])
    for n, v in per.items():
        if v['start'] is None:
            v['start'] = default_start
            assumed.append(f"{n}: start {default_start:.0f} s (not measured in the probe: assumed "
                           f"{A['train_start_s']:.0f} s + compiles)")
        if v['eval50'] is None:
            v['eval_fwd'] = True
    if any(v.get('eval_fwd') for v in per.values()):
        assumed.append(f"eval of {PAPER_EVAL_ITERS} batches x 3 splits: a forward a third of a step, where the "
                       f"probe did not time a steady eval")
    else:
        facts.append(f"eval cost: the probe's steady evals scaled to {PAPER_EVAL_ITERS} batches (an upper bound: "
                     f"their fixed costs scale too)")
    env_s = A['env_s']
    usable = c.deadline_s - env_s - c.final_s

    def run_time(v, P, steps):
        s = step_at(v, P)
        e = v['eval50'] * s / step_at(v, v['P_at'] or P) if v['eval50'] is not None else PAPER_EVAL_ITERS * s
        n_evals = steps // PAPER_EVAL_INTERVAL + 1 + (steps % PAPER_EVAL_INTERVAL > 0)
        return v['start'] + steps * s + n_evals * e

    def fit_steps(P):
        lo, hi = 0, 200000
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if max(run_time(v, P, mid) for v in per.values()) <= usable:
                lo = mid
            else:
                hi = mid - 1
        return lo
    options = []
    for P in range(len(runs), 0, -1):
        t = max(run_time(per[n], P, PAPER_STEPS) for n in runs)
        options.append(dict(parallel=P, commands=math.ceil(len(runs) / P), full_run_s=round(t),
                             fits=t <= usable, steps_in_one_command=fit_steps(P)))
    fitting = [o for o in options if o['fits']]
    best = min(fitting, key=lambda o: (o['commands'], o['full_run_s'])) if fitting else None
    six = options[0]
    cmds = []
    if best:
        groups = [runs[i:i + best['parallel']] for i in range(0, len(runs), best['parallel'])]
        for g in groups:
            cmds.append(f"bash scripts/gpu_first.sh --phases=env,probe,plan --probe_runs={','.join(g)} "
                        f"--probe_iters={PAPER_STEPS} --probe_parallel={len(g)} "
                        f"--probe_eval_interval={PAPER_EVAL_INTERVAL} --probe_eval_iters={PAPER_EVAL_ITERS}")
        verdict = (f"the full {PAPER_STEPS} steps of the {len(runs)} paper runs take {best['commands']} command(s) "
                   f"of {c.deadline_s:.0f} s, {best['parallel']} runs at once ({best['full_run_s']} s each)")
    else:
        n6 = six['steps_in_one_command']
        cmds.append(f"bash scripts/gpu_first.sh --phases=env,probe,plan --probe_iters={n6 - n6 % 50} "
                    f"--probe_parallel={len(runs)} --probe_eval_interval={PAPER_EVAL_INTERVAL} "
                    f"--probe_eval_iters={PAPER_EVAL_ITERS}")
        verdict = (f"{PAPER_STEPS} steps of a run do not fit in one command even alone "
                   f"({options[-1]['full_run_s']} s against {usable:.0f}); all {len(runs)} at once, "
                   f"{n6} steps each fit (the first {n6} steps of the paper's schedule, lr_decay_iters="
                   f"{c.probe_decay_iters}); the full length needs a checkpoint to travel between commands")
    return dict(status='ok', verdict=verdict, usable_s=round(usable), command_budget_s=c.deadline_s,
                steps_all_at_once=six['steps_in_one_command'], options=options,
                recommended=best, commands=cmds,
                device_call=dict(carry=['data/shakespeare_char'], timeout_s=DEVICE_TIMEOUT_S),
                per_run={n: {k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.items()}
                         for n, v in per.items()},
                facts=facts, assumptions=assumed)


def phase_plan(ctx):
    ctx.plan.update(plan_second(ctx))
    if ctx.plan.get('status') != 'ok':
        return 'partial: ' + ctx.plan.get('status', '')
    ctx.say(f"plan: {ctx.plan['verdict']}")
    for cmd in ctx.plan['commands']:
        ctx.say(f"plan: next command: {cmd}")


# ----------------------------------------------------------------------------- the report


def fmt(x, spec='.2g'):
    if x is None:
        return '-'
    if isinstance(x, float) and not math.isfinite(x):
        return 'inf'
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def render(ctx):
    c, e = ctx.c, ctx.env
    L = ['# The first GPU command: what it found', '',
         f"`python3 -m lab.gpu_first{''.join(' ' + a for a in ctx.argv)}`",
         f"on {e.get('gpu', ctx.dev)}; {ctx.clock.now():.0f} s of the {c.deadline_s:.0f} s budget used"
         + (' (the report as the command ended)' if ctx.ended
            else ' (written while it ran: a later phase may be missing)')
         + f"; {'toy sizes' if c.toy else 'real sizes'}.", '',
         '| phase | status | start s | seconds | note |', '|---|---|---|---|---|']
    for p in PHASES:
        s = ctx.status.get(p)
        if s:
            L.append(f"| {p} | {s['status']} | {s['start_s']} | {s['seconds']} | {s['note']} |")
        elif p == ctx.current:
            L.append(f"| {p} | running (cut short?) | | | |")
        else:
            L.append(f"| {p} | not reached | | | |")
    if e:
        L += ['', '## Environment', '']
        for k in ('python', 'torch', 'cuda', 'cudnn', 'triton', 'gpu', 'capability', 'sm_count', 'mem_free_mib',
                  'mem_total_mib', 'bf16', 'sdpa', 'tf32', 'nvidia_smi', 'cpu_cores', 'usable_cores',
                  'torch_threads', 'scratch_free_gib', 'code'):
            if k in e:
                L.append(f"- {k}: {e[k]}")
    if ctx.kernels:
        L += ['', '## SDPA kernel per variant (one training step, autocast, dropout 0.1)', '',
              f"Size {ctx.size['kernel']}. flash / efficient / cudnn: a fused kernel (no T x T weights); math: "
              "the fallback that forms them; plain: the model's own attend_plain.", '',
              '| variant | kernel | what it means | ops | CUDA kernels |', '|---|---|---|---|---|']
        for r in ctx.kernels:
            if r.get('status') != 'ok':
                L.append(f"| {r['variant']} | {r['status']} | | | |")
                continue
            L.append(f"| {r['variant']} | {r['backend']} | {r['note']} | {', '.join(r.get('ops', []))} | "
                     f"{', '.join(r.get('kernels', [])) or '-'} |")
    if ctx.fused:
        tl = ', '.join(f"{k}: logits {v[0]:g}, grads {v[1]:g} (floor {v[2]:g})" for k, v in TOL.items())
        L += ['', '## Fused (model.attend) against plain (model.attend_plain)', '',
              f"Size {ctx.size['fused']}, dropout 0, perturbed weights. Each number: the largest difference "
              f"between the two paths at that precision, relative to the plain formula in float32 (logits: their "
              f"largest value; gradients: per parameter, its largest, floored at a fraction of the largest of "
              f"all). Tolerances: {tl}; in bf16 a gradient past its tolerance passes where the fused path is no "
              f"further from float32 than 1.5 x the plain path's distance + 0.02 (round-off of a cancelled "
              f"gradient).", '',
              '| form | pos | float32 logits | float32 grads | bf16 logits | bf16 grads | bf16 grads against float32: '
              'fused, plain | verdict |', '|---|---|---|---|---|---|---|---|']
        for r in ctx.fused:
            f32, b16 = r.get('float32', {}), r.get('bfloat16', {})
            L.append(f"| {r['form']} | {r['pos']} | {fmt(f32.get('logits'))} | {fmt(f32.get('grads'))} | "
                     f"{fmt(b16.get('logits'))} | {fmt(b16.get('grads'))} | {fmt(b16.get('fused_vs_f32'))}, "
                     f"{fmt(b16.get('plain_vs_f32'))} | {r['status']} |")
    if ctx.compile:
        L += ['', '## Compiled against eager (first step: compile + forward + backward)', '',
              f"Size {ctx.size['compile']}, dropout 0, autocast as the runs; backend {ctx.size['backend']}. "
              f"Tolerances (relative): {COMPILE_TOL}.", '',
              '| form | compile s | compiled step ms | eager step ms | loss rel | logits rel | grads rel | '
              'graph breaks | verdict |', '|---|---|---|---|---|---|---|---|---|']
        for r in ctx.compile:
            L.append(f"| {r['form']} | {fmt(r.get('compile_s'), '.1f')} | {fmt(r.get('step_ms'), '.1f')} | "
                     f"{fmt(r.get('eager_ms'), '.1f')} | {fmt(r.get('loss_rel'))} | {fmt(r.get('logits_rel'))} | "
                     f"{fmt(r.get('grads_rel'))} | {fmt(r.get('graph_breaks'))} | {r['status']} |")
    if ctx.speed:
        L += ['', "## Speed and memory at the paper scale (train.py's step, compiled)", '',
              'Each run in its own process: compiled while the others compiled too (compile s), timed alone '
              '(ms/step, peak memory), then all at once (shared ms/step).', '',
              '| run | status | compile s | ms/step alone | tok/s alone | peak MiB | reserved MiB | '
              'ms/step all at once |', '|---|---|---|---|---|---|---|---|']
        for r in ctx.speed:
            L.append(f"| {r['run']} | {r.get('status', '-')} | {fmt(r.get('compile_s'), '.1f')} | "
                     f"{fmt(r.get('ms'), '.1f')} | {fmt(r.get('tok_s'), ',.0f')} | {fmt(r.get('peak_mib'), ',.0f')} | "
                     f"{fmt(r.get('reserved_mib'), ',.0f')} | {fmt(r.get('shared_ms'), '.1f')} |")
        if ctx.shared:
            L += ['', f"All {ctx.shared['runs']} at once for {ctx.shared['seconds']:g} s: {ctx.shared['steps']} "
                  f"steps; one run after another, alone, the same steps take x{ctx.shared['gain']} that time "
                  f"(measured: above 1, sharing the GPU beats taking turns)."]
    if ctx.probe:
        s = ctx.probe.get('sizing', {})
        L += ['', "## Probe: the paper runs through train.py, all at once", '',
              f"{s.get('N')} steps each ({s.get('how')}), {s.get('parallel')} at once, lr schedule of "
              f"lr_decay_iters={c.probe_decay_iters}; {s.get('left_s')} s were left, "
              f"{fmt(s.get('planned_s'))} s planned. "
              "Inputs:", '']
        for n, v in s.get('inputs', {}).items():
            L.append(f"- {n}: {v['step_ms']} ms/step at once, start {v['start_s']} s ({'; '.join(v['how'])})")
        if ctx.probe.get('runs'):
            L += ['', '| run | status | iters | ms/iter (at once) | start s | steady eval s | val by iter | '
                  'last train loss |', '|---|---|---|---|---|---|---|---|']
            for r in ctx.probe['runs']:
                L.append(f"| {r['run']} | {r['status']} | {r.get('iters', '-')} | {fmt(r.get('ms'), '.1f')} | "
                         f"{fmt(r.get('start_s'), '.0f')} | {fmt(r.get('eval_s'), '.1f')} | "
                         f"{' '.join(f'{i}:{v}' for i, v in r.get('val', [])) or '-'} | "
                         f"{fmt(r.get('last_loss'), '.4f')} |")
    if ctx.plan:
        p = ctx.plan
        L += ['', '## Plan for the second command', '']
        if p.get('status') != 'ok':
            L.append(p.get('status', ''))
        else:
            L += [p['verdict'] + '.', '',
                  f"Budget of one command: {p['command_budget_s']:.0f} s, {p['usable_s']} s for the runs. All six "
                  f"at once: {p['steps_all_at_once']} steps each in one command.", '',
                  '| runs at once | commands for 5000 steps | seconds a command needs | fits | steps in one command |',
                  '|---|---|---|---|---|']
            for o in p['options']:
                L.append(f"| {o['parallel']} | {o['commands']} | {o['full_run_s']} | {o['fits']} | "
                         f"{o['steps_in_one_command']} |")
            L += ['', 'The command(s), each a device run with `carry=["data/shakespeare_char"]`, '
                  f'`timeout_s={DEVICE_TIMEOUT_S}`:', '']
            L += [f"    {x}" for x in p['commands']]
            L += ['', 'Measured: ' + ('; '.join(p['facts']) or 'the step times and starts above') + '.',
                  'Assumed: ' + ('; '.join(p['assumptions']) or 'nothing') + '.']
    trouble = [f"- {p}: {s['status']}: {s['note']}" for p, s in ctx.status.items()
               if s['status'] not in ('ok',) and s['note']]
    if trouble:
        L += ['', '## Skipped, partial or failed', ''] + trouble
    return '\n'.join(L) + '\n'


def write_all(ctx):
    """Rewrite the five report files (console.txt is written as the command goes)."""
    with ctx.lock:
        try:
            c = ctx.c
            meta = dict(argv=ctx.argv, clock_s=round(ctx.clock.now(), 1), deadline_s=c.deadline_s, toy=c.toy,
                        device=ctx.dev, status=ctx.status)
            write_atomic(os.path.join(c.out, 'env.json'), dumps(dict(meta=meta, env=ctx.env)))
            write_atomic(os.path.join(c.out, 'preflight.json'), dumps(dict(
                meta=meta, sizes={k: ctx.size[k] for k in ('kernel', 'fused', 'compile', 'speed')},
                tolerances=dict(fused=TOL, compile=COMPILE_TOL), kernels=ctx.kernels, fused=ctx.fused,
                compile=ctx.compile, speed=ctx.speed, shared=ctx.shared)))
            probe = {k: v for k, v in ctx.probe.items() if k != 'runs'}
            probe['runs'] = [{k: v for k, v in r.items() if k not in ('proc', 'reader')}
                             for r in ctx.probe.get('runs', [])]
            write_atomic(os.path.join(c.out, 'probe_logs.json'), dumps(dict(meta=meta, **probe), indent=None))
            write_atomic(os.path.join(c.out, 'plan.json'), dumps(dict(meta=meta, **ctx.plan)))
            write_atomic(os.path.join(c.out, 'GPU.md'), render(ctx))
        except Exception as e:      # noqa: BLE001 - a report that cannot be written must not end the command
            print(f"report: not written: {first_line(e)}", file=sys.stderr, flush=True)


class Tee:
    def __init__(self, stream, f):
        self.stream, self.f = stream, f

    def write(self, s):
        self.stream.write(s)
        try:
            self.f.write(s)
            self.f.flush()
        except ValueError:
            pass
        return len(s)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


# ----------------------------------------------------------------------------- the timeline (plan_only)


def counts(c):
    from model import FNET_POS
    pos_list = csv(c.fused_pos) if not (c.toy and c.fused_pos == DEFAULTS['fused_pos']) else ['learned']
    forms = attn_forms(c.variants)
    n_fused = sum(1 for f in forms.values() for p in pos_list if f['attn'] != 'fnet' or p in FNET_POS)
    speed_n = len(paper_runs(c.speed_runs or ('dot,fox_mope_rel' if c.toy else ''))) if 'speed' in csv(c.phases) else 0
    probe_n = len(paper_runs(c.probe_runs or ('dot,fox_mope_rel' if c.toy else '')))
    return dict(kernels=len(kernel_specs(c.variants)), fused=n_fused, forms=len(forms), pos=pos_list,
                speed=speed_n, check=((1 if c.toy and c.compile_forms == DEFAULTS['compile_forms']
                                       else len(csv(c.compile_forms))) if 'compile' in csv(c.phases) else 0),
                probe=probe_n)


def timeline(c):
    """The phases' (name, start, end, what) on the assumed timings, the probe sized as the real run
    sizes it; raises Refused where the budget cannot hold them."""
    A, size = ASSUMED[c.toy], SIZES[c.toy]
    n = counts(c)
    ph = csv(c.phases)
    rows, t = [], 0.0

    def add(name, dur, what):
        nonlocal t
        rows.append((name, t, t + dur, what))
        t += dur
    add('env', A['env_s'], 'versions, GPU, memory, SDPA flags (assumed: import torch, CUDA start)')
    pre0 = t
    workers = n['speed'] + (1 if n['check'] else 0)
    if workers:
        add('launch', A['launch_s'], f"{workers} worker processes: {n['speed']} paper runs to time, "
            f"{'1 compile check of ' + str(n['check']) + ' forms' if n['check'] else 'no compile check'}")
    if 'kernels' in ph:
        add('kernels', min(size['kernels_cap'], n['kernels'] * A['kernel_s']),
            f"{n['kernels']} variants, one training step each at {size['kernel']} (cap {size['kernels_cap']:.0f} s)")
    if 'fused' in ph:
        add('fused', min(size['fused_cap'], n['fused'] * A['fused_s']),
            f"{n['forms']} forms x {len(n['pos'])} encodings ({n['fused']} models) x float32, bf16 at "
            f"{size['fused']} (cap {size['fused_cap']:.0f} s)")
    if workers:
        ready = pre0 + A['worker_start_s'] + A['compile_s']
        cap = pre0 + c.preflight_s - size['measure_cap']
        if ready > t:
            add('compiles', min(ready, cap) - t, f"waiting for the workers' compiles (assumed {A['compile_s']:.0f} s "
                f"each, all at once; cap at preflight + {c.preflight_s - size['measure_cap']:.0f} s)")
        step = A['step_ms'] / 1000
        meas = min(size['measure_cap'], n['speed'] * (size['alone_steps'] * step + 0.5) + size['shared_s'] + 3)
        add('measure', meas, f"{n['speed']} x {size['alone_steps']} steps alone, then {size['shared_s']:g} s all "
            f"at once")
    if t - pre0 > c.preflight_s + 1e-9:
        raise Refused(f"the preflight needs {t - pre0:.0f} s, over preflight_s={c.preflight_s:g}")
    if 'probe' in ph:
        P = min(c.probe_parallel or n['probe'], n['probe'])
        step = A['step_ms'] / 1000 * P / A['share_gain']
        start = A['train_start_s'] + A['compile_s'] * (1 + A['eval_compile_frac'])
        inputs = {'run': dict(step_s=step, start_s=start)}
        left = c.deadline_s - t - c.final_s
        note = ''
        if c.probe_iters:
            N = c.probe_iters
            need = start + N * step + (N // eval_every(N, c) + 2) * (c.probe_eval_iters * step + 0.5)
            if need > left:
                note = (f"; the assumed timings give {need:.0f} s, over the {left:.0f} s left: the runs are "
                        f"stopped at the deadline (the measured plan said they fit, or they end cut short)")
                need = left
        else:
            N, need = size_probe(left, inputs, c.probe_eval_iters, c, A)
            if c.toy:
                N = min(max(N, 4), 6)
                need = start + N * step + (N // eval_every(N, c) + 2) * (c.probe_eval_iters * step + 0.5)
            if N < (1 if c.toy else c.probe_min_iters):
                raise Refused(f"deadline_s={c.deadline_s:g} leaves the probe {left:.0f} s: {max(N, 0)} steps, under "
                              f"probe_min_iters={c.probe_min_iters} (after the preflight's {t:.0f} s, a run needs "
                              f"{start:.0f} s to start and {step * 1000:.0f} ms a step with {P} at once)")
        add('probe', need, f"{n['probe']} paper runs through train.py, {P} at once, {N} steps each "
            f"({step * 1000:.0f} ms/step at once, start {start:.0f} s incl. compiles; assumed){note}")
    add('final', c.final_s, 'stop what still runs (SIGTERM, grace 10 s), plan.json, GPU.md')
    if t > c.deadline_s + 1e-9:
        raise Refused(f"the plan needs {t:.0f} s, over deadline_s={c.deadline_s:g}")
    return rows, t


def print_plan(c):
    rows, total = timeline(c)
    A = ASSUMED[c.toy]
    print(f"budget: {c.deadline_s:g} s from this module's start (the device command's timeout_s="
          f"{DEVICE_TIMEOUT_S} leaves {DEVICE_TIMEOUT_S - c.deadline_s:g} s for python's start and the copy back); "
          f"preflight cap {c.preflight_s:g} s; {'toy' if c.toy else 'real'} sizes")
    for name, a, b, what in rows:
        print(f"  {a:6.0f} - {b:6.0f} s  {name:9s} {what}")
    print(f"planned total: {total:.0f} s <= {c.deadline_s:g} s")
    print("assumed (replaced by measurements as the command runs): " + '; '.join(
        f"{ASSUMPTION_TEXT[k]}: {A[k]:g}" for k in ASSUMPTION_TEXT))
    return total


# ----------------------------------------------------------------------------- main


def check(c):
    bad = [p for p in csv(c.phases) if p not in PHASES]
    if bad:
        raise ConfigError(f"phases: {bad[0]!r} is not one of {', '.join(PHASES)}")
    if not (c.device in ('auto', 'cpu', 'cuda') or (c.device.startswith('cuda:') and c.device[5:].isdigit())):
        raise ConfigError(f"device={c.device!r} is not one of: auto, cpu, cuda, cuda:N")
    o, s = os.path.abspath(c.out), os.path.abspath(c.scratch)
    if s == o or s.startswith(o + os.sep):
        raise ConfigError(f"scratch={c.scratch} is inside out={c.out}: checkpoints must not come back")
    for k in ('probe_iters', 'probe_min_iters', 'probe_max_iters', 'probe_eval_interval', 'probe_parallel'):
        if getattr(c, k) < 0:
            raise ConfigError(f"{k} must be >= 0, got {getattr(c, k)}")
    if c.probe_eval_iters < 1:
        raise ConfigError(f"probe_eval_iters must be >= 1, got {c.probe_eval_iters}")
    paper_runs(c.speed_runs)
    paper_runs(c.probe_runs)
    from model import GPTConfig
    for f in csv(c.compile_forms):
        a, p = parse_spec(f)
        try:
            GPTConfig(attn=a, pos=p)
        except ValueError as e:
            raise ConfigError(f"compile_forms: {f}: {e}") from None
    if c.variants:
        from model import ATTN
        bad = [v for v in csv(c.variants) if v not in ATTN]
        if bad:
            raise ConfigError(f"variants: {bad[0]!r} is not a registered attention")


def main(argv):
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip() + '\n\nkeys and defaults:\n' + describe(DEFAULTS))
        return 0
    try:
        c = SimpleNamespace(**load_config(DEFAULTS, argv))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if c.worker:
        return worker_main(c.worker)
    clock = Clock(c.deadline_s)
    try:
        check(c)
        if c.plan_only:
            print_plan(c)
            return 0
        timeline(c)         # a budget that cannot hold the plan is refused before anything starts
    except (ConfigError, Refused) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run(c, clock, argv)


def run(c, clock, argv):
    os.makedirs(c.out, exist_ok=True)
    os.makedirs(c.scratch, exist_ok=True)
    ctx = Ctx(c, clock)
    ctx.argv = list(argv)
    console = open(os.path.join(c.out, 'console.txt'), 'w')
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Tee(old[0], console), Tee(old[1], console)
    done = threading.Event()

    def end_now(why, code):
        """The deadline or a SIGTERM: the children killed, the phase under way recorded as cut short,
        the report written, the process gone."""
        ctx.say(f"{why} during {ctx.current or 'the end'}: the report is written, the command ends")
        ctx.kill_children()
        if ctx.current:
            ctx.record(ctx.current, 'cut short', why, ctx.current_start)
        ctx.ended = True
        write_all(ctx)
        console.flush()
        os._exit(code)

    def on_deadline():
        if not done.wait(max(0.0, clock.left() - 2)):
            end_now(f"DEADLINE: {c.deadline_s:g} s reached", 124)
    threading.Thread(target=on_deadline, daemon=True).start()
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, lambda signum, frame: end_now('SIGTERM', 128 + signum))
    try:
        import torch
        ctx.dev = ('cuda' if torch.cuda.is_available() else 'cpu') if c.device == 'auto' else c.device
        # tiny models: more threads only add synchronisation; on the GPU machine the workers' compiles
        # want the cores more than this process's small CPU ops do
        torch.set_num_threads(1 if c.toy else max(1, min(4, torch.get_num_threads())))
        if ctx.dev.startswith('cuda') and not torch.cuda.is_available():
            raise ConfigError(f"device={c.device} but CUDA is not available")
        ctx.say(f"gpu_first: device {ctx.dev}, {'toy' if c.toy else 'real'} sizes, deadline {c.deadline_s:g} s, "
                f"out {c.out}, scratch {c.scratch}")
        write_all(ctx)
        A = ctx.assumed
        run_phase(ctx, 'env', phase_env)
        pre_start = ctx.clock.now()
        preflight_end = pre_start + c.preflight_s
        if {'compile', 'speed'} & set(ctx.phases):
            try:
                launch_workers(ctx)
            except Exception as e:      # noqa: BLE001
                traceback.print_exc()
                for p in ('compile', 'speed'):
                    ctx.record(p, 'FAILED', 'workers not started: ' + first_line(e))
        run_phase(ctx, 'kernels', phase_kernels, need_s=min(ctx.size['kernels_cap'], 5.0))
        run_phase(ctx, 'fused', phase_fused, need_s=min(ctx.size['fused_cap'], 5.0))
        if ctx.workers:
            name = 'speed' if 'speed' in ctx.phases else 'compile'
            run_phase(ctx, name, lambda x: collect_workers(x, preflight_end))
            if name == 'speed' and 'compile' in ctx.phases:
                bad = [r for r in ctx.compile if r.get('status') != 'PASS']
                ctx.record('compile', 'ok' if ctx.compile and not bad else 'partial' if ctx.compile else 'FAILED',
                           f"{len(bad)} of {len(ctx.compile)} forms not PASS" if bad else '', pre_start)
        elif {'compile', 'speed'} & set(ctx.phases):
            for p in ('compile', 'speed'):
                if p in ctx.phases and p not in ctx.status:
                    ctx.record(p, 'skipped', 'no workers')
        need = A['train_start_s'] + 5
        run_phase(ctx, 'probe', phase_probe, need_s=need)
        run_phase(ctx, 'plan', phase_plan)
        ctx.ended = True
        ctx.say(f"gpu_first: done in {clock.now():.1f} s; wrote {', '.join(FILES)} to {c.out}")
        write_all(ctx)
        return 0
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        done.set()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        ctx.kill_children()
        sys.stdout, sys.stderr = old
        console.close()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
