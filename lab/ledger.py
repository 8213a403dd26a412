"""
The claims ledger, generated from the committed runs:

    python -m lab.ledger                    # print the table
    python -m lab.ledger --write=True       # write results/LEDGER.md, ledger.png and README.md's GPU runs

Each row is a published claim (or one of ours, marked), the comparison it rests on (which
runs, how many seeds), our numbers with their paired 95% intervals, and a verdict that a
rule gives from the numbers (lab/verdicts.py: VERDICTS, stated in the ledger's header). The
prose of a row (lab/claims.py: what the paper says, and a note on what the numbers mean)
holds no number of ours: every number of ours in the ledger is computed from the runs' logs.
LEDGER.md opens with one line per claim (summary), then every row in full (table). Neither file is
written over a ledger that rests on more runs (less) unless --replace=True.
"""

import json
import os
import re
import sys

if not __package__:     # run by path (python lab/X.py): the repository's root on sys.path, as -m has it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configurator import ConfigError
from lab.readme import read_block, write_block
from lab import cli, paths, plan, studies
from lab import claims, seed_claims
from lab.logs import finals, read_log
from lab.paths import results_json
from lab.provenance import command_problem
from lab.runs import collect, summarized
from lab.plots_paired import plot_ledger
from lab.verdicts import ROWS, THRESHOLDS, VERDICTS, describe, leaks, name, seed_diffs, words

CLAIMS = claims.CLAIMS + seed_claims.CLAIMS    # every row, in order
ROWS_HEAD = '## Every row'     # LEDGER.md: the summary above it, the table below
GPU_BLOCK = ('<!-- gpu: python -m lab.ledger --write=True -->', '<!-- /gpu -->')

# LEDGER.md's summary gives a row split into one-question rows (13a, 13b, ...) one line, under this claim
GROUPS = {
    '6': 'lag (convolution) attention helps',
    '7': 'per-head scale init gives no benefit (slightly worse)',
    '13': 'causal spectral filters (Gaussian, Mexican hat, causal Morlet) do not beat dot at character level',
    '22': 'EGA costs nothing (parameters < 0.3%; "no computational cost")',
    '25': "(ours) the authors' weight-decay recipe (AdamW on every parameter) changes nothing",
    '44': 'phase, not amplitude, carries FourierQK; re-phasing breaks any trained model (row 12\'s reason)',
    '29': '(ours, locality) a causal filter adds to the forget gate (the combination beats the sum of its parts)',
}


def finished():
    """{variant: {seed: summary}} of every finished run at the CPU study scale (and the runs
    of superseded forms in results/history, as 'history/<variant>'); {variant} that leak."""
    runs = {r for name in studies.STUDIES for r in studies.plan(name)}
    _, done, leaking = collect(sorted(runs, key=lambda r: r.label), studies.DEFAULT_OVERLAY)
    hist = os.path.join(paths.RESULTS, 'history')
    for folder in sorted(os.listdir(hist)) if os.path.isdir(hist) else ():
        name, _, seed = folder.rpartition('-s')
        if '@' in name:         # a run at another scale (the paper's): no row of the CPU scale reads it
            continue
        evals = read_log(os.path.join(hist, folder, 'log.jsonl'))[0]
        s = summarized(os.path.join(hist, folder), max(evals, default=0))
        if s['done'] and name:
            done.setdefault('history/' + name, {})[int(seed) if seed.isdigit() else seed] = s
    return done, leaking


# the paper's model and steps (docs/variants.md §0): the paper column reads a run only where its recorded command
# trains exactly these
PAPER_SIZE = dict(n_layer=6, n_head=8, n_embd=256, block_size=256, max_iters=5000)


def paper_sized(run_dir):
    """Whether a run's recorded command (its run.json) trains the paper's model for the paper's steps (PAPER_SIZE):
    a run named @paper on the paper's evaluation set but cut short or shrunk is no paper-scale result."""
    try:
        with open(os.path.join(run_dir, 'run.json')) as f:
            cmd = json.load(f).get('cmd')
    except (OSError, ValueError, AttributeError):
        return False
    if command_problem(cmd):
        return False
    args = [a for a in cmd[2:] if not a.startswith(('--out_dir=', '--init_from=', '--overwrite='))]
    cfg = studies.config_of([a for a in args if not a.startswith('--')], [a for a in args if a.startswith('--')])
    return all(cfg.get(k) == v for k, v in PAPER_SIZE.items())


def finished_paper():
    """{variant: {seed: summary}} of every finished run at the paper scale (the studies of
    studies.PAPER_QUEUE, trained on a GPU: lab/gpu_study.py) whose recorded command is the paper's model and
    steps (paper_sized); {variant} that leak."""
    runs = {r for name in studies.PAPER_QUEUE for r in studies.plan(name, overlay='') if paper_sized(r.dir)}
    _, done, leaking = collect(sorted(runs, key=lambda r: r.label), '')
    for old, new in plan.ALIAS.items():     # a row's study-scale name for a form the paper scale names anew
        done[old] = done.get(new, {})
    return done, leaking


WIDTH = 160     # the summary: a line's most characters
PAPER_RULES = ('effect', 'sign', 'null', 'zero', 'all')     # the rows that paired runs at the paper scale decide


def at_paper_scale(cl, cpu_verdict, done, leaking):
    """A row's cells at the paper scale: (ours, verdict), by the rule of its CPU cells where two seeds or more
    are paired on one evaluation set; 'pending' with what is there (each side's seeds) and the call of
    results/gpu/PLAN.md that trains the rest, where fewer are; ('-', '-') where the row has no paper-scale
    runs and none planned. A decided verdict that differs from the CPU one says so: that is a finding."""
    if cl.rule == 'mope_pairs':
        names = [c.a for c in cl.cmps] or ('mope', 'ega_mope', 'ega_mope_paper')
        if not any(x.get('mope') for v in names for x in done.get(v, {}).values()):
            return '-', '-'
        ours, verdict = ROWS[cl.rule](done, leaking, cl)
        return ours, words(cl, verdict)
    if cl.rule == 'cost':
        return cost_at_paper_scale(cl)
    if cl.rule not in PAPER_RULES:
        return '-', '-'
    cmps = cl.cmps if cl.rule == 'all' else cl.cmps[:1]
    sides = {v for c in cmps for v in (c.a, c.b, c.c, c.d) if v}
    n = min(len(seed_diffs(done, c)) for c in cmps)
    call = plan.deciding_call(done, cmps, max(2, n + 1))
    if n >= 2:
        ours, verdict = ROWS[cl.rule](done, leaking, cl)
        verdict = words(cl, verdict)
        decided = [v for v in (cpu_verdict, verdict) if not v.startswith(('untestable', 'a leak', 'not '))]
        if len(decided) == 2 and verdict.split(' (')[0] != cpu_verdict.split(' (')[0]:
            verdict += ' (changes with scale)'
        return ours, verdict + (f"; a seed more: results/gpu/PLAN.md call {call}" if call else '')
    if not call:
        return '-', '-'
    have = [f"`{v}` {', '.join(f's{seed} {x:.4f}' for seed, x in sorted(finals(done, v).items()))}"
            for v in sorted(sides) if done.get(v)]
    sets = {x.get('eval_set') for v in sides for x in done.get(v, {}).values()}
    ours = ('; '.join(describe(done, leaking, c) for c in cl.cmps if seed_diffs(done, c)) or 'no paired seeds') + (
        f"; finished: {'; '.join(have)}" + (f", all on one evaluation set ({next(iter(sets)).split(', seed')[0]})"
                                              if len(sets) == 1 else '') if have else '; not run yet')
    return ours, f"pending ({n} paired seed{'s' * (n != 1)}{f': results/gpu/PLAN.md call {call}' if call else ''})"


def cost_at_paper_scale(cl):
    """Row 22's training cost at the paper's size on the GPU: by the row's rule where an interleaved CUDA
    bench is committed (results/bench/cuda_logit.json, lab/gpu_check.sh --speed); else pending, with the
    times alone that the GPU records hold, which were not taken alike (two calls, two harnesses)."""
    if 'paper' not in cl.claim:
        return '-', '-'
    if results_json('bench', 'cuda_logit.json').get('variants'):
        return ROWS['cost'](None, None, cl._replace(source='bench/cuda_logit.json'))
    alone = (plan.fit() or {}).get('alone', {})
    if not {'dot', 'ega'} <= set(alone):
        return '-', '-'
    return (f"alone on the H200, but not timed alike (two commands, two harnesses), so no ratio: `ega` "
            f"{alone['ega']:.1f} ms/step (its training log, results/runs/ega@paper-s1337), dot {alone['dot']:.1f} "
            f"(the first GPU command's speed phase)"), \
        'pending (no interleaved CUDA benchmark yet: bash lab/gpu_check.sh --speed)'


def table(done=None, leaking=None, paper=None):
    if done is None:
        done, leaking = finished()
    done_p, leaking_p = finished_paper() if paper is None else paper
    out = ['| # | claim (paper) | paper | ours (CPU scale; paired 95% intervals) | verdict | ours, paper scale '
           '| verdict, paper scale | note |', '|---|---|---|---|---|---|---|---|']
    for cl in CLAIMS:
        ours, verdict = ROWS[cl.rule](done, leaking, cl)
        verdict = words(cl, verdict)
        ours_p, verdict_p = at_paper_scale(cl, verdict, done_p, leaking_p)
        verdict_p = verdict_p if verdict_p == '-' else f"**{verdict_p}**"
        out.append(f"| {cl.n} | {cl.claim} | {cl.paper} | {ours} | **{verdict}** | {ours_p} | {verdict_p} "
                   f"| {cl.note} |")
    return '\n'.join(out)


PAIRED = ('effect', 'sign', 'null', 'zero', 'all')     # the rules that one paired comparison decides


def deciding(done, leaking):
    """[(label, {seed: difference}, leaks)]: the comparison that decides each row of a rule in PAIRED (the
    first; every one for rule 'all'), for results/ledger.png; a re-phased side ('v@mode') leaks."""
    out = []
    for cl in CLAIMS:
        for c in (cl.cmps if cl.rule == 'all' else cl.cmps[:1]) if cl.rule in PAIRED else ():
            x = seed_diffs(done, c)
            if x:
                out.append((f"{cl.n}: {name(c).strip('`')}", x, leaks(leaking, c)))
    return out


def summary(done=None, leaking=None):
    """LEDGER.md's opening: one line per claim, its verdict at the CPU scale and at the paper's (where
    runs decide it); a claim split into one-question rows (13a, 13b, ...) one line,
    each row's verdict in it. The verdicts without their parentheses, and the claim cut at a word where
    the line would pass WIDTH characters: LEDGER.md gives each in full."""
    if done is None:
        done, leaking = finished()
    done_p, leaking_p = finished_paper()
    out, groups = ['| # | claim | verdict (CPU scale) | paper scale |', '|---|---|---|---|'], {}
    for cl in CLAIMS:
        verdict = words(cl, ROWS[cl.rule](done, leaking, cl)[1])
        seeds = len(seed_diffs(done_p, cl.cmps[0])) if cl.rule in PAPER_RULES else 0
        paper = at_paper_scale(cl, verdict, done_p, leaking_p)[1]
        changed = ', changes with scale' if 'changes with scale' in paper else ''
        call = re.search(r'call (\d+)', paper)
        paper = '-' if paper == '-' else (
            f"**{paper.split(' (')[0].split(';')[0]}** ({seeds} seed{'s' * (seeds != 1)}{changed}"
            + (f"; call {call.group(1)}" if call else '') + ')' if cl.rule in PAPER_RULES else f"**{paper.split(' (')[0]}**")
        groups.setdefault(cl.n.rstrip('abcdefgh'), []).append((cl, verdict.split(' (')[0], paper))
    for n, rows in groups.items():
        if len(rows) == 1:
            claim, verdicts, papers = rows[0][0].claim, f"**{rows[0][1]}**", rows[0][2]
        else:
            claim = GROUPS[n]
            verdicts = '; '.join(f"{cl.n}: **{v}**" for cl, v, _ in rows)
            papers = '; '.join(f"{cl.n}: {p}" for cl, _, p in rows if p != '-') or '-'
        line = lambda: f"| row {n} | {claim} | {verdicts} | {papers} |"   # noqa: E731
        while len(line()) > WIDTH and ' ' in claim.rstrip(' …'):
            claim = claim.rstrip(' …').rsplit(' ', 1)[0].rstrip(',;:(') + ' …'
        out.append(line())
    return '\n'.join(out)


def gpu_runs(paper=None):
    """README's block of the paper-scale runs in the tables: each variant's finished seeds, final val and the
    evaluation set they read (a leaking form marked: its loss is no modelling result)."""
    done, leaking = finished_paper() if paper is None else paper
    names = dict.fromkeys(r[0] for q in studies.PAPER_QUEUE for r in studies.STUDIES[q]['runs'])
    out = ['| variant | seeds | final val | evaluation set |', '|---|---|---|---|']
    for v in (v for v in names if done.get(v)):
        seeds = sorted(done[v])
        sets = '; '.join(sorted({x.get('eval_set') or 'not recorded' for x in done[v].values()}))
        out.append(f"| `{v}`{' (**LEAKS**)' if v in leaking else ''} | {', '.join(f's{x}' for x in seeds)} | "
                   f"{', '.join(format(done[v][x]['final'], '.4f') for x in seeds)} | {sets} |")
    return '\n'.join(out)


def glance(done=None, leaking=None):
    """LEDGER.md's title and summary, up to ROWS_HEAD."""
    return '\n'.join([
        '# The claims ledger', '',
        'One line per claim of the papers (and of ours, marked): its verdict at the CPU study scale (2 CPU cores, '
        'char-level TinyShakespeare unless a row says otherwise) and at the paper\'s scale (**pending** where '
        'runs are missing, with the call of results/gpu/PLAN.md that trains them), each by the rule printed '
        'under "Every row", which gives each row in full. Two runs are paired only where they read one '
        'evaluation set.', '', summary(done, leaking), ''])


def header():
    return '\n'.join([
        ROWS_HEAD, '',
        'Generated by `python -m lab.ledger --write=True` from the committed runs (results/runs, '
        'results/history). "Paper" is the published number (single seed, paper scale; a change in val '
        'loss against their dot baseline, lower is better). "Ours" gives each comparison as the mean '
        'of per-seed differences over the seeds both sides have, with its 95% interval (Student\'s t, '
        'exact quantile), at the CPU study scale (`config/cpu.py`: 4 layers, 4 heads, C = 128, T = 128, '
        '2000 steps, char-level TinyShakespeare unless the row says GPT-2 BPE). "Ours, paper scale" is the same '
        'row at the paper\'s scale (6 layers, 8 heads, C = 256, T = 256, 5000 steps, 50 val batches; trained on one '
        'H200 by `python -m lab.gpu_study`, results/gpu), by the same rule where two seeds or more are paired, '
        '**pending** where fewer are (with what is finished, and the call of results/gpu/PLAN.md that trains the '
        'rest); a decided verdict that differs from the CPU one is marked "changes with scale". At either scale two '
        'runs are paired only where they read one evaluation set (the same val windows: each run\'s log records '
        'it; lab/logs.py, alike), and a seed left out says why. A claim of several '
        'questions is split into rows of one question each (13a, 13b, ...); the verdict rests on the first '
        'comparison of a row (the others give context), by one rule ([ledger.png](ledger.png) draws that '
        'comparison of every row, seed by seed):', ''] +
        [f"- **{k}**: {v}" for k, v in VERDICTS.items()] +
        ['', 'The thresholds of the rows of their own kind:', ''] +
        [f"- row {k}: {v}" if k[0].isdigit() else f"- {v}" for k, v in THRESHOLDS.items()] + [''])


def counts(table_text):
    """{(row, the backticked names of a comparison): (runs, what they are)} from a ledger table: how many
    seeds (or runs, or heads x seeds) each comparison of each row rests on, as its "ours" cell says."""
    out = {}
    for line in table_text.splitlines():
        cells = line.split(' | ')
        if not re.match(r'\| \d+[a-h]?$', cells[0]) or len(cells) < 4:
            continue
        for part in cells[3].split('; '):
            found = re.findall(r'\b(\d+) (seeds?|runs?|heads x seeds)\b', part)
            if found:
                key = (cells[0][2:], tuple(re.findall(r'`[^`]+`', part)))
                n = out.get(key, (0, ''))[0] + sum(int(x) for x, _ in found)
                out[key] = (n, found[0][1].rstrip('s') + 's')
    return out


def less(old, new, where='README.md'):
    """Why the ledger `new` rests on less than `old` ('' if it does not). Less: a comparison of a row that
    rests on fewer seeds (or runs) than in the old ledger, or that is gone from its row (it counts 0): a
    ledger from fewer finished runs. More seeds, or a new comparison, are not less."""
    now = counts(new)
    for (row, names), (n, what) in counts(old).items():
        m = now.get((row, names), (0, ''))[0]
        if m < n:
            return (f"{where}'s ledger row {row} rests on {n} {what} for {', '.join(names) or 'its runs'}; this "
                    f"ledger would have {m}. Finish the runs (python -m lab.status), or pass --replace=True")
    return ''


def main(argv):
    """Print the table, or write results/LEDGER.md and README's GPU runs; not over a ledger that rests on
    more runs (less) unless --replace=True."""
    defaults = dict(write=False, replace=False)
    if cli.wants_help(argv):
        print(cli.help_text(__doc__, defaults))
        return 0
    try:
        c = cli.load(defaults, argv)
        if c['replace'] and not c['write']:
            raise ConfigError("--replace=True goes with --write=True")
    except ConfigError as e:
        return cli.fail(e)
    t = table()
    if not c['write']:
        print(t)
        return 0
    readme, path = os.path.join(paths.REPO, 'README.md'), os.path.join(paths.RESULTS, 'LEDGER.md')
    try:
        read_block(readme, GPU_BLOCK)          # checked before either file is written
    except ConfigError as e:
        return cli.fail(e)
    old = ''
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    old = old[max(old.find(ROWS_HEAD), 0):]     # the rows (a ledger of before the summary: all of it)
    why = '' if c['replace'] else less(old, t, paths.rel(path))
    if why:
        return cli.fail(why, 1)
    with open(path, 'w') as f:
        f.write(glance() + '\n' + header() + '\n' + t + '\n')
    write_block(readme, GPU_BLOCK, gpu_runs())
    drawn = plot_ledger(paths.RESULTS, deciding(*finished()))
    print(f"wrote results/LEDGER.md{', ledger.png' if drawn else ''} and the paper-scale runs in README.md")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
