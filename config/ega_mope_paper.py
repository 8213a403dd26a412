# EGA + MOPE as published, window normalisation. LEAKS (paper: 1.3550)
attn = 'ega'
ega_norm = 'window'     # published: z-scores over the whole window (LEAKS)
pos = 'mope'
mope_init = 'paper'     # the published init
out_dir = 'out-ega_mope_paper'
