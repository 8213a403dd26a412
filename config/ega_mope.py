# EGA + MOPE, the first paper's combined model, with the causal EGA normalisation
attn = 'ega'
ega_norm = 'prefix'
pos = 'mope'
mope_init = 'paper'
out_dir = 'out-ega_mope'
