#!/usr/bin/env bash
# The sm90 device run in one command (about 7 min on an H100): the sm90 GPU tests, the benchmark
# (benchmarks/sm90_mlp.py: correctness and stress of every variant, the GeMMs alone with both epilogue
# store modes against cuBLAS and stock CUTLASS, the MLPs with and without the banded producer order),
# compute-sanitizer (benchmarks/sm90_sanitize.sh), and Nsight Compute on gpt3 gemm2 M=2048 128x256
# (quad stores, pair stores, stock CUTLASS); the sanitizer summary and the targets are printed last.
#   CUSYNC_SM90_LIB=<prebuilt libcusync_sm90.so> OUT=<dir> bash benchmarks/sm90_run.sh
# Installs the wheels of .whl/ (if any) into /tmp/site like benchmarks/gpu.sh. Logs in $OUT:
# tests.log, bench.log, ncu.txt, sanitize-*.log, the JSON, sm90-targets-<device>.txt and
# sm90-sanitize-summary.txt. Knobs: BENCH_ARGS (extra sm90_mlp.py arguments), NCU=0 skips ncu,
# SANITIZE=0 skips the sanitizer.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/latest}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
t_start=$SECONDS
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || true
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export SM90_SITE_DONE=1
export CUSYNCGEN_CACHE=${CUSYNCGEN_CACHE:-$PWD/.cache/cusyncgen}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1 | tee "$OUT/bench.log"
echo "sm90 library: ${CUSYNC_SM90_LIB:-(built from the cache)}" | tee -a "$OUT/bench.log"
# the SM80 modules the sanitizer's SM80 part runs, compiled in the background meanwhile
if [ "${SANITIZE:-1}" = 1 ]; then
  ( timeout 300 nice -n 5 $PY -m cusyncgen.commands.prebuild --workloads mlp --M 1 --jobs 8 \
      > "$OUT/sanitize-sm80-prebuild.log" 2>&1; echo "prebuild rc $?" >> "$OUT/sanitize-sm80-prebuild.log" ) &
  export SM80_PREBUILD_PID=$!
fi
timeout 60 $PY -m pytest -m gpu tests/test_gpu_sm90.py -q -rs -p no:cacheprovider > "$OUT/tests.log" 2>&1
echo "sm90 GPU tests: $(tail -1 "$OUT/tests.log")"
# shellcheck disable=SC2086
timeout 230 $PY benchmarks/sm90_mlp.py --out "$OUT" ${BENCH_ARGS:-} >> "$OUT/bench.log" 2>&1
echo "bench rc $? ($((SECONDS - t_start)) s so far); log $OUT/bench.log"
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  timeout 45 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:'sync_gemm|device_kernel' -c 3 \
    $PY benchmarks/sm90_profile.py --model gpt3 --gemm 2 --M 2048 --config 128x256x64 --order grouped --store both \
    --stock 128x256x64 > "$OUT/ncu.txt" 2>&1
  echo "ncu rc $? ($((SECONDS - t_start)) s so far); $OUT/ncu.txt (kernels: ours quad-store, ours pair-store, stock)"
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput" \
    "$OUT/ncu.txt" | head -40
fi
if [ "${SANITIZE:-1}" = 1 ]; then
  SAN_LIMIT_MEM=${SAN_LIMIT_MEM:-60} SAN_LIMIT_SYNC=${SAN_LIMIT_SYNC:-45} SAN_LIMIT_RACE=${SAN_LIMIT_RACE:-70} \
    SAN_LIMIT_SM80=${SAN_LIMIT_SM80:-45} bash benchmarks/sm90_sanitize.sh 2>&1 | tail -30
fi
echo
echo "== bench summary (last lines of $OUT/bench.log) =="
sed -n '/^== best sm90 GeMM per shape/,$p' "$OUT/bench.log" | grep -v "^check \|^stress " | tail -75
echo "total $((SECONDS - t_start)) s"
