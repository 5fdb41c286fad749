#!/usr/bin/env python3
"""numpy mirror of core/counter_rng.h and models/synthetic_spec.h: the synthetic weights, bit for bit.

A Python script (e.g. a transformers reference run) can regenerate any synthetic tensor without the C++ tools:
    values = tensor_values(seed, "model.layers.0.self_attn.q_proj.weight", shape)   # float32, BF16-exact

Commands:
    synthetic.py check PATH [--seed S]   PATH: a directory written by make-hf-model (or one .safetensors file);
                                         every tensor is regenerated here and compared bit for bit (F16 files:
                                         with numpy's own float16 rounding). Exit status 1 on any mismatch.
    synthetic.py reference [OUT.json]    writes tests/data/synthetic_ref.json: sample values for the C++ test.
"""
import argparse
import glob
import json
import os
import struct
import sys

import numpy as np

# ---- core/counter_rng.h -------------------------------------------------------------------------------------
U64 = np.uint64


def rng_mix(z):
    """splitmix64 finaliser of z + golden gamma (uint64 arrays wrap mod 2^64, as in C++)."""
    z = np.asarray(z, dtype=U64) + U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


def rng_values(seed, tensor_id, index, offset, scale):
    """offset + scale * (2 * unit - 1) in float32 arithmetic, then rounded to BF16 (returned as float32)."""
    key = rng_mix(np.array([(seed ^ (tensor_id << 32)) & 0xFFFFFFFFFFFFFFFF], dtype=U64))[0]
    u = rng_mix(np.asarray(index, dtype=U64) ^ key)
    unit = (u >> U64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    v = np.float32(offset) + np.float32(scale) * (np.float32(2.0) * unit - np.float32(1.0))
    return round_bf16(v.astype(np.float32))


def round_bf16(x):
    """Round float32 to the nearest BF16 (ties to even, NaN kept quiet), as core/dtype.h f32_to_bf16."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return (rounded.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---- models/synthetic_spec.h --------------------------------------------------------------------------------
EMBEDDING_ID, FINAL_NORM_ID, HEAD_ID = 1, 2, 3
LAYER_ROLES = {
    "input_layernorm": 0, "self_attn.q_proj": 1, "self_attn.k_proj": 2, "self_attn.v_proj": 3,
    "self_attn.o_proj": 4, "post_attention_layernorm": 5, "mlp.gate_proj": 6, "mlp.up_proj": 7,
    "mlp.down_proj": 8,
}
NORM_OFFSET, NORM_SCALE = 1.0, 0.2
EMBEDDING_OFFSET, EMBEDDING_SCALE = 0.0, 1.0


def layer_tensor_id(layer, role):
    return (layer + 1) * 16 + role


def linear_scale(in_features):
    return np.sqrt(np.float32(3.0) / np.float32(in_features), dtype=np.float32)


def fill_for(name, shape):
    """(tensor_id, offset, scale) of a Hugging Face Llama tensor name with its file shape."""
    if name == "model.embed_tokens.weight":
        return EMBEDDING_ID, EMBEDDING_OFFSET, EMBEDDING_SCALE
    if name == "model.norm.weight":
        return FINAL_NORM_ID, NORM_OFFSET, NORM_SCALE
    if name == "lm_head.weight":
        return HEAD_ID, 0.0, linear_scale(shape[1])
    parts = name.split(".")
    if len(parts) >= 5 and parts[0] == "model" and parts[1] == "layers" and parts[-1] == "weight":
        layer, role = int(parts[2]), ".".join(parts[3:-1])
        if role in LAYER_ROLES:
            tid = layer_tensor_id(layer, LAYER_ROLES[role])
            if role.endswith("layernorm"):
                return tid, NORM_OFFSET, NORM_SCALE
            return tid, 0.0, linear_scale(shape[1])
    raise ValueError(f"{name}: not a tensor of a synthetic Llama model")


def tensor_values(seed, name, shape, start=0, count=None):
    """Elements [start, start+count) of the tensor in FILE order (q/k rows rotate-half, as HF stores them)."""
    numel = int(np.prod(shape, dtype=np.int64))
    count = numel - start if count is None else count
    tid, offset, scale = fill_for(name, shape)
    return rng_values(seed, tid, np.arange(start, start + count, dtype=np.uint64), offset, scale)


# ---- safetensors, parsed by hand ----------------------------------------------------------------------------
def read_safetensors(path):
    """{name: (dtype, shape, numpy memmap of the raw bytes)}."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], raw[b:end])
    return out


def as_float32(dtype, raw):
    if dtype == "F32":
        return raw.view(np.float32)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    raise ValueError(f"unsupported dtype {dtype}")


def check_file(path, seed, chunk=1 << 22):
    bad = 0
    tensors = read_safetensors(path)
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        got = as_float32(dtype, raw)
        numel = int(np.prod(shape, dtype=np.int64))
        mismatches = 0
        for start in range(0, numel, chunk):
            n = min(chunk, numel - start)
            want = tensor_values(seed, name, shape, start, n)
            if dtype == "F16":
                want = want.astype(np.float16).astype(np.float32)
            mismatches += int(np.count_nonzero(want.view(np.uint32) != got[start:start + n].view(np.uint32)))
        status = "ok" if mismatches == 0 else f"MISMATCH in {mismatches} of {numel} elements"
        print(f"{os.path.basename(path)}: {name} {dtype} {shape}: {status}")
        bad += mismatches != 0
    return bad, len(tensors)


def check(path, seed):
    files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
    if not files:
        sys.exit(f"error: no .safetensors files in {path}")
    bad = total = 0
    for f in files:
        b, n = check_file(f, seed)
        bad, total = bad + b, total + n
    print(f"{total - bad} of {total} tensors match the generator (seed {seed})")
    return 1 if bad else 0


# ---- reference values for tests/cpu/models_test.cpp ---------------------------------------------------------
def reference(out_path):
    # (name, file shape) of tiny-gqa tensors plus one llama3.1-8b-sized embedding index range.
    cases = [
        ("model.embed_tokens.weight", [256, 64]),
        ("model.layers.0.input_layernorm.weight", [64]),
        ("model.layers.0.self_attn.q_proj.weight", [64, 64]),
        ("model.layers.1.self_attn.k_proj.weight", [32, 64]),
        ("model.layers.1.mlp.down_proj.weight", [64, 160]),
        ("model.norm.weight", [64]),
        ("lm_head.weight", [256, 64]),
        ("model.embed_tokens.weight", [128256, 4096]),
    ]
    doc = {"generator": "tools/synthetic.py reference (numpy mirror of core/counter_rng.h)", "cases": []}
    for seed in (0, 12345):
        for name, shape in cases:
            numel = int(np.prod(shape))
            idx = sorted({0, 1, 2, 3, 17, numel // 2, numel - 1})
            tid, offset, scale = fill_for(name, shape)
            vals = rng_values(seed, tid, np.array(idx, dtype=np.uint64), offset, scale)
            doc["cases"].append({"seed": seed, "name": name, "shape": shape, "tensor_id": tid,
                                 "offset": float(offset), "scale": float(scale), "index": idx,
                                 "bf16_bits": [int(b) for b in (vals.view(np.uint32) >> 16)]})
    with open(out_path, "w") as f:  # one case per line
        f.write('{"generator": %s,\n "cases": [\n  ' % json.dumps(doc["generator"]))
        f.write(",\n  ".join(json.dumps(c) for c in doc["cases"]))
        f.write("\n ]\n}\n")
    print(f"wrote {out_path}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("path")
    c.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("reference")
    r.add_argument("out", nargs="?", default=os.path.join(here, "..", "tests", "data", "synthetic_ref.json"))
    a = ap.parse_args()
    if a.cmd == "check":
        sys.exit(check(a.path, a.seed))
    reference(a.out)


if __name__ == "__main__":
    main()
