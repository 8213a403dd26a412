# The causal complex Morlet filter with its scale learned per head from a = 8 (published); causal
attn = 'causal_morlet'
filter_taps = 0
filter_learned = True
pos = 'learned'
out_dir = 'out-causal_morlet_learned'
