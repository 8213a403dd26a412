# The causal complex Morlet filter with its scale learned per head from a = 8 (published); causal
attn = 'causal_morlet'
filter_taps = 0         # half the window: the published 128 taps at T = 256
filter_learned = True   # log a learned from the published 8
out_dir = 'out-causal_morlet_learned'
