# EGA-M as published: the signal is the channel mean of the LayerNorm output (zero at init,
# so the gate starts constant) and the energies are z-normalised over the whole window.
# LEAKS: a key's gate depends on later tokens; its losses are not language-modelling results.
attn = 'ega_morlet'
ega_norm = 'window'     # published: z-scores over the whole window (LEAKS)
gate_signal = 'channel_mean'# published: the channel mean as the signal
morlet_learned = True   # log w, log sig learned, as published
out_dir = 'out-ega_morlet_paper'
