# Dot attention with per-head q, k init scales, the EGA paper's ablation (docs/variants.md §3):
# the q and k weights of head h drawn with std 0.02 (1 + (h mod 4) / 4). Causal.
attn = 'scale_init'
pos = 'learned'
out_dir = 'out-scale_init'
