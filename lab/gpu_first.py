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
   - workers: one process per run of the 'paper' study (lab/studies.py: dot, ega, ega_mope, fox, causal_gauss,
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

This module runs the phases in order (main, run); each phase lives in a module of its own:
lab/gpu_first_env.py (1), gpu_first_speed.py and gpu_first_worker.py (2a, the workers),
gpu_first_kernels.py (2b, 2c), gpu_first_probe.py (3), gpu_first_plan.py (4, and --plan_only's
timeline); gpu_first_base.py holds the keys, constants and context, gpu_first_report.py GPU.md.
"""

import os
import signal
import sys
import threading
import traceback
from types import SimpleNamespace

from configurator import ConfigError
from lab import cli
from lab.gpu_first_base import DEFAULTS, FILES, PHASES, Clock, Ctx, Refused, csv, first_line, parse_spec, paper_runs
from lab.gpu_first_env import phase_env
from lab.gpu_first_kernels import phase_fused, phase_kernels
from lab.gpu_first_plan import phase_plan, print_plan, timeline
from lab.gpu_first_probe import phase_probe
from lab.gpu_first_report import write_all
from lab.gpu_first_speed import collect_workers, launch_workers
from lab.gpu_first_worker import worker_main


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
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, DEFAULTS))
        return 0
    try:
        c = SimpleNamespace(**cli.load(DEFAULTS, argv))
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
