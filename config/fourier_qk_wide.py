# The filter-shape follow-up, wide band: s_f = 16 bins, weights summing to 1. LEAKS
attn = 'fourier_qk'
fourier_sf = 16.0
fourier_norm = 'sum'    # the follow-up paper's unit sum
out_dir = 'out-fourier_qk_wide'
