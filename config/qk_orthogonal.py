# Control (docs/variants.md §4): q and k mixed over time by a fixed random orthogonal T x T
# matrix. LEAKS
attn = 'qk_orthogonal'
out_dir = 'out-qk_orthogonal'
