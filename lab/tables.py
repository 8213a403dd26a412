"""
The writers of a study's RESULTS.md and their guards: a table never silently replaces the one
there with less (fewer seeds of a variant, a run counted at fewer steps, another scale); it says
why in one line and writes nothing, unless --replace=True. Also the scale line of a table.
"""

import os
from importlib import metadata

from lab import paths, plots, studies
from lab.provenance import run_codes, tokens
from lab.results_md import results_md
from lab.runs import collect, command
from lab.studies import Run, max_iters, resolve, results_dir


class StudyError(Exception):
    pass


class Refused(StudyError):
    """A writer would replace a committed table or block with one that holds less (--replace=True overrides)."""


def scale(runs, overlay):
    """The scale line of a table: the first run's config (resolved from the config files) and its data."""
    for r in runs:
        try:
            c = resolve(r, overlay)
        except Exception:
            continue
        gas = c.get('gradient_accumulation_steps', 1)
        return (f"{c['n_layer']} layers, {c['n_head']} heads, C = {c['n_embd']}, T = {c['block_size']}, batch "
                f"{c['batch_size']}{f' x {gas} micro-steps' if gas > 1 else ''}, {c['max_iters']} steps, eval "
                f"every {c['eval_interval']} on {c['eval_iters']} val batches, data "
                f"{tokens(c['data_dir'], [x for x in runs if x.name == r.name])} ({overlay or 'no overlay'})")
    return 'unknown (no config could be read)'


def committed(text):
    """What a RESULTS.md holds: {variant: seeds} from its main tables (the causal variants' and the leaking
    ones'), and its scale line (None where it has none)."""
    seeds, scale_line, rows = {}, None, False
    for line in text.splitlines():
        if line.startswith('- scale: ') and scale_line is None:
            scale_line = line[len('- scale: '):]
        elif line.startswith('| variant | seeds | final val'):
            rows = True
        elif rows and line.startswith('| ') and not line.startswith('|---'):
            cells = [c.strip() for c in line.strip('|').split('|')]
            if len(cells) > 1 and cells[1].isdigit():
                seeds[cells[0]] = int(cells[1])
        elif not line.startswith('|---'):
            rows = False
    return seeds, scale_line


def why_short(info, v, overlay):
    """Why variant v has fewer finished runs than it might: its runs that are not finished, in words."""
    out = []
    for r, st, detail, s in info:
        if r.name != v or (s and s['done']):
            continue
        if st == 'missing':
            out.append(f"{r.label}: {detail}")
        elif s and s['last'] is not None:
            out.append(f"{r.label} stops at iter {s['last']} of {max_iters(r, overlay)}")
        else:
            out.append(f"{r.label} not started")
    return ', '.join(out) or f"{v} is not in the study's runs"


def less_than(name, text, info, done, overlay, scale_line):
    """Why a table of these runs would hold less than the committed RESULTS.md `text` (at `name`); '' if it
    would not. Less is: another scale (its scale line differs: the model, the batch, the steps, the evals,
    the data or the overlay); fewer steps (a run counted as finished at fewer iterations than its config now
    asks for: its run.json's max_iters below the config's); fewer seeds (a variant of the committed tables
    with fewer finished runs in this one; a variant gone counts 0). More seeds or more variants are not less."""
    seeds, old_scale = committed(text)
    if old_scale is not None and old_scale != scale_line:
        was, now = old_scale.split(', '), scale_line.split(', ')
        return (f"{name} has the scale '{', '.join(x for x in was if x not in now)}'; this table would have "
                f"'{', '.join(x for x in now if x not in was)}'. Pass --replace=True to replace it (another "
                f"scale or seed set is written beside it: --overlay, --seeds)")
    for r, st, detail, s in info:
        if s and s['done']:
            try:
                asked = int(resolve(r, overlay)['max_iters'])
            except Exception:
                continue
            if max_iters(r, overlay) < asked:
                return (f"{name}: this table would count {r.label} as finished at iter {max_iters(r, overlay)}, "
                        f"where its config asks for {asked} (its run.json's max_iters). Train it again, or pass "
                        f"--replace=True")
    short = [(v, n, len(done.get(v, {}))) for v, n in seeds.items() if len(done.get(v, {})) < n]
    if not short:
        return ''
    v, n, m = short[0]
    also = f"; also fewer of {', '.join(f'{x} ({b} of {a})' for x, a, b in short[1:])}" if short[1:] else ''
    return (f"{name} has {n} seeds of {v}; this table would have {m} ({why_short(info, v, overlay)}){also}. "
            f"Finish the run{'s' * (n - m > 1 or bool(also))}, or pass --replace=True")


def write_results(study, runs, opts, argv):
    """RESULTS.md and the plots in results_dir; the same bytes when the runs are the same (no date, no
    commit of the table's own). Without one finished run nothing is written (None); a table that holds
    less than the existing one (less_than) raises Refused, nothing written, unless opts['replace'].
    Returns the path written."""
    overlay, d = opts['overlay'], results_dir(study, opts)
    info, done, leaking = collect(runs, overlay)
    path = os.path.join(d, 'RESULTS.md')
    if not any(done.values()):
        print(f"no finished run: {paths.rel(path)} " + ('left as it was' if os.path.exists(path) else 'not written'))
        return None
    try:
        torch_v = metadata.version('torch')
    except metadata.PackageNotFoundError:
        torch_v = 'not installed'
    head = dict(command=' '.join(['python', '-m', 'lab.study', *argv]), scale=scale(runs, overlay),
                machine=f"{os.cpu_count()} CPUs, torch {torch_v} (where the table was made; each run's own "
                        f"output is its run.txt)",
                run_cmd=' '.join(command(Run(study, 'RUN', 'S', ('CONFIGS',), ('[OVERRIDES]',)), overlay)),
                run_code=', '.join(sorted({c for r in runs for c in run_codes(r)})))
    if os.path.exists(path) and not opts.get('replace'):
        with open(path) as f:
            why = less_than(paths.rel(path), f.read(), info, done, overlay, head['scale'])
        if why:
            raise Refused(why)
    os.makedirs(d, exist_ok=True)
    with open(path, 'w') as f:
        f.write(results_md(study, info, done, leaking, head))
    if plots.plot(d, {v: s for v, s in done.items() if s}, leaking, (studies.STUDIES[study]['refs'] or [None])[0]):
        plots.plot_long(d, done, studies.STUDIES[study].get('long', {}))
    return path
