"""
The first GPU command's plans: the second command, from the measured numbers (phase 4), and the
timeline of the first on the assumed timings (--plan_only=True), refused where the budget cannot
hold it.
"""

import math

from lab.gpu_first_base import (ASSUMED, ASSUMPTION_TEXT, DEFAULTS, DEVICE_TIMEOUT_S, PAPER_EVAL_INTERVAL,
                                PAPER_EVAL_ITERS, PAPER_STEPS, SIZES, Refused, attn_forms, csv, kernel_specs,
                                paper_runs)
from lab.gpu_first_probe import eval_every, size_probe


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
