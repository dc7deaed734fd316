#!/usr/bin/env python3
"""Builds ONNX models of real architectures for Kestrel's tests and docs, with no download.

    make_models.py OUTDIR [resnet18] [mobilenetv2] [bert_layer]

writes OUTDIR/resnet18.onnx, OUTDIR/mobilenetv2.onnx and OUTDIR/bert_layer.onnx (all three
when no name is given). The layer shapes are the real architectures'; the weights are random
(numpy, fixed seed per model, scaled so that activations stay of order one), so the same
command always writes the same files. Opset 17, IR version 8: Debian's libonnx 1.12 reads
them. Each model is checked with onnx.checker (with shape inference) before it is written.

- resnet18: input "input" [1,3,224,224] -> "output" [1,1000]. 7x7/2 stem, 3x3/2 max pool
  (pad 1), four stages of two basic blocks (64, 128, 256, 512 channels; the first block of
  stages 2-4 has stride 2 and a 1x1/2 projection), global average pool, Flatten, Gemm
  512->1000. Convolutions carry a bias (no BatchNormalization); Relu; residual Add.
- mobilenetv2: MobileNetV2 1.0 at 224: input "input" [1,3,224,224] -> "output" [1,1000].
  3x3/2 stem (32), 17 inverted residual blocks (expansion 6 except the first, depthwise 3x3,
  linear 1x1 projection, residual Add when the stride is 1 and the channels match),
  1x1 conv to 1280, global average pool, Flatten, Gemm 1280->1000. ReLU6 is Clip(0, 6) with
  min/max inputs.
- bert_layer: one BERT-base encoder layer: input "hidden" [1,seq,768] (seq symbolic) ->
  "output" [1,seq,768]. 12 heads of 64; Q/K/V MatMul+Add, Reshape [1,-1,12,64], Transpose,
  MatMul QK^T, Div by 8, Softmax(-1), MatMul PV, Transpose back, Reshape [1,-1,768], output
  projection, residual Add, LayerNormalization (epsilon 1e-12), FFN 768->3072->768 with GELU
  as x*0.5*(1+Erf(x/1.41421)), residual Add, LayerNormalization.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


class Builder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.initializers = []
        self.counts = {}

    def name(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return f"{base}_{n}" if n else base

    def const(self, base, array):
        name = self.name(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def randn(self, base, shape, std):
        data = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        return self.const(base, data.astype(np.float32))

    def node(self, op, inputs, base, **attrs):
        out = self.name(base)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out + "_node", **attrs))
        return out

    def conv(self, x, cin, cout, k, stride, pad, base, groups=1, gain=2.0):
        fan_in = (cin // groups) * k * k
        w = self.randn(base + "_w", (cout, cin // groups, k, k), np.sqrt(gain / fan_in))
        b = self.randn(base + "_b", (cout,), 0.01)
        return self.node("Conv", [x, w, b], base, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad, pad, pad, pad], group=groups, dilations=[1, 1])

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="kestrel make_models.py")
        model.ir_version = IR_VERSION
        return model


def resnet18():
    b = Builder(seed=18)
    x = b.conv("input", 3, 64, 7, 2, 3, "conv1")
    x = b.node("Relu", [x], "relu1")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512], start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            base = f"layer{stage}.{block}"
            y = b.conv(x, cin, cout, 3, stride, 1, base + ".conv1")
            y = b.node("Relu", [y], base + ".relu1")
            # The second conv of a block is scaled down so that the residual sums (there is
            # no BatchNormalization) keep activations of order one through 8 blocks.
            y = b.conv(y, cout, cout, 3, 1, 1, base + ".conv2", gain=0.5)
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = b.conv(x, cin, cout, 1, stride, 0, base + ".downsample", gain=1.0)
            y = b.node("Add", [y, shortcut], base + ".add")
            x = b.node("Relu", [y], base + ".relu2")
            cin = cout
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    w = b.randn("fc_w", (1000, 512), np.sqrt(1.0 / 512))
    bias = b.randn("fc_b", (1000,), 0.01)
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["output"], name="fc", transB=1))
    return b.model("resnet18",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])])


def mobilenetv2():
    b = Builder(seed=2)
    lo = b.const("relu6_min", np.array(0.0, dtype=np.float32))
    hi = b.const("relu6_max", np.array(6.0, dtype=np.float32))

    def relu6(x, base):
        return b.node("Clip", [x, lo, hi], base)

    x = relu6(b.conv("input", 3, 32, 3, 2, 1, "features.0"), "features.0.relu6")
    cin = 32
    # (expansion t, output channels c, repeats n, first stride s): the paper's Table 2.
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    index = 1
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            base = f"features.{index}"
            hidden = cin * t
            y = x
            if t != 1:
                y = relu6(b.conv(y, cin, hidden, 1, 1, 0, base + ".expand"), base + ".expand.relu6")
            y = b.conv(y, hidden, hidden, 3, stride, 1, base + ".dw", groups=hidden)
            y = relu6(y, base + ".dw.relu6")
            y = b.conv(y, hidden, c, 1, 1, 0, base + ".project", gain=1.0)
            if stride == 1 and cin == c:
                y = b.node("Add", [y, x], base + ".add")
            x = y
            cin = c
            index += 1
    x = relu6(b.conv(x, cin, 1280, 1, 1, 0, f"features.{index}"), f"features.{index}.relu6")
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    w = b.randn("classifier_w", (1000, 1280), np.sqrt(1.0 / 1280))
    bias = b.randn("classifier_b", (1000,), 0.01)
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["output"], name="classifier",
                                    transB=1))
    return b.model("mobilenetv2",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])])


def bert_layer():
    hidden_size, heads, head_dim, ffn = 768, 12, 64, 3072
    b = Builder(seed=768)

    def linear(x, cin, cout, base):
        w = b.randn(base + "_w", (cin, cout), 0.02)
        bias = b.randn(base + "_b", (cout,), 0.02)
        y = b.node("MatMul", [x, w], base + ".matmul")
        return b.node("Add", [y, bias], base + ".add")

    def layer_norm(x, base):
        gamma = b.const(base + "_gamma", (1.0 + 0.1 * b.rng.standard_normal(
            hidden_size, dtype=np.float32)).astype(np.float32))
        beta = b.randn(base + "_beta", (hidden_size,), 0.1)
        return b.node("LayerNormalization", [x, gamma, beta], base, axis=-1, epsilon=1e-12)

    heads_shape = b.const("heads_shape", np.array([1, -1, heads, head_dim], dtype=np.int64))
    merged_shape = b.const("merged_shape", np.array([1, -1, hidden_size], dtype=np.int64))

    def split_heads(x, base, perm):
        y = b.node("Reshape", [x, heads_shape], base + ".reshape")
        return b.node("Transpose", [y], base + ".transpose", perm=perm)

    x = "hidden"
    q = split_heads(linear(x, hidden_size, hidden_size, "query"), "query", [0, 2, 1, 3])
    k = split_heads(linear(x, hidden_size, hidden_size, "key"), "key", [0, 2, 3, 1])
    v = split_heads(linear(x, hidden_size, hidden_size, "value"), "value", [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], "attention.scores")
    scale = b.const("attention.scale", np.array(8.0, dtype=np.float32))
    scores = b.node("Div", [scores, scale], "attention.scaled")
    probs = b.node("Softmax", [scores], "attention.softmax", axis=-1)
    context = b.node("MatMul", [probs, v], "attention.context")
    context = b.node("Transpose", [context], "attention.merge", perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, merged_shape], "attention.reshape")
    attn = linear(context, hidden_size, hidden_size, "attention.output")
    attn = b.node("Add", [attn, x], "attention.residual")
    attn = layer_norm(attn, "attention.layernorm")

    h = linear(attn, hidden_size, ffn, "intermediate")
    # GELU as BERT's exporters write it: x * 0.5 * (1 + erf(x / sqrt(2))).
    sqrt2 = b.const("gelu.sqrt2", np.array(1.41421, dtype=np.float32))
    one = b.const("gelu.one", np.array(1.0, dtype=np.float32))
    half = b.const("gelu.half", np.array(0.5, dtype=np.float32))
    g = b.node("Div", [h, sqrt2], "gelu.div")
    g = b.node("Erf", [g], "gelu.erf")
    g = b.node("Add", [g, one], "gelu.add")
    g = b.node("Mul", [h, g], "gelu.mul")
    g = b.node("Mul", [g, half], "gelu.half")
    out = linear(g, ffn, hidden_size, "output")
    out = b.node("Add", [out, attn], "output.residual")
    gamma = b.const("output.layernorm_gamma", (1.0 + 0.1 * b.rng.standard_normal(
        hidden_size, dtype=np.float32)).astype(np.float32))
    beta = b.randn("output.layernorm_beta", (hidden_size,), 0.1)
    b.nodes.append(helper.make_node("LayerNormalization", [out, gamma, beta], ["output"],
                                    name="output.layernorm", axis=-1, epsilon=1e-12))
    return b.model(
        "bert_layer",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "seq", hidden_size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, "seq", hidden_size])])


MODELS = {"resnet18": resnet18, "mobilenetv2": mobilenetv2, "bert_layer": bert_layer}


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(f"usage: {argv[0]} OUTDIR [{'] ['.join(MODELS)}]", file=sys.stderr)
        return 2
    outdir = argv[1]
    names = argv[2:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"make_models: unknown model {unknown[0]!r} (known: {', '.join(MODELS)})",
              file=sys.stderr)
        return 2
    os.makedirs(outdir, exist_ok=True)
    for name in names:
        model = MODELS[name]()
        onnx.checker.check_model(model, full_check=True)
        path = os.path.join(outdir, name + ".onnx")
        tmp = path + ".tmp"
        onnx.save(model, tmp)
        os.replace(tmp, path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
