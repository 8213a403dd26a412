# The Forgetting Transformer's forget gate (Lin et al., ICLR 2025), docs/variants.md §6:
# logits q.k/sqrt(hs) + sum of log f between key and query, f = sigmoid(w^T x + b) per head
attn = 'fox'
fox_bias = 0.0          # FoX's default
out_dir = 'out-fox'
