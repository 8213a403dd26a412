# EGA's gate (causal prefix normalisation) and FoX's forget gate, their logits summed
# (docs/variants.md §6)
attn = 'ega_fox'
fox_bias = 0.0          # FoX's default
out_dir = 'out-ega_fox'
