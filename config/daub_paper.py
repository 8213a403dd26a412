# The Daubechies prior with the statistics and signal of the published Morlet gate: window
# z-scores, the channel mean. LEAKS (not a modelling result).
attn = 'daub'
daub_order = 2
ega_norm = 'window'
gate_signal = 'channel_mean'
pos = 'learned'
out_dir = 'out-daub_paper'
