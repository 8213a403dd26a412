# Lag attention as the authors' code computes it (docs/variants.md §3): its lag shift cancels
# and its lag weights are read as Python floats (no gradient), so it is dot attention with a
# scale of sum_l w_l = 1. Kept to show that (reported +0.007 against dot: noise). Causal.
attn = 'conv_paper'
conv_lags = 4
pos = 'learned'
out_dir = 'out-conv_paper'
