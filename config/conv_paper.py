# Lag attention as the authors' code computes it (docs/variants.md §3). Its lag shift cancels:
# each lag l = -4..4 adds w_l q_i . k_j / sqrt(hs) on the block where its shifted windows
# overlap, so the logit is c_ij q_i . k_j / sqrt(hs) with c_ij = 1 inside the window and less
# near its edges (first keys, last rows). w = softmax of fixed lag weights (read as Python floats:
# never learned). Dot attention with a fixed, position-dependent logit scale; not a lag effect. Causal.
attn = 'conv_paper'
conv_lags = 4           # L = 4, as published
out_dir = 'out-conv_paper'
