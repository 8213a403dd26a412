"""Ledger rows whose evidence is the model's own code: MOPE's wide limit (the sinusoidal
encoding), EGA's parameters per head, and MOPE's positional kernel computed from the pairs the
runs learned. Each returns (what we measured, verdict) like the rows of lab/verdicts.py, which
lists them in ROWS."""
import statistics

import torch

LIMIT = 1e-12       # MOPE's wide limit: its table within this of the sinusoidal one, in float64
PARAMS = 0.003      # row 22a: the paper's bound on EGA's extra parameters (< 0.3%)
LAG_TOL = 0.10      # MOPE's kernel is one of the lag if, at each lag, it varies over positions by less than this
REACH = 1e-3        # a position is reached while |PE(b)|^2 is at least this share of |PE(0)|^2
MOPE_RUNS = ('mope', 'ega_mope', 'ega_mope_paper')


def row_mope_limit(done, leaking, cl):
    """MOPE with the sinusoidal frequencies and widths s growing: the largest difference of its table
    from the sinusoidal table, in float64 (reproduced if it falls to LIMIT as s grows)."""
    import model
    C, T = 64, 128
    cfg = model.GPTConfig(pos='mope', mope_init='sin', mope_rule=False, n_embd=C, n_head=4, block_size=T)
    mope = model.MOPE(cfg).double()
    b = torch.arange(T, dtype=torch.float64)
    w = model.sin_freqs(C).double()
    sin = model.waves(b, w)                                     # (T, C)
    diffs = {}
    with torch.no_grad():
        mope.log_w.copy_(w.log())
        for s in (1e2, 1e4, 1e6, 1e8):
            mope.log_s.fill_(float(torch.tensor(s).log()))
            diffs[s] = (mope(T)[0] - sin).abs().max().item()
    text = ('largest difference of the MOPE table (sinusoidal frequencies, C = 64, T = 128, float64) from the '
            'sinusoidal table, by width s: ' + ', '.join(f"s = {s:.0e}: {d:.1e}" for s, d in diffs.items()))
    falls = all(a >= b for a, b in zip(diffs.values(), list(diffs.values())[1:]))
    return text, 'reproduced' if falls and diffs[1e8] <= LIMIT else 'contradicted'


def row_params(done, leaking, cl):
    """EGA's extra parameters at the paper scale against the paper's bound (PARAMS)."""
    from model import GPT, GPTConfig
    n = {a: GPT(GPTConfig(attn=a)).num_params() for a in ('dot', 'ega')}
    extra = n['ega'] / n['dot'] - 1
    text = f"parameters at the paper scale: `ega` {n['ega']:,} against `dot` {n['dot']:,} (+{100 * extra:.2f}%)"
    return text, 'reproduced' if extra < PARAMS else 'contradicted'


def row_gate_params(done, leaking, cl):
    """EGA's parameters per head, counted on our EnergyGate (the paper: d + 2)."""
    import model
    cfg = model.GPTConfig(attn='ega')
    gate = model.EnergyGate(cfg)
    per_head = sum(p.numel() for p in gate.parameters()) // cfg.n_head
    d = cfg.n_embd
    text = (f"our gate at the paper scale (d = {d}): {per_head} parameters per head (d + {per_head - d}: "
            "the energy projection's weights and bias, alpha, tau)")
    return text, 'reproduced' if per_head == d + 2 else 'contradicted'


def mope_kernel(w, s, T):
    """MOPE's positional kernel K(i, j) = PE(i) . PE(j) = sum_p exp(-(i^2 + j^2) / 2 s_p^2) cos(w_p (i - j))
    of learned pairs (w, s) over a window of T, in float64; returns (reach: the positions b with
    |PE(b)|^2 >= REACH |PE(0)|^2, spread: for each lag tau < T, the range of K(i, i - tau) over i as a share
    of K's largest |value|: 0 for a kernel of the lag alone)."""
    import model
    b = torch.arange(T, dtype=torch.float64)
    pe = model.waves(b, torch.tensor(w, dtype=torch.float64), torch.tensor(s, dtype=torch.float64))  # (T, C)
    K = pe @ pe.T                                               # (T, T)
    norm = K.diagonal()                                         # |PE(b)|^2
    reach = int((norm >= REACH * norm[0]).sum())
    top = K.abs().max().item()
    spread = [(d.max() - d.min()).item() / top for d in (K.diagonal(-tau) for tau in range(T))]  # K(i, i - tau)
    return reach, spread


def span(xs, what):
    """'12% {what} in every run' where every run gives it, else '10% to 30% {what} (median 12%)'."""
    lo, hi = f'{min(xs):.0%}', f'{max(xs):.0%}'
    return f"{lo} {what} in every run" if lo == hi else f"{lo} to {hi} {what} (median {statistics.median(xs):.0%})"


def row_mope_kernel(done, leaking, cl):
    """The seed's lag-space Morlet kernel C(tau) of MOPE: the learned pairs' positional kernel at the runs'
    window is a function of the lag alone if, at every lag, it varies over positions by less than LAG_TOL."""
    runs = [(v, x) for v in MOPE_RUNS for x in done.get(v, {}).values() if x.get('mope')]
    if not runs:
        return 'no learned pairs logged', 'untestable here'
    T = 128                                                     # the CPU study's window (config/cpu.py)
    got = [mope_kernel(x['mope']['w'], x['mope']['s'], T) for _, x in runs]
    reach = [r for r, _ in got]
    worst = [max(sp[:T // 2]) for _, sp in got]                 # over lags 0..T/2 - 1
    names = ', '.join(f'`{v}`' for v in dict.fromkeys(v for v, _ in runs))
    text = (f"the pairs learned by {len(runs)} run{'s' if len(runs) > 1 else ''} ({names}), at T = {T}: "
            f"PE reaches positions 0..{min(reach) - 1}{f' to 0..{max(reach) - 1}' if max(reach) > min(reach) else ''} "
            f"(|PE(b)|^2 at least {REACH:g} of "
            f"|PE(0)|^2), so K(i, j) is near 0 past them whatever the lag; at its worst lag below {T // 2}, "
            f"K(i, i - tau) ranges over i by {span(worst, 'of its largest value')}")
    return text, 'reproduced' if max(worst) < LAG_TOL else 'contradicted'
