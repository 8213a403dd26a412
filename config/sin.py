# dot attention with the fixed sinusoidal encoding
attn = 'dot'
pos = 'sin'
out_dir = 'out-sin'
