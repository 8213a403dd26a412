# Random-QK (docs/variants.md §4, our reading): fixed random Gaussian bands per head (seeded
# centre bin and width), bilateral FFT. LEAKS (paper: 1.031)
attn = 'random_qk'
out_dir = 'out-random_qk'
