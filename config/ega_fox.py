# EGA's gate (causal prefix normalisation) and FoX's forget gate, their logits summed
# (docs/variants.md §6)
attn = 'ega_fox'
ega_norm = 'prefix'
pos = 'learned'
fox_bias = 0.0
out_dir = 'out-ega_fox'
