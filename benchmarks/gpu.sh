#!/usr/bin/env bash
# The GPU path in one command, for an H100/H200 machine that has CUDA, CuPy and PyTorch but may
# lack lark and nvidia-cutlass and any package index:
#   bash benchmarks/gpu.sh [tests|bench|all|timeline|tune]  (default: all; timeline: diagnostics only;
#   tune: `cusyncgen tune` for every workload -- the MLP's tile candidates measured, Conv2D and
#   Attention chosen among bench runs with sync warps on, spread off and their other tile shape)
# Installs the wheels carried in .whl/ (if any) into /tmp/site, compiles every module in
# parallel into the cubin cache, runs the GPU tests, then the benchmarks. One log (run.log) and
# the results (JSON, markdown, PNG) go to $OUT (default benchmarks/results/latest).
# Knobs: PREBUILD_ARGS (e.g. "--workloads conv2d"), TESTS (default: every GPU test),
# BENCHES (default "overhead mlp conv2d attention"; conv2d also writes conv-costs-<device>.md,
# cusyncgen.commands.conv_costs), BENCH_ARGS (e.g. "--M 1,256"),
# SAVE_CACHE=1 (tar the cubin cache into $OUT, in 15 MB parts, to carry it to the next machine),
# TIMELINES (per-block timelines of MLP chains, e.g. "llama:1,256 gpt3:128"; TIMELINE_CONFIGS).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
OUT=${OUT:-benchmarks/results/latest}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export CUSYNCGEN_CACHE=${CUSYNCGEN_CACHE:-$PWD/.cache/cusyncgen}
export PYTHONUNBUFFERED=1
LOG="$OUT/run.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1 | tee "$LOG"
status=0
tune_args=""
[ "$what" = tune ] && tune_args="--tune"
# shellcheck disable=SC2086
$PY -m cusyncgen.commands.prebuild --jobs "$(nproc)" $tune_args ${PREBUILD_ARGS:-} 2>&1 | tee -a "$LOG" || status=1
if [ "$what" = tests ] || [ "$what" = all ]; then
  # shellcheck disable=SC2086
  timeout 420 $PY -m pytest -m gpu ${TESTS:-tests} -q -rs -p no:cacheprovider 2>&1 | tee -a "$LOG" || status=1
fi
if [ "$what" = tune ]; then
  B="$PY -m cusyncgen.commands.bench"
  dev=$($PY -c "from cusyncgen.cuda import driver; from cusyncgen.commands import bench; print(bench.slug(driver.device_name()))")
  timeout 900 $PY -m cusyncgen tune mlp -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
  for w in conv2d attention; do
    other=$([ $w = conv2d ] && echo "128x64x32/s4/w2x2" || echo wide)
    runs=""
    for opt in "" "--sync-warp on" "--spread off" "--tiles $other"; do
      # shellcheck disable=SC2086
      timeout 540 $B $w $opt -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
    done
    for f in "$OUT/$w-$dev.json" "$OUT/$w-$dev-syncwarp-on.json" "$OUT/$w-$dev-spread-off.json" "$OUT"/$w-$dev-tiles-*.json; do
      [ -f "$f" ] && runs="$runs $f"
    done
    # shellcheck disable=SC2086
    $PY -m cusyncgen tune $w --from-json $runs -o "$OUT" 2>&1 | tee -a "$LOG" || status=1
  done
fi
if [ "$what" != tests ] && [ "$what" != timeline ] && [ "$what" != tune ]; then
  for b in ${BENCHES:-overhead mlp conv2d attention}; do
    # shellcheck disable=SC2086
    timeout 540 $PY -m cusyncgen.commands.bench "$b" -o "$OUT" ${BENCH_ARGS:-} 2>&1 | tee -a "$LOG" || status=1
    if [ "$b" = conv2d ]; then  # what posting and waiting cost the synchronized Conv2D chains
      dev=$($PY -c "from cusyncgen.cuda import driver; from cusyncgen.commands import bench; print(bench.slug(driver.device_name()))")
      timeout 180 $PY -m cusyncgen.commands.conv_costs -o "$OUT/conv-costs-$dev.md" 2>&1 | tee -a "$LOG" || status=1
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
  # in parts of 15 MB ($OUT's files are limited to 16 MiB each): cat cache.tar.gz.part-* | tar xz
  tar --exclude='src-*' -czf - -C "$(dirname "$CUSYNCGEN_CACHE")" "$(basename "$CUSYNCGEN_CACHE")" |
    split -b 15m - "$OUT/cache.tar.gz.part-"
fi
exit $status
