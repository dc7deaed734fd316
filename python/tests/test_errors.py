# Bad input raises Python exceptions carrying the C++ message.
import pytest

import kestrel
from conftest import FAST


def test_an_unknown_op_raises_op_error_with_the_message():
    with pytest.raises(kestrel.OpError, match=r"unknown op 'fft'") as info:
        kestrel.space("fft", "8x8")
    assert isinstance(info.value, ValueError) and isinstance(info.value, kestrel.Error)
    with pytest.raises(ValueError, match=r"unknown op 'gemmm' \(did you mean 'gemm'"):
        kestrel.op("gemmm")


def test_tune_refuses_an_unknown_op_before_starting(tmp_path):
    with pytest.raises(kestrel.OpError, match=r"unknown op 'fft'"):
        kestrel.tune("fft", "8x8", trials=1, db=tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()


def test_a_bad_shape_raises_op_error():
    with pytest.raises(kestrel.OpError, match="missing parameter K for gemm"):
        kestrel.space("gemm", "48x40")
    with pytest.raises(kestrel.OpError, match="unknown parameter 'Q'"):
        kestrel.profile("gemm", {"M": 4, "N": 4, "K": 4, "Q": 1})
    with pytest.raises(kestrel.UsageError, match="must map names"):
        kestrel.space("gemm", {"M": "big"})


def test_a_missing_database_raises_records_error(tmp_path):
    missing = tmp_path / "missing.db"
    with pytest.raises(kestrel.RecordsError, match="no records database"):
        kestrel.read_records(missing)
    with pytest.raises(kestrel.RecordsError):
        kestrel.best(missing)
    with pytest.raises(kestrel.RecordsError):
        kestrel.export(missing, tmp_path / "out")
    assert not missing.exists()


def test_unknown_options_and_strategies_raise_usage_error(tmp_path):
    with pytest.raises(kestrel.UsageError, match="unknown tune option.*trails"):
        kestrel.tune("gemm", "8x8x8", trails=3, db=tmp_path / "x.db")
    with pytest.raises(kestrel.UsageError, match="unknown strategy 'best'"):
        kestrel.tune("gemm", "8x8x8", strategy="best", db=tmp_path / "x.db")
    with pytest.raises(kestrel.UsageError, match="needs tracker"):
        kestrel.profile("gemm", "8x8x8", key="rpi4")
    with pytest.raises(kestrel.UsageError, match="tracker must be"):
        kestrel.profile("gemm", "8x8x8", tracker=9190)
    with pytest.raises(kestrel.UsageError, match="repeat must be between 1 and"):
        kestrel.profile("gemm", "8x8x8", repeat=0)


def test_an_exception_in_the_callback_stops_the_session_and_propagates(tmp_path):
    db = tmp_path / "cb.db"
    calls = []

    def callback(progress):
        calls.append(progress["trials"])
        if progress["phase"] == "tuning":
            raise RuntimeError("enough after %d trials" % progress["trials"])

    with pytest.raises(RuntimeError, match="enough after"):
        kestrel.tune("gemm", "32x32x32", trials=64, batch=4, db=db, callback=callback, **FAST)
    assert len([c for c in calls]) >= 1
    assert len(kestrel.read_records(db)) < 64


def test_an_unreachable_tracker_raises_rpc_error():
    with pytest.raises(kestrel.RpcError):
        kestrel.query("127.0.0.1:1", timeout_ms=1000)


def test_a_bad_configuration_raises_op_error_once_the_target_is_known():
    with pytest.raises(kestrel.OpError, match="unknown knob 'zz' for gemm"):
        kestrel.profile("gemm", "16x16x16", {"zz": 1}, repeat=1, min_repeat_ms=1)
