#!/usr/bin/env bash
# The CPU study: each config at the CPU study scale (config/cpu.py: 4x4x128, T=128,
# batch 16, 2000 steps, 20 fixed val batches), seed given as $SEED (default 1337).
# Two runs at a time, one thread each, on a 2-core machine. Prints each run's final line.
#   bash scripts/cpu_study.sh [config names...]   (default: dot ega mope ega_mope ega_mope_paper)
set -euo pipefail
cd "$(dirname "$0")/.."
SEED=${SEED:-1337}
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(dot ega mope ega_mope ega_mope_paper)
[ -f data/shakespeare_char/train.bin ] || { echo "run python prepare.py first" >&2; exit 2; }
run() {
  OMP_NUM_THREADS=1 python train.py "config/$1.py" config/cpu.py --seed="$SEED" \
    --out_dir="out-study/$1-s$SEED" > "out-study/$1-s$SEED.txt" 2>&1
}
mkdir -p out-study
for ((i = 0; i < ${#names[@]}; i += 2)); do
  run "${names[i]}" &
  [ $((i + 1)) -lt ${#names[@]} ] && run "${names[i+1]}" &
  wait
done
for n in "${names[@]}"; do grep -E '^(audit|done|error)' "out-study/$n-s$SEED.txt" | sed "s/^/$n: /"; done
python scripts/study_table.py --seeds="$SEED" "${names[@]}"
