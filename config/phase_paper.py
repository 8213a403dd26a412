# MQ-EP as published: channel-mean signal, window z-scores. LEAKS (not a modelling result).
attn = 'phase'
ega_norm = 'window'
gate_signal = 'channel_mean'
pos = 'learned'
out_dir = 'out-phase_paper'
