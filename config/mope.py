# dot attention with the Morlet positional encoding, published form (SPEC section 1)
attn = 'dot'
pos = 'mope'
mope_init = 'paper'
out_dir = 'out-mope'
