# Lag (convolution) attention, the EGA paper's ablation done as described (docs/variants.md §3):
# logits sum_l c_l q_i . k_(j-l) / sqrt(hs), lags l = 0..conv_lags-1, a learned kernel c per
# head (init c = (1, 0, 0, 0): it starts as dot attention). Causal.
attn = 'conv'
conv_lags = 4           # L = 4, as published
out_dir = 'out-conv'
