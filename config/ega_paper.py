# EGA as published: z-normalised over the whole window. LEAKS: a key's gate depends on
# later tokens, so its losses are not language-modelling results (paper: 1.3821)
attn = 'ega'
ega_norm = 'window'     # published: z-scores over the whole window (LEAKS)
out_dir = 'out-ega_paper'
