#!/usr/bin/env python3
"""Whole-model latency of the model zoo against ONNX Runtime (issue 28 part 2's table).

For every model given (default: the full tier in build/zoo, the .legacy exports and the
dynamo ones, and the small tier in tests/data/zoo with its .npz inputs), at each thread
count, runs `kestrel run --model F --json --threads T --repeat R` (which checks the
outputs against ONNX Runtime's and times both, each at T threads, ONNX Runtime with its
graph optimizations on) and prints one markdown table: Kestrel's and ONNX Runtime's
median ms, the ratio (ONNX Runtime's median / Kestrel's: above 1, Kestrel is faster),
whether the outputs matched, and the issue's targets (>= 1.1x on resnet50,
mobilenet_v3_small, efficientnet_b0 and bert_base; no model below 0.9x).

    bench/zoo_vs_ort.py                         # default kernels, 1 and 2 threads
    bench/zoo_vs_ort.py --db records.db         # each task at its best record
    bench/zoo_vs_ort.py --threads 1 --repeat 50 build/zoo/resnet50.legacy.onnx

Prints the CPU and its vector ISA first: figures are per ISA, and timings taken while
other work shares the machine are not figures to report (run it on a quiet machine, or
under `nice -n -15` at the least). Exit status 0 when every run matched, 1 otherwise.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ("resnet50", "mobilenet_v3_small", "efficientnet_b0", "bert_base")


def machine():
    model, flags = "unknown CPU", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                if line.startswith(("flags", "Features")) and not flags:
                    flags = " " + line.split(":", 1)[1].strip() + " "
    except OSError:
        pass
    isa = "AVX-512" if " avx512f " in flags else "AVX2" if " avx2 " in flags else "NEON" if " asimd " in flags else "other"
    return f"{model}, {os.cpu_count()} hardware threads, {isa}"


def default_models():
    files = sorted(glob.glob(os.path.join(ROOT, "build", "zoo", "*.onnx")))
    files += sorted(glob.glob(os.path.join(ROOT, "tests", "data", "zoo", "*.onnx")))
    return files


def run(kestrel, path, threads, repeat, db, timeout):
    cmd = [kestrel, "run", "--model", path, "--json", "--threads", str(threads), "--repeat", str(repeat)]
    npz = path[: -len(".onnx")] + ".npz"
    if os.path.exists(npz):
        cmd += ["--inputs", npz]
    if db:
        cmd += ["--db", db]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer in {timeout} s"}
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="ONNX files (default: build/zoo/*.onnx, tests/data/zoo/*.onnx)")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each (default 20)")
    parser.add_argument("--db", help="records whose best configurations the kernels use (kestrel run --db)")
    parser.add_argument("--kestrel", default=os.path.join(ROOT, "build", "tools", "kestrel"))
    parser.add_argument("--timeout", type=int, default=900, help="seconds per kestrel run")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t]
    models = args.models or default_models()
    if not os.access(args.kestrel, os.X_OK):
        print(f"zoo_vs_ort: no kestrel binary at {args.kestrel} (build it, or give --kestrel)", file=sys.stderr)
        return 2
    if not models:
        print("zoo_vs_ort: no models (scripts/model-zoo.py --tier small|full writes them)", file=sys.stderr)
        return 2

    print(f"machine: {machine()}")
    print(f"kernels: {'best records of ' + args.db if args.db else 'the ops default configurations (untuned)'}; "
          f"median of {args.repeat} runs each\n")
    header = "| model |" + "".join(f" kestrel {t}t ms | ORT {t}t ms | x ORT {t}t |" for t in threads) + " outputs |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    ratios, failed, worst = {}, False, {}
    for path in models:
        name = os.path.basename(path)[: -len(".onnx")]
        row, ok, why = f"| {name} |", True, "outputs differ from ONNX Runtime's"
        for t in threads:
            r = run(args.kestrel, path, t, args.repeat, args.db, args.timeout)
            lat = r.get("latency_ms", {})
            if "error" in r or "onnxruntime" not in lat:
                row += " - | - | - |"
                ok = False
                why = r.get("error", "ONNX Runtime did not run")
                continue
            k, o = lat["kestrel"]["median"], lat["onnxruntime"]["median"]
            ratio = o / k if k > 0 else 0.0
            ratios.setdefault(t, []).append(ratio)
            worst[name] = min(worst.get(name, math.inf), ratio)
            row += f" {k:.3f} | {o:.3f} | {ratio:.2f} |"
            ok = ok and bool(r.get("ok"))
        row += " match |" if ok else f" FAILED: {why} |"
        failed = failed or not ok
        print(row, flush=True)
    print()
    for t, values in ratios.items():
        geo = math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0
        print(f"{t} thread{'s' if t > 1 else ''}: geomean x{geo:.2f} ONNX Runtime over {len(values)} models, "
              f"{sum(v >= 1.0 for v in values)} at or above 1")
    target = {n: w for n, w in worst.items() if n.split(".")[0] in TARGETS}
    below = sorted(n for n, w in worst.items() if w < 0.9)
    short = ", ".join(f"{n} x{w:.2f}" for n, w in sorted(target.items()) if w < 1.1)
    print("targets (issue 28): >= 1.1x on " + ", ".join(TARGETS) + " at every thread count: " +
          ("not measured (none of them was run)" if not target else "met" if not short else f"not met ({short})"))
    print("no model below 0.9x: " + ("met" if not below else "not met (" + ", ".join(below) + ")"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
