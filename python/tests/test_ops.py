# kestrel.version, kestrel.ops, kestrel.op and kestrel.space: the op library as `kestrel ops` shows it.
import math
import re

import kestrel


def test_version_is_the_libraries():
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", kestrel.version())


def test_ops_lists_the_builtin_ops_with_their_parameters():
    ops = {o["name"]: o for o in kestrel.ops()}
    assert {"gemm", "conv2d", "batch_matmul"} <= set(ops)
    gemm = ops["gemm"]
    assert [p["name"] for p in gemm["params"]][:3] == ["M", "N", "K"]
    assert "cpu" in gemm["backends"]
    assert gemm["description"]
    assert kestrel.op("gemm")["name"] == "gemm"


def test_space_gives_the_knobs_their_values_and_the_size():
    s = kestrel.space("gemm", {"M": 48, "N": 40, "K": 32})
    assert s.op == "gemm"
    assert s.workload == "K=32,M=48,N=40"
    assert s.params == {"M": 48, "N": 40, "K": 32}
    assert s.flops == 2 * 48 * 40 * 32
    assert s.knobs, "gemm has knobs"
    assert s.size == math.prod(len(k["values"]) for k in s.knobs)
    assert set(s.default) == {k["name"] for k in s.knobs}
    for k in s.knobs:
        assert s.default[k["name"]] in k["values"]
    assert [t["role"] for t in s.tensors][-1] == "output"


def test_space_takes_the_shape_as_text_too():
    a = kestrel.space("gemm", "48x40x32")
    b = kestrel.space("gemm", "M=48,N=40,K=32")
    assert a.workload == b.workload == "K=32,M=48,N=40"
    assert a.size == b.size and a.default == b.default
