#!/usr/bin/env bash
# Trains the cost model Kestrel ships (share/cost-model/kestrel.kcm) from the datasets
# beside it (share/cost-model/data/*.jsonl.gz: `kestrel records export` of `kestrel
# datagen` runs, one file per machine and class). share/cost-model/README.md says how the
# datasets were measured and how to add one.
#
#   scripts/train-cost-model.sh [-o OUT.kcm] [DATASET.jsonl[.gz] ...] [-- cost-model train options]
#
# Without datasets: every file of share/cost-model/data. Without -o: the shipped file.
# The kestrel binary: $KESTREL_BIN, else build/tools/kestrel.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kestrel="${KESTREL_BIN:-$root/build/tools/kestrel}"
out="$root/share/cost-model/kestrel.kcm"
datasets=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) datasets+=("$1"); shift ;;
  esac
done
if [ ${#datasets[@]} -eq 0 ]; then
  shopt -s nullglob
  datasets=("$root"/share/cost-model/data/*.jsonl.gz "$root"/share/cost-model/data/*.jsonl)
  shopt -u nullglob
fi
[ ${#datasets[@]} -gt 0 ] || { echo "train-cost-model.sh: no datasets" >&2; exit 1; }
[ -x "$kestrel" ] || { echo "train-cost-model.sh: no kestrel at $kestrel (scripts/build.sh builds it)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for dataset in "${datasets[@]}"; do
  plain="$work/$(basename "${dataset%.gz}")"
  case "$dataset" in
    *.gz) gzip -dc "$dataset" > "$plain" ;;
    *) cp "$dataset" "$plain" ;;
  esac
  "$kestrel" records import --db "$work/train.db" "$plain" >&2
done
"$kestrel" cost-model train --db "$work/train.db" -o "$out" "${extra[@]}"
