"""
The first GPU command's report: GPU.md (what each phase found, in tables) and the JSON files
beside it, rewritten after every phase and at the end, however the command ends.
"""

import math
import os
import sys

from prepare import write_atomic
from lab.gpu_first_base import COMPILE_TOL, DEVICE_TIMEOUT_S, PHASES, TOL, dumps, first_line


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
            probe = {k: v for k, v in ctx.probe.items() if k != 'runs'}
            probe['runs'] = [{k: v for k, v in r.items() if k not in ('proc', 'reader')}
                             for r in ctx.probe.get('runs', [])]
            files = {'env.json': dumps(dict(meta=meta, env=ctx.env)),
                     'preflight.json': dumps(dict(
                         meta=meta, sizes={k: ctx.size[k] for k in ('kernel', 'fused', 'compile', 'speed')},
                         tolerances=dict(fused=TOL, compile=COMPILE_TOL), kernels=ctx.kernels, fused=ctx.fused,
                         compile=ctx.compile, speed=ctx.speed, shared=ctx.shared)),
                     'probe_logs.json': dumps(dict(meta=meta, **probe), indent=None),
                     'plan.json': dumps(dict(meta=meta, **ctx.plan)),
                     'GPU.md': render(ctx)}
            write_atomic({os.path.join(c.out, k): v.encode() for k, v in files.items()})
        except Exception as e:      # noqa: BLE001 - a report that cannot be written must not end the command
            print(f"report: not written: {first_line(e)}", file=sys.stderr, flush=True)
