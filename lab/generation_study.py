"""
Every published leaking form scored as it generates (lab/generation.py), at the CPU study scale:

    python -m lab.generation_study                 # results/generation/generation.json and GENERATION.md
    python -m lab.generation_study --table_only=True

Each run of FORMS is trained again from its committed command (results/runs/<run>/run.json; a form with no
committed run from config/NAME.py config/cpu.py at its seed) into --scratch (kept, resumable: a finished
checkpoint there is reused, a cut one resumed), its final val checked against the committed log's (CPU
training is deterministic), then evaluated on its fixed val windows three ways: window (LEAKS), prefix (the
published EGA only) and generation. The committed dot run of the same seed, and the form's causal counterpart,
are its yardsticks where they read the same evaluation set; both are causal, so their windowed val is their
generation loss (tests/test_registry.py). The first seed of each form gives one sample from sample.py. Each run's
result is written as soon as it is measured: a stop loses at most the run in hand, and the same command goes on.
"""

import json
import os
import subprocess
import sys
import time

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab import cli, paths
from lab.generation import evaluate
from lab.logs import read_log
from lab.provenance import command_problem
from lab.rules import by_rule
from lab.runs import recorded_eval_set
from lab.studies import config_of
from lab.stats import paired

S3, S1 = (1337, 2, 3), (1337,)
# (form, seeds, its causal counterpart, the published val at the paper's scale or '-')
FORMS = (('ega_paper', S3, 'ega', '1.3821'), ('ega_mope_paper', S3, 'ega_mope', '1.3550'),
         ('fourier_qk', S3, 'fourier_qk_causal', '0.608'), ('multi_fourier_qk', S3, 'fourier_qk_causal', '0.309'),
         ('random_qk', S3, None, '1.031'), ('mexhat_qk', S1, 'causal_mexhat', '-'), ('nyquist_qk', S1, None, '-'),
         ('dc_gauss_qk', S1, None, '-'), ('morlet_xcorr', S1, 'causal_morlet', '~0.018'),
         ('qk_gaussian', S1, None, '-'), ('qk_orthogonal', S1, None, '-'), ('fnet', S1, None, '-'),
         ('conv_paper', S1, 'conv', '-'))       # conv_paper: causal, but depends on the window's end
PROMPT = 'ROMEO:'
OUT = os.path.join('generation', 'generation.json')
RULE_46 = ("the published EGA delivers its windowed loss when it generates if the paired 95% interval of its "
           "generation loss minus its windowed loss (the same weights, the same windows) lies within +-0.02; it does "
           "not if the interval is clear of 0 and reaches past +-0.02; else not resolved")
RULE_48 = ("a published leaking form keeps none of its windowed gain when it generates if the paired 95% interval "
           "of its generation loss minus dot's val (the same seeds and windows) lies clear above 0; the claim holds if "
           "that is so for every form with 2 seeds or more, does not hold if any form's interval lies clear below 0, "
           "else not resolved; the one-seed forms are listed, not judged")


class StudyError(Exception):
    pass


def command(label):
    """The training command's options of run `label`: its committed one, else its config at the CPU study scale."""
    path = os.path.join(paths.RUNS, label, 'run.json')
    if os.path.exists(path):
        with open(path) as f:
            rec = json.load(f)
        why = command_problem(rec.get('cmd'))
        if why:
            raise StudyError(f"{label}: not trained again: {why}")
        return [a for a in rec['cmd'][2:] if not a.startswith(('--out_dir=', '--init_from=', '--overwrite='))]
    name, _, seed = label.rpartition('-s')
    return [f'config/{name}.py', 'config/cpu.py', f'--seed={seed}']


def final(run_dir):
    evals = read_log(os.path.join(run_dir, 'log.jsonl'))[0]
    return (max(evals), evals[max(evals)]['val']) if evals else (None, None)


def trained(label, scratch, threads):
    """scratch/label holds the run's finished checkpoint: trained (or resumed) here unless it does already."""
    out = os.path.join(scratch, label)
    args = command(label)
    want = config_of([a for a in args if not a.startswith('--')], [a for a in args if a.startswith('--')])['max_iters']
    if final(out)[0] == want and os.path.exists(os.path.join(out, 'ckpt.pt')):
        return out, args
    resume = os.path.exists(os.path.join(out, 'ckpt.pt'))
    print(f"{label}: training ({'resumed' if resume else 'from scratch'}) into {out}", flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, 'run.txt'), 'a') as log:
        rc = subprocess.run([sys.executable, 'train.py', *args, f'--out_dir={out}', f'--threads={threads}',
                             '--init_from=resume' if resume else '--overwrite=True'], cwd=paths.REPO,
                            stdout=log, stderr=subprocess.STDOUT).returncode
    if rc or final(out)[0] != want:     # a signal stops train.py with its checkpoint saved: the same command resumes
        raise StudyError(f"{label}: train.py stopped (exit {rc}) before iter {want}; its output: "
                         f"{os.path.join(out, 'run.txt')}; the same command resumes it")
    return out, args


def sample(out, threads):
    p = subprocess.run([sys.executable, 'sample.py', f'--out_dir={out}', f'--start={PROMPT}', '--num_samples=1',
                        '--max_new_tokens=200', '--seed=1337', '--device=cpu'], cwd=paths.REPO,
                       capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if p.returncode:
        raise StudyError(f"sample.py on {out}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    return p.stdout.split('---------------\n')[0].strip('\n'), p.stderr.strip()


def yardstick(name, seed, eval_set):
    """The committed causal run's final val at that seed, where it reads the same evaluation set; else None."""
    run = os.path.join(paths.RUNS, f'{name}-s{seed}')
    if not name or not os.path.exists(run):
        return None
    it, val = final(run)
    return val if recorded_eval_set(run, read_log(os.path.join(run, 'log.jsonl'))[0].get(it)) == eval_set else None


def measure(label, form, seed, counterpart, scratch, threads):
    out, args = trained(label, scratch, threads)
    t = time.time()
    res = evaluate(os.path.join(out, 'ckpt.pt'), out=print)
    committed = final(os.path.join(paths.RUNS, label))[1]
    again = final(out)[1]
    res.update(form=form, seed=seed, command=' '.join(['python', 'train.py', *args]), committed=committed, again=again,
               dot=yardstick('dot', seed, res['eval_set']), counterpart=counterpart,
               counterpart_val=yardstick(counterpart, seed, res['eval_set']), eval_seconds=round(time.time() - t, 1))
    res.pop('per_batch')
    if seed == FORMS_SEEDS[form][0]:
        res['sample'] = sample(out, threads)
    print(f"{label}: window {res['window']:.4f}{' (LEAKS)' if res['leaks'] else ''}" +
          (f", prefix {res['prefix']:.4f}" if 'prefix' in res else '') +
          f", generation {res['generation']:.4f}; dot {res['dot']}; trained again {again:.4f} (committed "
          f"{committed if committed is None else f'{committed:.4f}'}); {res['eval_seconds']:.0f} s", flush=True)
    return res


FORMS_SEEDS = {f: seeds for f, seeds, _, _ in FORMS}


def by_form(res):
    """{form: {seed: run result}} in FORMS' order."""
    out = {}
    for r in res.get('runs', {}).values():
        out.setdefault(r['form'], {})[r['seed']] = r
    return {f: out[f] for f, *_ in FORMS if f in out}


def interval(diffs):
    p = paired(diffs, dict.fromkeys(diffs, 0.0))
    if p is None:
        return p, '-'
    if p['half'] is None:
        return p, f"{p['mean']:+.3f} (1 seed)"
    return p, f"{p['mean']:+.3f} ({p['mean'] - p['half']:+.3f}..{p['mean'] + p['half']:+.3f}, {p['n']} seeds)"


def row_46(done=None, leaking=None, cl=None):
    """Row 46 by RULE_46: generation minus window of `ega_paper`, with prefix minus window beside it."""
    runs = by_form(paths.results_json(*OUT.split('/'))).get('ega_paper', {})
    if not runs:
        return 'not measured (python -m lab.generation_study)', 'untestable here'
    gen, txt = interval({s: r['generation'] - r['window'] for s, r in runs.items()})
    _, pre = interval({s: r['prefix'] - r['window'] for s, r in runs.items() if 'prefix' in r})
    _, dot = interval({s: r['generation'] - r['dot'] for s, r in runs.items() if r['dot'] is not None})
    v = by_rule('zero', gen)
    return (f"`ega_paper`, the same weights, as it generates minus its windowed val: {txt}; with prefix statistics "
            f"(context, not how it generates): {pre}; as it generates minus dot: {dot}",
            {'reproduced': 'holds', 'contradicted': 'does not hold'}.get(v, 'not resolved' if v.startswith('not')
                                                                           else v))


def row_48(done=None, leaking=None, cl=None):
    """Row 48 by RULE_48: each leaking form's generation loss minus dot's val, paired by seed."""
    forms = {f: r for f, r in by_form(paths.results_json(*OUT.split('/'))).items() if f != 'conv_paper'}
    if not forms:
        return 'not measured (python -m lab.generation_study)', 'untestable here'
    parts, judged = [], {}
    for f, runs in forms.items():
        p, txt = interval({s: r['generation'] - r['dot'] for s, r in runs.items() if r['dot'] is not None})
        parts.append(f"`{f}` {txt}")
        if p is not None and p['half'] is not None:
            judged[f] = 1 if p['mean'] - p['half'] > 0 else -1 if p['mean'] + p['half'] < 0 else 0
    text = 'as it generates minus dot: ' + '; '.join(parts)
    if any(v < 0 for v in judged.values()):
        return text, 'does not hold: ' + ', '.join(f'`{f}`' for f, v in judged.items() if v < 0)
    return text, 'holds' if judged and all(v > 0 for v in judged.values()) else 'not resolved'


PUB = {f: p for f, _, _, p in FORMS}
PUBLISHED_40 = (f"{float(PUB['ega_mope_paper']) - float(PUB['ega_paper']):+.3f}: {PUB['ega_mope_paper']} against "
                f"{PUB['ega_paper']}")


def row_40(forms):
    """ega_mope_paper's generation loss minus ega_paper's, paired by seed: row 40's comparison as they generate."""
    a, b = forms.get('ega_mope_paper', {}), forms.get('ega_paper', {})
    return interval({s: a[s]['generation'] - b[s]['generation'] for s in a if s in b})[1]


def fmt(x, leaks=False):
    return '-' if x is None else f"{x:.4f}" + (' (LEAKS)' if leaks else '')


def report(res):
    """GENERATION.md: per form its losses by evaluation, beside dot and its causal counterpart; per run; samples."""
    forms = by_form(res)
    out = ['# What each leaking form delivers when it generates', '',
           f"Made by `{res.get('command', 'python -m lab.generation_study')}` (lab/generation_study.py says "
           "how), on the CPU, from retrained checkpoints (each run's committed command, its final val checked). Val "
           "loss at the CPU study scale (4 x 4 x 128, T = 128, 2000 steps) on each run's 20 fixed val batches of 16 "
           "windows. Three evaluations of the same weights: **window** (every position at once: a leaking form "
           "reads later tokens, **LEAKS**, no modelling result), **prefix** (the published EGA with ega_norm=prefix: "
           "causal, but not how it generates) and **generation** (each token predicted from the tokens before it "
           "alone, as sample.py does: what the model delivers). dot and the causal counterpart are causal: their val "
           "is their generation loss. The published number is the paper's, at its own scale (6 x 8 x 256, T = 256, "
           "5000 steps): it is a windowed, leaking loss.", '',
           f"Row 46: {RULE_46}. Verdict: **{row_46()[1]}**. {row_46()[0]}.", '',
           f"Row 48: {RULE_48}. Verdict: **{row_48()[1]}**. {row_48()[0]}.", '',
           f"Row 40's published comparison, EGA + MOPE against EGA ({PUBLISHED_40}, both windowed and leaking), "
           f"as the two generate (context: row 40 is judged on the causal forms): `ega_mope_paper - ega_paper` "
           f"{row_40(forms)}.", '',
           '| form | seeds | published (paper scale, window) | window (LEAKS) | prefix | generation | dot | '
           'causal counterpart | generation - dot | generation - counterpart |', '|---|---|---|---|---|---|---|---|---|---|']
    mean = lambda rs, k: (sum(r[k] for r in rs) / len(rs)) if rs and all(r.get(k) is not None for r in rs) else None  # noqa: E731
    for f, runs in forms.items():
        rs = list(runs.values())
        cp = rs[0]['counterpart']
        out.append(f"| `{f}`{' (causal, edge)' if not rs[0]['leaks'] else ''} | {len(rs)} | {PUB[f]} | "
                   f"{fmt(mean(rs, 'window'), rs[0]['leaks'])} | {fmt(mean(rs, 'prefix'))} | "
                   f"{fmt(mean(rs, 'generation'))} | {fmt(mean(rs, 'dot'))} | "
                   f"{f'`{cp}` ' + fmt(mean(rs, 'counterpart_val')) if cp else '-'} | "
                   f"{interval({r['seed']: r['generation'] - r['dot'] for r in rs if r['dot'] is not None})[1]} | "
                   f"{interval({r['seed']: r['generation'] - r['counterpart_val'] for r in rs if r.get('counterpart_val') is not None})[1] if cp else '-'} |")
    out += ['', '## Each run', '', '| run | committed val | trained again | window | prefix | generation | dot | '
            'evaluation cost (s, 1 thread) |', '|---|---|---|---|---|---|---|---|']
    for f, runs in forms.items():
        for s, r in runs.items():
            out.append(f"| {f}-s{s} | {fmt(r['committed'])} | {fmt(r['again'])} | {fmt(r['window'], r['leaks'])} | "
                       f"{fmt(r.get('prefix'))} | {fmt(r['generation'])} | {fmt(r['dot'])} | "
                       f"{r['seconds'].get('generation', 0):.0f} |")
    runs = forms.get('ega_paper', {})
    if runs:
        out += ['', '## Where along the window (`ega_paper`, mean over its seeds)', '',
                '| positions | window (LEAKS) | prefix | generation |', '|---|---|---|---|']
        for lo, hi in ((0, 16), (16, 64), (64, 112), (112, 127), (127, 128)):
            cells = [sum(sum(r['per_position'][k][lo:hi]) / (hi - lo) for r in runs.values()) / len(runs)
                     for k in ('window', 'prefix', 'generation')]
            out.append(f"| {lo} to {hi - 1} | " + ' | '.join(f'{x:.3f}' for x in cells) + ' |')
    out += ['', f'## Samples (`python sample.py --start={PROMPT} --num_samples=1 --max_new_tokens=200 --seed=1337`, '
            'first seed)', '']
    for f, runs in forms.items():
        r = next((r for r in runs.values() if r.get('sample')), None)
        if r:
            text, note = r['sample']
            out += [f'### {f}', '', *(f"> {line}" for line in note.splitlines() if line), '', f"```\n{text}\n```", '']
    return '\n'.join(out).rstrip() + '\n'


def write(res, argv, table_only=False):
    """generation.json (its command the one that measured: --table_only leaves it) and GENERATION.md from it."""
    if not table_only:
        paths.write_result(OUT, 'lab.generation_study', argv, **{k: v for k, v in res.items() if k != 'command'})
    with open(os.path.join(paths.RESULTS, 'generation', 'GENERATION.md'), 'w') as f:
        f.write(report(paths.results_json(*OUT.split('/'))))
    print('wrote results/generation/GENERATION.md')


def main(argv):
    c, rc = cli.parse(__doc__, dict(scratch='out/generation', threads=1, table_only=False), argv)
    if c is None:
        return rc
    if c['threads'] < 1:
        return cli.fail(f"need threads >= 1, got {c['threads']}")
    import torch
    torch.set_num_threads(c['threads'])
    res = paths.results_json(*OUT.split('/'))
    res = dict(date=res.get('date'), runs=res.get('runs', {}))
    if not c['table_only']:
        scratch = paths.at_repo(c['scratch'], 'out/generation')
        for form, seeds, counterpart, _ in FORMS:
            for seed in seeds:
                label = f'{form}-s{seed}'
                if label in res['runs']:
                    continue
                try:
                    res['runs'][label] = measure(label, form, seed, counterpart, scratch, c['threads'])
                except (StudyError, ConfigError, OSError) as e:
                    return cli.fail(e)
                except KeyboardInterrupt:
                    print(f"stopped at {label}: the same command goes on from there", file=sys.stderr)
                    return 130
                res['date'] = time.strftime('%Y-%m-%d')
                write(res, argv)        # each run as it is measured: a stop loses at most the one in hand
    write(res, argv, c['table_only'])
    print(f"row 46: {row_46()[1]}; row 48: {row_48()[1]}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
