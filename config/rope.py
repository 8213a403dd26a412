# dot attention with rotary embeddings on q and k (base 10000)
attn = 'dot'
pos = 'rope'
out_dir = 'out-rope'
