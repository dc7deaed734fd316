# kestrel.read_records / kestrel.records(...).to_dataframe(), kestrel.best and
# kestrel.export against the records of a real session.
import ctypes
import json
import math
import os

import kestrel
from conftest import TRIALS


def test_the_dataframe_has_one_row_per_record_of_the_session(tuned):
    result, calls, db = tuned
    df = kestrel.read_records(db)
    assert list(df.columns) == kestrel.RECORD_COLUMNS
    assert len(df) == len(kestrel.records(db))
    assert set(df["session"]) == {result.session}
    assert set(df["op"]) == {"gemm"} and set(df["workload"]) == {"K=32,M=48,N=40"}
    assert set(df["implementation"]) == {"kestrel"}
    search = df[~df["final"]]
    assert len(search) == TRIALS
    assert (df["device_key"] == "local").all()
    assert df["id"].is_monotonic_increasing
    assert str(df["time"].dtype).startswith("datetime64")
    ok = df[df["status"] == "ok"]
    assert (ok["gflops"] > 0).all() and (ok["cost"] > 0).all()
    assert all(math.isinf(c) for c in df[df["status"] != "ok"]["cost"])
    # The final round re-measured the finalists and the default.
    final = df[df["final"]]
    assert len(final) >= 2 and final["is_default"].any()
    # The record's one JSON form: the final round's choice and the device's machine state.
    assert (df["final"] == df["final_measurement"]).all()
    assert (final["recommended"] & 1).sum() == 1 and (df[~df["final"]]["recommended"] == 0).all()
    assert all(len(r) == n for r, n in zip(df["round_seconds"], df["rounds"]))
    assert any(isinstance(m, dict) and "load1" in m for m in df["machine"])
    # The best of the search is what the progress reported.
    tuning = [c for c in calls if c["phase"] == "tuning"]
    assert search["gflops"].max() == tuning[-1]["best_gflops"]


def test_records_are_dicts_too(tuned):
    result, calls, db = tuned
    rows = kestrel.records(db).to_list()
    assert rows[0]["op"] == "gemm" and rows[0].op == "gemm"
    assert len(kestrel.records(db, op="conv2d")) == 0


def test_best_is_the_sessions_recommendation(tuned):
    result, calls, db = tuned
    (b,) = kestrel.best(db)
    assert b.op == "gemm" and b.workload == "K=32,M=48,N=40"
    assert b.config == result.best_config
    assert b.gflops == result.best_gflops
    assert b.trials >= TRIALS


def test_export_writes_a_library_of_the_best_records(tuned, tmp_path):
    result, calls, db = tuned
    out = tmp_path / "lib"
    report = kestrel.export(db, out)
    assert {"libkestrel_kernels.so", "libkestrel_kernels.a", "kestrel_kernels.h", "manifest.json"} <= set(report.files)
    for name in report.files:
        assert (out / name).is_file(), name
    (kernel,) = report.kernels
    assert kernel["op"] == "gemm" and kernel["origin"] == "tuned"
    assert kernel["config"] == result.best.config_text
    assert report.runtime_copied, report.runtime_note
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == os.fspath(db)
    header = (out / "kestrel_kernels.h").read_text()
    assert "int32_t kestrel_gemm(" in header
    assert "gemm K=32,M=48,N=40: tuned " + kernel["config"] in header
    # The library dispatches the tuned workload to its kernel (and no other shape).
    lib = ctypes.CDLL(os.fspath(out / "libkestrel_kernels.so"))

    class Shape(ctypes.Structure):
        _fields_ = [(n, ctypes.c_int64) for n in ("M", "N", "K", "bias", "residual", "act", "panels")]

    lib.kestrel_gemm_which.restype = ctypes.c_char_p
    assert lib.kestrel_gemm_which(ctypes.byref(Shape(48, 40, 32, 0, 0, 0, 0))) == b"tuned " + kernel["config"].encode()
    assert lib.kestrel_gemm_which(ctypes.byref(Shape(64, 40, 32, 0, 0, 0, 0))) is None
