# Control (docs/variants.md §4): q and k mixed over time by a fixed random Gaussian T x T
# matrix. LEAKS
attn = 'qk_gaussian'
out_dir = 'out-qk_gaussian'
