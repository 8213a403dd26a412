"""
The first GPU command's keys (python -m lab.gpu_first --help lists them), its constants (the phases,
the files, the tolerances, the sizes: real and toy, and the timings the plan assumes until it measures
them), the helpers its phases share, and the context a phase reads and writes (Ctx).
"""

import glob
import hashlib
import json
import os
import subprocess
import threading
import time

from configurator import ConfigError, load_config
from lab.paths import REPO
from lab import studies


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
            if not k.startswith('_') and isinstance(v, (bool, int, float, str)) and k != 'REPO'}   # the keys above
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
    """The 'paper' study's runs (lab/studies.py) as (name, config files, overrides, seed), in its order."""
    runs = [(name, list(cf), list(ov), own[0]) for name, cf, ov, own in studies.STUDIES[STUDY]['runs']]
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
    from runtime import GitError, git       # runtime imports torch: here, not before the clock starts
    ids = {}
    try:
        head = git('rev-parse', 'HEAD', cwd=REPO, check=True, timeout=5).strip()
        dirty = git('status', '--porcelain', '--untracked-files=no', cwd=REPO, timeout=5).strip()
        ids['git'] = head + ('+dirty' if dirty else '')
    except (OSError, subprocess.SubprocessError, GitError):
        pass
    mine = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'lab', 'gpu_first*.py')))
    for f in ('model.py', 'train.py', 'runtime.py', 'causality.py', *mine):
        try:
            with open(os.path.join(REPO, f), 'rb') as fh:
                ids[f] = hashlib.sha256(fh.read()).hexdigest()[:12]
        except OSError:
            ids[f] = 'missing'
    return ids


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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
