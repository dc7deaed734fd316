# kestrel.tune: a real tuning session (tuner::TuneSession) on the embedded pool with a
# per-batch callback; kestrel.profile; a LocalPool kept across calls and kestrel.query.
import os
import signal
import threading
import time

import pytest

import kestrel
from conftest import BATCH, FAST, SHAPE, TRIALS


def test_tune_calls_back_once_per_batch_with_growing_trials(tuned):
    result, calls, db = tuned
    tuning = [c for c in calls if c["phase"] == "tuning"]
    assert len(tuning) >= TRIALS // BATCH
    trials = [c["trials"] for c in tuning]
    assert trials == sorted(trials) and len(set(trials)) == len(trials), trials
    # One call as the session starts, one after the default's measurement, one per batch.
    assert trials[0] == 0 and trials[1] == 1
    assert all(b - a <= BATCH for a, b in zip(trials[1:], trials[2:])), trials
    assert len(tuning) == 2 + -(-(TRIALS - 1) // BATCH)
    assert trials[-1] == TRIALS
    assert all(c["total"] == TRIALS for c in calls)
    assert calls[-1]["phase"] == "done"
    assert tuning[-1]["best_gflops"] > 0
    assert set(tuning[-1]["best_config"]) == {k["name"] for k in kestrel.space("gemm", SHAPE).knobs}


def test_tune_returns_the_best_configuration_and_the_records(tuned):
    result, calls, db = tuned
    assert result.op == "gemm" and result.workload == "K=32,M=48,N=40"
    assert result.trials == TRIALS and result.this_session == TRIALS
    assert result.stop_reason == "trials"
    assert result.best_gflops > 0
    assert result.best.status == "ok"
    assert result.best_config == result.best.config
    assert result.db == os.fspath(db)
    assert result.interrupted is False
    assert os.path.exists(db)


def test_tune_again_resumes_from_the_records(tuned):
    result, calls, db = tuned
    again = kestrel.tune("gemm", SHAPE, trials=TRIALS, batch=BATCH, db=db, seed=7, **FAST)
    assert again.resumed >= TRIALS
    assert again.this_session == 0


def test_profile_measures_the_default_configuration():
    r = kestrel.profile("gemm", SHAPE, repeat=2, min_repeat_ms=5)
    assert r.ok and r.status == "ok"
    assert r.gflops > 0 and r.cost > 0
    assert len(r.round_seconds) == 2
    assert r.config == kestrel.space("gemm", SHAPE).default


def test_profile_measures_a_given_configuration():
    default = kestrel.space("gemm", SHAPE).default
    name = sorted(default)[0]
    r = kestrel.profile("gemm", SHAPE, {name: default[name]}, repeat=2, min_repeat_ms=5)
    assert r.ok and r.config == default


def test_a_local_pool_serves_query_and_tune(tmp_path):
    with kestrel.LocalPool() as pool:
        assert pool.tracker.startswith("127.0.0.1:")
        # The device registers with the pool's tracker shortly after it starts.
        deadline = time.monotonic() + 30
        summary = kestrel.query(pool)
        while not summary["keys"] and time.monotonic() < deadline:
            time.sleep(0.1)
            summary = kestrel.query(pool)
        assert summary.tracker == pool.tracker
        assert [k["key"] for k in summary["keys"]] == ["local"]
        assert summary["keys"][0]["free"] == 1
        assert len(summary.devices) == 1 and summary.devices[0]["state"] == "free"
        assert summary.devices[0]["lease_holder"] is None and summary.devices[0]["name"]
        assert summary.devices[0]["info"]["cores"] >= 1
        r = kestrel.tune("gemm", "32x32x32", trials=4, batch=4, db=tmp_path / "t.db", tracker=pool, **FAST)
        assert r.trials == 4
    assert "closed" in repr(pool)


def test_ctrl_c_stops_the_session_and_keeps_the_records(tmp_path):
    """SIGINT during a session: KeyboardInterrupt once it has stopped; the records stay."""
    db = tmp_path / "int.db"
    started = threading.Event()

    def interrupt():
        started.wait(60)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        # Interrupted once something is recorded (the default, then batches): Ctrl-C drops the
        # batch in flight at once, and keeps what was measured before it.
        kestrel.tune("gemm", SHAPE, trials=400, batch=4, db=db,
                     callback=lambda p: started.set() if p["trials"] >= 1 else None, **FAST)
    n = len(kestrel.read_records(db))
    assert 1 <= n < 400


def _two_matmul_model(path):
    """An ONNX model of two MatMul+Add layers (8x32 @ 32x16, then 8x16 @ 16x8), written with
    onnx.helper: the tasks kestrel.tune(model=...) tunes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("MatMul", ["hb", "w2"], ["y0"]), helper.make_node("Add", ["y0", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "two_layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])], [w1, b1, w2, b2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def test_tune_a_model_tunes_each_of_its_tasks(tmp_path):
    pytest.importorskip("onnx")
    model = tmp_path / "two.onnx"
    _two_matmul_model(model)
    db = tmp_path / "model.db"
    calls = []
    result = kestrel.tune(model=model, trials_per_task=4, batch=2, db=db, callback=lambda p: calls.append(dict(p)), **FAST)
    assert result.model == os.fspath(model)
    assert len(result.tasks) == 2, result
    assert {t.op for t in result.tasks} == {"gemm"}
    assert {t.workload for t in result.tasks} == {"K=32,M=8,N=16,bias=1", "K=16,M=8,N=8,bias=1"}
    assert all(t.trials == 4 and t.best_gflops > 0 for t in result.tasks)
    assert result.stop_reason == "trials" and result.interrupted is False
    assert calls and calls[-1]["phase"] == "done"
    records = kestrel.read_records(db)
    assert len(records) >= 8


def test_tune_model_refuses_an_op_beside_it_and_options_of_models_without_one(tmp_path, monkeypatch):
    with pytest.raises(kestrel.UsageError, match="not both"):
        kestrel.tune("gemm", SHAPE, model=tmp_path / "m.onnx")
    with pytest.raises(kestrel.UsageError, match="buckets and block go with model="):
        kestrel.tune("gemm", SHAPE, buckets="seq=8")
    with pytest.raises(kestrel.UsageError, match="winograd goes with model="):
        kestrel.tune("gemm", SHAPE, winograd=False)
    with pytest.raises(kestrel.ModelError, match="missing.onnx"):
        kestrel.tune(model=tmp_path / "missing.onnx")
    # zero_shot without cost_model takes the shipped model; where there is none, it says where it looked.
    monkeypatch.setenv("KESTREL_COST_MODEL", os.fspath(tmp_path / "absent.kcm"))
    with pytest.raises(kestrel.ModelError, match="absent.kcm"):
        kestrel.tune("gemm", SHAPE, zero_shot=True)


def test_tune_reads_the_budget_as_kestrel_tune_does(tmp_path):
    # The budget options are kestrel tune's (frontend/options.h), spelled with underscores;
    # each mistake is refused before a pool starts.
    pytest.importorskip("onnx")
    model = tmp_path / "two.onnx"
    _two_matmul_model(model)
    with pytest.raises(kestrel.UsageError, match="with a model, give trials_per_task or time_budget"):
        kestrel.tune(model=model, trials=4)
    with pytest.raises(kestrel.UsageError, match="trials_per_task goes with a model"):
        kestrel.tune("gemm", SHAPE, trials_per_task=4)
    with pytest.raises(kestrel.UsageError, match="time_budget '15x' has an unknown unit"):
        kestrel.tune("gemm", SHAPE, time_budget="15x")
    with pytest.raises(kestrel.UsageError, match="time_budget must be a number"):
        kestrel.tune("gemm", SHAPE, time_budget=True)
    with pytest.raises(kestrel.UsageError, match="zero_shot_verify goes with zero_shot"):
        kestrel.tune("gemm", SHAPE, zero_shot_verify=2)
    with pytest.raises(kestrel.UsageError, match="unknown tune option"):
        kestrel.tune("gemm", SHAPE, time_budget_s=60)


def test_tune_stops_at_a_time_budget_given_as_text_or_seconds(tmp_path):
    for budget in ("2s", 1.5):
        result = kestrel.tune("gemm", SHAPE, trials=100000, time_budget=budget, batch=2, db=tmp_path / "b.db", **FAST)
        assert result.stop_reason == "time budget", (budget, result.stop_reason)
        assert 1 <= result.this_session < 100000
        assert result.final_cut in ("", "fewer passes", "skipped")  # kestrel tune --json's field


def test_tune_zero_shot_picks_without_a_device_or_records(tmp_path):
    # The cost model Kestrel ships, found without cost_model=, on an AVX2 target named
    # without a device.
    shipped = kestrel.shipped_cost_model()
    assert shipped and shipped.endswith("kestrel.kcm")
    db = tmp_path / "none.db"
    result = kestrel.tune("gemm", "M=200,N=300,K=100", zero_shot=True,
                          target="x86_64-linux-gnu", features="+avx2,+fma", db=db)
    assert result.stop_reason == "zero-shot"
    assert result.this_session == 0
    assert result.zero_shot["fallback"] == ""
    pick = dict(kv.split("=") for kv in result.zero_shot["pick"].split(","))
    assert set(pick) == {k["name"] for k in kestrel.space("gemm", "M=200,N=300,K=100").knobs}
    assert not db.exists()  # nothing measured, nothing recorded
    # The same file named explicitly gives the same pick.
    again = kestrel.tune("gemm", "M=200,N=300,K=100", cost_model=shipped, zero_shot=True,
                         target="x86_64-linux-gnu", features="+avx2,+fma", db=db)
    assert again.zero_shot["pick"] == result.zero_shot["pick"]


def test_a_whole_model_zero_shot_from_tune_and_export(tmp_path):
    # Every task of a model picked by the shipped cost model in seconds, and the same
    # picks compiled by export; no database is read or written.
    pytest.importorskip("onnx")
    model = tmp_path / "two.onnx"
    _two_matmul_model(model)
    db = tmp_path / "absent.db"
    tuned = kestrel.tune(model=model, zero_shot=True, target="native", db=db)
    assert len(tuned.tasks) == 2
    picks = {t.workload: t.zero_shot["pick"] for t in tuned.tasks}
    assert all(t.stop_reason == "zero-shot" and t.zero_shot["fallback"] == "" for t in tuned.tasks)
    exported = kestrel.export(db, tmp_path / "out", model=model, zero_shot=True)
    gemms = [k for k in exported.kernels if k["op"] == "gemm"]
    assert gemms and all(k["origin"] == "zero-shot" for k in gemms)
    assert {k["params"]: k["config"] for k in gemms} == picks
    assert not db.exists()


def test_export_plans_3x3_layers_on_winograd_kernels_unless_told_not_to(tmp_path):
    # A 3x3 convolution with a 16x16 output: conv2d_winograd by default, conv2d_nchwc with
    # winograd=False, as kestrel export --no-winograd. zero_shot=True needs no database.
    pytest.importorskip("onnx")
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((16, 16, 3, 3)).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([conv], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], [w])
    model = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    db = tmp_path / "absent.db"
    ops = {k["op"] for k in kestrel.export(db, tmp_path / "a", model=model, zero_shot=True).kernels}
    assert "conv2d_winograd" in ops, ops
    ops = {k["op"] for k in kestrel.export(db, tmp_path / "b", model=model, zero_shot=True, winograd=False).kernels}
    assert "conv2d_winograd" not in ops and "conv2d_nchwc" in ops, ops
