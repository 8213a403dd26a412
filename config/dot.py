# BASE-DOT: causal dot-product attention, learned absolute positions (paper: best val 1.4742)
attn = 'dot'
out_dir = 'out-dot'
