# Energy-Gated Attention with causal running z-normalisation (docs/variants.md §2)
attn = 'ega'
out_dir = 'out-ega'
