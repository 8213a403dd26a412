"""
MOPE's frequencies under the published w s >= 5 rule (docs/variants.md §1): where w s < 5 the rule
sets w = 5 / s, so `log w` gets no gradient there and moves by weight decay alone. Two measurements:

    python -m lab.mope_rule                 # both, written to results/ega_mope/mope_rule.json

- the committed runs: at every eval after the first, the share of each run's pairs on the rule's
  boundary w s = 5 (where the rule holds: log w frozen), from their logged (w, s);
- a real run, measured step by step: train.py's own setup and step halves (forward_backward,
  update) at the CPU study scale, `pos=mope` then `pos=mope_learned`, one seed; after each
  step's backward, how many pairs' `log w` got a gradient of exactly 0, and at the end the drift
  of `log w` and `log s` against what weight decay alone would have done (the schedule's
  prod(1 - lr_t wd) applied to the initial logs).

The ledger's row (ours) "the published rule leaves MOPE's frequencies untrained" reads the JSON.
"""

import json
import os
import statistics
import sys
import tempfile

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import cli, paths
from lab.logs import read_log

steps = 300                 # steps of the measured runs (the study scale's lr schedule cut short)
seed = 1337
ON = 2e-3                   # |w s / 5 - 1| below this (the logs round w to 5 digits, s to 3): on the boundary
FROZEN = 0.9                # the row holds if at least this share of pairs is frozen, in every run and step
RULE = (f"the published rule leaves the frequencies untrained if, in every committed run with it, at least "
        f"{FROZEN:.0%} of the pairs sit on the boundary w s = 5 (where log w gets no gradient) at every eval after "
        f"the first, and in the measured run at least {FROZEN:.0%} of log w's gradients are exactly 0 at every step "
        f"of its second half; it does not hold if either share is under half")


def on_boundary(mope):
    return sum(abs(w * s / 5 - 1) < ON for w, s in zip(mope['w'], mope['s'])), len(mope['w'])


def committed():
    """{run: {iter: share of pairs on the boundary}} of every committed run whose evals log MOPE's pairs under
    the published rule (pos=mope with the rule on: its run.json command says no mope_rule=False)."""
    out = {}
    for base in ('runs', 'history'):
        d = os.path.join(paths.RESULTS, base)
        for label in sorted(os.listdir(d)) if os.path.isdir(d) else ():
            try:
                with open(os.path.join(d, label, 'run.json')) as f:
                    cmd = ' '.join(json.load(f)['cmd'])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if 'mope_learned' in cmd or 'mope_rule=False' in cmd:
                continue
            evals = read_log(os.path.join(d, label, 'log.jsonl'))[0]
            got = {i: on_boundary(r['mope']) for i, r in sorted(evals.items()) if r.get('mope') and i > 0}
            if got:
                out[f"{base}/{label}" if base != 'runs' else label] = {i: a / n for i, (a, n) in got.items()}
    return out


def measure(pos, n_steps, seed_, data_dir):
    """A run of `n_steps` at the CPU study scale with `pos`: per step the pairs whose log w got a gradient
    of exactly 0, and the drift of log w and log s against decay alone."""
    import train
    from configurator import load_config
    with tempfile.TemporaryDirectory() as out:
        argv = [os.path.join(paths.REPO, 'config', 'mope.py'), os.path.join(paths.REPO, 'config', 'cpu.py'),
                f'--pos={pos}', f'--seed={seed_}', f'--out_dir={out}', f'--data_dir={data_dir}', '--threads=1']
        c = load_config(train.DEFAULTS, argv, train.CHOICES)
        r = train.setup(c)
        try:
            mope = r.model.transformer.pos
            w0, s0 = mope.log_w.detach().clone(), mope.log_s.detach().clone()
            frozen, keep = [], 1.0
            for it in range(n_steps):
                lr = train.get_lr(r.c, it)
                for group in r.optimizer.param_groups:
                    group['lr'] = lr
                x, y = train.get_batch(r, it, 0)        # step it's batch, as train.py's loop reads it
                train.forward_backward(r.train_model, x, y, r.ctx, r.scaler)
                frozen.append(int((mope.log_w.grad == 0).sum()))
                train.update(r.model, r.optimizer, r.scaler, r.c.grad_clip)
                keep *= 1 - lr * r.c.weight_decay                   # AdamW's decoupled decay of this step
            dw, ds = (mope.log_w.detach() - w0).tolist(), (mope.log_s.detach() - s0).tolist()
            decay_w, decay_s = ((w0 * (keep - 1)).tolist(), (s0 * (keep - 1)).tolist())
        finally:
            if r.lock:
                r.lock.release()
    med = lambda xs: round(statistics.median(xs), 5)     # noqa: E731
    return dict(pos=pos, steps=n_steps, seed=seed_, pairs=len(dw), frozen_per_step=frozen,
                log_w_drift=med(dw), log_w_decay_alone=med(decay_w), log_s_drift=med(ds), log_s_decay_alone=med(decay_s),
                log_w_off_decay=round(max(abs(a - b) for a, b in zip(dw, decay_w)), 6))


def verdict(res):
    """(text, verdict) of the ledger's row from the JSON (THRESHOLDS: RULE)."""
    runs = res.get('committed', {})
    meas = res.get('measured', {}).get('mope')
    if not runs or not meas:
        return 'not measured (python -m lab.mope_rule)', 'untestable here'
    low = min(min(x.values()) for x in runs.values())
    per, n = meas['frozen_per_step'], meas['pairs']
    late = min(per[len(per) // 2:]) / n                 # the share frozen through the run's second half
    since = next(i for i in range(len(per)) if all(x >= FROZEN * n for x in per[i:])) + 1 \
        if per[-1] >= FROZEN * n else None
    learned = res['measured'].get('mope_learned')
    text = (f"{len(runs)} committed runs that log their pairs at every eval: at least {low:.0%} on `w s = 5` at every "
            f"eval after the first; measured ({meas['steps']} steps at the study scale, seed {meas['seed']}): log w's "
            f"gradient exactly 0 for {per[0]} of the {n} pairs at step 1, {min(per[1:])} to {max(per[1:])} after, "
            + (f"{FROZEN:.0%} or more from step {since} on" if since else f"under {FROZEN:.0%} at the end")
            + f"; log w moved {meas['log_w_drift']:+.4f} (median), decay alone {meas['log_w_decay_alone']:+.4f}; "
            f"log s {meas['log_s_drift']:+.4f}, decay alone {meas['log_s_decay_alone']:+.4f}")
    if learned:
        text += (f"; `mope_learned`: log w's gradient 0 for {max(learned['frozen_per_step'][1:])} pairs at most "
                 f"(those the clamp w <= 0.95 pi holds), log w moved {learned['log_w_drift']:+.4f}")
    if low >= FROZEN and late >= FROZEN:
        return text, 'holds'
    return text, 'does not hold' if min(low, late) < 0.5 else 'not resolved'


def row_mope_rule(done, leaking, cl):
    return verdict(paths.results_json('ega_mope', 'mope_rule.json'))


def main(argv):
    c, rc = cli.parse(__doc__, dict(steps=steps, seed=seed, data_dir='data/shakespeare_char'), argv)
    if c is None:
        return rc
    if c['steps'] < 2:
        return cli.fail(f"need steps >= 2, got {c['steps']}")
    data = c['data_dir'] if os.path.isabs(c['data_dir']) else os.path.join(paths.REPO, c['data_dir'])
    res = dict(rule=RULE, committed=committed(),
               measured={p: measure(p, c['steps'], c['seed'], data) for p in ('mope', 'mope_learned')})
    text, v = verdict(res)
    print(f"{text}\n{v}")
    paths.write_result(os.path.join('ega_mope', 'mope_rule.json'), 'lab.mope_rule', argv, **res)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
