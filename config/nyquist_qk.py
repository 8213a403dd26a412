# Control: q and k reduced to the last rfft bin (docs/variants.md §4). LEAKS
attn = 'nyquist_qk'
out_dir = 'out-nyquist_qk'
