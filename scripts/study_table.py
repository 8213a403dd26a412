"""
A markdown table of CPU-study runs, from their out-study/<name>-s<seed>/log.jsonl:
the final val loss per seed, the mean and spread, the shuffled-val gap, and the
audit verdict. A leaking run is marked, never ranked among the causal ones.

    python scripts/study_table.py --seeds=1337,2,3 dot ega mope ega_mope ega_mope_paper

Only finished runs count: those with an eval at step --iters (default 2000).
"""

import json
import os
import statistics
import sys


def final_eval(name, seed, iters):
    path = f'out-study/{name}-s{seed}/log.jsonl'
    if not os.path.exists(path):
        return None
    evals = [r for r in map(json.loads, open(path)) if r['kind'] == 'eval' and r['iter'] == iters]
    return evals[-1] if evals else None


def main(argv):
    seeds, iters, names = ['1337'], 2000, []
    for a in argv:
        if a.startswith('--seeds='):
            seeds = a[len('--seeds='):].split(',')
        elif a.startswith('--iters='):
            iters = int(a[len('--iters='):])
        elif a.startswith('--'):
            sys.exit(f"error: unknown flag {a}; use --seeds=S1,S2 --iters=N NAME...")
        else:
            names.append(a)
    print('| config | ' + ' | '.join(f'val, seed {s}' for s in seeds) +
          ' | mean (sd) | shuffled-val gap | audit |')
    print('|---|' + '---|' * (len(seeds) + 3))
    for n in names:
        runs = [final_eval(n, s, iters) for s in seeds]
        vals = [r['val'] for r in runs if r]
        done = [r for r in runs if r]
        if not done:
            continue
        leaks = any(r['leaks'] for r in done)
        mean = f"{statistics.mean(vals):.4f}" + (f" ({statistics.stdev(vals):.4f})" if len(vals) > 1 else '')
        gaps = ', '.join(f"{r['gap']:+.2f}" for r in done)
        cells = [f"{r['val']:.4f}" if r else '-' for r in runs]
        print(f"| {n} | " + ' | '.join(cells) + f" | {mean} | {gaps} | "
              f"{'**LEAKS** (not a modelling result)' if leaks else 'causal'} |")


if __name__ == '__main__':
    main(sys.argv[1:])
