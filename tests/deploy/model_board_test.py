"""The whole model on a board, as a user gets it: `kestrel export --model` for the board's
target, the example program built from the export folder with the board's C compiler,
run (under qemu for aarch64, armv7 and riscv64) on the zoo's inputs, and its outputs compared with
ONNX Runtime's that the zoo's .npz holds (computed on the host when the zoo was made).
Natively, `kestrel run --kernels` must run the same program. The buckets' programs share
one model.weights. A corrupt model.kprog, a corrupt, truncated or missing model.weights and
a missing kernel library must give clear errors.

usage: model_board_test.py SOURCE_DIR KESTREL_BIN BOARD   (BOARD: native, aarch64, armv7, riscv64)
Exit 77 (skipped) without numpy, the cross compiler, qemu or the board's build
(scripts/build-device.sh TRIPLE), unless KESTREL_REQUIRE_BOARDS=1 says they must be there.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
BOARDS = {
    "native": {"triple": "native", "gcc": "cc", "qemu": None, "build": "build"},
    "aarch64": {"triple": "aarch64-linux-gnu", "gcc": "aarch64-linux-gnu-gcc", "qemu": "qemu-aarch64-static",
                "loader": "/lib/ld-linux-aarch64.so.1", "sysroot": "/usr/aarch64-linux-gnu",
                "build": "build-device-aarch64-linux-gnu"},
    "armv7": {"triple": "armv7a-linux-gnueabihf", "gcc": "arm-linux-gnueabihf-gcc", "qemu": "qemu-arm-static",
              "loader": "/lib/ld-linux-armhf.so.3", "sysroot": "/usr/arm-linux-gnueabihf",
              "build": "build-device-armv7a-linux-gnueabihf"},
    "riscv64": {"triple": "riscv64-linux-gnu", "gcc": "riscv64-linux-gnu-gcc", "qemu": "qemu-riscv64-static",
                "loader": "/lib/ld-linux-riscv64-lp64d.so.1", "sysroot": "/usr/riscv64-linux-gnu",
                "build": "build-device-riscv64-linux-gnu"},
}
# A CNN of torchvision's (Conv+HardSwish, squeeze-excite, blocked layout), residual blocks
# whose 3x3 convolutions run as conv2d_winograd (the weights' Winograd transform packed on
# the host for the board's block) and a transformer of Hugging Face's (token-id and mask
# inputs: int64), as the legacy exporter writes them.
# (model, --buckets, the program to run): a model with symbols exported at two sizes gets
# one program per bucket, and the example runs the one of the zoo's inputs.
MODELS = [("mobilenet_v3_small_w025.legacy", None, "model.kprog"), ("bert_tiny.legacy", None, "model.kprog"),
          ("bert_tiny_dyn.legacy", "batch=1;sequence=8,16", "model.batch=1,sequence=16.kprog"),
          ("resnet_blocks_tiny.legacy", None, "model.kprog")]
TOLERANCE = 1e-3  # of the largest magnitude of ONNX Runtime's output, as kestrel run


def skip(why):
    if os.environ.get("KESTREL_REQUIRE_BOARDS") == "1":
        print("FAILED (KESTREL_REQUIRE_BOARDS=1): " + why)
        sys.exit(1)
    print("SKIPPED: " + why)
    sys.exit(SKIP)


def run(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def must(cmd, **kw):
    r = run(cmd, **kw)
    if r.returncode != 0:
        print(r.stdout[-4000:], r.stderr[-4000:])
        raise SystemExit("FAILED: exit %d" % r.returncode)
    return r


def main():
    source, kestrel, board_name = sys.argv[1], sys.argv[2], sys.argv[3]
    board = BOARDS[board_name]
    try:
        import numpy as np
    except ImportError:
        if os.environ.get("KESTREL_REQUIRE_PYTHON") == "1":
            raise SystemExit("FAILED: no numpy (KESTREL_REQUIRE_PYTHON=1; scripts/setup-python.sh)")
        skip("no numpy (scripts/setup-python.sh)")
    build = os.path.join(source, board["build"])
    if board_name == "native":
        build = os.path.dirname(os.path.dirname(os.path.abspath(kestrel)))  # <build>/tools/kestrel
    library = os.path.join(build, "deploy", "libkestrel_model.so")
    if not shutil.which(board["gcc"]):
        skip(board["gcc"] + " is not installed (scripts/setup-cross.sh)")
    if board["qemu"] and not shutil.which(board["qemu"]):
        skip(board["qemu"] + " is not installed (scripts/setup-cross.sh)")
    if not os.path.exists(library):
        skip("no %s (scripts/build-device.sh %s)" % (library, board["triple"]))
    triple = board["triple"]
    if triple == "native":
        triple = os.uname().machine + "-linux-gnu"

    with tempfile.TemporaryDirectory() as tmp:
        # Records with one default measurement for the board (an unrelated gemm): every task
        # is exported at its op's default, as for a board not tuned yet.
        record = {"id": 1, "op": "gemm", "workload": "K=64,M=64,N=64", "target": triple, "device_key": "board",
                  "device_model": "test", "device": "board-0", "device_fingerprint": triple + "|test|1",
                  "config": "", "status": "ok", "message": "", "round_seconds": [0.001], "cost": 0.001,
                  "gflops": 0.5, "compile_ms": 1.0, "tool_version": "0.1.0", "time_unix_ms": 1,
                  "session": "test", "final_measurement": False, "is_default": True,
                  "implementation": "kestrel"}
        with open(os.path.join(tmp, "records.jsonl"), "w") as f:
            f.write(json.dumps(record) + "\n")
        db = os.path.join(tmp, "tune.db")
        must([kestrel, "records", "import", "--db", db, os.path.join(tmp, "records.jsonl")])

        for name, buckets, program_name in MODELS:
            model = os.path.join(source, "tests", "data", "zoo", name + ".onnx")
            arrays = np.load(os.path.join(source, "tests", "data", "zoo", name + ".npz"))
            out = os.path.join(tmp, name)
            must([kestrel, "export", "--db", db, "--model", model, "--target", board["triple"], "-o", out,
                  "--runtime-dir", os.path.join(build, "device_runtime")] + (["--buckets", buckets] if buckets else []))
            for f in [program_name, "model.weights", "libkestrel_model.so", "kestrel_model.h", "kestrel_model_run.c",
                      "libkestrel_kernels.so", "kestrel-model-run"]:
                assert os.path.exists(os.path.join(out, f)), f + " was not exported"
            with open(os.path.join(out, "manifest.json")) as f:
                manifest = json.load(f)
            assert manifest["weights"] == "model.weights", manifest["weights"]
            for memory in manifest["memory"]:
                # The arena holds every activation buffer, reusing memory between them.
                assert memory["peak_bytes"] <= memory["arena_bytes"] <= memory["buffers_bytes"], memory
            if name.startswith("resnet_blocks_tiny"):
                # Its stride-1 3x3 layers run on Winograd kernels, with weights transformed on the host.
                assert any(k["op"] == "conv2d_winograd" for k in manifest["kernels"]), manifest["kernels"]
            weights = os.path.getsize(os.path.join(out, "model.weights"))
            for program_file in manifest["programs"]:
                # The weights are in model.weights, once, not in each program.
                assert os.path.getsize(os.path.join(out, program_file)) < weights, program_file
            if buckets:
                assert os.path.exists(os.path.join(out, "model.batch=1,sequence=8.kprog")), "a bucket's program is missing"
                assert not os.path.exists(os.path.join(out, "model.kprog"))
            select = ["--program", program_name] if buckets else []
            prefix = []
            if board["qemu"]:
                prefix = [board["qemu"]]
                if not os.access(board["loader"], os.R_OK):
                    prefix += ["-L", board["sysroot"]]
            # The example program shipped built for the target; and its source builds as
            # docs/export.md tells a user to, and runs.
            program = os.path.join(out, "kestrel-model-run")
            built = os.path.join(out, "example-built")
            must([board["gcc"], "-std=c11", "-O2", "-Wall", "-Werror", os.path.join(out, "kestrel_model_run.c"),
                  "-o", built, "-L" + out, "-lkestrel_model", "-Wl,-rpath,$ORIGIN"])
            must(prefix + [built, out, "--repeat", "1"] + select)

            # The zoo's inputs as raw files, in the types the program takes.
            info = must(prefix + [program, out, "--repeat", "1"] + select).stdout
            print(info)
            inputs = []
            for key in arrays.files:
                if not key.startswith("input:"):
                    continue
                value = arrays[key]
                value = value.astype(np.float32) if value.dtype.kind == "f" else value.astype(np.int64)
                path = os.path.join(tmp, name + "." + key.replace(":", "_").replace("/", "_") + ".bin")
                value.tofile(path)
                inputs += ["--input", key[len("input:"):] + "=" + path]
            results = os.path.join(tmp, name + ".outputs")
            os.makedirs(results)
            ran = must(prefix + [program, out, "--repeat", "2", "--outputs", results] + select + inputs).stdout
            print(ran)
            checked = 0
            for line in ran.splitlines():
                if not line.startswith("output "):
                    continue
                _, index, output, dtype, shape = line.split(" ", 4)
                shape = [int(d) for d in shape.strip("[]").split(",") if d]
                got = np.fromfile(os.path.join(results, index + ".bin"), dtype=np.float32 if dtype == "float32"
                                  else np.int64).reshape(shape)
                want = arrays["output:" + output]
                assert got.shape == want.shape, (output, got.shape, want.shape)
                error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                magnitude = float(np.max(np.abs(want)))
                print("%s on %s: output %s max abs error %.3g, largest magnitude %.3g" % (name, board_name, output,
                                                                                        error, magnitude))
                assert error <= TOLERANCE * magnitude, "%s: output %s differs from ONNX Runtime's" % (name, output)
                assert float(np.max(got)) != float(np.min(got)), "output %s is constant" % output
                checked += 1
            assert checked == len([k for k in arrays.files if k.startswith("output:")]), "not every output was checked"

            if board_name == "native":
                # kestrel run runs the same program (and says so), and matches the zoo's outputs.
                r = must([kestrel, "run", "--model", model, "--kernels", out, "--inputs",
                          os.path.join(source, "tests", "data", "zoo", name + ".npz"), "--no-check", "--json",
                          "--repeat", "2"])
                report = json.loads(r.stdout)
                assert report["program"] is True, report
                assert report["ok"] is True and report["npz_outputs"], report
                assert all(o["ok"] for o in report["npz_outputs"]), report["npz_outputs"]

        # Several programs and none named: the error lists them.
        out = os.path.join(tmp, MODELS[2][0])
        r = run(prefix + [os.path.join(out, "kestrel-model-run"), out])
        assert r.returncode == 1 and "model.batch=1,sequence=16.kprog" in r.stderr and "--program" in r.stderr, r.stderr
        # A broken weights file: each program that names it says which file and what is wrong.
        weights = os.path.join(out, "model.weights")
        select = ["--program", MODELS[2][2]]
        with open(weights, "r+b") as f:
            f.seek(os.path.getsize(weights) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))
        r = run(prefix + [os.path.join(out, "kestrel-model-run"), out] + select)
        print(r.stderr)
        assert r.returncode == 1 and "model.weights" in r.stderr and "checksum" in r.stderr, r.stderr
        with open(weights, "r+b") as f:
            f.truncate(100)
        r = run(prefix + [os.path.join(out, "kestrel-model-run"), out] + select)
        assert r.returncode == 1 and "model.weights" in r.stderr and "corrupt" in r.stderr, r.stderr
        os.remove(weights)
        r = run(prefix + [os.path.join(out, "kestrel-model-run"), out] + select)
        assert r.returncode == 1 and "model.weights" in r.stderr and "kestrel export" in r.stderr, r.stderr
        # Bad artifacts: clear errors, exit 1, never a crash.
        out = os.path.join(tmp, MODELS[0][0])
        program = os.path.join(out, "kestrel-model-run")
        kprog = os.path.join(out, "model.kprog")
        with open(kprog, "r+b") as f:
            f.seek(os.path.getsize(kprog) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))
        r = run(prefix + [program, out])
        print(r.stderr)
        assert r.returncode == 1 and "corrupt" in r.stderr and "checksum" in r.stderr, r.stderr
        with open(kprog, "r+b") as f:
            f.truncate(100)
        r = run(prefix + [program, out])
        assert r.returncode == 1 and "corrupt" in r.stderr, r.stderr
        os.remove(kprog)
        r = run(prefix + [program, out])
        assert r.returncode == 1 and "model.kprog" in r.stderr and "kestrel export" in r.stderr, r.stderr
        out = os.path.join(tmp, MODELS[1][0])
        program = os.path.join(out, "kestrel-model-run")
        os.remove(os.path.join(out, "libkestrel_kernels.so"))
        r = run(prefix + [program, out])
        assert r.returncode == 1 and "libkestrel_kernels.so" in r.stderr, r.stderr
    print("ok")


if __name__ == "__main__":
    main()
