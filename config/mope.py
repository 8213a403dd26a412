# dot attention with the Morlet positional encoding, published form (docs/variants.md §1)
attn = 'dot'
pos = 'mope'
mope_init = 'paper'     # the published init
out_dir = 'out-mope'
