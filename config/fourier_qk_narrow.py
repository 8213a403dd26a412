# The filter-shape follow-up, narrow band: s_f = 0.5 bins, weights summing to 1. LEAKS
attn = 'fourier_qk'
fourier_sf = 0.5
fourier_norm = 'sum'    # the follow-up paper's unit sum
out_dir = 'out-fourier_qk_narrow'
