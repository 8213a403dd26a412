# FourierQK as published (docs/variants.md §4): q, k filtered by a learned Gaussian band
# per head (s_f = 2 bins, init bin 4, L2-normalised) over the whole window. LEAKS: the
# bilateral FFT puts later positions into q~ and k~ (paper: 0.608)
attn = 'fourier_qk'
fourier_sf = 2.0        # the published band width, 2 bins
fourier_norm = 'l2'     # the main paper's unit L2 norm
out_dir = 'out-fourier_qk'
