#!/usr/bin/env python3
"""The gguf Python package's dequantization of a GGUF file's tensors as small test references: per tensor its GGML
type, dims, the sha256 of its raw bytes and of gguf.quants.dequantize's float32 output (little-endian), and a few
sampled values as the hex of their float32 bytes. The C++ tests compare our dequantizers with these bit for bit.

    pip install gguf==0.19.0 numpy         # only to MAKE the data; the C++ tests need neither
    tools/gguf_dequant_refs.py             # tests/data/smollm2_dequant_refs.json from the default model
    tools/gguf_dequant_refs.py --gguf PATH --out PATH [--all-types] [--samples N]

Without --gguf it reads models-cache/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model.sh) and writes
tests/data/smollm2_dequant_refs.json (read by tests/cpu/smollm2_dequant_test.cpp); by default only the quantized
tensors are listed (F32/F16/BF16 ones are not dequantized). tools/make_tiny_q4km.py uses tensor_entry() for its own
references (tests/data/tiny_q4km_refs.json).
"""
import argparse
import hashlib
import json
import os

import numpy as np

import gguf
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
DEFAULT_GGUF = os.path.join(ROOT, "models-cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "smollm2_dequant_refs.json")
UNQUANTIZED = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}


def sha256_hex(b):
    return hashlib.sha256(b).hexdigest()


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def generator_note(script):
    return f"{script}, gguf {getattr(gguf, '__version__', '0.19.0')}, numpy {np.__version__}"


def sample_indices(count, name, n_samples):
    """First, second, middle and last positions plus pseudo-random ones seeded by the name (same for every run)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))
    idx = {0, 1, count // 2, count - 1}
    while len(idx) < min(n_samples, count):
        idx.add(int(rng.integers(0, count)))
    return sorted(idx)


def tensor_entry(t, n_samples):
    """(reference dict, dequantized float32 values flattened) of one gguf.GGUFReader tensor."""
    qtype = gguf.GGMLQuantizationType(int(t.tensor_type))
    raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
    y = dequantize(t.data, qtype).astype("<f4").reshape(-1)
    dims = [int(d) for d in t.shape]  # GGUF order: innermost (row length) first
    assert y.size == int(np.prod(dims)), t.name
    entry = {
        "type": qtype.name,
        "type_id": int(qtype),
        "dims": dims,
        "raw_sha256": sha256_hex(raw.tobytes()),
        "dequant_sha256": sha256_hex(y.tobytes()),
        "samples": [[j, y[j:j + 1].tobytes().hex()] for j in sample_indices(y.size, t.name, n_samples)],
    }
    return entry, y


def write_compact(out, path):
    """JSON with one line per tensor (the file stays small and diffs per tensor)."""
    with open(path, "w") as f:
        f.write("{\n")
        for k, v in out.items():
            if k != "tensors":
                f.write(f" {json.dumps(k)}: {json.dumps(v)},\n")
        f.write(' "tensors": {\n')
        names = list(out["tensors"])
        for i, name in enumerate(names):
            sep = "," if i + 1 < len(names) else ""
            f.write(f"  {json.dumps(name)}: {json.dumps(out['tensors'][name], separators=(',', ':'))}{sep}\n")
        f.write(" }\n}\n")


def make_refs(gguf_path, out_path, n_samples, all_types):
    r = gguf.GGUFReader(gguf_path)
    out = {
        "generator": generator_note("tools/gguf_dequant_refs.py"),
        "file": os.path.relpath(os.path.abspath(gguf_path), ROOT),
        "file_sha256": file_sha256(gguf_path),
        "what": "per tensor (quantized ones only unless all_types): GGML type, dims (innermost first), sha256 of the "
                "raw bytes and of gguf.quants.dequantize's float32 output (little-endian), sampled values "
                "[index, float32 bytes as hex]",
        "all_types": all_types,
        "tensors": {},
    }
    types = {}
    for t in r.tensors:
        if not all_types and gguf.GGMLQuantizationType(int(t.tensor_type)) in UNQUANTIZED:
            continue
        entry, _ = tensor_entry(t, n_samples)
        out["tensors"][t.name] = entry
        types[entry["type"]] = types.get(entry["type"], 0) + 1
    out["type_counts"] = dict(sorted(types.items()))
    write_compact(out, out_path)
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes): {len(out['tensors'])} tensors, "
          + ", ".join(f"{k} x {v}" for k, v in out["type_counts"].items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="GGUF file to read (default: the fetched SmolLM2)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="JSON to write")
    ap.add_argument("--samples", type=int, default=6, help="sampled values per tensor (at least the 4 fixed ones)")
    ap.add_argument("--all-types", action="store_true", help="also list F32/F16/BF16 tensors")
    args = ap.parse_args()
    make_refs(args.gguf, args.out, args.samples, args.all_types)


if __name__ == "__main__":
    main()
