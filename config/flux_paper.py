# MQ-EF as published: channel-mean signal, window z-scores. LEAKS (not a modelling result).
attn = 'flux'
ega_norm = 'window'     # published: z-scores over the whole window (LEAKS)
gate_signal = 'channel_mean'# published: the channel mean as the signal
out_dir = 'out-flux_paper'
