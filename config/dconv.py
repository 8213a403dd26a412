# Primer's multi-dconv-head attention (docs/variants.md §7): q, k and v each through a learned
# depthwise causal filter of 3 taps over time after their projections; init h = (1, 0, 0), so it
# starts as dot attention. Causal.
attn = 'dconv'
dconv_width = 3         # Primer's 3 taps
out_dir = 'out-dconv'
