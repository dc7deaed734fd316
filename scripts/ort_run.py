#!/usr/bin/env python3
"""Runs an ONNX model with ONNX Runtime on inputs from files, writes its outputs, times it.

    ort_run.py MODEL --input NAME=FILE[@D0,D1,...] ... --out-dir DIR
               [--threads N] [--repeat R] [--format raw|npy]

Inputs: FILE is a .npy file (float32, int64, bool, ...), or raw little-endian float32
whose shape follows '@' ("hidden=/tmp/h.bin@1,7,768"). Each input is converted to the
element type the model declares for it (an int64 array feeds an int32 or bool input;
a float array never feeds an integer or bool input). Outputs: DIR/output_<i>.bin (raw little-endian float32) or
.npy with --format npy. ONNX Runtime runs on the CPU with intra_op_num_threads = N,
inter_op_num_threads = 1 and sequential execution; one untimed warm-up run, then R timed
runs. Prints one JSON object on stdout:

    {"outputs": [{"name": ..., "file": ..., "shape": [...]}, ...],
     "latency_ms": {"median": ..., "min": ..., "runs": R}, "threads": N,
     "onnxruntime": "<version>"}

Exit status: 0 done, 2 bad arguments or inputs, 3 onnxruntime (or numpy) is not importable.
"""

import argparse
import json
import os
import statistics
import sys
import time


def fail(message, status=2):
    print(f"ort_run: {message}", file=sys.stderr)
    sys.exit(status)


def parse_input(spec):
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        fail(f"bad --input {spec!r}: expected NAME=FILE.npy or NAME=FILE@D0,D1,...")
    path, at, dims = rest.partition("@")
    shape = None
    if at:
        try:
            shape = [int(d) for d in dims.split(",")]
        except ValueError:
            fail(f"bad shape {dims!r} in --input {spec!r}: expected integers separated by ','")
        if any(d < 0 for d in shape):
            fail(f"bad shape {dims!r} in --input {spec!r}: dimensions must be >= 0")
    return name, path, shape


ONNX_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}


def convert_input(np, name, onnx_type, array):
    """The array as the element type the model declares for the input."""
    dtype = ONNX_TYPES.get(onnx_type)
    if dtype is None:
        fail(f"input {name!r} is {onnx_type}, which ort_run.py does not feed")
    want = np.dtype(dtype)
    if want.kind in "iub" and array.dtype.kind == "f":
        fail(f"input {name!r} is {onnx_type}: got {array.dtype} values, expected integers or booleans")
    if want.kind == "b" and array.dtype.kind in "iu" and array.size and not np.isin(array, (0, 1)).all():
        fail(f"input {name!r} is {onnx_type}: got values other than 0 and 1")
    return np.ascontiguousarray(array, dtype=want)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE[@SHAPE]")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--format", choices=["raw", "npy"], default="raw")
    args = parser.parse_args()
    if args.threads < 1:
        fail(f"--threads must be at least 1, got {args.threads}")
    if args.repeat < 1:
        fail(f"--repeat must be at least 1, got {args.repeat}")

    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as error:
        fail(f"{error.name or 'onnxruntime'} is not importable with {sys.executable} "
             "(run scripts/setup-python.sh, or pip install numpy onnxruntime)", status=3)

    if not os.path.isfile(args.model):
        fail(f"no model file {args.model}")

    feeds = {}
    for spec in args.input:
        name, path, shape = parse_input(spec)
        if not os.path.isfile(path):
            fail(f"no input file {path} (for input {name!r})")
        if path.endswith(".npy") and shape is None:
            array = np.load(path)
        else:
            if shape is None:
                fail(f"input {name!r}: raw file {path} needs its shape (NAME=FILE@D0,D1,...)")
            array = np.fromfile(path, dtype="<f4")
            expected = 1
            for d in shape:
                expected *= d
            if array.size != expected:
                fail(f"input {name!r}: {path} holds {array.size} float32 values, "
                     f"shape {shape} needs {expected}")
            array = array.reshape(shape)
        feeds[name] = array

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        session = ort.InferenceSession(args.model, sess_options=options,
                                       providers=["CPUExecutionProvider"])
    except Exception as error:  # ORT raises its own exception types
        fail(f"onnxruntime cannot load {args.model}: {error}")

    wanted = [i.name for i in session.get_inputs()]
    missing = [n for n in wanted if n not in feeds]
    extra = [n for n in feeds if n not in wanted]
    if missing or extra:
        fail(f"inputs do not match the model's ({', '.join(wanted)}): "
             f"missing {missing}, unknown {extra}")

    for meta in session.get_inputs():
        feeds[meta.name] = convert_input(np, meta.name, meta.type, feeds[meta.name])

    try:
        outputs = session.run(None, feeds)  # warm-up; its outputs are the ones written
    except Exception as error:
        fail(f"onnxruntime failed to run {args.model}: {error}")
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1000.0)

    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    for index, (meta, value) in enumerate(zip(session.get_outputs(), outputs)):
        value = np.ascontiguousarray(value, dtype=np.float32)
        if args.format == "npy":
            path = os.path.join(args.out_dir, f"output_{index}.npy")
            np.save(path, value)
        else:
            path = os.path.join(args.out_dir, f"output_{index}.bin")
            value.astype("<f4").tofile(path)
        written.append({"name": meta.name, "file": path, "shape": list(value.shape)})

    print(json.dumps({
        "outputs": written,
        "latency_ms": {"median": statistics.median(times), "min": min(times),
                       "runs": len(times)},
        "threads": args.threads,
        "onnxruntime": ort.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
