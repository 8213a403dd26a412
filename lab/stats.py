"""
The statistics of the tables: a sample's mean and spread, Student's t quantile in closed form,
and paired differences over the seeds two variants share, with their 95% interval.
"""

import math
import statistics


def stats(xs):
    xs = list(xs)
    return dict(n=len(xs), mean=statistics.mean(xs), sd=statistics.stdev(xs) if len(xs) > 1 else None,
                min=min(xs), max=max(xs))


def t_within(t, df):
    """P(|T| <= t) for Student's t with an integer df, in closed form (Abramowitz and Stegun
    26.7.3, 26.7.4): with th = atan(t / sqrt(df)), c = cos th, the odd df give
    (2/pi) (th + sin th (c + 2/3 c^3 + 2 4/(3 5) c^5 + ...)) and the even ones
    sin th (1 + 1/2 c^2 + 1 3/(2 4) c^4 + ...), df - 2 powers of c at most."""
    th = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(th) ** 2, 1.0, 0.0
    if df % 2:
        term, k = math.cos(th), 1
        while k <= df - 2:
            total += term
            term *= c2 * (k + 1) / (k + 2)
            k += 2
        return 2 / math.pi * (th + math.sin(th) * total) if df > 1 else 2 * th / math.pi
    k = 0
    while k <= df - 2:
        total += term
        term *= c2 * (k + 1) / (k + 2)
        k += 2
    return math.sin(th) * total


def t95(df):
    """The two-sided 95% quantile of Student's t with df degrees of freedom, exactly (to 1e-12):
    the t with P(|T| <= t) = 0.95, by bisection on t_within."""
    lo, hi = 0.0, 100.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_within(mid, df) < 0.95 else (lo, mid)
    return (lo + hi) / 2


def paired(a, b):
    """a - b over the seeds both have ({seed: value}): n, mean, sd, min, max and the 95% half-width."""
    d = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if not d:
        return None
    st = stats(d)
    st['half'] = None if st['sd'] is None else t95(len(d) - 1) * st['sd'] / math.sqrt(len(d))
    return st
