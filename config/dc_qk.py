# Control: q and k reduced to rfft bin 0, their window means (docs/variants.md §4). Bilateral,
# yet causal: every logit of a row is the same, so the attention is the uniform causal mean
attn = 'dc_qk'
out_dir = 'out-dc_qk'
