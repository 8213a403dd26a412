#!/usr/bin/env bash
# The first command on a GPU machine: lab/gpu_first.py inside its own 570 s deadline (environment,
# preflight: SDPA kernels, fused vs plain, compiled vs eager, paper-scale speed; a probe of the paper
# runs through train.py; the plan of the next command). The report lands in $OUT: six small files,
# rewritten after every phase; checkpoints stay in /tmp.
#   bash scripts/gpu_first.sh [--key=value ...]      # keys: python3 -m lab.gpu_first --help
# As a device command: carry data/shakespeare_char (gitignored: it travels only when named) and
# give it timeout_s=590. PYTHON=... picks another interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
data=data/shakespeare_char
check=1
for arg in "$@"; do
  case "$arg" in
    --data_dir=*) data="${arg#--data_dir=}" ;;
    --plan_only=True|--plan_only=true|--plan_only=1|-h|--help) check=0 ;;
  esac
done
if [ "$check" = 1 ]; then
  for f in train.bin val.bin meta.pkl; do
    if [ ! -f "$data/$f" ]; then
      echo "error: $data/$f not found: run \`python3 prepare.py\` first and carry data/shakespeare_char with the device command (it is gitignored: it travels only when named)" >&2
      exit 2
    fi
  done
fi
PYTHONUNBUFFERED=1 exec "${PYTHON:-python3}" -m lab.gpu_first --out="${OUT:-out-gpu-first}" "$@"
