"""
The ledger's verdict rules: each row's comparisons paired over seeds (a - b, or the interaction
a - b - c + d) and the rule that turns them into a verdict (VERDICTS, stated in the ledger's
header): the paper's effect, a direction, no gain, no effect, and the rows of their own kind
(ROWS: a leak, the phase ablation, the learned pairs and periods, the gap, the cost, EMD, the
claims over several comparisons, the longer contexts). Every number comes from the runs' summaries.
"""

import math
import statistics

from lab.paths import results_json
from lab.logs import alike, at_iter, finals, why_text
from lab.gates import RHO, row_gate_mechanism
from lab.model_rows import LAG_TOL, LIMIT, PARAMS, REACH, row_gate_params, row_mope_kernel, row_mope_limit, row_params
from lab.generation_study import RULE_46, RULE_48, row_46, row_48
from lab.mope_rule import RULE as MOPE_RULE, row_mope_rule
from lab.rules import FACTOR, MARGIN, by_rule, clear  # noqa: F401 (clear: the rows' callers)
from lab.stats import paired, stats
from lab.studies import PHASE_MODES

WORD = 10           # row 5: a period of this many characters or more is word scale or beyond
NOISE_X = 1.5       # row 24: IMF periods within this factor of each other have not moved
SAME = 0.05         # row 22: "no cost" is EGA within 5% of dot's training tokens/s
# every threshold a row of its own kind uses, printed in the ledger's header (lab/ledger.py)
THRESHOLDS = {
    '5': f"MOPE's pairs reach word scale if a learned period is {WORD} characters or more (a word and its "
            "space are about 6)",
    '12': "the phase ablation tests nothing when every form it ran on leaks (a leak); else by the rule for a "
          "direction, on its first comparison",
    '17': "the shuffled-val gap tells leaks from learning unless a leaking form's lowest gap lies inside the range "
          "of the causal runs' gaps (min to max)",
    '22': f"EGA's parameters cost nothing if they add less than {PARAMS:.1%} at the paper scale (the paper's "
          f"bound); its training costs nothing if it keeps {1 - SAME:.0%} or more of dot's tokens/s in one "
          "interleaved benchmark (rows 22b to 22d: the paper's size, the study scale eager and compiled)",
    '24': f"EMD recovers the learned periods only if its IMFs move with them: the two families' bands differ, so "
          f"some IMF's median period must differ between them by more than {NOISE_X:g}x (contradicted if none does)",
    '31': "the locality priors hold past their training length if, for each, the paired interval of the mean loss on "
          "positions 128 to 511 minus the mean on 64 to 127 (positions 0 to 63, a cold start with little context, "
          f"left out) lies below +{MARGIN:g}; not for a prior whose interval is clear above 0 and reaches past "
          f"+{MARGIN:g}; else not resolved; dot without positions and rope are controls, listed, not judged",
    '37': f"MOPE becomes the sinusoidal encoding if its table's largest difference from it falls as s grows and is at "
          f"most {LIMIT:g} at s = 1e8; row 39: the paper's count holds if our gate has exactly d + 2 parameters per head",
    '41': f"MOPE's kernel PE(i) . PE(j) is one of the lag i - j if, at every lag below T/2, its range over the "
          f"positions i is under {LAG_TOL:.0%} of its largest value (a position is reached while |PE(b)|^2 is at "
          f"least {REACH:g} of |PE(0)|^2)",
    '42': f"a head of EGA's gate goes the claimed way if Spearman's rho of its logit with the key's being a word "
          f"boundary is >= {RHO:g} or with the key's log training frequency <= -{RHO:g}, the other way if the opposite; "
          "reproduced if more heads go the claimed way than at a fresh random init and than go the other way, "
          "contradicted if no more than at init, else (or where runs disagree) not resolved",
    '45': MOPE_RULE,
    '46': RULE_46,
    '48': RULE_48,
    'all': "a claim that nothing beats a base (rule 'all': row 28) is judged on every comparison by the rule for "
           "'no gain': it does not hold if any comparison contradicts it (a gain past the margin), holds if every "
           f"interval lies above -{MARGIN:g}, else it is not resolved; the verdict names the comparisons it turns on",
}
VERDICTS = {
    'reproduced': "the claim holds here: the paired 95% interval is clear of 0 in the paper's "
                  f"direction, and our effect is within a factor of {FACTOR:g} of the paper's "
                  f"(for a claim of no effect: the interval lies inside the equivalence margin, above -{MARGIN:g} "
                  f"for 'no gain', within +-{MARGIN:g} for 'no effect either way')",
    'direction only': "the interval is clear of 0 in the paper's direction, but our effect is off "
                      f"by more than a factor of {FACTOR:g}",
    'contradicted': 'the interval is clear of 0 in the other direction (for a claim of no effect: '
                    'clear of 0 on the side it denies and not inside the equivalence margin; an interval '
                    'inside the margin reproduces it even where it is clear of 0)',
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
    """{seed: final val}, or the val at a training step; of 'v@mode', the final val with q, k re-phased."""
    if '@' in v:
        v, mode = v.split('@')
        return {s: x['phase'][mode][1] for s, x in done.get(v, {}).items() if mode in (x.get('phase') or {})}
    return finals(done, v) if step is None else at_iter(done, v, step)


def seed_diffs(done, c, step=None):
    """{seed: a - b}, or (a - b) - (c - d), over the seeds every side has, read on one set (logs.alike)."""
    sides = [v for v in (c.a, c.b, c.c, c.d) if v]
    xs = [values(alike(done, *sides)[0], v, step) for v in sides]
    return {s: xs[0][s] - xs[1][s] - (xs[2][s] - xs[3][s] if c.c else 0.0)
            for s in sorted(set.intersection(*map(set, xs)))}


def compare(done, c, step=None):
    d = seed_diffs(done, c, step)
    return paired(d, dict.fromkeys(d, 0.0))


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
    text = f"{name(c)}: {cell(compare(done, c))}" + why_text(alike(done, *[v for v in (c.a, c.b, c.c, c.d) if v])[1])
    at = {s: compare(done, c, s) for s in c.at}
    steps = [f"{'n/a' if p is None else format(p['mean'], '+.3f')} at step {s}" for s, p in at.items()]
    return text + (' (**leaks**)' if leaks(leaking, c) else '') + (f"; {', '.join(steps)}" if steps else '')


def leaks(leaking, c):
    """Whether a comparison's first side leaks: it fails the audit, or is re-phased ('v@mode': the whole window)."""
    return c.a in leaking or '@' in c.a

# ----------------------------------------------------------------------------- the verdicts


OWN = {'reproduced': 'holds', 'contradicted': 'does not hold', 'not distinguishable from zero': 'not resolved',
       'direction only': 'holds in direction only'}


def words(cl, verdict):
    """A verdict in our own claims' words (holds, does not hold, not resolved) for a row marked (ours)."""
    if not cl.claim.startswith('(ours'):
        return verdict
    for theirs, ours in OWN.items():
        if verdict.startswith(theirs):
            return ours + verdict[len(theirs):]
    return verdict


def row_paired(done, leaking, cl):
    first = compare(done, cl.cmps[0])
    # whether the form itself leaks; a causal model re-phased is an ablation, marked by describe, not a leak
    published_leaks = cl.cmps[0].a.split('@')[0] in leaking
    verdict = 'a leak' if published_leaks else by_rule(cl.rule, first, cl.effect)
    if verdict == 'not distinguishable from zero':
        verdict += f" (the smallest effect it could have seen: {first['half']:.3f})"
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
    every = all(c.a in leaking for c in cl.cmps)
    return '; '.join(parts), ('a leak' if every else 'untestable here (not every form leaks: see the row)')


def row_leaks_as_claimed(done, leaking, cl):
    text, _ = row_leak(done, leaking, cl)
    return text, 'reproduced' if all(c.a in leaking for c in cl.cmps) else 'contradicted'


def row_phase(done, leaking, cl):
    """Each form's val with q, k re-phased at random (each of PHASE_MODES) minus dot's, paired over seeds."""
    ps = {(c.a, m): paired(*(values(alike(done, c.a, 'dot')[0], v) for v in (f'{c.a}@{m}', 'dot')))
          for c in cl.cmps for m in PHASE_MODES}
    parts = [f"`{v}`, `{m}` phases, minus dot: {cell(p)}" for (v, m), p in ps.items() if p]
    if not parts:
        return 'not evaluated', 'untestable here'
    first = ps[cl.cmps[0].a, PHASE_MODES[0]]
    return '; '.join(parts), 'a leak' if all(c.a in leaking for c in cl.cmps) else by_rule('sign', first, 1)


def row_mope_pairs(done, leaking, cl):
    """The learned pairs of the row's variants (its comparisons' first sides; the published forms by default):
    contradicted where no period reaches WORD; for a claim that one does (effect 1), reproduced where one does."""
    names = [c.a for c in cl.cmps] or ('mope', 'ega_mope', 'ega_mope_paper')
    pairs = [(w, s) for v in names for x in done.get(v, {}).values()
             if x.get('mope') for w, s in zip(x['mope']['w'], x['mope']['s'])]
    runs = sum(1 for v in names for x in done.get(v, {}).values() if x.get('mope'))
    if not pairs:
        return 'no learned pairs logged', 'untestable here'
    periods = [2 * math.pi / w for w, _ in pairs]
    on_rule = sum(abs(w * s - 5.0) < 0.05 for w, s in pairs)
    far = sum(p >= WORD for p in periods)
    return (f"{len(pairs)} pairs of {runs} runs: periods {min(periods):.1f} to {max(periods):.1f} tokens; "
            f"{on_rule} on the rule's boundary `w s = 5`; {far} at {WORD} tokens or more (word scale and "
            f"beyond)"), 'contradicted' if far == 0 else 'reproduced' if cl.effect == 1 else 'untestable here'


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
    """Training tokens/s of `ega` against `dot` in one interleaved benchmark (lab.bench --out, the row's
    source under results/): 'no cost' if EGA keeps 1 - SAME of dot's."""
    b = results_json(cl.source)
    if not b:
        return f'not measured ({cl.source})', 'untestable here'
    tok = {v: b['variants'][v]['tps'] for v in ('dot', 'ega')}
    ratio = tok['ega'] / tok['dot']
    text = (f"training tokens/s (`{b['command']}`, {b['date']}): `ega` {tok['ega']:,.0f} against `dot` "
            f"{tok['dot']:,.0f} ({100 * (ratio - 1):+.1f}%)")
    return text, 'reproduced' if ratio >= 1 - SAME else 'contradicted'


def row_emd(done, leaking, cl):
    """From results/fourierqk/emd.json (lab/emd.py): IMF 1..4 median periods of each trained checkpoint.
    EMD recovers the learned periods only if its IMFs move with them: the two families' bands differ (one
    band a head against four), so some IMF's median period must differ between them by more than NOISE_X;
    contradicted where every IMF agrees within NOISE_X, else untestable (the row gives the numbers)."""
    e = results_json('fourierqk', 'emd.json')
    if not e:
        return 'not analysed (python -m lab.emd)', 'untestable here'
    parts, fam = [f"white noise: {fmt(e['noise'][:4])}"], {}
    for run, r in sorted(e['runs'].items()):
        parts.append(f"`{run}` trained {fmt(r['trained'][:4])} (untrained {fmt(r['untrained'][:4])}; learned "
                     f"bands {min(r['bands']):.0f} to {max(r['bands']):.0f})")
        fam.setdefault(run.rsplit('-s', 1)[0], []).append(r['trained'][:4])
    text = 'IMF 1-4 median periods (tokens): ' + '; '.join(parts)
    if len(fam) < 2:
        return text, 'untestable here (one family of bands)'
    (fa, a), (fb, b) = [(f, [statistics.median(x[k] for x in runs) for k in range(4)]) for f, runs in fam.items()][:2]
    moves = [max(x, y) / min(x, y) for x, y in zip(a, b)]
    text += (f"; `{fa}` against `{fb}`, whose bands differ, IMF 1-4 median periods {fmt(a)} against {fmt(b)}: "
             f"apart by {'/'.join(f'{m:.2f}x' for m in moves)}")
    return text, 'contradicted' if max(moves) <= NOISE_X else "untestable here: the IMFs move between the families"


def fmt(ps):
    return '/'.join(f"{p:.1f}" for p in ps)


def row_all(done, leaking, cl):
    """A claim that nothing beats the base (rule 'all'): each comparison by rule 'null', sorted by its mean.
    Does not hold if any comparison contradicts it, holds if every one reproduces it, else not resolved;
    the verdict names the comparisons it turns on."""
    ps = [(compare(done, c), c) for c in cl.cmps]
    have = sorted(((p, c) for p, c in ps if p), key=lambda x: x[0]['mean'])
    text = '; '.join(describe(done, leaking, c) for _, c in have) or 'no paired runs yet'
    missing = [name(c) for p, c in ps if not p]
    text += f"; not run yet: {', '.join(missing)}" if missing else ''
    if missing or any(p['half'] is None for p, _ in have):
        return text, 'untestable here (a comparison without two seeds yet)'
    gains = [c for p, c in have if by_rule('null', p) == 'contradicted']
    wide = [c for p, c in have if by_rule('null', p) == 'not resolved']
    if gains:
        return text, f"contradicted: {', '.join(name(c) for c in gains)}"
    return text, f"not resolved: {', '.join(name(c) for c in wide)}" if wide else 'reproduced'


def context_results():
    return results_json('locality', 'context.json')


CONTROLS = ('dot_nopos', 'rope')    # row 31: context runs without a locality prior, listed beside the priors


def row_context(done, leaking, cl):
    """Per variant, paired over seeds: the mean loss on positions 128..511 of 512-token windows minus the
    mean on WARM..127 (lab/longctx.py: the cold start left out); each prior by THRESHOLDS['31']."""
    from lab.longctx import past_and_warm
    by, res = {}, context_results()
    for label, r in res.items():
        pw = past_and_warm(r)
        if pw:
            by.setdefault(label.rsplit('-s', 1)[0], {})[label.rsplit('-s', 1)[1]] = pw
    if not by:
        return 'not evaluated yet', 'untestable here (no checkpoints evaluated yet: python -m lab.longctx)'
    ps = {v: paired({s: x[0] for s, x in d.items()}, {s: x[1] for s, x in d.items()}) for v, d in by.items()}
    # a rise is the side the claim denies: the rule 'null' on the difference turned round
    got = {v: by_rule('null', p and dict(p, mean=-p['mean'])) for v, p in ps.items() if v not in CONTROLS}
    worse = [v for v, g in got.items() if g == 'contradicted']
    open_ = [v for v, g in got.items() if g != 'reproduced']
    verdict = (f"contradicted: {', '.join(f'`{v}`' for v in worse)}" if worse else
               f"not resolved: {', '.join(f'`{v}`' for v in open_)}" if open_ else 'reproduced')
    refused = sorted({label.rsplit('-s', 1)[0] for label, r in res.items() if 'refused' in r})
    text = '; '.join(f"`{v}`{' (control)' if v in CONTROLS else ''}: {cell(p)}"
                     for v, p in sorted(ps.items(), key=lambda x: x[1]['mean']))
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
    p = paired({s: x['diff'] for s, x in per.items()}, {s: 0.0 for s in per})
    iv = f" ({p['mean'] - p['half']:+.3f}..{p['mean'] + p['half']:+.3f})" if p and p['half'] is not None else ''
    return (', '.join(f"s{s}: {x['diff']:+.3f}" for s, x in sorted(per.items())) +
            f", paired {p['mean']:+.3f}{iv}, {len(per)} seed{'s' if len(per) != 1 else ''}, {r['verdict']}")


def row_moonshot(done, leaking, cl):
    res = recency_results()
    if not res.get('efficiency'):
        return 'not run yet', 'not resolved (no runs yet: python -m lab.recency)'
    moon, closest = res.get('moonshot', []), res.get('closest')
    text = f"closest: `{closest}`, {res['efficiency'][closest]['ratio']:.2f} of dot's steps" if closest else '-'
    text += f". Rule: {res['rules']['moonshot']}"
    return text, (f"holds: {', '.join(f'`{v}`' for v in moon)}" if moon else 'does not hold')


ROWS = {'effect': row_paired, 'sign': row_paired, 'null': row_paired, 'zero': row_paired, 'leak': row_leak,
        'leaks': row_leaks_as_claimed, 'phase': row_phase, 'mope_pairs': row_mope_pairs,
        'periods': row_periods, 'gap': row_gap, 'cost': row_cost, 'params': row_params, 'emd': row_emd, 'untestable': lambda done, leaking, cl: ('-', 'untestable here'),
        'all': row_all, 'context': row_context, 'recency_profile': row_recency('profile', gap_text),
        'efficiency': row_recency('efficiency', eff_text), 'corpus': row_recency('corpus', corpus_text),
        'moonshot': row_moonshot, 'mope_limit': row_mope_limit, 'gate_params': row_gate_params,
        'mope_kernel': row_mope_kernel, 'gate_mechanism': row_gate_mechanism, 'mope_rule': row_mope_rule,
        'generation_46': row_46, 'generation_48': row_48}
