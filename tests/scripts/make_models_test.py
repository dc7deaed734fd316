#!/usr/bin/env python3
"""Tests scripts/make_models.py: the models pass onnx.checker at opset 17 / IR 8, are the
real architectures (parameter counts equal torchvision's ResNet-18 and MobileNetV2 once
each BatchNormalization's 2 x channels are counted as the conv's 1 x channels of bias;
BERT-base's 7,087,872 per encoder layer), have the documented inputs and outputs (a
symbolic "seq" for the BERT layer), and are the same bytes on every run (fixed seeds).
Exits 77 (skipped) when onnx or numpy is not importable, 1 under KESTREL_REQUIRE_PYTHON=1 (CI)."""

import hashlib
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as error:
    must = os.environ.get("KESTREL_REQUIRE_PYTHON") == "1"
    print(f"{'FAIL' if must else 'skipped'}: {error.name} is not importable with {sys.executable} "
          "(run scripts/setup-python.sh)")
    sys.exit(1 if must else 77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "make_models.py")


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def check(path, name):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    if model.ir_version != 8:
        fail(f"{name}: IR version {model.ir_version}, not 8")
    opsets = {o.domain: o.version for o in model.opset_import}
    if opsets.get("", opsets.get("ai.onnx")) != 17:
        fail(f"{name}: opset {opsets}, not 17")
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    params = sum(a.size for a in inits.values() if a.dtype == np.float32 and a.ndim > 0)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    conv_bias = sum(inits[n.input[2]].size for n in convs)
    return model, params, conv_bias, convs


def main():
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([sys.executable, SCRIPT, out], capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"make_models.py failed: {run.stderr}")
        model, params, bias, convs = check(os.path.join(out, "resnet18.onnx"), "resnet18")
        if params + bias != 11689512 or len(convs) != 20:
            fail(f"resnet18: {params} parameters + {bias} conv biases, {len(convs)} convs "
                 "(torchvision: 11,689,512 with BN, 20 convs)")
        if dims(model.graph.input[0]) != [1, 3, 224, 224] or dims(model.graph.output[0]) != [1, 1000]:
            fail("resnet18: input/output shapes")
        model, params, bias, convs = check(os.path.join(out, "mobilenetv2.onnx"), "mobilenetv2")
        depthwise = [n for n in convs if any(a.name == "group" and a.i > 1 for a in n.attribute)]
        if params + bias != 3504872 or len(convs) != 52 or len(depthwise) != 17:
            fail(f"mobilenetv2: {params} parameters + {bias} conv biases, {len(convs)} convs, "
                 f"{len(depthwise)} depthwise (torchvision: 3,504,872 with BN, 52 convs, 17 depthwise)")
        if sum(1 for n in model.graph.node if n.op_type == "Clip") != 35:
            fail("mobilenetv2: ReLU6 (Clip) count is not 35")
        model, params, bias, convs = check(os.path.join(out, "bert_layer.onnx"), "bert_layer")
        if params != 7087872:
            fail(f"bert_layer: {params} parameters (BERT-base encoder layer: 7,087,872)")
        if model.graph.input[0].name != "hidden" or dims(model.graph.input[0]) != [1, "seq", 768]:
            fail(f"bert_layer: input {model.graph.input[0].name} {dims(model.graph.input[0])}")
        if dims(model.graph.output[0]) != [1, "seq", 768]:
            fail("bert_layer: output shape")
        ops = [n.op_type for n in model.graph.node]
        for op, count in [("Softmax", 1), ("LayerNormalization", 2), ("Erf", 1), ("MatMul", 8)]:
            if ops.count(op) != count:
                fail(f"bert_layer: {ops.count(op)} {op}, expected {count}")

        digests = {f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest() for f in os.listdir(out)}
        run = subprocess.run([sys.executable, SCRIPT, out, "bert_layer"], capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"make_models.py bert_layer failed: {run.stderr}")
        again = hashlib.sha256(open(os.path.join(out, "bert_layer.onnx"), "rb").read()).hexdigest()
        if again != digests["bert_layer.onnx"]:
            fail("bert_layer.onnx differs between two runs (seeds not fixed)")
        bad = subprocess.run([sys.executable, SCRIPT, out, "vgg16"], capture_output=True, text=True)
        if bad.returncode != 2 or "unknown model 'vgg16'" not in bad.stderr:
            fail("an unknown model name is not refused by name")
    print("make_models: checked, real parameter counts, documented inputs and outputs, reproducible")
    return 0


if __name__ == "__main__":
    sys.exit(main())
