# EGA + MOPE as published, window normalisation. LEAKS (paper: 1.3550)
attn = 'ega'
ega_norm = 'window'
pos = 'mope'
mope_init = 'paper'
out_dir = 'out-ega_mope_paper'
