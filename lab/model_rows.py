"""Ledger rows whose evidence is the model's own code, not a run: MOPE's wide limit (the
sinusoidal encoding) and EGA's parameters per head. Each returns (what we measured, verdict)
like the rows of lab/verdicts.py, which lists them in ROWS."""
import torch

LIMIT = 1e-12       # MOPE's wide limit: its table within this of the sinusoidal one, in float64


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
