"""Kestrel from Python: the op library, profiling, tuning sessions, the records and the
kernel-library export, bound to Kestrel's C++ libraries (kestrel._kestrel, pybind11).

    import kestrel
    result = kestrel.tune("gemm", "256x256x256", trials=64, db="tune.db",
                          callback=lambda p: print(p["trials"], p["best_gflops"]))
    df = kestrel.read_records("tune.db")          # a pandas DataFrame
    kestrel.export("tune.db", "out/")             # libkestrel_kernels.{so,a} + header

Without ``tracker=``, measurements run on this machine through the embedded pool: a
tracker inside this process and the kestrel-device this package ships (bin/), or the one
$KESTREL_DEVICE_BIN names. Errors raise kestrel.Error subclasses carrying the C++
message; the input errors (UsageError, OpError) are also ValueErrors. See docs/python.md.
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
# The embedded pool starts kestrel-device "next to the executable", which in Python is
# the interpreter: point it at the one shipped with the package (unless the caller chose).
_device = _os.path.join(_here, "bin", "kestrel-device")
if _os.path.isfile(_device) and _os.access(_device, _os.X_OK):
    _os.environ.setdefault("KESTREL_DEVICE_BIN", _device)
_runtime_dir = _os.path.join(_here, "lib")

from . import _kestrel  # noqa: E402  (after KESTREL_DEVICE_BIN is set)
from ._kestrel import (  # noqa: E402,F401
    Error,
    ModelError,
    OpError,
    RecordsError,
    RpcError,
    UsageError,
    set_log_level,
)

__all__ = [
    "Error", "UsageError", "OpError", "RecordsError", "RpcError", "ModelError",
    "version", "ops", "op", "space", "profile", "tune", "query", "LocalPool",
    "read_records", "records", "Records", "best", "export", "set_log_level", "Result",
]


class Result(dict):
    """A dict whose keys are also attributes (``r.gflops`` is ``r["gflops"]``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self):
        return list(super().__dir__()) + [str(k) for k in self]


def version():
    """The version of Kestrel's libraries, e.g. "0.1.0"."""
    return _kestrel.version()


def shipped_cost_model():
    """The path of the cost model Kestrel ships (what zero_shot=True uses without
    cost_model=): $KESTREL_COST_MODEL, else share/cost-model/kestrel.kcm of the source
    tree. None when it is not found."""
    return _kestrel.shipped_cost_model() or None


def ops():
    """The built-in ops: a list of dicts with name, description, params (name, help,
    min, max, default, optional) and backends."""
    return [Result(o) for o in _kestrel.ops()]


def op(name):
    """One op, as ops() describes it. Raises OpError for an unknown op."""
    return Result(_kestrel.op(name))


def space(op, shape, backend=None, target="native", cpu=""):
    """The knob space of `op` at the workload `shape` ("48x40x32", "M=48,N=40,K=32" or
    {"M": 48, "N": 40, "K": 32}): knobs (name, values, help), size (points before
    constraints), default (the configuration the target's traits pick), flops, tensors.
    backend: "cpu", "cuda" or "opencl" (the op's variant); target: "native" or a triple."""
    return Result(_kestrel.space(op, shape, backend, target, cpu))


def _tracker(tracker):
    if tracker is None or isinstance(tracker, str):
        return tracker
    if isinstance(tracker, LocalPool):
        return tracker.tracker
    raise UsageError("tracker must be \"HOST:PORT\" or a kestrel.LocalPool, not %r" % (tracker,))


def profile(op, shape, config=None, *, tracker=None, **options):
    """Compiles one configuration of `op` at `shape` (config: a dict or "mc=64,nr=16"
    of knobs; the others, or all when None, at the target's default), times it on a
    device and returns a Result: status, ok, gflops, cost (median seconds), min_s,
    median_s, mean_s, stddev_s, round_seconds, config, target, device, max_error.

    tracker: "HOST:PORT" or a LocalPool; None starts the embedded pool for this call.
    options: key, token, token_file, tls_ca, no_tls, wait_ms, priority (the pool);
    target ("auto", "native", a triple, "cuda", ...), mcpu, features; number, repeat,
    min_repeat_ms, cooldown_ms, flush_cache, timeout_ms, threads, data_seed (measuring).
    """
    options["tracker"] = _tracker(tracker)
    return Result(_kestrel.profile(op, shape, config, options))


def tune(op=None, shape=None, *, model=None, buckets=None, trials=None, trials_per_task=None, time_budget=None,
         batch=16, db="kestrel.db", strategy="sa", seed=1, callback=None, tracker=None, cost_model=None,
         zero_shot=False, zero_shot_verify=None, **options):
    """Tunes `op` at `shape`, or every task of an ONNX `model`, in a tuning session
    (tuner::TuneSession): proposes configurations with `strategy` (sa, anneal, ga,
    random, grid), compiles and measures them `batch` at a time until `trials` (200;
    earlier sessions in `db` included: running it again resumes) or `time_budget`
    (seconds, or a text such as "15m"), records every measurement in `db` (an SQLite
    path, or a postgresql:// URI), then re-measures the best beside the default.

    model: an ONNX file, tuned as `kestrel tune --model` does: its tasks (at each size of
    buckets=, e.g. "seq=8,32"; block= the NCHWc channels per block; winograd=False keeps
    3x3 layers on the direct kernel, as --no-winograd does) made for the leased
    device's target and interleaved, the trials going to the tasks expected to cut the
    model's latency most, until each has `trials_per_task` (64; no limit with a
    time_budget) or the time budget runs out.

    cost_model: a file of `kestrel cost-model train`: warm-starts the search; with
    zero_shot=True it picks the configuration without searching (without a device when
    the target is known: target="native", a triple, or this machine's), and
    zero_shot_verify=N measures its top N and the default once. zero_shot=True without
    cost_model uses the model Kestrel ships (shipped_cost_model()). With model=, every
    task gets its pick (export(..., model=, zero_shot=True) compiles the same picks).

    callback(progress) is called as the search starts, after the default configuration's
    measurement and after every batch (phase "tuning"), and as the session ends (phases
    "final", "done"), with a dict: trials, total, this_session, failures,
    statuses, best_gflops, default_gflops, best_config, elapsed_s, eta_s, phase. An
    exception it raises stops the session (its devices released, records kept) and
    propagates. Ctrl-C stops at once (the batch in flight is dropped) and raises
    KeyboardInterrupt; records are kept.

    Returns a Result (the form of `kestrel tune --json`, configurations as dicts with
    their text in config_text): best (the recommendation: config, gflops, median_s,
    speedup, implementation, ...), best_config, best_gflops, verdict, passes, trials,
    this_session, stop_reason, default_gflops, final, vendors, zero_shot, session, op,
    workload, target, db, interrupted. For a model: tasks (one such Result per task),
    stop_reason, db, interrupted.

    tracker: "HOST:PORT" or a LocalPool; None starts the embedded pool for this session.
    options: early_stopping, final_top (3, 2 for a model; 0: no final round),
    final_repeat, no_transfer, vendors, compile_threads, reconnect_ms, devices, the
    pool's and the measuring options of profile(), target, mcpu, features: the options
    of `kestrel tune`, spelled with underscores.
    """
    options.update(trials=trials, trials_per_task=trials_per_task, time_budget=time_budget)
    options.update(batch=batch, db=_os.fspath(db), strategy=strategy, seed=seed, tracker=_tracker(tracker),
                   model=None if model is None else _os.fspath(model), buckets=buckets,
                   cost_model=None if cost_model is None else _os.fspath(cost_model), zero_shot=zero_shot,
                   zero_shot_verify=zero_shot_verify)
    out = _kestrel.tune(op or "", shape, options, callback)

    def one(r):
        result = Result(r)
        best = result.get("best")
        result["best"] = Result(best) if best else None
        result["best_config"] = best["config"] if best else None
        result["best_gflops"] = best["gflops"] if best else 0.0
        return result

    if model is not None:
        return Result(model=_os.fspath(model), tasks=[one(r) for r in out["results"]], stop_reason=out["stop_reason"],
                      db=out["db"], interrupted=out["interrupted"])
    result = one(out["results"][0]) if out["results"] else Result(best=None, best_config=None, best_gflops=0.0,
                                                                   trials=0)
    result["db"] = out["db"]
    result["interrupted"] = out["interrupted"]
    return result


def query(tracker="127.0.0.1:9190", token=None, **options):
    """A tracker's pool: tracker, version, uptime_ms, clients, keys (key, free, busy,
    queued) and devices (id, key, name, state, address, lease_holder, info: the
    device's capabilities). options: token_file, tls_ca, no_tls, timeout_ms."""
    options.update(tracker=_tracker(tracker), token=token)
    return Result(_kestrel.query(options))


class LocalPool:
    """The embedded pool kept running across calls: a tracker on loopback and `devices`
    local kestrel-device processes under `key`. Pass it as tracker= to profile, tune
    and query; close() (or leaving a with block) stops them.

        with kestrel.LocalPool() as pool:
            kestrel.tune("gemm", "64x64x64", trials=16, tracker=pool)
            print(kestrel.query(pool))
    """

    def __init__(self, devices=1, key="local"):
        self._pool = _kestrel.LocalPool(devices, key)

    @property
    def tracker(self):
        return self._pool.tracker

    @property
    def key(self):
        return self._pool.key

    def close(self):
        self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "LocalPool(%s)" % ("closed" if self._pool.closed else self._pool.tracker)


# The DataFrame's columns, in order (time: from time_unix_ms, UTC): a record's JSON form
# (`kestrel records export`'s lines) with rounds and final beside round_seconds and
# final_measurement.
RECORD_COLUMNS = [
    "id", "op", "workload", "target", "device_key", "device_model", "device_fingerprint", "device", "config",
    "status", "message", "rounds", "cost", "gflops", "compile_ms", "tool_version", "time_unix_ms", "time",
    "session", "final", "is_default", "implementation", "machine", "recommended", "round_seconds",
    "final_measurement",
]


class Records:
    """The records of a database (read once, oldest first): len(), iteration over dicts,
    to_list(), to_dataframe(). Raises RecordsError when `db` is not a records database
    (a missing file included: nothing is created)."""

    def __init__(self, db, op=None):
        self.db = _os.fspath(db)
        self._rows = [Result(r) for r in _kestrel.read_records(self.db, op or "")]

    def __len__(self):
        return len(self._rows)

    def __iter__(self):
        return iter(self._rows)

    def to_list(self):
        return list(self._rows)

    def to_dataframe(self):
        """One row per record (pandas, imported now): RECORD_COLUMNS. cost is in seconds
        (inf unless ok), time a UTC timestamp, final marks the final re-measurements."""
        import pandas as pd

        frame = pd.DataFrame(self._rows, columns=[c for c in RECORD_COLUMNS if c != "time"])
        frame.insert(RECORD_COLUMNS.index("time"), "time",
                     pd.to_datetime(frame["time_unix_ms"].astype("int64"), unit="ms", utc=True))
        return frame


def records(db, op=None):
    """The records of `db` (of one op when given): a Records."""
    return Records(db, op)


def read_records(db, op=None):
    """The records of `db` as a pandas DataFrame, one row per record (see Records)."""
    return Records(db, op).to_dataframe()


def best(db):
    """The best record per (op, workload, target, device class), as `kestrel best`
    chooses: dicts with op, workload, target, config, gflops, cost, implementation,
    trials, default_is_best, default_gflops, record."""
    return [Result(b) for b in _kestrel.best(_os.fspath(db))]


def export(db, out, *, model=None, buckets=None, target="native", cpu=None, key=None, block=None,
           runtime_dir=None, cost_model=None, zero_shot=False, winograd=True):
    """Writes a kernel library into the folder `out` (model/export.h, as `kestrel
    export` does): libkestrel_kernels.so and .a, kestrel_kernels.h (a dispatcher by
    shape and a typed entry per op), kestrel_abi.h, kestrel_runtime.h, manifest.json and
    the target's libkestrel_rt (this package's for native).

    With model= (an ONNX file; buckets= e.g. "seq=8,32") every task of the model, at its
    best record, else (with cost_model=, a file of `kestrel cost-model train`) the cost
    model's zero-shot pick, else the op's default; zero_shot=True takes the picks of
    the model Kestrel ships (or of cost_model=) and needs no database (a `db` that does
    not exist is read as empty); winograd=False plans the model's 3x3 layers on the
    direct kernel instead of Winograd's (as `kestrel export --no-winograd`; tune with the
    same choice); without model=, every (op, workload) that
    has a best record for the target's triple in `db`. key: only records of that pool key. Returns a
    Result: kernels (op, params, config, origin, gflops, entry), files, runtime_copied,
    runtime_note, notes. Raises RecordsError (no database), ModelError (no record for the
    target, a compile failure, an unwritable folder)."""
    if runtime_dir is None and not _os.environ.get("KESTREL_RUNTIME_DIR") and target == "native" \
            and _os.path.isfile(_os.path.join(_runtime_dir, "libkestrel_rt.so")):
        runtime_dir = _runtime_dir
    options = {"model": None if model is None else _os.fspath(model), "buckets": buckets, "target": target,
               "cpu": cpu, "key": key, "block": block,
               "runtime_dir": None if runtime_dir is None else _os.fspath(runtime_dir),
               "cost_model": None if cost_model is None else _os.fspath(cost_model),
               "zero_shot": bool(zero_shot), "winograd": bool(winograd)}
    return Result(_kestrel.export(_os.fspath(db), _os.fspath(out), options))
