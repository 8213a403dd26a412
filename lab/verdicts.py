"""
The ledger's verdict rules: each row's comparisons paired over seeds (a - b, or the interaction
a - b - c + d) and the rule that turns them into a verdict (VERDICTS, stated in the ledger's
header): the paper's effect, a direction, no gain, no effect, and the rows of their own kind
(ROWS: a leak, the phase ablation, the learned pairs and periods, the gap, the cost, EMD, the
best of several, the longer contexts). Every number comes from the runs' summaries.
"""

import json
import math
import os
import statistics

from lab import paths
from lab.logs import at_iter, finals
from lab.stats import paired, stats
from lab.studies import PHASE_MODES

FACTOR = 3.0        # "reproduced" needs |ours| within this factor of the paper's effect
WORD = 10           # row 5: a period of this many characters or more is word scale or beyond
NOISE_X = 1.5       # row 24: IMF periods within this factor of white noise's are EMD's own ladder
MARGIN = 0.02      # a claim of no effect: the equivalence margin in val loss (the smallest effect of interest)
SAME = 0.05         # row 22: "no cost" is EGA within 5% of dot's training tokens/s
BENCH = os.path.join('bench', 'ega_cost.json')     # under paths.RESULTS, read where it is now
# every threshold a row of its own kind uses, printed in the ledger's header (lab/ledger.py)
THRESHOLDS = {
    '5': f"MOPE's pairs reach word scale if a learned period is {WORD} characters or more (a word and its "
            "space are about 6)",
    '17': "the shuffled-val gap tells leaks from learning unless a leaking form's lowest gap lies inside the range "
          "of the causal runs' gaps (min to max)",
    '22': f"no computational cost if EGA trains at {1 - SAME:.0%} or more of dot's tokens/s",
    '24': f"the IMF periods are EMD's own ladder if every trained run's lie within {NOISE_X:g}x of white noise's",
    'best': "a row of several comparisons (rule 'best': 28, 29) rests on the one with the largest gain; the "
            "others are listed",
}
VERDICTS = {
    'reproduced': "the claim holds here: the paired 95% interval is clear of 0 in the paper's "
                  f"direction, and our effect is within a factor of {FACTOR:g} of the paper's "
                  f"(for a claim of no effect: the interval lies inside the equivalence margin, above -{MARGIN:g} "
                  f"for 'no gain', within +-{MARGIN:g} for 'no effect either way')",
    'direction only': "the interval is clear of 0 in the paper's direction, but our effect is off "
                      f"by more than a factor of {FACTOR:g}",
    'contradicted': 'the interval is clear of 0 in the other direction (for a claim of no effect: '
                    'on the side of a gain)',
    'not distinguishable from zero': 'the interval holds 0; the row gives the smallest effect the '
                                     'test could have seen (the interval\'s half-width)',
    'not resolved': f'a claim of no effect whose interval is not clear of 0 (on the side it denies) but reaches '
                    f'past the equivalence margin +-{MARGIN:g}: the data can neither confirm nor refute it',
    'a leak': 'the published form fails the exact causality audit: its loss is no modelling result',
    'untestable here': 'the row says why',
    'holds / does not hold / not resolved': "our own claims, marked (ours): the words of reproduced / contradicted / "
                                            "not distinguishable from zero or not resolved, by the same rule; rows 32 "
                                            "to 35 by the rule each prints (lab/recency.py, RULES)",
}

# ----------------------------------------------------------------------------- comparisons


def values(done, v, step=None):
    """{seed: final val}, or the val at a training step."""
    return finals(done, v) if step is None else at_iter(done, v, step)


def compare(done, c, step=None):
    if not c.c:
        return paired(values(done, c.a, step), values(done, c.b, step))
    # a - b - c + d, seed by seed: pair (a - b) with (c - d)
    lhs = {s: x - y for s, x, y in zip_seeds(values(done, c.a, step), values(done, c.b, step))}
    rhs = {s: x - y for s, x, y in zip_seeds(values(done, c.c, step), values(done, c.d, step))}
    return paired(lhs, rhs)


def zip_seeds(a, b):
    return [(s, a[s], b[s]) for s in sorted(set(a) & set(b))]


def name(c):
    if c.c:
        return f"`{c.a} - {c.b} - {c.c} + {c.d}`"
    return f"`{c.a}`" if c.b == 'dot' else f"`{c.a} - {c.b}`"


def cell(p):
    if p is None:
        return 'no paired seeds'
    if p['half'] is None:
        return f"{p['mean']:+.3f} (1 seed)"
    return f"{p['mean']:+.3f} ({p['mean'] - p['half']:+.3f}..{p['mean'] + p['half']:+.3f}, {p['n']} seeds)"


def describe(done, leaking, c):
    text = f"{name(c)}: {cell(compare(done, c))}"
    steps = [f"{cell_short(compare(done, c, s))} at step {s}" for s in c.at]
    leak = ' (**leaks**)' if c.a in leaking else ''
    return text + leak + (f"; {', '.join(steps)}" if steps else '')


def cell_short(p):
    return 'n/a' if p is None else f"{p['mean']:+.3f}"

# ----------------------------------------------------------------------------- the verdicts


OWN = {'reproduced': 'holds', 'contradicted': 'does not hold', 'not distinguishable from zero': 'not resolved',
       'direction only': 'holds in direction only'}


def words(cl, verdict):
    """A verdict in our own claims' words (holds, does not hold, not resolved) for a row marked (ours)."""
    if not cl.claim.startswith('(ours'):
        return verdict
    head, sep, rest = verdict.partition(':')
    return OWN.get(head, head) + sep + rest


def clear(p):
    """-1 or +1 where the interval is clear of 0 on that side, 0 where it holds 0 (or is unknown)."""
    if p is None or p['half'] is None:
        return 0
    lo, hi = p['mean'] - p['half'], p['mean'] + p['half']
    return -1 if hi < 0 else 1 if lo > 0 else 0


def by_rule(rule, p, effect=None):
    """The verdict of one comparison: rule 'effect' (the paper's effect), 'sign' (its direction,
    -1 a gain), 'null' (no gain, a gain being < 0) or 'zero' (no effect either way)."""
    side = clear(p)
    if p is None:
        return 'untestable here'
    if p['half'] is None:
        return 'untestable here (one seed so far: no interval)'
    lo, hi = p['mean'] - p['half'], p['mean'] + p['half']
    if rule in ('null', 'zero'):
        if side < 0 or (side > 0 and rule == 'zero'):
            return 'contradicted'
        inside = lo >= -MARGIN and (rule == 'null' or hi <= MARGIN)
        return 'reproduced' if inside else 'not resolved'
    if side == 0:
        return 'not distinguishable from zero'
    want = int(math.copysign(1, effect))
    if side != want:
        return 'contradicted'
    if rule == 'sign':
        return 'reproduced'
    ratio = abs(p['mean']) / abs(effect)
    return 'reproduced' if 1 / FACTOR <= ratio <= FACTOR else 'direction only'


def smallest(p):
    return f" (the smallest effect it could have seen: {p['half']:.3f})" if p and p['half'] is not None else ''


def row_paired(done, leaking, cl):
    first = compare(done, cl.cmps[0])
    published_leaks = cl.cmps[0].a in leaking
    verdict = 'a leak' if published_leaks else by_rule(cl.rule, first, cl.effect)
    if verdict == 'not distinguishable from zero':
        verdict += smallest(first)
    elif first is None:
        verdict += ' (no paired runs yet)'
    return '; '.join(describe(done, leaking, c) for c in cl.cmps), verdict


def row_leak(done, leaking, cl):
    parts = []
    for c in cl.cmps:
        st = stats(values(done, c.a).values()) if values(done, c.a) else None
        val = f"val {st['mean']:.3f}" + (f" +- {st['sd']:.3f}" if st and st['sd'] else '') if st else 'not run'
        verdict = 'leaks' if c.a in leaking else 'causal'
        parts.append(f"`{c.a}` {verdict}, {val}, {name(c)}: {cell(compare(done, c))}")
    leaks = all(c.a in leaking for c in cl.cmps)
    return '; '.join(parts), ('a leak' if leaks else 'untestable here (not every form leaks: see the row)')


def row_leaks_as_claimed(done, leaking, cl):
    text, _ = row_leak(done, leaking, cl)
    return text, 'reproduced' if all(c.a in leaking for c in cl.cmps) else 'contradicted'


def row_phase(done, leaking, cl):
    parts = []
    for c in cl.cmps:
        for mode in PHASE_MODES:
            rnd = {s: x['phase'][mode][1] for s, x in done.get(c.a, {}).items() if mode in (x.get('phase') or {})}
            p = paired(rnd, values(done, 'dot'))
            if p:
                parts.append(f"`{c.a}`, `{mode}` phases, minus dot: {cell(p)}")
    return '; '.join(parts) or 'not evaluated', 'untestable here: the models leak, and any trained model ' \
        'suffers from scrambled q, k'


def row_mope_pairs(done, leaking, cl):
    pairs = [(w, s) for v in ('mope', 'ega_mope', 'ega_mope_paper') for x in done.get(v, {}).values()
             if x.get('mope') for w, s in zip(x['mope']['w'], x['mope']['s'])]
    runs = sum(1 for v in ('mope', 'ega_mope', 'ega_mope_paper') for x in done.get(v, {}).values() if x.get('mope'))
    if not pairs:
        return 'no learned pairs logged', 'untestable here'
    periods = [2 * math.pi / w for w, _ in pairs]
    on_rule = sum(abs(w * s - 5.0) < 0.05 for w, s in pairs)
    far = sum(p >= WORD for p in periods)
    return (f"{len(pairs)} pairs of {runs} runs: periods {min(periods):.1f} to {max(periods):.1f} tokens; "
            f"{on_rule} on the rule's boundary `w s = 5`; {far} at {WORD} tokens or more (word scale and "
            f"beyond)"), 'contradicted' if far == 0 else 'untestable here'


def row_periods(done, leaking, cl):
    bands = [x['bands'] for x in done.get('multi_fourier_qk', {}).values() if x.get('bands')]
    per = [sorted(b[h][k] for b in bands for h in b) for k in range(4)] if bands else []
    med = ', '.join(f"{statistics.median(p):.1f}" for p in per)
    text = (f"`multi_fourier_qk` (init 50, 26, 10, 5 tokens): median final periods {med} "
            f"({len(per[0])} heads x seeds)" if per else 'no bands logged')
    return text, 'a leak' if 'multi_fourier_qk' in leaking else 'untestable here'


def row_gap(done, leaking, cl):
    clean = [x['gap'] for v, runs in done.items() if v not in leaking and not v.startswith(('bpe_', 'history/'))
             for x in runs.values() if x.get('gap') is not None]
    gaps = {v: [x['gap'] for x in runs.values() if x.get('gap') is not None] for v, runs in done.items()
            if v in leaking and not v.startswith(('bpe_', 'history/'))}
    leaky = {v: min(g) for v, g in gaps.items() if g}       # a leaking variant with finished runs
    if not clean or not leaky:
        return 'no finished runs on both sides', 'untestable here'
    inside = sorted(v for v, g in leaky.items() if g >= min(clean))
    text = (f"causal runs: {min(clean):+.2f} to {max(clean):+.2f} ({len(clean)} runs); leaking forms, lowest "
            f"gap each: " + ', '.join(f"`{v}` {g:+.2f}" for v, g in sorted(leaky.items(), key=lambda x: x[1]))
            + f"; inside the causal range: {', '.join(f'`{v}`' for v in inside) or 'none'}")
    return text, 'contradicted' if inside else 'reproduced'


def row_cost(done, leaking, cl):
    """Parameters at the paper scale; throughput from the interleaved benchmark in BENCH (bench.py
    --out), else from the runs' logs. 'No cost': EGA within SAME of dot's tokens/s."""
    from model import GPT, GPTConfig
    n = {a: GPT(GPTConfig(attn=a)).num_params() for a in ('dot', 'ega')}
    text = f"parameters at the paper scale: +{100 * (n['ega'] / n['dot'] - 1):.2f}%"
    bench = os.path.join(paths.RESULTS, BENCH)
    if os.path.exists(bench):
        with open(bench) as f:
            b = json.load(f)
        tok = {v: b['variants'][v]['tps'] for v in ('dot', 'ega')}
        text += f"; training tokens/s, interleaved benchmark (`{b['command']}`, {b['date']})"
    else:
        tok = {v: statistics.median(x['tok_s'] for x in done.get(v, {}).values() if x.get('tok_s'))
               for v in ('dot', 'ega') if done.get(v)}
        text += "; training tokens/s, median of the runs' logs"
    if len(tok) < 2:
        return text, 'untestable here'
    ratio = tok['ega'] / tok['dot']
    text += f": `ega` {tok['ega']:,.0f} against `dot` {tok['dot']:,.0f} ({100 * (ratio - 1):+.1f}%)"
    return text, 'reproduced' if ratio >= 1 - SAME else 'contradicted'


def row_emd(done, leaking, cl):
    """From results/fourierqk/emd.json (lab/emd.py): IMF 1..4 median periods of each trained
    checkpoint against white noise's; contradicted where every run's are within NOISE_X of the
    noise's (the ladder is EMD's own), else untestable (the row gives the numbers)."""
    path = os.path.join(paths.RESULTS, 'fourierqk', 'emd.json')
    if not os.path.exists(path):
        return 'not analysed (python -m lab.emd)', 'untestable here'
    with open(path) as f:
        e = json.load(f)
    noise = e['noise'][:4]
    parts = [f"white noise: {fmt(noise)}"]
    noise_like = True
    for run, r in sorted(e['runs'].items()):
        bands = r['bands']
        parts.append(f"`{run}` trained {fmt(r['trained'][:4])} (untrained {fmt(r['untrained'][:4])}; learned "
                     f"bands {min(bands):.0f} to {max(bands):.0f})")
        noise_like &= all(1 / NOISE_X <= t / n <= NOISE_X for t, n in zip(r['trained'][:4], noise))
    text = 'IMF 1-4 median periods (tokens): ' + '; '.join(parts) + (
        f"; every trained run within {NOISE_X:g}x of white noise at every IMF: the ladder is EMD's own"
        if noise_like else '')
    return text, ('contradicted' if noise_like else 'untestable here: the IMF periods differ from '
                  "noise's; compare them with the bands in the row")


def fmt(ps):
    return '/'.join(f"{p:.1f}" for p in ps)


def row_best(done, leaking, cl):
    """Several comparisons, sorted by their mean; the verdict rests on the largest gain among those
    with an interval: by rule 'null' (nothing gains: reproduced unless it is clear of 0 below) or,
    with an effect of -1, by rule 'sign' (something gains)."""
    ps = [(compare(done, c), c) for c in cl.cmps]
    have = sorted(((p, c) for p, c in ps if p), key=lambda x: x[0]['mean'])
    ranked = [(p, c) for p, c in have if p['half'] is not None]
    if not ranked:
        return '; '.join(describe(done, leaking, c) for _, c in have) or 'no paired runs yet', \
            'untestable here (no comparison with two seeds yet)'
    best = ranked[0][0]
    verdict = by_rule('null', best) if cl.effect is None else by_rule('sign', best, cl.effect)
    verdict = f"{verdict}: {name(ranked[0][1])}" + (smallest(best) if clear(best) == 0 else '')
    missing = [name(c) for p, c in ps if not p]
    text = '; '.join(describe(done, leaking, c) for _, c in have)
    return text + (f"; not run yet: {', '.join(missing)}" if missing else ''), verdict


def results_json(*parts):
    """A JSON file under results/ (written by a lab command), or {} where there is none yet."""
    try:
        with open(os.path.join(paths.RESULTS, *parts)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def context_results():
    return results_json('locality', 'context.json')


def row_context(done, leaking, cl):
    """Per variant, paired over seeds: the mean loss on positions 128.. of 512-token windows minus
    the mean on 0..127 (rule 'null': the claim holds unless a variant's interval is clear above 0)."""
    by, res = {}, context_results()
    for label, r in res.items():
        b = r.get('T', {}).get('512', {}).get('buckets')
        if b and len(b) == 4:
            by.setdefault(label.rsplit('-s', 1)[0], {})[label.rsplit('-s', 1)[1]] = (sum(b[1:]) / 3, b[0])
    if not by:
        return 'not evaluated yet', 'untestable here (no checkpoints evaluated yet: python -m lab.longctx)'
    ps = {v: paired({s: x[0] for s, x in d.items()}, {s: x[1] for s, x in d.items()}) for v, d in by.items()}
    worse = [v for v, p in ps.items() if clear(p) > 0]
    verdict = f"contradicted: {', '.join(f'`{v}`' for v in worse)}" if worse else 'reproduced'
    refused = sorted({label.rsplit('-s', 1)[0] for label, r in res.items() if 'refused' in r})
    text = '; '.join(f"`{v}`: {cell(p)}" for v, p in sorted(ps.items(), key=lambda x: x[1]['mean']))
    return text + (f"; refused: {', '.join(refused)}" if refused else ''), verdict


def recency_results():
    return results_json('recency', 'recency.json')


DECIDES = 'fox'     # rows 32 to 34 rest on the forget gate, the prior with the largest gain; the others are listed


def row_recency(section, describe_one):
    """A row of study recency's answers (lab/recency.py writes recency.json): the verdict is that of
    DECIDES by the rule the row prints, every prior's listed beside it."""
    def row(done, leaking, cl):
        res = recency_results()
        got = res.get(section, {})
        rule = res.get('rules', {}).get({'efficiency': 'efficiency', 'profile': 'profile'}.get(section, section), '')
        if DECIDES not in got:
            return 'not run yet', 'not resolved (no runs yet: python -m lab.recency)'
        text = '; '.join(f"`{v}`: {describe_one(r)}" for v, r in got.items() if not v.endswith('_long') and v != 'dot')
        extra = [f"`{v}` at 6000 steps: {describe_one(r)}" for v, r in got.items() if v.endswith('_long')]
        text = '; '.join([text] + extra) + f". Rule: {rule}"
        return text, f"{got[DECIDES]['verdict']}: `{DECIDES}`"
    return row


def gap_text(r):
    return (', '.join(f'{g:.0%}' for g in r['gaps']) or '-') + f" gap in mean attention distance ({r['seeds']} seed" \
        + ('s' if r['seeds'] != 1 else '') + f"), {r['verdict']}"


def eff_text(r):
    d = r['diff']
    iv = f" ({d['mean'] - d['half']:+.3f}..{d['mean'] + d['half']:+.3f})" if d.get('half') else ''
    ratio = '-' if r['ratio'] is None else f"{r['ratio']:.2f}"
    return f"ratio {ratio} of dot's steps, final {d['mean']:+.3f}{iv}, {r['seeds']} seeds, {r['verdict']}"


def corpus_text(r):
    per = r['per_seed']
    return ', '.join(f"s{s}: {x['diff']:+.3f}" for s, x in sorted(per.items())) + f", {r['verdict']}"


def row_moonshot(done, leaking, cl):
    res = recency_results()
    if not res.get('efficiency'):
        return 'not run yet', 'not resolved (no runs yet: python -m lab.recency)'
    moon, closest = res.get('moonshot', []), res.get('closest')
    text = f"closest: `{closest}`, {res['efficiency'][closest]['ratio']:.2f} of dot's steps" if closest else '-'
    text += f". Rule: {res['rules']['moonshot']}"
    return text, (f"holds: {', '.join(f'`{v}`' for v in moon)}" if moon else 'does not hold')


def row_untestable(done, leaking, cl):
    return '-', 'untestable here'


ROWS = {'effect': row_paired, 'sign': row_paired, 'null': row_paired, 'zero': row_paired, 'leak': row_leak,
        'leaks': row_leaks_as_claimed, 'phase': row_phase, 'mope_pairs': row_mope_pairs,
        'periods': row_periods, 'gap': row_gap, 'cost': row_cost, 'emd': row_emd, 'untestable': row_untestable,
        'best': row_best, 'context': row_context, 'recency_profile': row_recency('profile', gap_text),
        'efficiency': row_recency('efficiency', eff_text), 'corpus': row_recency('corpus', corpus_text),
        'moonshot': row_moonshot}
