# The Morlet cross-correlation (docs/variants.md §4): keys circularly convolved with a
# symmetric Morlet lag kernel through rfft/irfft, no padding. LEAKS (paper: about 0.018)
attn = 'morlet_xcorr'
out_dir = 'out-morlet_xcorr'
