"""
The 2026-12-04 paper-scale runs into results/runs, as seed 1337 of the `paper` study:

    python results/gpu/2026-12-04/make_runs.py ../shared/gpu/2026-12-04/paper-5000/probe_logs.json

probe_logs.json (lab/gpu_first's report, its code at e2186e5 with study-list.diff) holds each run's
log rows and its console lines. The four that trained right (dot, mope, ega_paper, ega_mope_paper)
become <name>@paper-s1337: log.jsonl (the rows), run.txt (the lines), run.json (the command, the
code, the versions, and that their evals read 20 val batches, not the 50 of later runs). `ega` and
`ega_mope` trained under the bf16 fault of issue 46 and are not results: left out (README.md here).
A run folder that exists is left as it is.
"""

import json
import os
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RIGHT = ('dot', 'mope', 'ega_paper', 'ega_mope_paper')
VERSIONS = 'python 3.12.3, torch 2.11.0+cu130, CUDA 13.0, NVIDIA H200'     # its env.json


def main(path):
    with open(path) as f:
        probe = json.load(f)
    with open(os.path.join(HERE, 'study-list.diff')) as f:
        diff = f.read()
    for run in probe['runs']:
        if run['run'] not in RIGHT:
            print(f"{run['run']}: trained under the bf16 fault (issue 46): left out")
            continue
        d = os.path.join(REPO, 'results', 'runs', f"{run['run']}@paper-s1337")
        if os.path.exists(d):
            print(f"{os.path.relpath(d, REPO)}: exists, left as it is")
            continue
        assert run['status'] == 'finished' and any(r['kind'] == 'eval' and r['iter'] == 5000 for r in run['rows'])
        os.makedirs(d)
        with open(os.path.join(d, 'log.jsonl'), 'w') as f:
            f.writelines(json.dumps(r) + '\n' for r in run['rows'])
        with open(os.path.join(d, 'run.txt'), 'w') as f:
            f.writelines(line + '\n' for _, line in run['lines'])
        with open(os.path.join(d, 'code-0.diff'), 'w') as f:
            f.write(diff)
        rec = dict(cmd=shlex.split(run['cmd']), max_iters=5000, code=['e2186e5+dirty'], diffs={'0': 'code-0.diff'},
                   data=dict(data_dir='data/shakespeare_char', tokenizer='char', vocab_size=65),
                   versions=[VERSIONS], started='2026-12-04',
                   note=f"from results/gpu/2026-12-04 (lab/gpu_first's probe, 6 runs at once on one H200); "
                        f"its evals read {run['eval_iters']} val batches")
        with open(os.path.join(d, 'run.json'), 'w') as f:
            json.dump(rec, f, indent=1)
        print(f"{os.path.relpath(d, REPO)}: val {run['rows'][-1]['val']:.4f} at iter 5000")


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit('usage: python results/gpu/2026-12-04/make_runs.py PATH/probe_logs.json')
    main(sys.argv[1])
