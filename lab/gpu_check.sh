#!/usr/bin/env bash
# The GPU commands: the project's own tools on CUDA, each step under its own time limit, its report in
# $OUT as it goes. Each plan fits one device call (570 s); every plan opens with
#   env        the versions, the GPU (nvidia-smi)                                               20 s
# The check (no option): what a CPU runs in CI, run where users train.
#   tests      the registry's tests on CUDA (SPECTRAL_TEST_DEVICE): every form's bf16 forward and
#              gradients against float64 through sdpa, plain, flex and torch.compile; fused = plain
#              for every composition; the audits; the checkpoint round trip. 4 shards at once     220 s
#   bench      lab.bench --device=cuda, compiled, bf16, the paper's size: ms/step, memory          110 s
#   precision  python -m lab.precision: a form of every family trains in bf16 as in float32
#              (train.py, the paper's scale, 300 steps, all at once)                             180 s
# --speed: the speed issue's ratios at the paper's size and dropout, compiled, bf16, each bench one run
#   logit      dot and the logit-level forms (goal: 90% of dot's tokens/s), peak memory, MFU, the
#              attention kernel each step calls (fused, SDPA's math fallback, flex)               300 s
#   filters    dot, the causal filters (goal: 85%), and dot and ega as CUDA graphs
#              (compile_mode=reduce-overhead) beside their default compile                        200 s
# --profile: where each compiled step's time goes (lab.bench --profile: top kernels, launches per
#   step, the GPU's busy time against the wall's), written as results/bench/profiles_gpu.md       400 s
# summary.md has one line a step, its exit code and seconds; $OUT gets at most 8 files. The script exits
# 1 when a step failed (a non-zero exit, a cut at its limit), 2 on a usage or set-up error, else 0.
#
#   bash lab/gpu_check.sh [--speed | --profile]   # on the GPU machine; as a device command: carry
#                                                 # data/shakespeare_char (gitignored), timeout_s=590
#   bash lab/gpu_check.sh [--speed | --profile] --toy   # every step, tiny, on this CPU (its test)
#   bash lab/gpu_check.sh [--speed | --profile] --plan  # the CUDA steps and their limits, nothing run
#   bash lab/gpu_check.sh --help                        # this text
set -uo pipefail
case " $* " in *" --help "*|*" -h "*) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-out-gpu-check}
plan=check; flag=; toy=0; show=0
for a in "$@"; do
  case "$a" in
    --speed|--profile)
      if [ $plan != check ] && [ "--$plan" != "$a" ]; then
        echo "error: --speed and --profile are two plans, each one device call: pick one" >&2; exit 2
      fi
      plan=${a#--}; flag="$a " ;;
    --toy) toy=1 ;;
    --plan) show=1 ;;
    *) echo "error: usage: bash lab/gpu_check.sh [--speed | --profile] [--toy | --plan] (got: $*)" >&2; exit 2 ;;
  esac
done
# each plan's steps on CUDA, with their limits in seconds (--plan prints them; lab/tests/test_gpu_check.py
# holds their sum, with each step's kill grace, within one device call)
case $plan in
  check) STEPS=(env=20 tests=220 bench=110 precision=180) ;;
  speed) STEPS=(env=20 logit=300 filters=200) ;;
  profile) STEPS=(env=20 profile=400) ;;
esac
if [ $show = 1 ]; then printf '%s\n' "${STEPS[@]}"; exit 0; fi
if ! command -v "$PY" > /dev/null; then
  echo "error: $PY not found (set PYTHON=/path/to/python)" >&2; exit 2
fi
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "error: $PY cannot import torch: install it (pip install -r requirements.txt)" >&2; exit 2
fi
if [ $toy = 0 ] && ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "error: torch sees no CUDA device: this is the GPU check (bash lab/gpu_check.sh ${flag}--toy runs it tiny on a CPU)" >&2
  exit 2
fi
DATA=${DATA_DIR:-data/shakespeare_char}     # prepare.py's char-level TinyShakespeare
for f in train.bin val.bin meta.json; do
  if [ ! -f "$DATA/$f" ]; then
    echo "error: $DATA/$f not found: run \`$PY prepare.py\` first (and carry data/shakespeare_char with a device command: it is gitignored)" >&2
    exit 2
  fi
done
declare -A LIMIT
for s in "${STEPS[@]}"; do LIMIT[${s%=*}]=${s#*=}; done
PAPER=(--compile=True --n_layer=6 --n_head=8 --n_embd=256 --block_size=256 --batch_size=64)
TRAINING=(--dropout=0.1)     # the paper's: the --speed and --profile steps time training as it runs
LOGIT=dot,ega,ega:mope,ega:learned:ega_norm=window,ega:mope:ega_norm=window,fox,ega_fox,dot:alibi,dot:mope_rel,conv
FILTERS=dot,causal_gauss,causal_mexhat,causal_morlet,fourier_qk_causal,dot:learned:compile_mode=reduce-overhead,ega:learned:compile_mode=reduce-overhead
PROFILE=dot,ega,fox,ega_fox,causal_morlet
if [ $toy = 1 ]; then
  DEV=cpu; SHARDS=1
  # no GPU time to save on a CPU, which may be shared: every step 120 s (env's 20 s was cut once, beside two
  # other test runs on 2 cores)
  for k in "${!LIMIT[@]}"; do LIMIT[$k]=120; done
  TESTS=(tests/test_precision.py -k "dot or ega")
  BENCH=(--variants=dot,ega --n_layer=1 --n_head=2 --n_embd=16 --block_size=32 --batch_size=2 --steps=2 --warmup=1)
  PREC=(--toy=True --deadline_s=60 --data_dir="$DATA")
  SIZE=(--compile=True --n_layer=1 --n_head=2 --n_embd=16 --block_size=32 --batch_size=2 --steps=2 --warmup=1
        "${TRAINING[@]}")
  LOGIT=dot,ega; FILTERS=dot,causal_gauss,dot:learned:compile_mode=reduce-overhead; PROFILE=dot,ega
else
  DEV=cuda; SHARDS=4
  TESTS=(tests/test_precision.py tests/test_registry.py -k "bf16 or fused or audits or round_trips")
  BENCH=("${PAPER[@]}" --variants=dot,ega,ega:mope,ega:learned:ega_norm=window,fox,ega_fox,conv_paper,dot:alibi
         --steps=20 --warmup=5)
  PREC=(--device=cuda --deadline_s=150 --parallel=16 --data_dir="$DATA")
  SIZE=("${PAPER[@]}" "${TRAINING[@]}" --steps=20 --warmup=5)
fi
mkdir -p "$OUT"
scratch=$(mktemp -d)
failed=0
trap 'rm -rf "$scratch"' EXIT
printf '# GPU check (%s), %s\n\n' "$plan" "$(date -u '+%Y-%m-%d %H:%M UTC')" > "$OUT/summary.md"
git log -1 --format='commit %h %s' >> "$OUT/summary.md" 2>/dev/null
git status --porcelain | grep -q . && echo "uncommitted changes: $(git status --porcelain | wc -l) files" >> "$OUT/summary.md"
echo >> "$OUT/summary.md"

# lab.bench's deadline inside its step's limit: it drops variants it has no time to compile, cuts the
# timing short and still writes its JSON (a step killed at its limit writes none); GRACE_S covers
# python's start before lab.bench's clock and its exit after
GRACE_S=25
by() { echo "--deadline_s=$(( ${LIMIT[$1]} - GRACE_S ))"; }

step() {    # name, command...: under its limit (TERM, then KILL 10 s later), output to $OUT/name.txt
  local name=$1 limit=${LIMIT[$1]} t0 rc
  shift
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  local note=""
  [ $rc = 124 ] || [ $rc = 137 ] && note=" (cut at its limit, ${limit} s)"
  [ $rc = 0 ] || failed=1
  echo "- $name: exit $rc, $(( $(date +%s) - t0 )) s$note" | tee -a "$OUT/summary.md"
}

step env $PY -c "
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

if [ $plan = speed ]; then
  step logit $PY -m lab.bench --device=$DEV "${SIZE[@]}" "$(by logit)" --kernels=True --variants=$LOGIT --out="$OUT/logit.json"
  step filters $PY -m lab.bench --device=$DEV "${SIZE[@]}" "$(by filters)" --kernels=True --variants=$FILTERS --out="$OUT/filters.json"
  echo >> "$OUT/summary.md"
  grep -h -E "^\| " "$OUT/logit.txt" "$OUT/filters.txt" >> "$OUT/summary.md" 2>/dev/null
elif [ $plan = profile ]; then
  step profile $PY -m lab.bench --device=$DEV "${SIZE[@]}" "$(by profile)" --profile=$PROFILE --top=12 --out="$OUT/profiles_gpu.md"
  echo >> "$OUT/summary.md"
  grep -h -E "self (CUDA|CPU) time per training step" "$OUT/profile.txt" >> "$OUT/summary.md" 2>/dev/null
else
  # the tests: SHARDS pytest processes at once (SPECTRAL_TEST_SHARD, tests/conftest.py), each under the
  # step's limit; their outputs one after another in tests.txt
  t0=$(date +%s)
  pids=()
  for i in $(seq 0 $((SHARDS - 1))); do
    SPECTRAL_TEST_DEVICE=$DEV SPECTRAL_TEST_SHARD=$i/$SHARDS timeout --kill-after=10 "${LIMIT[tests]}" \
      $PY -m pytest -q -p no:cacheprovider -rf "${TESTS[@]}" > "$scratch/shard-$i.txt" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  for i in $(seq 0 $((SHARDS - 1))); do echo "## shard $i of $SHARDS"; cat "$scratch/shard-$i.txt"; done > "$OUT/tests.txt"
  echo "- tests: exit $rc, $(( $(date +%s) - t0 )) s ($SHARDS shards)" | tee -a "$OUT/summary.md"
  [ $rc = 0 ] || failed=1
  step bench $PY -m lab.bench --device=$DEV "${BENCH[@]}" "$(by bench)" --out="$OUT/bench.json"
  step precision $PY -m lab.precision "${PREC[@]}" --scratch="$scratch/precision" --out="$OUT/precision.json"
  echo >> "$OUT/summary.md"
  grep -h -E "passed|failed|error" "$OUT/tests.txt" | tail -n "$SHARDS" | sed 's/^/tests: /' >> "$OUT/summary.md"
  grep -h -E "^\| " "$OUT/precision.txt" >> "$OUT/summary.md" 2>/dev/null
fi
cat "$OUT/summary.md"
exit $failed
