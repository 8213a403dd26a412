"""
The claims ledger, generated from the committed runs:

    python study.py ledger                  # print the table
    python study.py ledger --write=True     # write results/LEDGER.md and README.md's table
    python ledger.py [...]                  # the same

Each row is a published claim (or one of ours, marked), the comparison it rests on (which
runs, how many seeds), our numbers with their paired 95% intervals, and a verdict that a
rule gives from the numbers (VERDICTS, stated in the ledger's header). The prose of a row
(CLAIMS: what the paper says, and a note on what the numbers mean) holds no number of
ours: every number of ours in the ledger is computed here from the runs' logs.
"""

import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass

import study

FACTOR = 3.0        # "reproduced" needs |ours| within this factor of the paper's effect
WORD = 10           # row 5: a period of this many characters or more is word scale or beyond
NOISE_X = 1.5       # row 24: IMF periods within this factor of white noise's are EMD's own ladder
SAME = 0.05         # row 22: "no cost" is EGA within 5% of dot's training tokens/s
BENCH = os.path.join('bench', 'ega_cost.json')     # under study.RESULTS, read where it is now
VERDICTS = {
    'reproduced': "the claim holds here: the paired 95% interval is clear of 0 in the paper's "
                  f"direction, and our effect is within a factor of {FACTOR:g} of the paper's "
                  "(for a claim of no effect: the interval is not clear of 0 on the side of a gain)",
    'direction only': "the interval is clear of 0 in the paper's direction, but our effect is off "
                      f"by more than a factor of {FACTOR:g}",
    'contradicted': 'the interval is clear of 0 in the other direction (for a claim of no effect: '
                    'on the side of a gain)',
    'not distinguishable from zero': 'the interval holds 0; the row gives the smallest effect the '
                                     'test could have seen (the interval\'s half-width)',
    'a leak': 'the published form fails the exact causality audit: its loss is no modelling result',
    'untestable here': 'the row says why',
}
LEDGER = ('<!-- ledger: python study.py ledger --write=True -->', '<!-- /ledger -->')


@dataclass
class Cmp:
    """A paired comparison over the seeds both sides have: a - b, or with c and d given the
    interaction a - b - c + d. at: also give the difference at these training steps."""
    a: str
    b: str = 'dot'
    c: str = ''
    d: str = ''
    at: tuple = ()


@dataclass
class Claim:
    n: str
    claim: str              # the paper's claim, summarised
    paper: str              # the paper's number, as it states it
    rule: str               # 'effect' (the paper's effect), 'sign' (a direction), 'null' (no gain),
    #                         'zero' (no effect either way), or a custom row's name (ROWS)
    cmps: tuple = ()        # the first is the one the verdict rests on
    effect: float = None    # the paper's effect (rule 'effect'), or its sign (rule 'sign')
    note: str = ''          # what the numbers mean; no number of ours


CLAIMS = [
    Claim('1', 'EGA alone improves on dot attention', '-0.092 (1.3821 vs 1.4742)', 'effect',
          (Cmp('ega'), Cmp('ega_paper'), Cmp('ega_paper', 'ega')), -0.092,
          "the causal `ega` against dot; the published `ega_paper` (z-statistics over the whole "
          "window) leaks, and its leak, `ega_paper - ega`, is the third comparison"),
    Claim('2', 'MOPE alone is slightly worse', '+0.032 (1.5060)', 'effect', (Cmp('mope'),), 0.032),
    Claim('3', 'EGA + MOPE is the best model', '-0.119 (1.3550)', 'effect',
          (Cmp('ega_mope'), Cmp('ega_mope', 'ega'), Cmp('ega_mope_paper', 'ega_mope')), -0.119,
          'the combination is compared with dot, then with EGA alone; the last comparison is the '
          "leak of the published form"),
    Claim('4', 'EGA and MOPE are superadditive', '-0.059 (the combined change minus the sum of the '
          'single ones)', 'effect', (Cmp('ega_mope', 'ega', 'mope', 'dot'),), -0.059),
    Claim('5', "MOPE's learned pairs form four clusters (character, word, clause, sentence)", 'qualitative',
          'mope_pairs', note="the published init (periods of 2 to 6.3 tokens) and the `w s >= 5` rule "
          'keep every pair at character scale: `results/ega_mope/mope_pairs.png`'),
    Claim('6', 'lag (convolution) attention helps', '-0.007', 'effect',
          (Cmp('conv_paper'), Cmp('conv'), Cmp('conv', 'ega')), -0.007,
          "`conv_paper` is the published code: dot attention with a fixed logit scale near the "
          "window's edges (its lag shift cancels), so not a lag effect; `conv` is a causal lag "
          'attention, for comparison'),
    Claim('7', 'per-head scale init gives no benefit (slightly worse)', '+0.007', 'effect',
          (Cmp('scale_init'), Cmp('history/scale_init'), Cmp('scale_init', 'history/scale_init')), 0.007,
          "the published form changes two things: the per-head q, k scales and PyTorch's default init "
          'of the output projections and the MLP; `history/scale_init` (`scale_init_rest=normal`) '
          'is the first change alone, and the third comparison the second change'),
    Claim('8', 'spectral flux helps', '-0.012', 'effect', (Cmp('flux'), Cmp('flux', 'ega_morlet')), -0.012,
          'the second comparison is against its own base, the Morlet gate without the flux logit'),
    Claim('9', 'phase coherence hurts slightly', '+0.007', 'effect', (Cmp('phase'), Cmp('phase', 'ega_morlet')),
          0.007),
    Claim('10', 'structured priors (Daubechies, fixed Morlet) lose to learned projections', 'qualitative',
          'sign', (Cmp('daub', 'ega'), Cmp('ega_morlet_fixed', 'ega'), Cmp('ega_morlet', 'ega'),
                   Cmp('ega_morlet_fixed', 'ega_morlet')), 1,
          'the learned Morlet bank loses to `ega` too: what costs is the filter-bank gate, learned or not'),
    Claim('11', 'Fourier-QK, MultiFourier-QK and Random-QK reach val 0.608, 0.309 and 1.031', 'val losses '
          'far below any char-level model', 'leak',
          (Cmp('fourier_qk', 'fourier_qk_causal'), Cmp('multi_fourier_qk', 'fourier_qk_causal'),
           Cmp('random_qk'), Cmp('mexhat_qk', 'causal_mexhat')),
          note='the bilateral FFT over time mixes every position into every other; random bands leak '
               'as much as learned ones, so the low losses need only the future tokens'),
    Claim('12', 'randomising the phases of q, k at eval is worse than dot', 'qualitative', 'phase',
          (Cmp('fourier_qk'), Cmp('multi_fourier_qk')),
          note='random phases scramble the time signals q and k that any trained model relies on, and '
               'these models leak: the test says nothing about phase coherence in causal attention'),
    Claim('13', 'causal spectral filters (Gaussian, Mexican hat, causal Morlet) do not beat dot at '
          'character level', 'qualitative', 'null',
          (Cmp('causal_gauss', at=(250, 2000)), Cmp('causal_mexhat', at=(250, 2000)),
           Cmp('causal_morlet', at=(250, 2000)), Cmp('fourier_qk_causal', at=(250, 2000))),
          note='`fourier_qk_causal` is ours (the learned band as a one-sided kernel). The gains shrink '
               'through training: the verdict holds at this scale and this length of training only. '
               'A causal smoothing of q and k is a locality prior (rows 19 to 21)'),
    Claim('14', 'orthogonal and non-orthogonal mixing controls give no gain', 'qualitative', 'leak',
          (Cmp('qk_orthogonal'), Cmp('qk_gaussian')),
          note='both controls mix every position into every other: they leak, and still do worse than dot'),
    Claim('15', 'learned periods settle near 49, 27, 10 and 6 tokens', 'qualitative', 'periods',
          note="the published periods are the published init (50, 26, 10, 5); and these models leak"),
    Claim('16', 'the Morlet irfft cross-correlation leaks (val ~0.018)', '0.018', 'leaks',
          (Cmp('morlet_xcorr', 'causal_morlet'),), note='the paper reports the leak itself'),
    Claim('17', 'the shuffled-val gap tells leaks from learning', 'diagnostic', 'gap',
          note='only the exact audit tells every leak from learning'),
    Claim('18', 'causal spectral attention might work at word scale (GPT-2 BPE)', 'conjecture', 'sign',
          (Cmp('bpe_fourier_qk_causal', 'bpe_dot', at=(500, 2000)),
           Cmp('bpe_causal_morlet', 'bpe_dot', at=(500, 2000)), Cmp('bpe_ega', 'bpe_dot')), -1,
          'GPT-2 BPE, 302k training tokens (2000 steps are about 14 epochs); the early leads shrink '
          'by the end; a larger corpus is the fuller test, beyond this CPU'),
    Claim('19', '(ours, FoX) EGA\'s gain survives next to a forget gate', '-', 'sign',
          (Cmp('ega_fox', 'fox'), Cmp('ega_fox_nopos', 'fox_nopos'), Cmp('fox', at=(250, 2000))), -1),
    Claim('20', '(ours, FoX) EGA and a forget gate add', '-', 'zero',
          (Cmp('ega_fox', 'ega', 'fox', 'dot'), Cmp('ega_fox_nopos', 'ega_nopos', 'fox_nopos', 'dot_nopos')),
          note='an interaction above 0 means they overlap: much of what EGA gives, a per-key causal '
               'down-weighting, a forget gate gives already'),
    Claim('21', '(ours) the lag-domain Morlet kernel of MOPE\'s theory, as a relative bias '
          '(`--pos=mope_rel`), helps', '-', 'sign', (Cmp('mope_rel', at=(500, 2000)), Cmp('mope')), -1,
          'a learned per-head lag bias: a locality prior, where the absolute MOPE hurts'),
    Claim('22', 'EGA costs nothing (parameters < 0.3%; "no computational cost")', '< 0.3% parameters',
          'cost', note='the CPU study scale; on the CPU the gate costs a Linear(C, nh), the '
          "z-statistics and the gate's channel in the fused kernel"),
    Claim('23', 'FourierQK avoids irfft reconstruction: it collapses the frequency dimension to a '
          'position-weighted scalar', '-', 'untestable',
          note="every FourierQK class in the authors' code reconstructs q and k with irfft; the form "
               'the sentence describes is not in their code, so there is nothing to run'),
    Claim('24', "FourierQK's EMD validation: EMD of the trained q, k recovers the learned periods "
          '(about 49, 27, 10, 6) independently', '-', 'emd',
          note='EMD acts as a dyadic filter bank on any signal; `python emd_periods.py` (optional '
               'EMD-signal package) decomposes q and k of the trained checkpoints, of the same '
               'architecture untrained, and white noise, on the same val windows: results/fourierqk/emd.json'),
    Claim('25', "(ours) the authors' weight-decay recipe (AdamW on every parameter: gates, pairs, "
          'bands, biases) changes nothing that the comparisons rest on', '-', 'zero',
          (Cmp('ega_decay_all', 'ega'), Cmp('ega_mope_decay_all', 'ega_mope'),
           Cmp('fourier_qk_causal_decay_all', 'fourier_qk_causal'),
           Cmp('multi_fourier_qk_decay_all', 'multi_fourier_qk')),
          note='`python study.py decay`: each variant with `--decay_all=True` against itself without, on '
               'the same seeds; ours decays the matrices and MOPE\'s pairs only'),
    # beyond the papers: is it all locality? (python study.py locality, long; python longctx.py)
    Claim('26', "(ours, locality) Primer's learned short filter of q, k, v (`dconv`, 3 taps) does what the "
          'fixed causal Gaussian filter of q and k (`causal_gauss`, 64 taps) does', '-', 'zero',
          (Cmp('dconv', 'causal_gauss'), Cmp('dconv'), Cmp('causal_gauss')),
          note='`python study.py locality`: the learned counterpart of the fixed filters; an interval '
               'holding 0 says the spectral shape of the fixed filter adds nothing to short-range mixing'),
    Claim('27', '(ours, locality) a fixed recency bias (ALiBi) gives what the learned forget gate gives', '-',
          'zero', (Cmp('alibi', 'fox'), Cmp('alibi_learned', 'fox'), Cmp('alibi'), Cmp('alibi_learned')),
          note='`alibi` drops the learned absolute positions; `alibi_learned` (`--pos=learned+alibi`) keeps them'),
    Claim('28', '(ours, locality) nothing beats the forget gate: no other locality prior, alone or added to '
          'the gate, by more than the seed spread', '-', 'best',
          tuple(Cmp(v, 'fox') for v in ('ega_fox', 'fox_causal_gauss', 'fox_fourier_qk_causal', 'fox_mope_rel',
                                        'fox_dconv', 'causal_gauss', 'mope_rel', 'dconv', 'fourier_qk_causal',
                                        'alibi', 'alibi_learned', 'conv')),
          note='each against `fox`, sorted by the mean; the verdict rests on the largest gain: the moonshot '
               'is a causal variant whose interval is clear of 0 below `fox`'),
    Claim('29', '(ours, locality) a causal filter adds to the forget gate (the combination beats the sum of '
          'its parts)', '-', 'best',
          tuple(Cmp(f'fox_{b}', 'fox', b, 'dot') for b in ('causal_gauss', 'fourier_qk_causal', 'mope_rel',
                                                           'dconv')) + (Cmp('ega_fox', 'ega', 'fox', 'dot'),), -1,
          note='interactions `ab - a - b + dot`: below 0 the two add more than their sum, above 0 they overlap'),
    Claim('30', '(ours, locality) the locality gains last: three times the training (6000 steps) keeps them',
          '-', 'sign', tuple(Cmp(f'{v}_long', 'dot_long', at=(2000, 4000)) for v in
                             ('fox', 'causal_gauss', 'fourier_qk_causal', study.BEST[0])), -1,
          '`python study.py long`: warmup and cosine stretched to 6000 steps; results/long/long.png sets the '
          'difference to dot through training beside the 2000-step runs'),
    Claim('31', "(ours, FoX's headline) the locality priors hold past their training length: the loss on "
          'positions 128 to 511 is no higher than on 0 to 127', '-', 'context',
          note='`python longctx.py`: the checkpoints trained at T = 128 on val windows of 512, per seed the '
               'mean loss past 128 minus the mean loss before it; learned absolute positions cannot run '
               'past their table, and a variant whose parts read the window length is refused'),
]

# ----------------------------------------------------------------------------- the runs


def finished():
    """{variant: {seed: summary}} of every finished run at the CPU study scale (and the runs
    of superseded forms in results/history, as 'history/<variant>'); {variant} that leak."""
    runs = {r for name in study.STUDIES for r in study.plan(name)}
    _, done, leaking = study.collect(sorted(runs, key=lambda r: r.label), study.DEFAULT_OVERLAY)
    hist = os.path.join(study.RESULTS, 'history')
    for folder in sorted(os.listdir(hist)) if os.path.isdir(hist) else ():
        name, _, seed = folder.rpartition('-s')
        evals, trains, extra = study.read_log(os.path.join(hist, folder, 'log.jsonl'))
        s = study.summarize(evals, trains, extra, max(evals, default=0))
        if s['done'] and name:
            done.setdefault('history/' + name, {})[int(seed) if seed.isdigit() else seed] = s
    return done, leaking


def values(done, v, step=None):
    """{seed: final val}, or the val at a training step."""
    if step is None:
        return {s: x['final'] for s, x in done.get(v, {}).items()}
    return {s: dict(x['curve'])[step] for s, x in done.get(v, {}).items() if step in dict(x['curve'])}


def compare(done, c, step=None):
    if not c.c:
        return study.paired(values(done, c.a, step), values(done, c.b, step))
    # a - b - c + d, seed by seed: pair (a - b) with (c - d)
    lhs = {s: x - y for s, x, y in zip_seeds(values(done, c.a, step), values(done, c.b, step))}
    rhs = {s: x - y for s, x, y in zip_seeds(values(done, c.c, step), values(done, c.d, step))}
    return study.paired(lhs, rhs)


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
    if side == 0:
        return 'reproduced' if rule in ('null', 'zero') else 'not distinguishable from zero'
    if rule in ('null', 'zero'):
        return 'contradicted' if side < 0 or rule == 'zero' else 'reproduced'
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
        st = study.stats(values(done, c.a).values()) if values(done, c.a) else None
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
        for mode in study.PHASE_MODES:
            rnd = {s: x['phase'][mode][1] for s, x in done.get(c.a, {}).items() if mode in (x.get('phase') or {})}
            p = study.paired(rnd, values(done, 'dot'))
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
    bench = os.path.join(study.RESULTS, BENCH)
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
    """From results/fourierqk/emd.json (emd_periods.py): IMF 1..4 median periods of each trained
    checkpoint against white noise's; contradicted where every run's are within NOISE_X of the
    noise's (the ladder is EMD's own), else untestable (the row gives the numbers)."""
    path = os.path.join(study.RESULTS, 'fourierqk', 'emd.json')
    if not os.path.exists(path):
        return 'not analysed (python emd_periods.py)', 'untestable here'
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


def context_results():
    try:
        with open(os.path.join(study.RESULTS, 'locality', 'context.json')) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def row_context(done, leaking, cl):
    """Per variant, paired over seeds: the mean loss on positions 128.. of 512-token windows minus
    the mean on 0..127 (rule 'null': the claim holds unless a variant's interval is clear above 0)."""
    by, res = {}, context_results()
    for label, r in res.items():
        b = r.get('T', {}).get('512', {}).get('buckets')
        if b and len(b) == 4:
            by.setdefault(label.rsplit('-s', 1)[0], {})[label.rsplit('-s', 1)[1]] = (sum(b[1:]) / 3, b[0])
    if not by:
        return 'not evaluated yet', 'untestable here (no checkpoints evaluated yet: python longctx.py)'
    ps = {v: study.paired({s: x[0] for s, x in d.items()}, {s: x[1] for s, x in d.items()}) for v, d in by.items()}
    worse = [v for v, p in ps.items() if clear(p) > 0]
    verdict = f"contradicted: {', '.join(f'`{v}`' for v in worse)}" if worse else 'reproduced'
    refused = sorted({label.rsplit('-s', 1)[0] for label, r in res.items() if 'refused' in r})
    text = '; '.join(f"`{v}`: {cell(p)}" for v, p in sorted(ps.items(), key=lambda x: x[1]['mean']))
    return text + (f"; refused: {', '.join(refused)}" if refused else ''), verdict


def row_untestable(done, leaking, cl):
    return '-', 'untestable here'


ROWS = {'effect': row_paired, 'sign': row_paired, 'null': row_paired, 'zero': row_paired, 'leak': row_leak,
        'leaks': row_leaks_as_claimed, 'phase': row_phase, 'mope_pairs': row_mope_pairs,
        'periods': row_periods, 'gap': row_gap, 'cost': row_cost, 'emd': row_emd, 'untestable': row_untestable,
        'best': row_best, 'context': row_context}

# ----------------------------------------------------------------------------- the ledger


def table(done=None, leaking=None):
    if done is None:
        done, leaking = finished()
    out = ['| # | claim (paper) | paper | ours (CPU scale; paired 95% intervals) | verdict | note |',
           '|---|---|---|---|---|---|']
    for cl in CLAIMS:
        ours, verdict = ROWS[cl.rule](done, leaking, cl)
        out.append(f"| {cl.n} | {cl.claim} | {cl.paper} | {ours} | **{verdict}** | {cl.note} |")
    return '\n'.join(out)


def header():
    return '\n'.join([
        '# The claims ledger', '',
        'Generated by `python study.py ledger --write=True` from the committed runs (results/runs, '
        'results/history). "Paper" is the published number (single seed, paper scale; a change in val '
        'loss against their dot baseline, lower is better). "Ours" gives each comparison as the mean '
        'of per-seed differences over the seeds both sides have, with its 95% interval (Student\'s t, '
        'exact quantile), at the CPU study scale (`config/cpu.py`: 4 layers, 4 heads, C = 128, T = 128, '
        '2000 steps, char-level TinyShakespeare unless the row says GPT-2 BPE). The verdict rests on '
        'the first comparison of a row, by one rule:', ''] +
        [f"- **{k}**: {v}" for k, v in VERDICTS.items()] + [''])


def counts(table_text):
    """{(row, the backticked names of a comparison): (runs, what they are)} from a ledger table: how many
    seeds (or runs, or heads x seeds) each comparison of each row rests on, as its "ours" cell says."""
    out = {}
    for line in table_text.splitlines():
        cells = line.split(' | ')
        if not re.match(r'\| \d+$', cells[0]) or len(cells) < 4:
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
                    f"ledger would have {m}. Finish the runs (python study.py status), or pass --replace=True")
    return ''


def main(argv):
    """python study.py ledger [--write=True [--replace=True]]: print the table, or write results/LEDGER.md and
    README's block; neither over a ledger that rests on more runs (less) unless --replace=True."""
    if argv and argv[0] in ('-h', '--help'):
        print(__doc__.strip())
        return 0
    opts = study.bool_flags(argv, ('write', 'replace'))
    if opts is None or (opts['replace'] and not opts['write']):
        print("error: usage: python study.py ledger [--write=True [--replace=True]]", file=sys.stderr)
        return 2
    t = table()
    if not opts['write']:
        print(t)
        return 0
    readme, path = os.path.join(study.HERE, 'README.md'), os.path.join(study.RESULTS, 'LEDGER.md')
    try:
        text, a, b = study.read_block(readme, LEDGER)       # both checked before either is written
        old = [('README.md', text[a:b])]
        if os.path.exists(path):
            with open(path) as f:
                old.append((study.rel(path), f.read()))
        why = '' if opts['replace'] else next((w for where, o in old for w in [less(o, t, where)] if w), '')
        if why:
            raise study.Refused(why)
    except study.StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1 if isinstance(e, study.Refused) else 2
    with open(path, 'w') as f:
        f.write(header() + '\n' + t + '\n')
    study.write_block(readme, LEDGER, t)
    print('wrote results/LEDGER.md and the ledger in README.md')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
