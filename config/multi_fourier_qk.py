# MultiFourier-QK (docs/variants.md §4): 4 learned bands per head, init periods 50, 26, 10,
# 5 tokens, per-band logits averaged. LEAKS (paper: 0.309)
attn = 'multi_fourier_qk'
fourier_sf = 2.0        # the published band width, 2 bins
fourier_norm = 'l2'     # the main paper's unit L2 norm
out_dir = 'out-multi_fourier_qk'
