"""
A run's log.jsonl read (the last row of an iter wins, a line cut by a kill is skipped) and
summarised: its final and best val, gap, throughput, the evaluation set, the learned MOPE pairs
and FourierQK bands, the phase ablation; and the numbers the tables take from the summaries of
finished runs, paired only where the runs were evaluated alike (`alike`).
"""

import json
import math
import os
import statistics


def read_log(path):
    """The eval and train rows of a log.jsonl by iter (the last row of an iter wins), and the
    eval_only rows (evaluations of the finished checkpoint: the phase ablation) in order."""
    rows, extra = {'eval': {}, 'train': {}}, []
    if os.path.exists(path):
        with open(path, encoding='utf-8', errors='replace') as f:      # a garbled line is skipped, as a cut one
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue            # a line cut by a kill
                if not isinstance(r, dict) or not isinstance(r.get('iter'), int):
                    continue
                if r.get('kind') in rows:
                    rows[r['kind']][r['iter']] = r
                elif r.get('kind') == 'eval_only':
                    extra.append(r)
    return rows['eval'], rows['train'], extra


def phased(extra, n):
    """{mode: (val with the phases kept, val re-phased)} from the eval_only rows at iter n."""
    return {r['qk_phase']['mode']: (r['val'], r['qk_phase']['val']) for r in extra
            if r['iter'] == n and isinstance(r.get('qk_phase'), dict) and num(r.get('val'))
            and num(r['qk_phase'].get('val'))}


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def summarize(evals, trains, extra, n):
    """A run's numbers; final, best, gap, tok_s, the learned MOPE pairs and FourierQK bands,
    and the phase ablation only when done (it has the eval at iter n)."""
    curve = sorted((i, r['val']) for i, r in evals.items() if i <= n and num(r.get('val')))
    rows = [*evals.values(), *trains.values()]
    s = dict(done=n in evals and num(evals[n].get('val')), last=max(evals, default=None), curve=curve,
             leaks=any(r.get('leaks') is True for r in rows))
    if not s['done']:
        return s
    e = evals[n]
    tok = [r['tok_s'] for r in trains.values() if num(r.get('tok_s'))]
    gap = e.get('gap')
    if gap is None and num(e.get('shuffled_val')):
        gap = e['shuffled_val'] - e['val']
    s.update(final=e['val'], best=min(v for _, v in curve), gap=gap if num(gap) else None,
             tok_s=statistics.median(tok) if tok else None, phase=phased(extra, n), eval_set=e.get('eval_set'))
    # learned parameters at the end: the final eval's, else an evaluation of the final checkpoint
    # (runs older than the mope field), the latest first
    sources = [e] + [x for x in reversed(extra) if x['iter'] == n]
    for key in ('mope', 'bands'):
        s[key] = next((r[key] for r in sources if r.get(key)), None)
    return s


def alike(done, *names):
    """done cut to `names` at the seeds where each has a finished run and all of them read one evaluation
    set (train.py's eval_set: the same val windows), and {seed: why not} for the seeds they all have but
    read on different sets, or on a set not recorded: such runs are no pair. 'v@mode' (a re-phased
    evaluation of v's checkpoint) reads v's set."""
    names = list(dict.fromkeys(n.split('@')[0] for n in names))
    common = set.intersection(*(set(done.get(n, {})) for n in names)) if names else set()
    keep, why = set(), {}
    for seed in common:
        sets = {n: done[n][seed].get('eval_set') for n in names}
        if None not in sets.values() and len(set(sets.values())) == 1:
            keep.add(seed)
        else:
            why[seed] = unlike(sets)
    return {n: {seed: x for seed, x in done.get(n, {}).items() if seed in keep} for n in names}, why


def unlike(sets):
    """'`a` on 20 x 64 windows of 256 tokens, `b` on 50 x 64 ...' for runs of one seed read on other sets:
    the windows alone where they differ, else the whole set."""
    short = {n: (x or 'a set not recorded').split(', seed')[0] for n, x in sets.items()}
    named = short if len(set(short.values())) > 1 else {n: x or 'a set not recorded' for n, x in sets.items()}
    return ', '.join(f"`{n}` on {x}" for n, x in named.items())


def why_text(why):
    """'; not paired: s1337 (`ega` on ..., `dot` on ...)' from alike's reasons ('' without)."""
    return '; not paired: ' + '; '.join(f"s{seed} ({w})" for seed, w in sorted(why.items(), key=str)) if why else ''


def finals(done, v):
    return {s: x['final'] for s, x in done.get(v, {}).items()}


def at_iter(done, v, it):
    """{seed: val at eval iter it} of a variant's finished runs that logged it."""
    return {s: dict(x['curve'])[it] for s, x in done.get(v, {}).items() if it in dict(x['curve'])}


def learned(done, key):
    """[(variant, seed, the run's final 'mope' or 'bands')] over the finished runs that have one."""
    return [(v, seed, x[key]) for v in done for seed, x in sorted(done[v].items()) if x.get(key)]
