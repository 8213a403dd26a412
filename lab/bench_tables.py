"""
The tables of committed bench runs, and the speed goals they judge: results/README.md's throughput
table (EAGER, COMPILED, REPEATS: each variant's eager ratio to dot beside its goal, GOALS), and
results/bench/speed.md's compiled table at the paper's size (PAPER, PAPER_REPEATS, PAPER_PLAIN, against
PAPER_GOAL), its CUDA table (CUDA_RUNS, against CUDA_GOALS and DOT_MS; README's table gains their
column) and comparison with the authors' code (AUTHORS_RUNS, against AUTHORS_GOALS). Each run is
a committed `python -m lab.bench --out=...` file (`python bench.py` before 2026-12-07, when the
root's bench.py was the suite), named here with the command that makes it; a missing or
mismatched file is a one-line error that names that command.

    python -m lab.bench_tables               # print the tables
    python -m lab.bench_tables --write=True  # write them into results/README.md and results/bench/speed.md
"""

import json
import os
import statistics
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lab.bench_parts import all_variants, ran_eager
from configurator import ConfigError
from lab import cli, paths
from lab.readme import write_block

# README's throughput table: idle eager runs (EAGER, REPEATS) and one compiled run of every
# variant, each written by --out, and each eager ratio to dot beside its goal (issue 23; CPU
# study scale)
EAGER = 'results/bench/cpu.json'                # python -m lab.bench --steps=60 --warmup=3 --out=...
COMPILED = 'results/bench/cpu_compile.json'     # the same with --compile=True --steps=10
# earlier idle eager runs of the same model code (each records its commit), beside EAGER's ratios:
# between idle runs of one code on this machine a ratio moves by several points
REPEATS = 'results/bench/cpu_repeats'
GOALS = {'ega': 95, 'ega_fox': 92, 'fox': 95, 'flux': 85, 'phase': 85, 'ega_morlet': 90, 'daub': 90,
         'conv': 90, 'causal_morlet': 80, 'causal_gauss': 90, 'causal_mexhat': 90, 'fourier_qk_causal': 80,
         'multi_fourier_qk': 65, 'dot:mope_rel': 95, 'dot:alibi': 95, 'dot:rope': 95}
THROUGHPUT = ('<!-- throughput: python -m lab.bench_tables --write=True -->', '<!-- /throughput -->')
# results/bench/speed.md's compiled table at the paper's size (6 layers, 8 heads, C = 256, T = 256, batch 16): three
# idle runs of the logit-level forms, and one of dot through the written-out path beside them (its bound)
PAPER = 'results/bench/paper_compile.json'      # PAPER_RUN --out=..., and --out=PAPER_REPEATS/{1,2}.json
PAPER_REPEATS = 'results/bench/paper_compile_repeats'
PAPER_PLAIN = 'results/bench/paper_compile_plain.json'   # PAPER_PLAIN_RUN --out=...
PAPER_SIZE = '--n_layer=6 --n_head=8 --n_embd=256 --block_size=256 --batch_size=16 --steps=10 --warmup=3'
PAPER_RUN = f'python -m lab.bench --compile=True --variants=dot,ega,fox,ega_fox,dot:alibi,dot:mope_rel,conv_paper {PAPER_SIZE}'
PAPER_PLAIN_RUN = f'python -m lab.bench --compile=True --variants=dot,dot:learned:attn_impl=plain,dot:mope_rel,conv_paper {PAPER_SIZE}'
PAPER_GOAL = 95                                 # % of compiled dot, every logit-level form
PAPER_BLOCK = ('<!-- paper_compiled: python -m lab.bench_tables --write=True -->', '<!-- /paper_compiled -->')

# results/bench/speed.md's CUDA table at the paper's size (batch 64, compiled, bf16): the two benches of
# `bash lab/gpu_check.sh --speed`, each one interleaved run with dot, committed under these names
CUDA_RUNS = {'logit': 'results/bench/cuda_logit.json', 'filters': 'results/bench/cuda_filters.json'}
CUDA_GOALS = {'logit': 90, 'filters': 85}       # % of dot's tokens/s: the logit-level forms, the causal filters
DOT_MS = 6.0                                    # dot's goal on an H200, ms per step
CUDA_BLOCK = ('<!-- cuda: python -m lab.bench_tables --write=True -->', '<!-- /cuda -->')
CUDA_REDO = ("on a GPU, `bash lab/gpu_check.sh --speed`; then its $OUT's logit.json and filters.json "
             "committed as results/bench/cuda_logit.json and cuda_filters.json")
AUTHORS_BLOCK = ('<!-- authors: python -m lab.bench_tables --write=True -->', '<!-- /authors -->')
AUTHORS_RUNS = {'the CPU study scale': 'results/bench/authors_cpu', "the paper's size": 'results/bench/authors_paper'}
AUTHORS_GOALS = {'the CPU study scale': 1.4, "the paper's size": 2.0}    # our ega's tokens/s over theirs


def compiled_note(compiled):
    """Whether the compiled run's every variant ran compiled, from its per-variant graph counts:
    the sentence for the table's head, the compiled column's heading, and the variants that ran
    eager. A run without the counts (bench.py before they were kept, when every variant from the
    ninth ran eager) is not verified per variant."""
    variants = compiled['variants']
    if not all('graphs' in r for r in variants.values()):
        return (" **The compiled column is not verified per variant**: its run recorded no graph counts, "
                "and bench.py then ran every variant from the ninth eager (dynamo's recompile limit of 8 "
                "graphs on their shared GPT.forward), so those rows and the loss check compare eager with "
                "eager; rerunning it with today's python -m lab.bench records the counts.",
                'compiled (not verified), tokens/s', set())
    eager = {k for k, r in variants.items() if ran_eager(r)}
    graphs, breaks = (sum(r.get(k, 0) for r in variants.values()) for k in ('graphs', 'graph_breaks'))
    if eager:
        return (f" **Not every variant compiled**: {', '.join(k for k in variants if k in eager)} ran eager "
                f"(marked in the compiled column).", f'compiled ({len(eager)} ran eager), tokens/s', eager)
    return (f" Every one of the {len(variants)} variants compiled ({graphs} graphs, {breaks} graph breaks, "
            f"no recompile-limit hit).", 'compiled (every variant), tokens/s', eager)


def readme_table(eager, compiled, repeats=(), cuda=None):
    """README's throughput table from --out files' contents: each variant's eager tokens/s and
    ratio to dot, its ratio in the repeated idle runs, its goal, judged on the median ratio of
    all those runs, what it saves for backward, and the compiled run's tokens/s and ratio to eager
    (and whether each variant ran compiled: compiled_note); with CUDA runs (cuda_runs), a column of
    each variant's ratio to dot there (results/bench/speed.md has their table)."""
    on_cuda = {k: x['tps'] / r['variants']['dot']['tps'] for r in (cuda or {}).values()
               for k, x in r['variants'].items()}
    runs = [eager, *repeats]
    diffs = {k: r['compile_diff'] for k, r in compiled['variants'].items() if 'compile_diff' in r}
    worst = max(diffs, key=diffs.get) if diffs else None
    check = (f" Each compiled model's first loss against its eager one: largest difference "
             f"{diffs[worst]:.1g} ({worst}), of {len(diffs)} variants." if diffs else '')
    verified, heading, ran_eagerly = compiled_note(compiled)

    def at(r):                                                  # runs before 2026-12-01 did not record it
        return f", at {r['code']}" if 'code' in r else ''
    listed = ', '.join(f"`{r['command']}` ({r['date']}{at(r)})" for r in repeats)
    again = (f" Repeated idle eager runs of the same model code ({listed}): their ratios in the column "
             f"after, and each goal judged on the median over the {len(runs)} runs." if repeats else '')
    out = [f"Eager: `{eager['command']}` ({eager['date']}{at(eager)}, torch {eager['torch']}, "
           f"{eager['threads']} threads). Compiled: `{compiled['command']}` ({compiled['date']})."
           f"{verified}{check}{again}", '',
           '| variant | tokens/s | vs dot | vs dot, repeated runs | goal | saved for backward, MiB | '
           f"{heading} | compiled / eager |{' CUDA, paper size: vs dot |' if on_cuda else ''} params |",
           '|---|---|---|---|---|---|---|---|' + ('---|' if on_cuda else '') + '---|']
    for name, r in eager['variants'].items():
        ratios = [run['variants'][name]['tps'] / run['variants']['dot']['tps'] for run in runs
                  if name in run['variants']]
        goal, comp = GOALS.get(name), compiled['variants'].get(name)
        met = round(100 * statistics.median(ratios), 1) >= goal if goal else None   # as the ratios show
        goal = '-' if goal is None else f"{goal}%: {'met' if met else '**not met**'}"
        comp = '- | -' if comp is None else (f"{comp['tps']:,.0f}{' (eager)' if name in ran_eagerly else ''} | "
                                             f"{comp['tps'] / r['tps']:.2f}x")
        others = ', '.join(f"{x:.1%}" for x in ratios[1:]) or '-'
        gpu = (f" {on_cuda[name]:.1%} |" if name in on_cuda else ' - |') if on_cuda else ''
        out.append(f"| {name} | {r['tps']:,.0f} | {ratios[0]:.1%} | {others} | {goal} | "
                   f"{r['mem'] / 2 ** 20:,.1f} | {comp} |{gpu} {r['params']:,} |")
    for run in (eager, compiled):
        gone = run.get('missing', {}).get('variants')
        if gone:
            out += ['', f"**Not in {'the compiled' if run is compiled else 'the eager'} run**: {', '.join(gone)} "
                        f"(left out): `{run['missing']['redo']}` adds them."]
    return '\n'.join(out)


def repeat_files(folder):
    """The --out files in a folder of repeated runs, sorted, named as the folder is; [] without the folder."""
    full = os.path.join(paths.REPO, folder)
    return sorted(os.path.join(folder, f) for f in os.listdir(full) if f.endswith('.json')) if os.path.isdir(full) else []


def load_run(path, redo):
    """A committed --out file (path from the repository), or a one-line error naming redo, what makes it."""
    try:
        with open(os.path.join(paths.REPO, path)) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing: {redo}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not JSON ({e}): {redo}") from None


def readme_runs():
    """The committed runs README's table is made from, checked: EAGER, COMPILED and the REPEATS
    (a list), each an eager or compiled run with dot, all at one scale; each run's 'missing' names the
    variants another of them holds that it lacks, and the command that benches them. Not the registry's: a
    variant a user registers (README's recipe) changes no table of the lab's."""
    runs, repeats = [], repeat_files(REPEATS)
    plan = [(EAGER, ' --steps=60', False), (COMPILED, ' --compile=True --steps=10', True)]
    for path, how, compiled in plan + [(p, ' --steps=60', False) for p in repeats]:
        redo = f"python -m lab.bench{how} --warmup=3 --out={path} --overwrite=True"
        run = load_run(path, redo)
        cfg = run.get('config', {})
        if cfg.get('compile') is not compiled or 'dot' not in run.get('variants', {}):
            raise ConfigError(f"{path} is not a{' compiled' if compiled else 'n eager'} run with dot: {redo}")
        run['missing'] = dict(redo=redo)
        runs.append(run)
    want = list(dict.fromkeys(v for r in runs for v in r['variants']))
    for r in runs:      # a run of some variants (--variants=dot,ega) is named under the table with what it lacks
        r['missing']['variants'] = [v for v in want if v not in r['variants']]
    scales = [{k: r['config'][k] for k in ('n_layer', 'n_head', 'n_embd', 'block_size', 'batch_size', 'dtype')
               if k in r['config']} for r in runs]
    for path, scale in zip([COMPILED] + repeats, scales[1:]):
        if scale != scales[0]:
            raise ConfigError(f"{EAGER} and {path} were run at different scales: {scales[0]} and {scale}")
    return runs[0], runs[1], runs[2:]


def paper_runs():
    """The committed compiled runs at the paper's size: PAPER, its repeats, PAPER_PLAIN."""
    runs = []
    scale = ('compile', 'n_layer', 'n_head', 'n_embd', 'block_size', 'batch_size', 'precision')
    for path in [PAPER] + repeat_files(PAPER_REPEATS) + [PAPER_PLAIN]:
        redo = f"{PAPER_PLAIN_RUN if path == PAPER_PLAIN else PAPER_RUN} --out={path} --overwrite=True"
        runs.append(load_run(path, redo))
        if 'dot' not in runs[-1]['variants'] or [runs[-1]['config'].get(k) for k in scale] != \
                [True, 6, 8, 256, 256, 16, runs[0]['config'].get('precision')]:
            raise ConfigError(f"{path} is not a compiled run with dot at the paper's size and the first run's "
                              f"precision: run {redo}")
    return runs[:-1], runs[-1]


def paper_table(runs, plain):
    """results/bench/speed.md's compiled table at the paper's size: each form's ratio to dot in each run, the
    median judged against PAPER_GOAL, what it saves for backward; then the written-out path's run."""
    def when(r):
        return f"{r['date']} {r.get('time', '')}, at {r.get('code', '?')}".replace('  ', ' ')
    r0 = runs[0]
    out = [f"Compiled, {r0['config']['precision']}, torch {r0['torch']}, {r0['threads']} threads, the median of {len(runs)} runs "
           f"(`{r0['command']}`: {'; '.join(when(r) for r in runs)}), goal {PAPER_GOAL}% of dot:", '',
           '| variant | tokens/s, first run | vs dot, each run | median | goal | saved for backward, MiB |',
           '|---|---|---|---|---|---|']
    for name, v in r0['variants'].items():
        ratios = [r['variants'][name]['tps'] / r['variants']['dot']['tps'] for r in runs if name in r['variants']]
        med = statistics.median(ratios)
        goal = '-' if name == 'dot' else f"{'met' if round(100 * med, 1) >= PAPER_GOAL else '**not met**'}"
        out.append(f"| {name} | {v['tps']:,.0f} | {', '.join(f'{x:.1%}' for x in ratios)} | {med:.1%} | {goal} | "
                   f"{v['mem'] / 2 ** 20:,.1f} |")
    out += ['', f"The written-out path (`attend_plain`, the `T x T` weights), one run (`{plain['command']}`, "
            f"{when(plain)}):", '', '| variant | tokens/s | vs dot | saved for backward, MiB |', '|---|---|---|---|']
    out += [f"| {name} | {v['tps']:,.0f} | {v['tps'] / plain['variants']['dot']['tps']:.1%} | "
            f"{v['mem'] / 2 ** 20:,.1f} |" for name, v in plain['variants'].items()]
    return '\n'.join(out)


def cuda_runs():
    """The committed CUDA runs (CUDA_RUNS) that exist, by name; each checked: compiled on CUDA at the
    paper's size, with dot."""
    runs = {}
    for name, path in CUDA_RUNS.items():
        if not os.path.exists(os.path.join(paths.REPO, path)):
            continue
        run = load_run(path, CUDA_REDO)
        cfg = run.get('config', {})
        if not str(cfg.get('device', '')).startswith('cuda') or 'dot' not in run.get('variants', {}) or \
                [cfg.get(k) for k in ('compile', 'n_layer', 'n_head', 'n_embd', 'block_size', 'batch_size', 'dropout')] != \
                [True, 6, 8, 256, 256, 64, 0.1]:
            raise ConfigError(f"{path} is not a compiled CUDA run with dot at the paper's size and dropout: {CUDA_REDO}")
        runs[name] = run
    return runs


def default_compile(spec):
    """The spec a compile_mode variant is timed against: itself without the mode (`dot:learned:
    compile_mode=reduce-overhead` -> `dot`), or None for a spec without one."""
    items = spec.split(':')
    if not any(i.startswith('compile_mode=') for i in items[2:]):
        return None
    rest = [i for i in items[2:] if not i.startswith('compile_mode=')]
    return ':'.join(items[:1] + ([items[1]] if rest or items[1] != 'learned' else []) + rest)


def cuda_table(runs):
    """results/bench/speed.md's CUDA table: each run's variants with ms per step, tokens/s, the ratio to dot
    against the run's goal (CUDA_GOALS), peak memory, MFU and the attention ops its step called
    (bench.py --kernels: a fused kernel, SDPA's math fallback, flex); a compile_mode variant against
    its own default compile instead; and dot's ms per step against DOT_MS. Without a run, what makes them."""
    if not runs:
        return f"No CUDA run is committed yet: {CUDA_REDO}."
    out = []
    for name, r in runs.items():
        cfg, v = r['config'], r['variants']
        B, T = cfg['batch_size'], cfg['block_size']
        ms = {k: 1e3 * B * T / x['tps'] for k, x in v.items()}
        where = r.get('versions', f"torch {r['torch']}")
        out += [f"{'The logit-level forms' if name == 'logit' else 'The causal filters'}: `{r['command']}` "
                f"({r['date']} {r.get('time', '')}, at {r.get('code', '?')}; {where}; dropout "
                f"{cfg.get('dropout', 0.0):g}), goal {CUDA_GOALS[name]}% of "
                f"dot's tokens/s; dot {ms['dot']:.1f} ms a step against the goal of {DOT_MS:g} ms: "
                f"{'met' if ms['dot'] <= DOT_MS else '**not met**'}."
                + (f" Its deadline cut it ({cfg['cut']}): the median of {cfg['steps_run']} timed steps after "
                   f"{cfg['warmup_run']} warm-up." if cfg.get('cut') else ''), '',
                '| variant | ms/step | tokens/s | vs dot | goal | peak MiB | MFU | attention |',
                '|---|---|---|---|---|---|---|---|']
        for k, x in v.items():
            base = default_compile(k)
            if base:
                goal = f"{x['tps'] / v[base]['tps']:.2f}x its default compile" if base in v else '-'
            elif k == 'dot':
                goal = '-'
            else:
                goal = 'met' if round(100 * x['tps'] / v['dot']['tps'], 1) >= CUDA_GOALS[name] else '**not met**'
            mfu = '-' if x.get('mfu') is None else f"{x['mfu']:.1%}"
            mib = '-' if x.get('mem') is None else f"{x['mem'] / 2 ** 20:,.0f}"     # None: a SIGTERM's bench
            eager = ' (ran eager)' if x.get('eager') else ''
            out.append(f"| {k}{eager} | {ms[k]:.1f} | {x['tps']:,.0f} | {x['tps'] / v['dot']['tps']:.1%} | {goal} | "
                       f"{mib} | {mfu} | {x.get('kernel', '-')} |")
        out.append('')
    missing = [p for n, p in CUDA_RUNS.items() if n not in runs]
    if missing:
        out.append(f"Not committed: {', '.join(missing)} ({CUDA_REDO}).")
    return '\n'.join(out).rstrip()


def authors_table():
    """results/bench/speed.md's comparison with the authors' code: at each scale (AUTHORS_RUNS: a run and its
    _repeats/), our ega's tokens/s over their EGA's in each run, the median against the goal, and its
    bound: our dot over their EGA, what an EGA that cost nothing beside dot would reach."""
    out = ['| scale | runs | our ega / their EGA, each run | median | goal | our dot / their EGA (the bound), '
           'median | our dot / their dot, median |', '|---|---|---|---|---|---|---|']
    for scale, base in AUTHORS_RUNS.items():
        paths = [base + '.json'] + repeat_files(base + '_repeats')
        runs = [load_run(path, "rerun its command (results/bench/speed.md's section against the authors' code)")
                for path in paths]
        v = [r['variants'] for r in runs]
        if not all({'dot', 'ega', 'authors:dot', 'authors:ega'} <= set(x) for x in v):
            raise ConfigError(f"{base}: every run needs dot, ega and the authors' dot and EGA (python -m lab.authors --script=PATH --bench=True)")
        size = [[r['config'].get(k) for k in ('n_layer', 'n_embd', 'block_size', 'batch_size', 'compile')] for r in runs]
        if any(x != size[0] for x in size):
            raise ConfigError(f"{base}: its runs are of different sizes ({size}): rerun them with one command")
        ours = [x['ega']['tps'] / x['authors:ega']['tps'] for x in v]
        med = statistics.median(ours)
        bound = statistics.median(x['dot']['tps'] / x['authors:ega']['tps'] for x in v)
        dots = statistics.median(x['dot']['tps'] / x['authors:dot']['tps'] for x in v)
        goal = AUTHORS_GOALS[scale]
        listed = '; '.join(f"`{p}` ({r['date']} {r.get('time', '')}, at {r.get('code', '?')})".replace(' ,', ',')
                           for p, r in zip(paths, runs))
        out.append(f"| {scale} | {listed} | {', '.join(f'{x:.2f}x' for x in ours)} | {med:.2f}x | {goal:g}x: "
                   f"{'met' if round(med, 2) >= goal else '**not met**'} | {bound:.2f}x | {dots:.2f}x |")
    return '\n'.join(out)


def write_readme():
    """README's throughput block, from the committed runs (readme_runs); results/bench/speed.md's paper-size block."""
    here = paths.REPO
    cuda = cuda_runs()
    table, paper, authors = readme_table(*readme_runs(), cuda=cuda), paper_table(*paper_runs()), authors_table()
    write_block(os.path.join(here, 'results', 'README.md'), THROUGHPUT, table)   # ConfigError: no block
    speed = os.path.join(here, 'results', 'bench', 'speed.md')
    write_block(speed, PAPER_BLOCK, paper)
    write_block(speed, CUDA_BLOCK, cuda_table(cuda))
    write_block(speed, AUTHORS_BLOCK, authors)
    print("wrote the throughput table of results/README.md and results/bench/speed.md's paper-size, CUDA and authors' tables")


def main(argv):
    c, rc = cli.parse(__doc__, {'write': False}, argv)
    if c is None:
        return rc
    try:
        eager, compiled, repeats = readme_runs()
        unbenched = [v for v in all_variants() if not any(v in r['variants'] for r in (eager, compiled, *repeats))]
        if unbenched:       # said here, not in the tables: a user's new variant changes no table of the lab's
            print(f"registered, in no committed bench: {', '.join(unbenched)} (python -m lab.bench --variants=... "
                  f"--out=... benches them)")
        if c['write']:
            write_readme()
        else:
            cuda = cuda_runs()
            print('\n\n'.join((readme_table(*readme_runs(), cuda=cuda), paper_table(*paper_runs()),
                                 cuda_table(cuda), authors_table())))
    except ConfigError as e:
        return cli.fail(e)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
