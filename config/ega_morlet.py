# EGA-M, the Morlet filter-bank gate (docs/variants.md §3), causal form: per head a learned
# signal u = w^T x + b, four complex Morlet filters (3, 7, 15, 31 taps) over time, energies
# |c_s|^2 z-normalised with running (prefix) statistics, per-scale gates mixed.
attn = 'ega_morlet'
morlet_learned = True   # log w, log sig learned, as published
out_dir = 'out-ega_morlet'
