# MQ-EP, the phase score (docs/variants.md §3), causal form: the Morlet gate, and logits
# lam_sim q.k/sqrt(hs) + lam_E mean_s z(E_s) + lam_P cos(mean_s arg c_s), prefix z.
attn = 'phase'
out_dir = 'out-phase'
