# The fixed-Morlet structured prior (docs/variants.md §3): EGA-M's filter bank with w and sig
# frozen at their init (w_s = pi / L_s, sig_s = 5 / w_s for L_s = 3, 7, 15, 31), over a learned
# per-head signal, prefix z-scores. The paper reports such priors lose to learned ones.
attn = 'ega_morlet'
morlet_learned = False
out_dir = 'out-ega_morlet_fixed'
