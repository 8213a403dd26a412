# dot attention with ALiBi linear biases (slopes 2^(-8h/nh))
attn = 'dot'
pos = 'alibi'
out_dir = 'out-alibi'
