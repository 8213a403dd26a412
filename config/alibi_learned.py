# ALiBi's linear distance bias on top of the learned absolute positions (docs/variants.md §7):
# the fixed recency prior beside the table that config/alibi.py drops. Causal.
attn = 'dot'
pos = 'learned+alibi'
out_dir = 'out-alibi_learned'
