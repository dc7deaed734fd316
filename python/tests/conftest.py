# Shared fixtures of the kestrel package's tests: fast measuring settings and one real
# tuning session (a small gemm on the embedded pool) whose progress calls are kept.
import pytest

import kestrel

# Short timed rounds: the tests check the plumbing, not the kernels' speed.
FAST = dict(repeat=2, min_repeat_ms=5, final_top=2, final_repeat=3, vendors="none")
SHAPE = "48x40x32"
TRIALS = 8
BATCH = 4


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """(result, progress calls, db path) of an 8-trial, 4-per-batch session."""
    db = tmp_path_factory.mktemp("tune") / "tune.db"
    calls = []
    result = kestrel.tune("gemm", SHAPE, trials=TRIALS, batch=BATCH, db=db, seed=7,
                          callback=lambda p: calls.append(dict(p)), **FAST)
    return result, calls, db
