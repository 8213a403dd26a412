# Causal mexhat filter over time on q and k (docs/variants.md §4): left-padded, filter_taps taps
# (0: half the window, 128 at T = 256 as published), scale a = 4 fixed; causal
attn = 'causal_mexhat'
filter_taps = 0         # half the window: the published 128 taps at T = 256
filter_learned = False  # the scale fixed at the published a = 4
out_dir = 'out-causal_mexhat'
