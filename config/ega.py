# Energy-Gated Attention with causal running z-normalisation (docs/variants.md §2)
attn = 'ega'
ega_norm = 'prefix'
pos = 'learned'
out_dir = 'out-ega'
