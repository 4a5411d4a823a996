#!/usr/bin/env bash
# compute-sanitizer on the synchronized sm90 GeMMs (one small size, every policy and ordering:
# benchmarks/sm90_sanitize.py) and on the SM80 GPT-3 M=1 kernels, in one call (< 4 min):
#   memcheck (--report-api-errors no: the driver entry-point probes of the libraries are not kernel
#   errors) and synccheck on every sm90 variant as the benchmark launches it; racecheck on the same
#   variants run in stream order with every wait already satisfied (racecheck serializes the blocks,
#   so a block waiting for another's post could starve); racecheck on
#   `python -m cusyncgen.commands.selfcheck --model gpt3 --M 1` (the SM80 path; its modules compiled
#   first with cusyncgen.commands.prebuild, which needs nvcc).
#   OUT=<dir> bash benchmarks/sm90_sanitize.sh
# Needs the sm90 library (CUSYNC_SM90_LIB, or CUSYNCGEN_CACHE holding the prebuilt one) and, for the
# SM80 part, the compiler's dependencies (the wheels of .whl/ are installed into /tmp/site if present).
# Writes $OUT/sanitize-<tool>-<target>.log and $OUT/sm90-sanitize-summary.txt (tool, target,
# errors or hazards, variants ok / failed), and prints the summary last. Time limits per tool:
# SAN_LIMIT_MEM, SAN_LIMIT_SYNC, SAN_LIMIT_RACE, SAN_LIMIT_SM80 (seconds).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/latest}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if [ -z "${SM90_SITE_DONE:-}" ] && compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || true
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=${PYTHONPATH:-$PWD}
fi
export PYTHONUNBUFFERED=1
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
SUMMARY="$OUT/sm90-sanitize-summary.txt"
MODEL=${SAN_MODEL:-gpt3}
M=${SAN_M:-128}
# the SM80 modules: compiled in the background while the sm90 tools run (unless a caller started it)
prebuild_pid=${SM80_PREBUILD_PID:-}
if [ -z "$prebuild_pid" ] && [ "${SAN_SM80:-1}" = 1 ]; then
  ( timeout 200 nice -n 5 $PY -m cusyncgen.commands.prebuild --workloads mlp --M 1 --jobs "$(nproc)" \
      > "$OUT/sanitize-sm80-prebuild.log" 2>&1; echo "prebuild rc $?" >> "$OUT/sanitize-sm80-prebuild.log" ) &
  prebuild_pid=$!
fi
printf "%-10s %-44s %-8s %s\n" tool target status "errors / hazards; variants" > "$SUMMARY"

# run_tool TOOL TARGET LIMIT LOG -- command...
run_tool() {
  local tool=$1 target=$2 limit=$3 log=$4
  shift 5
  local extra=()
  [ "$tool" = memcheck ] && extra=(--report-api-errors no --leak-check no)
  local t0=$SECONDS
  timeout "$limit" "$CS" --tool "$tool" ${extra[@]+"${extra[@]}"} --print-limit 50 "$@" > "$log" 2>&1
  local rc=$?
  local status=done
  [ $rc = 124 ] && status=TIMEOUT
  local errs
  errs=$(grep -Eo "(ERROR|RACECHECK) SUMMARY: .*" "$log" | tr '\n' ';' | sed 's/;$//')
  [ -z "$errs" ] && errs="no summary line (rc $rc)"
  local ok fail
  ok=$(grep -Ec "^variant .*: (ok|ran)|rel_err .* ok$" "$log")
  fail=$(grep -Ec "^variant .*: (WRONG|ERROR)|rel_err .* WRONG$" "$log")
  printf "%-10s %-44s %-8s %s; %s ok, %s failed (rc %s, %ss)\n" "$tool" "$target" "$status" "$errs" "$ok" "$fail" \
    "$rc" "$((SECONDS - t0))" | tee -a "$SUMMARY"
}

S="benchmarks/sm90_sanitize.py --model $MODEL --M $M"
# shellcheck disable=SC2086
PYTORCH_NO_CUDA_MEMORY_CACHING=1 run_tool memcheck "sm90 $MODEL M=$M every ordering" "${SAN_LIMIT_MEM:-75}" \
  "$OUT/sanitize-memcheck-sm90.log" -- $PY $S --mode run
# shellcheck disable=SC2086
run_tool synccheck "sm90 $MODEL M=$M every ordering" "${SAN_LIMIT_SYNC:-55}" \
  "$OUT/sanitize-synccheck-sm90.log" -- $PY $S --mode run
# shellcheck disable=SC2086
run_tool racecheck "sm90 $MODEL M=$M stream order, waits satisfied" "${SAN_LIMIT_RACE:-75}" \
  "$OUT/sanitize-racecheck-sm90.log" -- $PY $S --mode presatisfied

if [ "${SAN_SM80:-1}" = 1 ]; then
  # (a caller's background job is not this shell's child: poll it)
  while [ -n "$prebuild_pid" ] && kill -0 "$prebuild_pid" 2>/dev/null; do sleep 1; done
  tail -2 "$OUT/sanitize-sm80-prebuild.log" 2>/dev/null
  run_tool racecheck "sm80 selfcheck gpt3 M=1 (every config)" "${SAN_LIMIT_SM80:-50}" \
    "$OUT/sanitize-racecheck-sm80.log" -- $PY -m cusyncgen.commands.selfcheck --model gpt3 --M 1
  # where racecheck reports hazards: the distinct source locations / kinds it names (the first 12)
  grep -E "Race reported|and (Read|Write) access" "$OUT/sanitize-racecheck-sm80.log" |
    sed -E 's/^=+ *//; s/0x[0-9a-f]+/0x./g' | sort | uniq -c | sort -rn | head -12 > "$OUT/sanitize-racecheck-sm80-kinds.txt"
fi
grep -E "Race reported|and (Read|Write) access" "$OUT/sanitize-racecheck-sm90.log" |
  sed -E 's/^=+ *//; s/0x[0-9a-f]+/0x./g' | sort | uniq -c | sort -rn | head -12 > "$OUT/sanitize-racecheck-sm90-kinds.txt"

echo
echo "== compute-sanitizer summary ($SUMMARY) =="
cat "$SUMMARY"
for f in "$OUT/sanitize-racecheck-sm90-kinds.txt" "$OUT/sanitize-racecheck-sm80-kinds.txt"; do
  if [ -s "$f" ]; then
    echo "-- $(basename "$f"): most frequent racecheck reports"
    cat "$f"
  fi
done
