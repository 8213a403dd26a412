# dot attention with the Morlet positional encoding whose frequencies learn (ours, docs/variants.md §1):
# the published init and decay; where w s < 5 the envelope widens (s = 5 / w) instead of w being set to 5 / s
attn = 'dot'
pos = 'mope_learned'
mope_init = 'paper'     # the published init
out_dir = 'out-mope_learned'
