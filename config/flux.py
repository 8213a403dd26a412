# MQ-EF, the spectral-flux score (docs/variants.md §3), causal form: the Morlet gate, and
# logits lam_sim q.k/sqrt(hs) + lam_E mean_s z(E_s) + lam_F mean_s z(|E_s,j - E_s,j-1|), prefix z.
attn = 'flux'
out_dir = 'out-flux'
