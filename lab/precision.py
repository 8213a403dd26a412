"""
bf16 autocast against float32, through train.py itself: a form of each family trains twice from one
seed, and the two val losses must agree (tests/test_precision.py runs the same forms in-process on
the CPU; this runs them as processes, all at once, on a device of one's own).

    python -m lab.precision --device=cuda                 # the paper's scale, 300 steps, every family
    python -m lab.precision --device=cuda --families=ega,fox --steps=125
    python -m lab.precision --toy=True                    # tiny, on the CPU: what its test runs

Each run is `python train.py` with the scale's keys, `--dtype=bfloat16` or `--dtype=float32`, its
out_dir under --scratch (compile on CUDA: train.py's auto), `parallel` of them at once. At
--deadline_s every run still going gets one SIGTERM (train.py saves and stops) and counts as
unfinished. The verdict of a family: PASS where |val in bf16 - val in float32| <= tol at the last eval
both runs logged, with both at --steps; FAIL where the gap is larger; UNFINISHED otherwise. Its
table is printed and, with --out, written as JSON (every eval of both runs beside it). Exit 1 unless
every family passes.
"""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab import cli, paths

FAMILIES_EXTRA = ('fourier_qk', 'causal_morlet')   # FourierQK's bands, the causal filters: float32 filters
README_COMPOSITIONS = {'fox+causal_gauss': dict(attn='fox+causal_gauss'), 'fox+dconv': dict(attn='fox+dconv'),
                       'learned+alibi': dict(pos='learned+alibi')}
SCALES = {
    # the paper's model and schedule (the first 300 of 5000 steps), eval on 20 fixed val batches
    'paper': ['--n_layer=6', '--n_head=8', '--n_embd=256', '--block_size=256', '--batch_size=64',
              '--lr_decay_iters=5000', '--eval_iters=20'],
    # tests/test_precision.py's: a small model at the paper's T, a fast schedule, no dropout (4 sequences
    # a step: bf16 matmuls are about 5x float32's on a CPU without bf16 units, and 25 families train twice)
    'small': ['--n_layer=2', '--n_head=4', '--n_embd=64', '--block_size=256', '--batch_size=4',
              '--eval_iters=4', '--learning_rate=3e-3', '--min_lr=3e-4', '--warmup_iters=10', '--dropout=0.0'],
    'toy': ['--n_layer=1', '--n_head=2', '--n_embd=16', '--block_size=32', '--batch_size=2', '--eval_iters=1',
            '--warmup_iters=1', '--dropout=0.0'],
}

families_ = 'all'           # comma-separated family names (families()), or all
device = 'cuda'
scale = 'paper'             # paper, small or toy
steps = 300
tol = 0.02                  # |val in bf16 - val in float32| at the last eval: the GPU issue's criterion
parallel = 8                # runs at once
deadline_s = 150.0          # then one SIGTERM to each run still going
grace_s = 20.0              # then SIGKILL
scratch = 'out-precision'   # the runs' out_dirs
out = ''                    # the table and every eval, as JSON
data_dir = 'data/shakespeare_char'
toy = False                 # scale=toy, steps=4, device=cpu, parallel=2, families dot,ega,fox
DEFAULTS = {k.rstrip('_'): v for k, v in dict(globals()).items()
            if not k.startswith('_') and k.islower() and isinstance(v, (bool, int, float, str))}


def families():
    """{family: GPTConfig overrides}: every gate (they keep running statistics, where rounding bites),
    the first name of every other slot, FAMILIES_EXTRA, every encoding, the README's compositions."""
    from model import ATTN, POS
    names, slots = [], set()
    for n, v in ATTN.items():
        if v.slot in ('gate', 'filter_gate') or v.of or v.slot not in slots or n in FAMILIES_EXTRA:
            names.append(n)
            slots.add(v.slot)
    return {**{n: dict(attn=n) for n in names}, **{p: dict(pos=p) for p in POS if p != 'learned'},
            **README_COMPOSITIONS}


def train_args(form, dtype, scale_name, n_steps, device_name, out_dir, data):
    """train.py's arguments for one run: the scale, a schedule of n_steps with its last eval at the end."""
    evals = max(1, n_steps // 2)
    return [*SCALES[scale_name], f'--max_iters={n_steps}', f'--eval_interval={evals}',
            f'--log_interval={max(1, n_steps // 10)}', f'--device={device_name}', f'--dtype={dtype}',
            f'--data_dir={data}', f'--out_dir={out_dir}', '--overwrite=True',
            *(f'--{k}={v}' for k, v in form.items())]


def evals(out_dir):
    """[(iter, val)] of a run's log, [] before its first eval."""
    try:
        with open(os.path.join(out_dir, 'log.jsonl')) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []
    return [(r['iter'], r['val']) for r in rows if r.get('kind') == 'eval']


def verdict(low, ref, n_steps, tolerance):
    """(gap at the last eval both logged or None, PASS / FAIL / UNFINISHED)."""
    both = sorted(set(dict(low)) & set(dict(ref)))
    if not both:
        return None, 'UNFINISHED'
    it = both[-1]
    gap = dict(low)[it] - dict(ref)[it]
    if abs(gap) > tolerance:
        return gap, 'FAIL'
    return gap, 'PASS' if it >= n_steps else 'UNFINISHED'


def run_all(jobs, n_parallel, deadline, grace):
    """Start each job ((name, args, log path)), n_parallel at a time, until the deadline; then SIGTERM
    what is left, and SIGKILL it grace seconds later. Returns {name: exit code or None}."""
    todo, going, codes = list(jobs), {}, {}
    while todo or going:
        now = time.time()
        while todo and len(going) < n_parallel and now < deadline:
            name, args, log_path = todo.pop(0)
            with open(log_path, 'w') as f:
                going[name] = subprocess.Popen([sys.executable, 'train.py', *args], cwd=paths.REPO, stdout=f,
                                               stderr=subprocess.STDOUT, start_new_session=True)
        if now >= deadline:
            for name, _, _ in todo:
                codes[name] = None                  # never started
            todo = []
            for p in going.values():
                if p.poll() is None and not getattr(p, 'termed', False):
                    p.send_signal(signal.SIGTERM)
                    p.termed = True
            if now >= deadline + grace:
                for p in going.values():
                    if p.poll() is None:
                        p.kill()
        for name, p in list(going.items()):
            if p.poll() is not None:
                codes[name] = p.returncode
                del going[name]
        time.sleep(0.5)
    return codes


def table(rows, tolerance, scale_name, n_steps, device_name):
    lines = [f"bf16 autocast against float32, train.py at the {scale_name} scale, {n_steps} steps, on "
             f"{device_name}; PASS where |gap| <= {tolerance} at the last eval both reached", '',
             '| family | val bf16 | val float32 | gap | verdict |', '|---|---|---|---|---|']
    for r in rows:
        lo, ref = (f"{v:.4f}" if v is not None else '-' for v in (r['low'], r['ref']))
        gap = f"{r['gap']:+.4f}" if r['gap'] is not None else '-'
        lines.append(f"| {r['family']} | {lo} | {ref} | {gap} | {r['verdict']} |")
    return '\n'.join(lines)


def main(argv):
    o, code = cli.parse(__doc__, DEFAULTS, argv)
    if o is None:
        return code
    o = SimpleNamespace(**o)
    given = [k for k in ('scale', 'steps', 'device', 'parallel') if any(a.startswith(f'--{k}=') for a in argv)]
    bad = ([f"--toy=True sets scale, steps, device and parallel itself: drop --{given[0]}"] if o.toy and given else []) \
        + [f"need {k} > 0, got {getattr(o, k):g}" for k in ('steps', 'parallel', 'deadline_s', 'tol') if getattr(o, k) <= 0] \
        + [f"need grace_s >= 0, got {o.grace_s:g}"] * (o.grace_s < 0)
    try:
        if o.out and not bad:
            paths.check_output_file(o.out, '--out')       # before the runs, not after them
    except ConfigError as e:
        bad.append(str(e))
    if bad:
        return cli.fail(bad[0])
    if o.toy:
        o.scale, o.steps, o.device, o.parallel = 'toy', 4, 'cpu', 2
        o.families = 'dot,ega,fox' if o.families == 'all' else o.families
    known = families()
    chosen = list(known) if o.families == 'all' else o.families.split(',')
    bad = [f for f in chosen if f not in known] + ([o.scale] if o.scale not in SCALES else [])
    if bad:
        return cli.fail(f"{bad[0]!r} is not a family ({', '.join(known)}) or a scale ({', '.join(SCALES)})")
    if not os.path.isfile(os.path.join(paths.REPO, o.data_dir, 'val.bin')):
        return cli.fail(f"{o.data_dir}/val.bin not found: run `python prepare.py` first")
    os.makedirs(o.scratch, exist_ok=True)
    jobs = []
    for fam in chosen:
        for dtype in ('bfloat16', 'float32'):
            run_dir = os.path.abspath(os.path.join(o.scratch, f'{fam}-{dtype}'))
            os.makedirs(run_dir, exist_ok=True)
            jobs.append((f'{fam}-{dtype}', train_args(known[fam], dtype, o.scale, o.steps, o.device, run_dir,
                                                      o.data_dir), os.path.join(run_dir, 'run.txt')))
    print(f"{len(jobs)} runs of train.py ({len(chosen)} families x 2 dtypes), {o.parallel} at once, "
          f"{o.deadline_s:.0f} s", flush=True)
    codes = run_all(jobs, o.parallel, time.time() + o.deadline_s, o.grace_s)
    rows = []
    for fam in chosen:
        low, ref = (evals(os.path.join(o.scratch, f'{fam}-{d}')) for d in ('bfloat16', 'float32'))
        gap, v = verdict(low, ref, o.steps, o.tol)
        rows.append(dict(family=fam, low=low[-1][1] if low else None, ref=ref[-1][1] if ref else None, gap=gap,
                         verdict=v, evals=dict(bfloat16=low, float32=ref),
                         exit=dict(bfloat16=codes.get(f'{fam}-bfloat16'), float32=codes.get(f'{fam}-float32'))))
    text = table(rows, o.tol, o.scale, o.steps, o.device)
    print(text)
    if o.out:
        with open(o.out, 'w') as f:
            json.dump(dict(scale=o.scale, steps=o.steps, device=o.device, tol=o.tol, rows=rows), f, indent=1)
    return 0 if all(r['verdict'] == 'PASS' for r in rows) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
