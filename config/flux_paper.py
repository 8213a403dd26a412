# MQ-EF as published: channel-mean signal, window z-scores. LEAKS (not a modelling result).
attn = 'flux'
ega_norm = 'window'
gate_signal = 'channel_mean'
pos = 'learned'
out_dir = 'out-flux_paper'
