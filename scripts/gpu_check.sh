#!/usr/bin/env bash
# One short check of the CUDA path (bf16/fp16 autocast, GradScaler, torch.compile) at
# the paper scale: 60 steps each of dot, ega and ega_mope, then compiled-vs-eager logits
# on CUDA. Prints tokens/s per variant. Needs a CUDA GPU; about 5 minutes on one.
#   bash scripts/gpu_check.sh [path/to/input.txt]
# Without an argument it uses prepare.py's default: the TinyShakespeare copy cached in
# data/shakespeare_char/ by an earlier `python prepare.py`, else a download (sha256-checked).
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
if [ $# -ge 1 ]; then
  data=data/gpucheck
  python prepare.py --input="$1" --out_dir="$data"
else
  data=data/shakespeare_char
  python prepare.py || { echo "or give this script a local copy: bash scripts/gpu_check.sh path/to/input.txt" >&2; exit 2; }
fi
for name in dot ega ega_mope; do
  python train.py "config/$name.py" --data_dir="$data" --out_dir="out-gpucheck/$name" \
    --max_iters=60 --eval_interval=60 --eval_iters=5 --log_interval=20
done
python - <<'PY'
import torch
from model import GPT, GPTConfig
for attn in ('dot', 'ega'):
    torch.manual_seed(0)
    m = GPT(GPTConfig(attn=attn, dropout=0.0)).cuda().eval()
    idx = torch.randint(65, (8, 256), device='cuda')
    with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
        eager, _ = m(idx)
        comp, _ = torch.compile(m)(idx)
    err = (eager.float() - comp.float()).abs().max().item()
    print(f"{attn}: compiled vs eager max |logit diff| {err:.2e} (bf16)")
    assert err < 5e-2, err
PY
