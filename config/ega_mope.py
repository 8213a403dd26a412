# EGA + MOPE, the first paper's combined model, with the causal EGA normalisation
attn = 'ega'
pos = 'mope'
mope_init = 'paper'     # the published init
out_dir = 'out-ega_mope'
