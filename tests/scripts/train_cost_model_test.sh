#!/usr/bin/env bash
# The shipped cost model is what scripts/train-cost-model.sh makes of the shipped datasets:
# retrained here into a scratch file, every model (op, family, trained classes, workloads,
# rows, held-out quality) matches share/cost-model/kestrel.kcm, and a dataset that is not
# JSONL is refused with nothing written.
#   train_cost_model_test.sh KESTREL_BIN
set -euo pipefail
kestrel="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
summary() {
  "$kestrel" cost-model show "$1" --json |
    python3 -c 'import json, sys
for m in sorted(json.load(sys.stdin)["models"], key=lambda m: (m["op"], m["target_class"])):
    h = m["holdout"]
    print(m["op"], m["target_class"], ",".join(m["trained_classes"]), m["workloads"], m["rows"],
          h["workloads"], round(h["kendall_tau"], 6), round(h["pick_ratio"], 6))'
}
KESTREL_BIN="$kestrel" "$root/scripts/train-cost-model.sh" -o "$work/retrained.kcm" > "$work/log" 2>&1 \
  || { cat "$work/log"; echo "FAIL: train-cost-model.sh failed"; exit 1; }
summary "$root/share/cost-model/kestrel.kcm" > "$work/shipped.txt"
summary "$work/retrained.kcm" > "$work/retrained.txt"
if ! diff -u "$work/shipped.txt" "$work/retrained.txt"; then
  echo "FAIL: share/cost-model/kestrel.kcm is not what scripts/train-cost-model.sh makes of share/cost-model/data"
  exit 1
fi
grep -q "x86" "$work/shipped.txt" || { echo "FAIL: the shipped model has no x86 model"; exit 1; }
echo "not a record" > "$work/bad.jsonl"
if KESTREL_BIN="$kestrel" "$root/scripts/train-cost-model.sh" -o "$work/bad.kcm" "$work/bad.jsonl" > "$work/log" 2>&1; then
  echo "FAIL: a dataset that is not JSONL records was accepted"; exit 1
fi
[ ! -e "$work/bad.kcm" ] || { echo "FAIL: a model was written from a bad dataset"; exit 1; }
echo "ok: the shipped model matches its recipe ($(wc -l < "$work/shipped.txt") models)"
