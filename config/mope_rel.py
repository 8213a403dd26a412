# The relative Morlet bias (ours, in no paper; docs/variants.md §3): per head, the logit bias
# sum_m a_hm cos(w_hm (i-j)) exp(-(i-j)^2 / (4 s_hm^2)), mope_rel_terms terms, learned a, w, s.
# Causal and translation invariant; combines with every --attn.
attn = 'dot'
pos = 'mope_rel'
out_dir = 'out-mope_rel'
