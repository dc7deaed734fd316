#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of fuzz/ (frame decoding, the tracker's handshake,
# every tracker handler, the device's session handlers, the measurement messages, the
# dashboard's HTTP server) with
# ASan and UBSan, in their own build directory (clang-19; only base, kernel, rpc, tracker
# and device_runtime are built).
#
#   scripts/fuzz.sh build           builds them (build-fuzz/, or $KESTREL_FUZZ_BUILD_DIR)
#   scripts/fuzz.sh smoke           builds, then runs each target for 60 s
#                                   ($KESTREL_FUZZ_SMOKE_SECONDS) from the seed corpus
#   scripts/fuzz.sh run --time N    the long run: each target for N seconds; new inputs are
#                                   kept in <build>/corpus/<target> and the next run starts
#                                   from them
#   scripts/fuzz.sh nightly [--executions N] [--hours H] [--round-seconds S]
#                                   the nightly-length run: rounds of S s (600) per target,
#                                   each target until it has run N inputs (10,000,000) or
#                                   H hours (8) have passed; prints the executions per
#                                   target, appends them to <build>/nightly.tsv, fails on
#                                   any finding and says which targets fell short
#   scripts/fuzz.sh seeds           rewrites the seed corpus fuzz/corpus/ from real frames
#
# Each target first replays the inputs that once broke it (fuzz/crashes/<target>-*).
# Targets run two at a time ($KESTREL_FUZZ_JOBS); $KESTREL_FUZZ_TARGETS picks some
# (e.g. "frame measure"), $KESTREL_FUZZ_MAX_LEN the largest input (16384). A crash, a sanitizer report, a timeout
# (30 s per input) or a broken invariant fails the run: the input is saved as
# <build>/artifacts/<target>-crash-* and the log is <build>/logs/<target>.log; rerun it with
# <build>/fuzz/fuzz_<target> <file>. Prints the executions of each target (libFuzzer's
# stat::number_of_executed_units) and their sum.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KESTREL_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${KESTREL_FUZZ_JOBS:-2}"
read -r -a targets <<< "${KESTREL_FUZZ_TARGETS:-frame handshake tracker session measure http}"

usage() {
  sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

build_targets() {
  local cxx="${KESTREL_FUZZ_CXX:-clang++-19}" cc="${KESTREL_FUZZ_CC:-clang-19}"
  if ! command -v "$cxx" > /dev/null; then
    echo "fuzz: $cxx is missing (scripts/setup.sh installs clang-19 and libclang-rt-19-dev)" >&2
    exit 1
  fi
  mkdir -p "$build"
  CC="$cc" CXX="$cxx" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKESTREL_FUZZ=ON \
    > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
  cmake --build "$build" -j "${KESTREL_JOBS:-2}" --target kestrel_fuzz_seeds $(printf 'fuzz_%s ' "${targets[@]}")
}

# run_one TARGET SECONDS: one target from its seeds (and its kept corpus); its status in
# <build>/logs/TARGET.rc.
run_one() {
  local target="$1" seconds="$2"
  local corpus="$build/corpus/$target"
  mkdir -p "$corpus" "$build/artifacts" "$build/logs"
  local rc=0
  export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:handle_abort=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # Inputs that once broke this target (fuzz/crashes/) must pass first.
  local found=("$root/fuzz/crashes/$target"-*)
  if [ -e "${found[0]}" ]; then
    if ! "$build/fuzz/fuzz_$target" "${found[@]}" > "$build/logs/$target.replay.log" 2>&1; then
      cat "$build/logs/$target.replay.log" > "$build/logs/$target.log"
      echo "replaying fuzz/crashes/$target-* failed" >> "$build/logs/$target.log"
      echo 1 > "$build/logs/$target.rc"
      return
    fi
  fi
  "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -max_len="${KESTREL_FUZZ_MAX_LEN:-16384}" -timeout=30 -rss_limit_mb=3072 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" "$corpus" "$root/fuzz/corpus/$target" \
      > "$build/logs/$target.log" 2>&1 || rc=$?
  echo "$rc" > "$build/logs/$target.rc"
}

run_all() {
  local seconds="$1"
  rm -f "$build"/logs/*.rc
  echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $jobs at a time (logs: $build/logs)"
  for target in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    run_one "$target" "$seconds" &
  done
  wait
  local failed=0 total=0
  printf '%-12s %14s %10s %s\n' TARGET EXECUTIONS EXEC/S RESULT
  for target in "${targets[@]}"; do
    local log="$build/logs/$target.log" rc
    rc="$(cat "$build/logs/$target.rc" 2> /dev/null || echo 1)"
    local execs speed result=ok
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
    if [ "$rc" != 0 ] || grep -q -e '^==[0-9]*==ERROR' -e 'runtime error:' -e 'invariant broken' "$log"; then
      result="FAILED (exit $rc; see $log and $build/artifacts/$target-*)"
      failed=1
    fi
    total=$((total + ${execs:-0}))
    printf '%-12s %14s %10s %s\n' "$target" "${execs:-?}" "${speed:-?}" "$result"
  done
  printf '%-12s %14s\n' total "$total"
  # A failure explains itself where only this output survives (CI): the end of each
  # failed target's log (the broken invariant or the sanitizer report, and the input).
  for target in "${targets[@]}"; do
    local rc
    rc="$(cat "$build/logs/$target.rc" 2> /dev/null || echo 1)"
    if [ "$rc" != 0 ] || grep -q -e '^==[0-9]*==ERROR' -e 'runtime error:' -e 'invariant broken' "$build/logs/$target.log"; then
      echo "--- the end of $build/logs/$target.log"
      tail -n 60 "$build/logs/$target.log"
    fi
  done
  return "$failed"
}

# nightly GOAL HOURS ROUND: rounds of run_all over the targets still short of GOAL
# executions, until none is or HOURS have passed.
nightly() {
  local goal="$1" hours="$2" round="$3"
  local deadline=$((SECONDS + hours * 3600)) rounds=0 failed=0
  declare -A done_execs=()
  local all=("${targets[@]}")
  for target in "${all[@]}"; do done_execs[$target]=0; done
  while true; do
    targets=()
    for target in "${all[@]}"; do
      [ "${done_execs[$target]}" -lt "$goal" ] && targets+=("$target")
    done
    [ "${#targets[@]}" -eq 0 ] && break
    [ "$SECONDS" -ge "$deadline" ] && break
    rounds=$((rounds + 1))
    echo "fuzz nightly: round $rounds, $(( (deadline - SECONDS) / 60 )) min left, short of $goal: ${targets[*]}"
    run_all "$round" || failed=1
    for target in "${targets[@]}"; do
      local execs
      execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/logs/$target.log" | tail -1)"
      done_execs[$target]=$((done_execs[$target] + ${execs:-0}))
    done
    [ "$failed" = 1 ] && break
  done
  local commit short=0 total=0
  commit="$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)"
  echo "fuzz nightly: $rounds rounds at $commit, goal $goal executions per target"
  printf '%-12s %14s %s\n' TARGET EXECUTIONS GOAL
  for target in "${all[@]}"; do
    local met=met
    if [ "${done_execs[$target]}" -lt "$goal" ]; then met="SHORT"; short=1; fi
    total=$((total + done_execs[$target]))
    printf '%-12s %14s %s\n' "$target" "${done_execs[$target]}" "$met"
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "$target" "${done_execs[$target]}" "$met" \
      >> "$build/nightly.tsv"
  done
  printf '%-12s %14s\n' total "$total"
  if [ "$failed" = 1 ]; then
    echo "fuzz nightly: a target FAILED (see the table of the last round)"
    return 1
  fi
  [ "$short" = 0 ] || echo "fuzz nightly: no finding, but some targets fell short of $goal executions in ${hours} h"
  return 0
}

case "${1:-}" in
  build)
    build_targets
    ;;
  smoke)
    build_targets
    run_all "${KESTREL_FUZZ_SMOKE_SECONDS:-60}"
    ;;
  run)
    [ "${2:-}" = "--time" ] && [ -n "${3:-}" ] || usage
    build_targets
    run_all "$3"
    ;;
  nightly)
    shift
    goal=10000000 hours=8 round=600
    while [ $# -gt 0 ]; do
      case "$1" in
        --executions) goal="${2:?}"; shift 2 ;;
        --hours) hours="${2:?}"; shift 2 ;;
        --round-seconds) round="${2:?}"; shift 2 ;;
        *) usage ;;
      esac
    done
    build_targets
    nightly "$goal" "$hours" "$round"
    ;;
  seeds)
    build_targets
    rm -rf "$root/fuzz/corpus"
    "$build/fuzz/kestrel_fuzz_seeds" "$root/fuzz/corpus"
    ;;
  *)
    usage
    ;;
esac
