# The Daubechies structured prior (docs/variants.md §3), causal form: the gate energies from
# fixed db2 detail filters at dyadic scales 1, 2, 4, 8 (undecimated, causal) over a learned
# per-head signal, prefix z-scores.
attn = 'daub'
out_dir = 'out-daub'
