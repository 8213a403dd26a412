#!/usr/bin/env bash
# The GPU check: the project's own tools on CUDA, each step under its own time limit, its report in
# $OUT as it goes. What a CPU runs in CI, run where users train:
#   1. env        the versions, the GPU (nvidia-smi)                                        20 s
#   2. tests      the registry's tests on CUDA (SPECTRAL_TEST_DEVICE): every form's bf16 forward and
#                 gradients against float64 through sdpa, plain, flex and torch.compile; fused = plain
#                 for every composition; the audits; the checkpoint round trip. 4 shards at once  220 s
#   3. bench      bench.py --device=cuda, compiled, bf16, the paper's size: ms/step, memory    110 s
#   4. precision  python -m lab.precision: a form of every family trains in bf16 as in float32
#                 (train.py, the paper's scale, 300 steps, all at once)                       180 s
# 530 s of steps, then summary.md: one line a step, its exit code and seconds. $OUT gets 7 files:
# summary.md, env.txt, tests.txt, bench.txt, bench.json, precision.txt, precision.json.
#
#   bash scripts/gpu_check.sh          # on the GPU machine; as a device command: carry
#                                      # data/shakespeare_char (gitignored), timeout_s=590
#   bash scripts/gpu_check.sh --toy    # every step, tiny, on this CPU (tests/test_gpu_check.py)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-out-gpu-check}
toy=0
case "$*" in
  "") ;;
  --toy) toy=1 ;;
  *) echo "error: usage: bash scripts/gpu_check.sh [--toy] (got: $*)" >&2; exit 2 ;;
esac
if [ $toy = 0 ] && ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "error: torch sees no CUDA device: this is the GPU check (bash scripts/gpu_check.sh --toy runs it tiny on a CPU)" >&2
  exit 2
fi
DATA=${DATA_DIR:-data/shakespeare_char}     # prepare.py's char-level TinyShakespeare
for f in train.bin val.bin meta.pkl; do
  if [ ! -f "$DATA/$f" ]; then
    echo "error: $DATA/$f not found: run \`$PY prepare.py\` first (and carry data/shakespeare_char with a device command: it is gitignored)" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [ $toy = 1 ]; then
  DEV=cpu; SHARDS=1; T_TESTS=120; T_BENCH=60; T_PREC=90
  TESTS=(tests/test_precision.py -k "dot or ega")
  BENCH=(--variants=dot,ega --n_layer=1 --n_head=2 --n_embd=16 --block_size=32 --batch_size=2 --steps=2 --warmup=1)
  PREC=(--toy=True --deadline_s=60 --data_dir="$DATA")
else
  DEV=cuda; SHARDS=4; T_TESTS=220; T_BENCH=110; T_PREC=180
  TESTS=(tests/test_precision.py tests/test_registry.py -k "bf16 or fused or audits or round_trips")
  BENCH=(--compile=True --variants=dot,ega,ega:mope,ega:learned:ega_norm=window,fox,ega_fox,conv_paper,dot:alibi
         --n_layer=6 --n_head=8 --n_embd=256 --block_size=256 --batch_size=64 --steps=20 --warmup=5)
  PREC=(--device=cuda --deadline_s=150 --parallel=16 --data_dir="$DATA")
fi
printf '# GPU check, %s\n\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" > "$OUT/summary.md"
git log -1 --format='commit %h %s' >> "$OUT/summary.md" 2>/dev/null
git status --porcelain | grep -q . && echo "uncommitted changes: $(git status --porcelain | wc -l) files" >> "$OUT/summary.md"
echo >> "$OUT/summary.md"

step() {    # name, seconds, command...: under its limit (TERM, then KILL 10 s later), output to $OUT/name.txt
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  local note=""
  [ $rc = 124 ] || [ $rc = 137 ] && note=" (cut at its limit, ${limit} s)"
  echo "- $name: exit $rc, $(( $(date +%s) - t0 )) s$note" | tee -a "$OUT/summary.md"
}

step env 20 $PY -c "
import platform, subprocess, torch
print('python', platform.python_version(), '| torch', torch.__version__, '| CUDA', torch.version.cuda,
      '| cuDNN', torch.backends.cudnn.version())
try:
    import triton; print('triton', triton.__version__)
except ImportError:
    print('triton: not installed')
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print('GPU', p.name, f'{p.total_memory / 2**30:.0f} GiB', p.multi_processor_count, 'SMs')
    print(subprocess.run(['nvidia-smi'], capture_output=True, text=True).stdout)
"

# the tests: SHARDS pytest processes at once (SPECTRAL_TEST_SHARD, tests/conftest.py), each under the
# step's limit; their outputs one after another in tests.txt
t0=$(date +%s)
pids=()
for i in $(seq 0 $((SHARDS - 1))); do
  SPECTRAL_TEST_DEVICE=$DEV SPECTRAL_TEST_SHARD=$i/$SHARDS timeout --kill-after=10 "$T_TESTS" \
    $PY -m pytest -q -p no:cacheprovider -rf "${TESTS[@]}" > "$scratch/shard-$i.txt" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
for i in $(seq 0 $((SHARDS - 1))); do echo "## shard $i of $SHARDS"; cat "$scratch/shard-$i.txt"; done > "$OUT/tests.txt"
echo "- tests: exit $rc, $(( $(date +%s) - t0 )) s ($SHARDS shards)" | tee -a "$OUT/summary.md"
step bench "$T_BENCH" $PY bench.py --device=$DEV "${BENCH[@]}" --out="$OUT/bench.json"
step precision "$T_PREC" $PY -m lab.precision "${PREC[@]}" --scratch="$scratch/precision" --out="$OUT/precision.json"
echo >> "$OUT/summary.md"
grep -h -E "passed|failed|error" "$OUT/tests.txt" | tail -n "$SHARDS" | sed 's/^/tests: /' >> "$OUT/summary.md"
grep -h -E "^\| " "$OUT/precision.txt" >> "$OUT/summary.md" 2>/dev/null
cat "$OUT/summary.md"
