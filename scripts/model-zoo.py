#!/usr/bin/env python3
"""Real ONNX exports from torch and transformers, and what Kestrel does with each (issue 28).

    model-zoo.py --tier small [--out DIR] [--only NAME,...]   (venv: scripts/setup-zoo.sh)
    model-zoo.py --tier full  [--out DIR] [--only NAME,...]
    model-zoo.py --check DIR [--kestrel BIN] [--results FILE] [--repeat R] [--probe]
    model-zoo.py --markdown RESULTS.json [--full]

Export (runs under the venv of scripts/setup-zoo.sh): every model is exported the way a
user writes it, with random weights (nothing is downloaded), batch 1, torch.manual_seed(0),
model.eval(), by BOTH of torch's exporters:

- NAME.legacy.onnx: torch.onnx.export(model, args, f, dynamo=False, opset_version=17,
  input_names=..., output_names=...[, dynamic_axes=...]) (the TorchScript exporter).
- NAME.dynamo.onnx: torch.onnx.export(model, args, f, input_names=..., output_names=...
  [, dynamic_axes=...]) with every other argument at torch's default (the torch.export-based
  exporter; its defaults choose the opset and IR version, and external_data=True writes
  the weights of 256 bytes or more to NAME.dynamo.onnx.data beside the model).
- NAME.dynamo-opset17.onnx (a few models, OPSET17_TOO): the same with opset_version=17,
  what a user tries after Kestrel refuses the default opset.
Models whose forward takes the inputs by keyword (transformers' text models) are called
with torch.onnx.export(model, (), f, kwargs={...}); when an exporter fails on the model as
it is, the export is retried with the model wrapped in a module that takes exactly the
inputs and passes them by keyword (the usual user fix), and the sidecar keeps both.

Beside each export: NAME.EXPORTER.json (the exporter, the library versions, ir_version,
opsets, inputs and outputs with dtype and shape, the operator counts, the largest
difference between ONNX Runtime's and torch's outputs, or the exporter's error: an
exporter failing is a recorded result, the script goes on) and, for the small tier only
and only when it stays under 200 KB, NAME.EXPORTER.npz: one input set (keys "input:NAME")
and ONNX Runtime's outputs for it ("output:NAME"). Image inputs are torch.randn; token ids
are in the vocabulary ([CLS] ... [SEP] for BERT-style models) with an attention mask of
ones. Weights: as the constructors initialise them, except that every BatchNorm gets random
running statistics and affine parameters and every other parameter whose elements are all
equal (LayerNorm's ones, zero biases) gets N(0, 0.02) added, so that the exports look like
those of trained weights; cnn_bn_tiny alone keeps the pristine initialisation (zero conv
biases, default BatchNorm), which is what makes the legacy exporter share initializers
through Identity nodes.

--tier small writes tests/data/zoo/ (by default): the architectures as the libraries define
them, scaled down through their constructors' own width/depth/config arguments so that the
files can be checked in. --tier full writes build/zoo/ (by default; never committed):
resnet50, efficientnet_b0, mobilenet_v3_small at 224x224 and a bert-base-uncased config at
sequence 128.

--check DIR runs `kestrel tasks --model F --json` and `kestrel run --model F --json` on
every DIR/*.onnx (symbolic dimensions bound with one --shape "a=1;b=16" to the sizes the
sidecar recorded), writes one JSON object per file to --results (default:
build/zoo-check/<DIR with '/' as '-'>.json, e.g. build/zoo-check/tests-data-zoo.json) and
prints a markdown table. It needs no torch; --probe needs onnx (run it with the zoo venv):
a file Kestrel refuses is then also tried as patched copies in a temporary directory, each
step following the advice of the refusal before it (ir_version set to 8 with the weights
still external; then the weights inlined; then onnx.version_converter.convert_version(model,
17)), until Kestrel reads the copy or the conversion fails: what stands behind the first
refusal.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NPZ_LIMIT = 200 * 1024
SEED = 0


# --------------------------------------------------------------------------------------
# Models. Each builder returns a dict: module, args (tuple of tensors), input_names,
# output_names, dynamic_axes (or None), description, pristine (bool: keep the init).
# --------------------------------------------------------------------------------------

def image(size, channels=3):
    import torch
    return torch.randn(1, channels, size, size)


def tokens(vocab, seq, cls_sep=True):
    """Token ids in the vocabulary ([CLS]=101 first and [SEP]=102 last for BERT-style
    vocabularies) and an attention mask of ones, both int64 [1, seq]."""
    import torch
    ids = torch.randint(1000 if vocab > 2000 else 1, vocab, (1, seq), dtype=torch.int64)
    if cls_sep:
        ids[0, 0] = 101
        ids[0, -1] = 102
    return ids, torch.ones(1, seq, dtype=torch.int64)


def cnn_bn_tiny():
    import torch
    from torch import nn

    class TinyCnn(nn.Module):
        """Conv+BN+ReLU twice, a 1x1 conv, global pool, linear; conv and linear biases
        zero and BatchNorm at its default state, as after construction."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(8)
            self.conv3 = nn.Conv2d(8, 8, 1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(8, 8)
            for m in (self.conv1, self.conv2, self.conv3, self.fc):
                nn.init.zeros_(m.bias)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            x = torch.relu(self.bn2(self.conv2(x)))
            x = self.conv3(x) + x
            return self.fc(torch.flatten(self.pool(x), 1))

    return dict(module=TinyCnn(), args=(image(32),), input_names=["input"],
                output_names=["logits"], pristine=True,
                description="tiny CNN: Conv(zero bias)+BatchNorm(default)+ReLU x2, 1x1 conv, "
                            "residual Add, global pool, Linear; 3x32x32")


def embedding_tiny():
    """The smallest model with an int64 input: token ids through torch's Embedding, then a
    Linear and ReLU (the front of every text model, without attention)."""
    import torch
    from torch import nn
    model = nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 16), nn.ReLU())
    ids = torch.randint(0, 100, (1, 16), dtype=torch.int64)
    return dict(module=model, args=(ids,), input_names=["input_ids"], output_names=["hidden"],
                description="torch nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 16), "
                            "nn.ReLU()); input_ids int64 [1,16]")


def mobilenet_v3_small_w025(size=64, classes=100):
    from torchvision.models import mobilenetv3
    setting, last = mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    model = mobilenetv3.MobileNetV3(setting, last, num_classes=classes)
    return dict(module=model, args=(image(size),), input_names=["input"],
                output_names=["logits"],
                description=f"torchvision MobileNetV3(_mobilenet_v3_conf('mobilenet_v3_small', "
                            f"width_mult=0.25), num_classes={classes}); 3x{size}x{size}")


def efficientnet_b0_w025(size=64, classes=100):
    from torchvision.models import efficientnet
    setting, last = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25,
                                                    depth_mult=0.25)
    model = efficientnet.EfficientNet(setting, dropout=0.2, last_channel=last,
                                      num_classes=classes)
    return dict(module=model, args=(image(size),), input_names=["input"],
                output_names=["logits"],
                description=f"torchvision EfficientNet(_efficientnet_conf('efficientnet_b0', "
                            f"width_mult=0.25, depth_mult=0.25), num_classes={classes}); "
                            f"3x{size}x{size}")


def resnet_blocks_tiny(size=64, classes=10):
    """torchvision's ResNet class fixes its widths at 64..512 (layer4 alone is 3.7M
    parameters), so this one stacks torchvision's own BasicBlock and Bottleneck modules,
    with their downsample branches, behind the ResNet stem at 16 channels."""
    from torch import nn
    from torchvision.models.resnet import BasicBlock, Bottleneck, conv1x1

    def down(cin, cout, stride):
        return nn.Sequential(conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))

    model = nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(16),
        nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1),
        BasicBlock(16, 16),
        BasicBlock(16, 32, stride=2, downsample=down(16, 32, 2)),
        Bottleneck(32, 16, stride=2, downsample=down(32, 64, 2)),
        Bottleneck(64, 16),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1), nn.Linear(64, classes))
    return dict(module=model, args=(image(size),), input_names=["input"],
                output_names=["logits"],
                description="torchvision ResNet stem + BasicBlock(16,16), BasicBlock(16,32,s2), "
                            f"Bottleneck(32,16,s2), Bottleneck(64,16), pool, Linear; 3x{size}x{size}")


def bert(config_kwargs, seq, dynamic, description):
    from transformers import BertConfig, BertModel
    config = BertConfig(**config_kwargs)
    model = BertModel(config)
    ids, mask = tokens(config.vocab_size, seq)
    axes = None
    if dynamic:
        axes = {"input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "last_hidden_state": {0: "batch", 1: "sequence"},
                "pooler_output": {0: "batch"}}
    return dict(module=model, args=(ids, mask), input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state", "pooler_output"], dynamic_axes=axes,
                by_keyword=True,
                description=description + f" ({config._attn_implementation} attention)")


TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, vocab_size=1000, max_position_embeddings=64)


def bert_tiny():
    return bert(TINY_BERT, 16, False,
                "transformers BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, "
                "num_attention_heads=2, intermediate_size=64, vocab_size=1000, "
                "max_position_embeddings=64)); input_ids + attention_mask int64 [1,16]")


def bert_tiny_dyn():
    return bert(TINY_BERT, 16, True,
                "bert_tiny exported with dynamic_axes batch and sequence on both inputs "
                "(as the transformers/ONNX tutorials write it); traced at [1,16]")


def distilbert_tiny():
    from transformers import DistilBertConfig, DistilBertModel
    config = DistilBertConfig(vocab_size=1000, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                              max_position_embeddings=64)
    ids, mask = tokens(config.vocab_size, 16)
    return dict(module=DistilBertModel(config), args=(ids, mask), by_keyword=True,
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"],
                description="transformers DistilBertModel(DistilBertConfig(vocab_size=1000, dim=32, "
                            "n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)); "
                            f"int64 [1,16] ({config._attn_implementation} attention)")


def vit_tiny():
    from transformers import ViTConfig, ViTModel
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, image_size=32, patch_size=8)
    return dict(module=ViTModel(config), args=(image(32),), input_names=["pixel_values"],
                output_names=["last_hidden_state", "pooler_output"],
                description="transformers ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, "
                            "num_attention_heads=2, intermediate_size=64, image_size=32, "
                            f"patch_size=8)); 3x32x32 ({config._attn_implementation} attention)")


def gpt2_tiny():
    import torch
    from transformers import GPT2Config, GPT2Model
    config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        use_cache=False)
    ids, mask = tokens(config.vocab_size, 16, cls_sep=False)
    return dict(module=GPT2Model(config), args=(ids, mask), by_keyword=True,
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"],
                description="transformers GPT2Model(GPT2Config(vocab_size=1000, n_positions=64, "
                            "n_embd=32, n_layer=2, n_head=2, use_cache=False)); int64 [1,16] "
                            f"(causal; {config._attn_implementation} attention)")


def resnet50():
    from torchvision.models import resnet50 as build
    return dict(module=build(), args=(image(224),), input_names=["input"],
                output_names=["logits"], description="torchvision resnet50(); 3x224x224")


def efficientnet_b0():
    from torchvision.models import efficientnet_b0 as build
    return dict(module=build(), args=(image(224),), input_names=["input"],
                output_names=["logits"], description="torchvision efficientnet_b0(); 3x224x224")


def mobilenet_v3_small():
    from torchvision.models import mobilenet_v3_small as build
    return dict(module=build(), args=(image(224),), input_names=["input"],
                output_names=["logits"],
                description="torchvision mobilenet_v3_small(); 3x224x224")


def bert_base():
    return bert({}, 128, False,
                "transformers BertModel(BertConfig()) (the bert-base-uncased shape, random "
                "init); input_ids + attention_mask int64 [1,128]")


TIERS = {
    "small": [cnn_bn_tiny, embedding_tiny, mobilenet_v3_small_w025, efficientnet_b0_w025, resnet_blocks_tiny,
              bert_tiny, bert_tiny_dyn, distilbert_tiny, vit_tiny, gpt2_tiny],
    "full": [resnet50, efficientnet_b0, mobilenet_v3_small, bert_base],
}
# Also exported by the dynamo exporter with opset_version=17, what a user tries after
# Kestrel's "opset N is not supported: Kestrel reads opsets 11 to 17" (a few small models
# only, to keep the checked-in files small).
OPSET17_TOO = {"cnn_bn_tiny", "bert_tiny", "vit_tiny", "resnet50", "bert_base"}
DEFAULT_OUT = {"small": os.path.join(ROOT, "tests", "data", "zoo"),
               "full": os.path.join(ROOT, "build", "zoo")}


# --------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------

def trained_like(module):
    """BatchNorm running statistics and affine parameters at random; every other
    parameter whose elements are all equal gets N(0, 0.02) noise (seeded by the caller)."""
    import torch
    from torch import nn
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0.0, 0.1)
        for p in module.parameters():
            if p.numel() > 1 and torch.all(p == p.flatten()[0]):
                p.add_(torch.randn_like(p) * 0.02)


def flat_outputs(value):
    """torch outputs (a tensor, tuple, or transformers ModelOutput) as a list of arrays."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value.detach().numpy()]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    out = []
    for v in value:
        out.extend(flat_outputs(v))
    return out


def dtype_name(elem_type):
    import onnx
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "?"


def value_info(v):
    t = v.type.tensor_type
    dims = []
    for d in t.shape.dim:
        dims.append(d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?"))
    return {"name": v.name, "dtype": dtype_name(t.elem_type), "shape": dims}


def describe(path):
    """ir_version, opsets, inputs, outputs, operator counts, sizes of an exported file."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    ops = {}
    for n in m.graph.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        ops[key] = ops.get(key, 0) + 1
    functions = [f"{f.domain}::{f.name}" for f in m.functions]
    external = sum(1 for t in m.graph.initializer
                   if t.data_location == onnx.TensorProto.EXTERNAL)
    data_files = sorted(os.path.basename(p) for p in glob.glob(path + ".data"))
    return {
        "ir_version": m.ir_version,
        "opsets": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "inputs": [value_info(v) for v in m.graph.input],
        "outputs": [value_info(v) for v in m.graph.output],
        "nodes": len(m.graph.node),
        "op_types": dict(sorted(ops.items())),
        "functions": functions,
        "initializers": len(m.graph.initializer),
        "external_initializers": external,
        "bytes": os.path.getsize(path),
        "data_files": {f: os.path.getsize(os.path.join(os.path.dirname(path), f))
                       for f in data_files},
    }


def symbols_of(info, feeds):
    """The model's symbolic input dimensions bound to the sizes of the traced inputs."""
    symbols = {}
    for inp in info["inputs"]:
        if inp["name"] not in feeds:
            continue
        for axis, d in enumerate(inp["shape"]):
            if isinstance(d, str) and d != "?":
                symbols[d] = int(feeds[inp["name"]].shape[axis])
    return symbols


def export_one(spec, name, exporter, out_dir, tier, versions):
    import numpy as np
    import onnxruntime as ort
    import torch

    base = f"{name}.{exporter}"
    path = os.path.join(out_dir, base + ".onnx")
    for stale in glob.glob(os.path.join(out_dir, base + ".*")):
        os.remove(stale)
    args_text = "(), f, kwargs={...}" if spec.get("by_keyword") else "args, f"
    call = {"legacy": f"torch.onnx.export(model, {args_text}, dynamo=False, opset_version=17, "
                      "input_names, output_names",
            "dynamo": f"torch.onnx.export(model, {args_text}, input_names, output_names",
            "dynamo-opset17": f"torch.onnx.export(model, {args_text}, opset_version=17, "
                              "input_names, output_names"}[exporter]
    call += ", dynamic_axes)" if spec.get("dynamic_axes") else ")"
    record = {"name": base, "model": name, "tier": tier, "exporter": exporter, "call": call,
              "description": spec["description"], "seed": SEED,
              "weights": "constructor init" if spec.get("pristine") else
                         "constructor init, BatchNorm and constant parameters randomized",
              "parameters": sum(p.numel() for p in spec["module"].parameters()),
              **versions, "ok": False, "error": None}
    kwargs = dict(input_names=spec["input_names"], output_names=spec["output_names"])
    if spec.get("dynamic_axes"):
        kwargs["dynamic_axes"] = spec["dynamic_axes"]
    if exporter == "legacy":
        kwargs.update(dynamo=False, opset_version=17)
    elif exporter == "dynamo-opset17":
        kwargs.update(opset_version=17)
    start = time.time()
    try:
        try:
            if spec.get("by_keyword"):
                quiet_export(spec["module"], (), path,
                             dict(kwargs, kwargs=dict(zip(spec["input_names"], spec["args"]))))
            else:
                quiet_export(spec["module"], spec["args"], path, kwargs)
        except Exception as error:  # any exporter failure is a result to record
            # What users then write: a module whose forward takes exactly the inputs and
            # passes them by keyword. The first error stays in the record.
            record["first_error"] = error_text(error)
            print(f"model-zoo: {base}: export failed ({record['first_error']}); "
                  "retrying with the model wrapped (inputs passed by keyword)", file=sys.stderr)
            for stale in glob.glob(os.path.join(out_dir, base + ".onnx*")):
                os.remove(stale)
            quiet_export(KeywordWrapper(spec["module"], spec["input_names"]), spec["args"],
                         path, kwargs)
            record["workaround"] = ("exported as a wrapper module whose forward(" +
                                    ", ".join(spec["input_names"]) + ") calls model(" +
                                    ", ".join(f"{n}={n}" for n in spec["input_names"]) + ")")
    except Exception as error:  # any exporter failure is a result to record
        record["error"] = error_text(error)
        record["export_seconds"] = round(time.time() - start, 2)
        print(f"model-zoo: {base}: export failed: {record['error']}", file=sys.stderr)
        write_json(os.path.join(out_dir, base + ".json"), record)
        return record
    record["export_seconds"] = round(time.time() - start, 2)
    record["file"] = base + ".onnx"
    record.update(describe(path))

    feeds = {n: a.numpy() for n, a in zip(spec["input_names"], spec["args"])}
    record["symbols"] = symbols_of(record, feeds)
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(path, sess_options=options,
                                       providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        ort_out = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
        record["ort_unused_inputs"] = sorted(set(feeds) - wanted)
        names = [o.name for o in session.get_outputs()]
        ref = spec["reference"]
        diffs = [float(np.max(np.abs(a.astype(np.float64) - b)))
                 for a, b in zip(ort_out, ref) if a.shape == b.shape]
        record["ort_vs_torch_max_abs"] = max(diffs) if len(diffs) == len(ref) else None
        record["torch_max_abs"] = max(float(np.max(np.abs(b))) for b in ref)
        record["ok"] = True
        if tier == "small":
            arrays = {f"input:{k}": v for k, v in feeds.items()}
            arrays.update({f"output:{n}": np.asarray(v) for n, v in zip(names, ort_out)})
            npz = os.path.join(out_dir, base + ".npz")
            np.savez(npz, **arrays)
            if os.path.getsize(npz) > NPZ_LIMIT:
                record["npz"] = None
                record["npz_omitted"] = f"{os.path.getsize(npz)} bytes > {NPZ_LIMIT}"
                os.remove(npz)
            else:
                record["npz"] = base + ".npz"
    except Exception as error:
        record["error"] = f"onnxruntime: {type(error).__name__}: {str(error).strip()[:500]}"
    print(f"model-zoo: {base}: IR {record['ir_version']}, opsets {record['opsets']}, "
          f"{record['bytes'] + sum(record['data_files'].values())} bytes, "
          f"{record['export_seconds']} s, ort vs torch {record.get('ort_vs_torch_max_abs')}",
          file=sys.stderr)
    write_json(os.path.join(out_dir, base + ".json"), record)
    return record


def error_text(error):
    lines = [l for l in str(error).strip().splitlines() if l.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:600]


def quiet_export(module, args, path, kwargs):
    import warnings
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, **kwargs)


def _keyword_wrapper_class():
    from torch import nn

    class KeywordWrapper(nn.Module):
        """forward(*inputs) -> model(**{name: input}): the usual fix when an exporter trips
        over a model's optional arguments."""

        def __init__(self, model, names):
            super().__init__()
            self.model = model
            self.names = list(names)

        def forward(self, *inputs):
            return self.model(**dict(zip(self.names, inputs)))

    return KeywordWrapper


def KeywordWrapper(model, names):  # noqa: N802 - a class made on first use (torch import)
    return _keyword_wrapper_class()(model, names)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1, sort_keys=False)
        f.write("\n")


def export_tier(tier, out_dir, only):
    import numpy as np
    import onnx
    import onnxruntime
    import torch
    versions = {"torch": torch.__version__, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__}
    for mod in ("torchvision", "transformers", "onnxscript"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # pragma: no cover - recorded as missing
            versions[mod] = None
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(out_dir, exist_ok=True)
    summary = []
    tier_start = time.time()
    for build in TIERS[tier]:
        name = build.__name__
        if only and name not in only:
            continue
        torch.manual_seed(SEED)
        np.random.seed(SEED)
        try:
            spec = build()
            model = spec["module"]
            if not spec.get("pristine"):
                trained_like(model)
            model.eval()
            with torch.no_grad():
                if spec.get("by_keyword"):
                    out = model(**dict(zip(spec["input_names"], spec["args"])))
                else:
                    out = model(*spec["args"])
                spec["reference"] = flat_outputs(out)
        except Exception as error:  # the model itself does not build or run: recorded
            record = {"name": name, "model": name, "tier": tier, **versions, "ok": False,
                      "error": "building or running the torch model: " + error_text(error)}
            print(f"model-zoo: {name}: {record['error']}", file=sys.stderr)
            write_json(os.path.join(out_dir, name + ".json"), record)
            summary.append(record)
            continue
        exporters = ["legacy", "dynamo"]
        if name in OPSET17_TOO:
            exporters.append("dynamo-opset17")
        for exporter in exporters:
            torch.manual_seed(SEED)
            with torch.no_grad():
                summary.append(export_one(spec, name, exporter, out_dir, tier, versions))
    keys = ("name", "ok", "error", "first_error", "ir_version", "opsets", "bytes", "data_files",
            "export_seconds", "ort_vs_torch_max_abs", "torch_max_abs")
    everything = []  # every sidecar in the directory, also those of earlier --only runs
    for side in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        if os.path.basename(side) != "summary.json":
            with open(side) as f:
                everything.append(json.load(f))
    write_json(os.path.join(out_dir, "summary.json"),
               {"tier": tier, **versions, "seconds_last_run": round(time.time() - tier_start, 1),
                "exports": [{k: r.get(k) for k in keys} for r in everything]})
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "*")))
    print(f"model-zoo: tier {tier}: {len(summary)} exports, {sum(r['ok'] for r in summary)} ok, "
          f"{total} bytes in {out_dir}, {time.time() - tier_start:.1f} s", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------
# Kestrel check
# --------------------------------------------------------------------------------------

def first_error_line(text):
    lines = [l.strip() for l in text.splitlines()
             if l.strip() and not l.strip().startswith("(see ")]
    for l in lines:
        if re.search(r"error|refus|cannot|not |fail|unsupported|invalid", l, re.I):
            return l[:400]
    return lines[-1][:400] if lines else ""


def run(cmd, timeout):
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - start
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", f"timed out after {timeout} s", time.time() - start


def kestrel_tasks(kestrel, path, shape_args, timeout):
    rc, out, err, secs = run([kestrel, "tasks", "--model", path, "--json", *shape_args], timeout)
    result = {"rc": rc, "seconds": round(secs, 2)}
    if rc == 0:
        try:
            t = json.loads(out)
            plan = t["plans"][0]
            total = plan.get("total_flops") or 0.0
            result.update({
                "tasks": len(plan["tasks"]),
                "instances": sum(x["occurrences"] for x in plan["tasks"]),
                "tuned_share": (plan["tuned_flops"] / total) if total else None,
                "total_gflop": total / 1e9,
                "untuned": [{"op_type": u["op_type"], "reason": u["reason"],
                             "occurrences": u["occurrences"], "share": u["share"]}
                            for u in plan["untuned"]],
                "patterns": sorted({x["pattern"] for x in plan["tasks"]}),
            })
        except (ValueError, KeyError, IndexError) as error:
            result["error"] = f"unreadable --json output: {error}"
    else:
        result["error"] = first_error_line(err or out)
    return result


def kestrel_run(kestrel, path, shape_args, repeat, python, timeout):
    cmd = [kestrel, "run", "--model", path, "--json", "--repeat", str(repeat), *shape_args]
    if python:
        cmd += ["--python", python]
    rc, out, err, secs = run(cmd, timeout)
    result = {"rc": rc, "seconds": round(secs, 2)}
    try:
        r = json.loads(out) if out.strip() else None
    except ValueError:
        r = None
    if r:
        lat = r.get("latency_ms", {})
        result.update({"ok": r.get("ok"), "checked": r.get("checked"),
                       "task_steps": r.get("task_steps"),
                       "portable_steps": r.get("portable_steps"),
                       "kestrel_ms": lat.get("kestrel", {}).get("median"),
                       "ort_ms": lat.get("onnxruntime", {}).get("median"),
                       "speedup": r.get("speedup"), "target": r.get("target"),
                       "machine": r.get("machine")})
        if r.get("error"):
            result["error"] = str(r["error"])[:400]
    if rc != 0 and "error" not in result:
        result["error"] = first_error_line(err or out)
    return result


def probe_steps(path, work):
    """Copies of a file Kestrel refuses at import, each following the advice of the refusal
    before it: ir_version set to 8 (the weights still external), then the weights inlined,
    then onnx.version_converter.convert_version(model, 17). Yields (changes, path or None,
    error) per step that applies; a step that raises ends the chain with its error."""
    import onnx
    from onnx import version_converter
    meta = onnx.load(path, load_external_data=False)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in meta.graph.initializer)
    opset = next((o.version for o in meta.opset_import if o.domain in ("", "ai.onnx")), None)
    changes = []
    base = os.path.basename(path)
    if meta.ir_version > 8:
        changes.append(f"ir_version {meta.ir_version} -> 8")
        if external:  # the weights stay in the .data file, copied beside the patched model
            step_dir = os.path.join(work, "ir8")
            os.makedirs(step_dir, exist_ok=True)
            for data in glob.glob(path + ".data"):
                shutil.copy(data, step_dir)
            meta.ir_version = 8
            out = os.path.join(step_dir, base)
            onnx.save(meta, out)
            yield list(changes), out, None
    model = onnx.load(path)
    model.ir_version = min(model.ir_version, 8)
    if external:
        changes.append("weights inlined")
    if changes:
        out = os.path.join(work, "inline", base)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        onnx.save(model, out)
        yield list(changes), out, None
    if opset is not None and opset > 17:
        changes.append(f"version_converter {opset} -> 17")
        try:
            converted = version_converter.convert_version(model, 17)
            converted.ir_version = 8
            out = os.path.join(work, "opset17", base)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            onnx.save(converted, out)
            yield list(changes), out, None
        except Exception as error:  # the converter's own failure is the result
            yield list(changes), None, error_text(error)


def check(args):
    kestrel = args.kestrel
    if not os.access(kestrel, os.X_OK):
        print(f"model-zoo: no kestrel binary at {kestrel} (build it: scripts/build.sh)", file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(args.check, "*.onnx")))
    if args.only:
        files = [f for f in files if os.path.basename(f).split(".")[0] in args.only]
    results = []
    work = tempfile.mkdtemp(prefix="kestrel-zoo-probe-")
    try:
        for path in files:
            base = os.path.basename(path)[:-len(".onnx")]
            side_path = path[:-len(".onnx")] + ".json"
            side = json.load(open(side_path)) if os.path.exists(side_path) else {}
            symbols = side.get("symbols", {})
            # One --shape for all symbols: "batch=1;sequence=16" (the option is not repeatable).
            shape_args = (["--shape", ";".join(f"{k}={v}" for k, v in sorted(symbols.items()))]
                          if symbols else [])
            size = os.path.getsize(path) + sum((side.get("data_files") or {}).values())
            entry = {"file": os.path.basename(path), "exporter": side.get("exporter"),
                     "ir_version": side.get("ir_version"), "opsets": side.get("opsets"),
                     "bytes": size, "external_data": bool(side.get("data_files")),
                     "symbols": symbols,
                     "tasks": kestrel_tasks(kestrel, path, shape_args, args.timeout),
                     "run": kestrel_run(kestrel, path, shape_args, args.repeat, args.python,
                                        args.timeout)}
            if args.probe and entry["tasks"]["rc"] != 0:
                steps = []
                for changes, patched, error in probe_steps(path, work):
                    step = {"changes": changes}
                    if error:
                        step["error"] = error
                    else:
                        step["tasks"] = kestrel_tasks(kestrel, patched, shape_args, args.timeout)
                        step["run"] = kestrel_run(kestrel, patched, shape_args, args.repeat,
                                                  args.python, args.timeout)
                    steps.append(step)
                    if error or step["tasks"]["rc"] == 0:
                        break
                if steps:
                    entry["probe"] = steps
            results.append(entry)
            print(f"model-zoo: {entry['file']}: tasks rc {entry['tasks']['rc']}, "
                  f"run rc {entry['run']['rc']}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tag = os.path.relpath(os.path.abspath(args.check), ROOT).replace(os.sep, "-").strip(".-")
    out = args.results or os.path.join(ROOT, "build", "zoo-check", (tag or "zoo") + ".json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_json(out, {"kestrel": kestrel, "repeat": args.repeat, "results": results})
    print(markdown(results))
    return 0


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def short(message):
    """A kestrel error line without its command and file prefix."""
    return re.sub(r"^kestrel (tasks|run): \S+?\.onnx( at \S+)?: ", "", message or "")


def untuned_text(t):
    reasons = {}
    for u in t.get("untuned", []):
        reason = u["reason"]
        if reason.startswith("broadcast between shapes"):
            reason = "broadcast between shapes (e.g. " + reason[len("broadcast between shapes "):] + ")"
            key = "broadcast"
        else:
            key = reason
        entry = reasons.setdefault(key, [reason, {}])
        entry[1][u["op_type"]] = entry[1].get(u["op_type"], 0) + u["occurrences"]
    return "; ".join(f"{r}: {', '.join(f'{op} x{n}' for op, n in ops.items())}"
                     for r, ops in reasons.values()) or "none"


def tasks_text(t):
    if t["rc"] != 0:
        return f"rc {t['rc']}: {short(t.get('error'))}"
    return (f"rc 0: {t['tasks']} tasks ({t['instances']} instances), "
            f"{pct(t['tuned_share'])} of {t['total_gflop']:.3g} GFLOP tuned; untuned: "
            f"{untuned_text(t)}")


def run_text(r, t=None):
    if r["rc"] == 0 and r.get("ok"):
        return (f"rc 0, matches ORT; kestrel {r['kestrel_ms']:.3f} ms, ORT {r['ort_ms']:.3f} ms "
                f"(x{r['speedup']:.2f})")
    error = short(r.get("error"))
    if t is not None and t["rc"] != 0 and error == short(t.get("error")):
        return f"rc {r['rc']}: the same refusal"
    return f"rc {r['rc']}: {error}"


def cell(text):
    return text.replace("|", "\\|")


LABELS = [  # (pattern of a kestrel or converter message, short label; \\1 = first group)
    (r"IR version (\d+) is newer", r"IR \1 refused"),
    (r"opset (\d+) is not supported", r"opset \1 refused"),
    (r"keeps its data in an external file", "external data refused"),
    (r"Unrecognized attribute: (\w+) for operator (\w+)", r"invalid after conversion (\2 keeps \1)"),
    (r"No Previous Version of (\w+)", r"converter: no \1 before its opset"),
    (r"No Adapter From Version \$?(\d+) for (\w+)", r"converter: no adapter for \2-\1"),
    (r"shape inference cannot tell the shape of .*?\((output of \w+) node", r"shape inference: unknown \1"),
    (r"no portable implementation of (\w+)", r"no portable \1"),
    (r"model input (\S+) is not float", r"int64 input \1 refused"),
]


def label(message):
    for pattern, text in LABELS:
        m = re.search(pattern, message or "")
        if m:
            return m.expand(text)
    return short(message)[:120]


def compact_tasks(t):
    if t["rc"] != 0:
        return f"exit {t['rc']}: {label(t.get('error'))}"
    return (f"{t['tasks']} tasks, {pct(t['tuned_share'])} of {t['total_gflop']:.3g} GFLOP tuned; "
            f"untuned: {untuned_text(t)}")


def compact_run(r, t):
    if r["rc"] == 0 and r.get("ok"):
        return (f"exit 0, matches ORT; {r['kestrel_ms']:.3f} ms vs ORT {r['ort_ms']:.3f} ms "
                f"(x{r['speedup']:.2f})")
    if t["rc"] != 0 and short(r.get("error")) == short(t.get("error")):
        return f"exit {r['rc']}: the same"
    return f"exit {r['rc']}: {label(r.get('error'))}"


def compact_probe(steps):
    parts = []
    for p in steps:
        change = p["changes"][-1]
        if "error" in p:
            parts.append(f"{change}: {label(p['error'])}")
        elif p["tasks"]["rc"] != 0:
            parts.append(f"{change}: {label(p['tasks'].get('error'))}")
        else:
            run = p["run"]
            outcome = ("runs, matches ORT" if run["rc"] == 0 and run.get("ok")
                       else f"run exit {run['rc']}: {label(run.get('error'))}")
            parts.append(f"{change}: plans ({pct(p['tasks']['tuned_share'])} tuned), {outcome}")
    return " → ".join(parts) or "-"


def markdown(results, full=False):
    if not full:
        rows = ["| file | exporter | IR / opset | size | `kestrel tasks` | `kestrel run` | "
                "behind the first refusal (--probe) |", "|---|---|---|---|---|---|---|"]
        for e in results:
            opset = (e["opsets"] or {}).get("ai.onnx", "?")
            size = f"{e['bytes'] / 1024:,.0f} KB" + (" (.onnx + .data)" if e["external_data"] else "")
            row = [f"`{e['file']}`", e["exporter"] or "?", f"{e['ir_version']} / {opset}", size,
                   compact_tasks(e["tasks"]), compact_run(e["run"], e["tasks"]),
                   compact_probe(e.get("probe", []))]
            rows.append("| " + " | ".join(cell(c) for c in row) + " |")
        return "\n".join(rows)
    rows = ["| file | exporter | IR / opset | size | `kestrel tasks` | `kestrel run` |",
            "|---|---|---|---|---|---|"]
    for e in results:
        opset = (e["opsets"] or {}).get("ai.onnx", "?")
        size = f"{e['bytes'] / 1024:,.0f} KB" + (" (with .data)" if e["external_data"] else "")
        row = [f"`{e['file']}`", e["exporter"] or "?", f"{e['ir_version']} / {opset}", size,
               tasks_text(e["tasks"]), run_text(e["run"], e["tasks"])]
        rows.append("| " + " | ".join(cell(c) for c in row) + " |")
        for p in e.get("probe", []):
            if "error" in p:
                ptasks, prun = f"the conversion fails: {p['error']}", "-"
            else:
                ptasks, prun = tasks_text(p["tasks"]), run_text(p["run"], p["tasks"])
            rows.append("| " + " | ".join(cell(c) for c in [
                f"↳ probe: {', '.join(p['changes'])}", "", "", "", ptasks, prun]) + " |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", choices=sorted(TIERS))
    parser.add_argument("--out", help="export directory (default: tests/data/zoo for small, "
                                      "build/zoo for full)")
    parser.add_argument("--only", type=lambda s: set(s.split(",")), default=None,
                        help="comma-separated model names (e.g. bert_tiny,vit_tiny)")
    parser.add_argument("--check", metavar="DIR", help="run kestrel on every DIR/*.onnx")
    parser.add_argument("--markdown", metavar="RESULTS",
                        help="print the table of an earlier --check's JSON and exit")
    parser.add_argument("--full", action="store_true",
                        help="with --markdown: every message in full, one row per probe step")
    parser.add_argument("--kestrel", default=os.path.join(ROOT, "build", "tools", "kestrel"))
    parser.add_argument("--results", help="--check's JSON (default build/zoo-check/<DIR, '/' as '-'>.json)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per kestrel command")
    parser.add_argument("--python", help="--python for kestrel run (default: kestrel's own choice)")
    parser.add_argument("--probe", action="store_true",
                        help="with --check: also try refused files patched as Kestrel's messages advise")
    args = parser.parse_args()
    if args.markdown:
        with open(args.markdown) as f:
            print(markdown(json.load(f)["results"], full=args.full))
        return 0
    if bool(args.tier) == bool(args.check):
        parser.error("give either --tier small|full or --check DIR")
    if args.check:
        return check(args)
    return export_tier(args.tier, args.out or DEFAULT_OUT[args.tier], args.only)


if __name__ == "__main__":
    sys.exit(main())
