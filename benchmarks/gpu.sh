#!/usr/bin/env bash
# The GPU path in one command, for an H100/H200 machine that has CUDA, CuPy and PyTorch but may
# lack lark and nvidia-cutlass and any package index:
#   bash benchmarks/gpu.sh [all|tests|checks|sanitize|bench|tune|timeline]   (default: all)
#     tests     the GPU tests (pytest -m gpu), their output in gpu-tests-<device>.log
#     checks    sm_90: every sm90 MLP variant checked, then stressed (python -m cusyncgen.commands.sm90_check)
#     sanitize  sm_90: compute-sanitizer memcheck, synccheck and racecheck (python -m cusyncgen.commands.sanitize)
#     bench     `cusyncgen bench` of every workload (and conv_costs after conv2d)
#     tune      `cusyncgen tune` of every workload: the MLP's candidates measured; Conv2D and Attention
#               chosen among bench runs with sync warps on, spread off and their other tile shape
#     timeline  nothing but the TIMELINES below
#     all       tests, checks (on sm_90), bench
# Installs the wheels carried in .whl/ (if any) into /tmp/site and compiles every module in parallel
# into the cubin cache first. Results go to $OUT (default benchmarks/results/<device>/: a run
# replaces the committed one, `git diff` shows what changed, and
# `python -m cusyncgen.results -o docs/results.md benchmarks/results` regenerates the page); every
# result names the command that wrote it. The whole run's log: $OUT/run.log (not a result).
# Knobs: PREBUILD_ARGS (e.g. "--workloads conv2d"), TESTS (default: every GPU test),
# BENCHES (default "overhead mlp conv2d attention"; conv2d also writes conv-costs-<device>.md,
# cusyncgen.commands.conv_costs), BENCH_ARGS (e.g. "--M 1,256"),
# CHECK_ARGS (sm90_check's options, e.g. "--models gpt3 --M 200"), SANITIZE_ARGS (sanitize's),
# SAVE_CACHE=1 (tar the cubin cache into $OUT, in 15 MB parts, to carry it to the next machine),
# TIMELINES (per-block timelines of MLP chains, e.g. "llama:1,256 gpt3:128"; TIMELINE_CONFIGS).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case $what in all|tests|checks|sanitize|bench|tune|timeline) ;;
  *) echo "usage: bash benchmarks/gpu.sh [all|tests|checks|sanitize|bench|tune|timeline]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export CUSYNCGEN_CACHE=${CUSYNCGEN_CACHE:-$PWD/.cache/cusyncgen}
export PYTHONUNBUFFERED=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
dev=$($PY -c "import sys; from cusyncgen.results import slug; print(slug(sys.argv[1]))" "${name:-unknown}")
sm90=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | grep -c '^9\.')
OUT=${OUT:-benchmarks/results/$dev}
mkdir -p "$OUT"
LOG="$OUT/run.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1 | tee "$LOG"
status=0
tune_args=""
[ "$what" = tune ] && tune_args="--tune"
# shellcheck disable=SC2086
$PY -m cusyncgen.commands.prebuild --jobs "$(nproc)" $tune_args ${PREBUILD_ARGS:-} 2>&1 | tee -a "$LOG" || status=1
if [ "$what" = tests ] || [ "$what" = all ]; then
  # shellcheck disable=SC2086
  { echo "# ${TESTS:+TESTS=\"$TESTS\" }bash benchmarks/gpu.sh $what: python -m pytest -m gpu ${TESTS:-tests} on $name"
    timeout 420 $PY -m pytest -m gpu ${TESTS:-tests} -q -rs -p no:cacheprovider 2>&1; } |
    tee "$OUT/gpu-tests-$dev.log" | tee -a "$LOG" || status=1
fi
if { [ "$what" = checks ] || [ "$what" = all ]; } && [ "$sm90" = 1 ]; then
  # shellcheck disable=SC2086
  timeout 540 $PY -m cusyncgen.commands.sm90_check ${CHECK_ARGS:-} -o "$OUT" 2>&1 | tail -n 3 | tee -a "$LOG" || status=1
fi
if [ "$what" = sanitize ] && [ "$sm90" = 1 ]; then
  # shellcheck disable=SC2086
  $PY -m cusyncgen.commands.sanitize ${SANITIZE_ARGS:-} -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
fi
if [ "$what" = tune ]; then
  B="$PY -m cusyncgen.commands.bench"
  timeout 900 $PY -m cusyncgen tune mlp -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
  for w in conv2d attention; do
    other=$([ $w = conv2d ] && echo "128x64x32/s4/w2x2" || echo wide)
    k=$([ $w = attention ] && echo "--kernel sm80")   # the SM80 family's options (the sm90 one: below)
    runs=""
    for opt in "" "--sync-warp on" "--spread off" "--tiles $other"; do
      # shellcheck disable=SC2086
      timeout 540 $B $w $k $opt -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
    done
    for f in "$OUT/$w-$dev.json" "$OUT/$w-$dev-syncwarp-on.json" "$OUT/$w-$dev-spread-off.json" "$OUT"/$w-$dev-tiles-*.json; do
      [ -f "$f" ] && runs="$runs $f"
    done
    # shellcheck disable=SC2086
    $PY -m cusyncgen tune $w $k --from-json $runs -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
  done
  if [ "$sm90" = 1 ]; then   # the Hopper attention block: chosen among its own bench run
    [ -f "$OUT/attention-$dev-sm90.json" ] || timeout 540 $B attention --kernel sm90 -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
    $PY -m cusyncgen tune attention --kernel sm90 --from-json "$OUT/attention-$dev-sm90.json" -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
  fi
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for b in ${BENCHES:-overhead mlp conv2d attention}; do
    # shellcheck disable=SC2086
    timeout 540 $PY -m cusyncgen bench "$b" -o "$OUT" ${BENCH_ARGS:-} 2>&1 | tee -a "$LOG" || status=1
    if [ "$b" = conv2d ]; then  # what posting and waiting cost the synchronized Conv2D chains
      timeout 180 $PY -m cusyncgen.commands.conv_costs -o "$OUT/conv-costs-$dev.md" 2>&1 | tee -a "$LOG" || status=1
    fi
    if [ "$b" = attention ] && [ "$sm90" = 1 ]; then  # the SM80 attention kernels too (sm90's is the default there)
      # shellcheck disable=SC2086
      timeout 540 $PY -m cusyncgen bench attention --kernel sm80 -o "$OUT" ${BENCH_ARGS:-} 2>&1 | tee -a "$LOG" || status=1
    fi
  done
fi
if [ -n "${TIMELINES:-}" ]; then
  mkdir -p "$OUT/timeline"
  for spec in $TIMELINES; do
    # shellcheck disable=SC2086
    timeout 300 $PY -m cusyncgen.commands.timeline --model "${spec%%:*}" --M "${spec#*:}" -o "$OUT/timeline" \
      ${TIMELINE_CONFIGS:+--configs "$TIMELINE_CONFIGS"} ${TIMELINE_ARGS:-} 2>&1 | tee -a "$LOG" || status=1
  done
  tar -czf "$OUT/timeline.tar.gz" -C "$OUT" timeline && rm -rf "$OUT/timeline"
fi
if [ "${SAVE_CACHE:-0}" = 1 ]; then
  # in parts of 15 MB: cat cache.tar.gz.part-* | tar xz
  tar --exclude='src-*' -czf - -C "$(dirname "$CUSYNCGEN_CACHE")" "$(basename "$CUSYNCGEN_CACHE")" |
    split -b 15m - "$OUT/cache.tar.gz.part-"
fi
exit $status
