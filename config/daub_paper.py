# The Daubechies prior with the statistics and signal of the published Morlet gate: window
# z-scores, the channel mean. LEAKS (not a modelling result).
attn = 'daub'
ega_norm = 'window'     # published: z-scores over the whole window (LEAKS)
gate_signal = 'channel_mean'# published: the channel mean as the signal
out_dir = 'out-daub_paper'
