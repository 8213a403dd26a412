# Mexican-hat spectral bands at 4 learned scales per head (init periods 50/26/10/5), each
# L1-normalised; q and k filtered by each band and the 4 bands' logits averaged, bilateral FFT
# (docs/variants.md §4). LEAKS
attn = 'mexhat_qk'
out_dir = 'out-mexhat_qk'
