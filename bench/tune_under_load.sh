#!/usr/bin/env bash
# Tuning under load: does a tune on a busy machine still recommend something no slower
# than the default? Ten workloads (gemm and conv2d_nchwc). Per workload:
#   1. tune with a CPU hog running (2 x cores busy processes) into loaded.db,
#   2. tune the same workload on the quiet machine into quiet.db,
#   3. on the quiet machine, re-time three configurations in alternating rounds (ROUNDS
#      of each, medians): the default, the loaded tune's recommendation and the quiet
#      tune's recommendation. RETIME=profile (default) times them as the tune did, on a
#      local device (`kestrel profile --config`); RETIME=bench in `kestrel bench --config`,
#      in one process with OpenBLAS and oneDNN (whose threads share the cores: on 2 cores
#      its absolute figures run ~30% lower, and configurations rank differently).
# Prints per workload the ratios loaded/default and loaded/quiet (GFLOP/s over GFLOP/s:
# above 1 is faster) and the verdict of each tune. Targets: loaded/default >= 0.97 and
# loaded/quiet >= 0.95 on every workload.
#   bench/tune_under_load.sh            # TRIALS (48), ROUNDS (5), THREADS (all cores), WORKDIR
#   REUSE=1 WORKDIR=dir bench/tune_under_load.sh   # re-time the tunes already in dir
# Environment: KESTREL_BIN (default build/tools/kestrel). Takes ~30-60 min on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kestrel="${KESTREL_BIN:-$root/build/tools/kestrel}"
trials="${TRIALS:-48}"
rounds="${ROUNDS:-5}"
cores="$(nproc)"
threads="${THREADS:-$cores}"
work="${WORKDIR:-$(mktemp -d /tmp/kestrel-under-load-XXXXXX)}"
mkdir -p "$work"
[ -x "$kestrel" ] || { echo "tune_under_load: no kestrel binary at $kestrel (build it, or set KESTREL_BIN)" >&2; exit 2; }
command -v jq > /dev/null || { echo "tune_under_load: needs jq (apt-get install jq)" >&2; exit 2; }

workloads=(
  "gemm 64x3072x768"
  "gemm 256x256x256"
  "gemm 128x512x256"
  "gemm 512x64x512"
  "gemm 96x96x1024"
  "conv2d_nchwc C=64,H=56,W=56,K=64,R=3,S=3,pad=1,block=16"
  "conv2d_nchwc C=128,H=28,W=28,K=128,R=3,S=3,pad=1,block=16"
  "conv2d_nchwc C=256,H=14,W=14,K=256,R=3,S=3,pad=1,block=16"
  "conv2d_nchwc C=512,H=28,W=28,K=1024,R=1,S=1,stride=2,block=16"
  "conv2d_nchwc C=64,H=56,W=56,K=256,R=1,S=1,block=16"
)

hog_pids=()
start_hog() {
  for _ in $(seq $((2 * cores))); do
    (while :; do :; done) &
    hog_pids+=($!)
  done
}
stop_hog() {
  for p in "${hog_pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait "${hog_pids[@]}" 2> /dev/null || true
  hog_pids=()
}
trap stop_hog EXIT

# The recommendation of a tune's JSON (the default's config when it is the recommendation).
recommendation() { jq -r '.best.config' "$1"; }
default_of() { jq -r '.final[] | select(.is_default) | .config' "$1"; }

retime="${RETIME:-profile}"
# GFLOP/s of one timing of `config` (kestrel profile's median of its rounds, or kestrel
# bench's).
gflops() {
  local op="$1" shape="$2" config="$3"
  if [ "$retime" = bench ]; then
    "$kestrel" bench --op "$op" --shape "$shape" --config "$config" --threads "$threads" --json 2> /dev/null |
      jq -r '.results[0].kestrel.gflops'
  else
    "$kestrel" profile --op "$op" --shape "$shape" --config "$config" --threads "$threads" --json 2> /dev/null |
      jq -r '.gflops'
  fi
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

isa="AVX2"
grep -qw avx512f /proc/cpuinfo && isa="AVX-512"
grep -qw avx2 /proc/cpuinfo || isa="no AVX2"
echo "tune_under_load: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores, $isa;" \
     "$trials trials per tune, $rounds re-timing rounds ($retime), $threads threads; work in $work"
printf '%-62s %9s %9s %9s %10s %10s  %s\n' WORKLOAD DEFAULT LOADED QUIET LOAD/DEF LOAD/QUIET "VERDICTS (loaded, quiet)"
worst_def=""
worst_quiet=""
for w in "${workloads[@]}"; do
  op="${w%% *}"
  shape="${w#* }"
  tag="$(echo "$w" | tr -c 'a-zA-Z0-9' '_')"
  common=(tune --op "$op" --shape "$shape" --trials "$trials" --vendors none --threads "$threads" --json)
  if [ "${REUSE:-0}" != 1 ] || [ ! -s "$work/$tag.loaded.json" ] || [ ! -s "$work/$tag.quiet.json" ]; then
    start_hog
    "$kestrel" "${common[@]}" --db "$work/$tag.loaded.db" > "$work/$tag.loaded.json" 2> "$work/$tag.loaded.log"
    stop_hog
    "$kestrel" "${common[@]}" --db "$work/$tag.quiet.db" > "$work/$tag.quiet.json" 2> "$work/$tag.quiet.log"
  fi
  def="$(default_of "$work/$tag.quiet.json")"
  loaded="$(recommendation "$work/$tag.loaded.json")"
  quiet="$(recommendation "$work/$tag.quiet.json")"
  d=() l=() q=()
  for _ in $(seq "$rounds"); do
    d+=("$(gflops "$op" "$shape" "$def")")
    l+=("$(gflops "$op" "$shape" "$loaded")")
    q+=("$(gflops "$op" "$shape" "$quiet")")
  done
  dm="$(printf '%s\n' "${d[@]}" | median)"
  lm="$(printf '%s\n' "${l[@]}" | median)"
  qm="$(printf '%s\n' "${q[@]}" | median)"
  r_def="$(awk -v a="$lm" -v b="$dm" 'BEGIN {printf "%.3f", a / b}')"
  r_quiet="$(awk -v a="$lm" -v b="$qm" 'BEGIN {printf "%.3f", a / b}')"
  verdicts="$(jq -r '.verdict' "$work/$tag.loaded.json"), $(jq -r '.verdict' "$work/$tag.quiet.json")"
  printf '%-62s %9.1f %9.1f %9.1f %10s %10s  %s\n' "$w" "$dm" "$lm" "$qm" "${r_def}x" "${r_quiet}x" "$verdicts"
  worst_def="$(printf '%s\n%s\n' "$worst_def" "$r_def" | grep . | sort -g | head -1)"
  worst_quiet="$(printf '%s\n%s\n' "$worst_quiet" "$r_quiet" | grep . | sort -g | head -1)"
done
echo "worst loaded/default: ${worst_def}x (target >= 0.97); worst loaded/quiet: ${worst_quiet}x (target >= 0.95) [$isa]"
