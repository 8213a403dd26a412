# Dot attention with per-head q, k init scales, the EGA paper's ablation as published
# (docs/variants.md §3): the q and k weights of head h drawn with std 0.02 (1 + (h mod 4) / 4),
# v with 0.02, and the output projections and MLP left at PyTorch's default init (the
# published model never draws them from N(0, 0.02)). So it changes two things against dot;
# scale_init_rest = 'normal' is the one-change form. Causal.
attn = 'scale_init'
scale_init_rest = 'torch'# PyTorch's init for the other matrices, as published
out_dir = 'out-scale_init'
