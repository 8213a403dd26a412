"""
The rule that turns one paired comparison into a verdict (the ledger's header states it: lab/verdicts.py,
VERDICTS): the paper's effect within a factor, a direction, no gain, no effect either way, with the
equivalence margin for a claim of no effect. Shared by the ledger's rows and the lab modules that judge
their own measurements (lab/generation_study.py).
"""

import math

FACTOR = 3.0        # "reproduced" needs |ours| within this factor of the paper's effect
MARGIN = 0.02      # a claim of no effect: the equivalence margin in val loss (the smallest effect of interest)


def clear(p):
    """-1 or +1 where the interval is clear of 0 on that side, 0 where it holds 0 (or is unknown)."""
    if p is None or p['half'] is None:
        return 0
    lo, hi = p['mean'] - p['half'], p['mean'] + p['half']
    return -1 if hi < 0 else 1 if lo > 0 else 0


def by_rule(rule, p, effect=None):
    """One comparison's verdict: 'effect' (the paper's), 'sign' (-1 a gain), 'null' (no gain), 'zero' (no effect)."""
    side = clear(p)
    if p is None:
        return 'untestable here'
    if p['half'] is None:
        return 'untestable here (one seed so far: no interval)'
    lo, hi = p['mean'] - p['half'], p['mean'] + p['half']
    if rule in ('null', 'zero'):
        # equivalence first: an effect inside the margin is no effect of interest, even if clear of 0
        if lo >= -MARGIN and (rule == 'null' or hi <= MARGIN):
            return 'reproduced'
        return 'contradicted' if side < 0 or (side > 0 and rule == 'zero') else 'not resolved'
    if side == 0:
        return 'not distinguishable from zero'
    want = int(math.copysign(1, effect))
    if side != want:
        return 'contradicted'
    if rule == 'sign':
        return 'reproduced'
    ratio = abs(p['mean']) / abs(effect)
    return 'reproduced' if 1 / FACTOR <= ratio <= FACTOR else 'direction only'
