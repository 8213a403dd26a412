# Mexican-hat spectral weights at 4 learned scales per head (init periods 50/26/10/5),
# L1-normalised, bilateral FFT (docs/variants.md §4). LEAKS
attn = 'mexhat_qk'
pos = 'learned'
out_dir = 'out-mexhat_qk'
