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
