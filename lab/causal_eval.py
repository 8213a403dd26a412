"""
The published EGA as it must generate (issue 57): `ega_paper` z-normalises its energies over the
whole window, so at training and evaluation each key's gate sees the keys after it; a language
model has no keys after the token it predicts. The same weights, evaluated with the causal prefix
statistics (`train.py --init_from=resume --eval_only=True --ega_norm=prefix`, no retraining), say
what the model delivers when it runs causally.

    python -m lab.causal_eval           # results/ega_mope/causal_eval.json and CAUSAL.md

Each committed `ega_paper` run of study ega_mope (the CPU study scale) is trained again from its own
command into a scratch folder (CPU training is deterministic: its final val is checked against the
committed log's), then evaluated on the same fixed windows twice: with the window statistics it was
trained with, and with prefix statistics. The committed `ega` and dot runs of the same seeds, on the
same evaluation set, are its yardsticks. For seed 1337, dot and `ega` are trained again too, and
each of the three checkpoints gives two samples from sample.py (seeded alike).
"""

import json
import os
import subprocess
import sys
import tempfile

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab import cli, paths
from lab.logs import read_log
from lab.provenance import command_problem
from lab.rules import by_rule
from lab.runs import recorded_eval_set
from lab.stats import paired

SEEDS = (1337, 2, 3)
PROMPT = 'ROMEO:'
RULE = ("the published EGA keeps its windowed loss when it runs causally if the paired 95% interval of its val "
        "with prefix statistics minus its val with window statistics (the same weights, the same windows) lies "
        "within +-0.02; it does not if the interval is clear of 0 and reaches past +-0.02; else not resolved")


def train_again(label, out, jobs_env):
    """Train the committed run `label` again into out (its own command); its final val, or an error."""
    with open(os.path.join(paths.RUNS, label, 'run.json')) as f:
        rec = json.load(f)
    if command_problem(rec['cmd']):
        raise SystemExit(f"error: {label}: {command_problem(rec['cmd'])}")
    args = [a for a in rec['cmd'][2:] if not a.startswith(('--out_dir=', '--init_from=', '--overwrite='))]
    subprocess.run([sys.executable, 'train.py', *args, f'--out_dir={out}', '--overwrite=True'], cwd=paths.REPO,
                   check=True, capture_output=True, env=jobs_env)
    evals = read_log(os.path.join(out, 'log.jsonl'))[0]
    return evals[max(evals)]['val'], args


def evaluate(out, args, norm, env):
    subprocess.run([sys.executable, 'train.py', *args, f'--out_dir={out}', '--init_from=resume', '--eval_only=True',
                    f'--ega_norm={norm}'], cwd=paths.REPO, check=True, capture_output=True, env=env)
    extra = read_log(os.path.join(out, 'log.jsonl'))[2]
    return next(r for r in reversed(extra) if r.get('ega_norm') == norm)


def samples(out, n, env):
    p = subprocess.run([sys.executable, 'sample.py', f'--out_dir={out}', f'--start={PROMPT}', f'--num_samples={n}',
                        '--max_new_tokens=200', '--seed=1337'], cwd=paths.REPO, check=True, capture_output=True,
                       text=True, env=env)
    return [x.strip('\n') for x in p.stdout.split('---------------\n') if x.strip()][:n], p.stderr.strip()


def final(label):
    evals = read_log(os.path.join(paths.RUNS, label, 'log.jsonl'))[0]
    return evals[max(evals)]['val'] if evals else None


def run(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    res = dict(rule=RULE, seeds={}, samples={})
    with tempfile.TemporaryDirectory() as scratch:
        for seed in SEEDS:
            label = f'ega_paper-s{seed}'
            out = os.path.join(scratch, label)
            val, args = train_again(label, out, env)
            window, prefix = (evaluate(out, args, norm, env) for norm in ('window', 'prefix'))
            res['seeds'][seed] = dict(committed=final(label), again=val, window=window['val'], prefix=prefix['val'],
                                      window_leaks=window['leaks'], prefix_leaks=prefix['leaks'],
                                      ega=final(f'ega-s{seed}'), dot=final(f'dot-s{seed}'),
                                      eval_set=prefix.get('eval_set'),
                                      same_set=len({prefix.get('eval_set'), recorded_eval_set(os.path.join(paths.RUNS, f'ega-s{seed}')),
                                                    recorded_eval_set(os.path.join(paths.RUNS, f'dot-s{seed}'))}) == 1)
            print(f"{label}: trained again {val:.4f} (committed {res['seeds'][seed]['committed']:.4f}); window "
                  f"{window['val']:.4f}, prefix {prefix['val']:.4f}", flush=True)
            if seed == SEEDS[0]:
                res['samples']['ega_paper'] = samples(out, 2, env)
                for name in ('ega', 'dot'):
                    other = os.path.join(scratch, f'{name}-s{seed}')
                    train_again(f'{name}-s{seed}', other, env)
                    res['samples'][name] = samples(other, 2, env)
    return res


def verdict(res):
    """(text, verdict) of the ledger's row from the JSON, by RULE (the rule 'zero' of lab/rules.py on the
    paired prefix - window difference), with prefix - ega and prefix - dot beside it."""
    seeds = res.get('seeds', {})
    if not seeds:
        return 'not measured (python -m lab.causal_eval)', 'untestable here'
    diff = lambda key: {s: x['prefix'] - x[key] for s, x in seeds.items() if x.get(key) is not None}   # noqa: E731
    ps = {k: paired(diff(k), dict.fromkeys(diff(k), 0.0)) for k in ('window', 'ega', 'dot')}
    cell = lambda p: (f"{p['mean']:+.3f}" + (f" ({p['mean'] - p['half']:+.3f}..{p['mean'] + p['half']:+.3f}, "   # noqa: E731
                                             f"{p['n']} seeds)" if p['half'] is not None else ' (1 seed)'))
    text = (f"`ega_paper`, the same weights, prefix statistics minus window statistics: {cell(ps['window'])}; "
            f"causally minus `ega` (trained causal): {cell(ps['ega'])}; minus dot: {cell(ps['dot'])}"
            + ('' if all(x.get('same_set') for x in seeds.values()) else '; (not every seed on one evaluation set)'))
    v = by_rule('zero', ps['window'])
    return text, {'reproduced': 'holds', 'contradicted': 'does not hold'}.get(v, 'not resolved' if
                                                                               v.startswith('not') else v)


def row_causal_eval(done, leaking, cl):
    return verdict(paths.results_json('ega_mope', 'causal_eval.json'))


def report(res):
    """CAUSAL.md: the table per seed and the samples."""
    rows = [f"| {s} | {x['committed']:.4f} | {x['again']:.4f} | {x['window']:.4f} | {x['prefix']:.4f} | "
            f"{x['ega']:.4f} | {x['dot']:.4f} |" for s, x in res['seeds'].items()]
    out = ['# The published EGA run causally', '', 'Made by `python -m lab.causal_eval` (its docstring says how). '
           'Val loss at the CPU study scale on one evaluation set; `ega_paper` trained again from its committed '
           'command, then evaluated with the statistics it was trained with (window: **LEAKS**, no modelling result) '
           'and with causal prefix statistics (no retraining).', '', f"Rule: {RULE}.", '',
           f"Verdict: **{verdict(res)[1]}**. {verdict(res)[0]}.", '',
           '| seed | ega_paper, committed (window) | trained again (window) | window statistics (LEAKS) | '
           'prefix statistics | ega | dot |', '|---|---|---|---|---|---|---|', *rows, '',
           f'## Samples (`python sample.py --start={PROMPT} --num_samples=2 --max_new_tokens=200 --seed=1337`, '
           'seed-1337 checkpoints)', '']
    for name, (texts, note) in res['samples'].items():
        out += [f'### {name}', '', *(f"> {note}" for note in note.splitlines() if note), '']
        out += [f"```\n{t}\n```" for t in texts] + ['']
    return '\n'.join(out)


def main(argv):
    c, rc = cli.parse(__doc__, dict(threads=1), argv)
    if c is None:
        return rc
    if c['threads'] < 1:
        return cli.fail(f"need threads >= 1, got {c['threads']}")
    res = run(c['threads'])
    paths.write_result(os.path.join('ega_mope', 'causal_eval.json'), 'lab.causal_eval', argv, **res)
    with open(os.path.join(paths.RESULTS, 'ega_mope', 'CAUSAL.md'), 'w') as f:
        f.write(report(json.loads(json.dumps(res))))      # the seeds as the JSON keeps them
    print(verdict(res))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
