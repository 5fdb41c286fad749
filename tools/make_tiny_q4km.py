#!/usr/bin/env python3
"""Makes tests/data/models/tiny-q4km/: a tiny Llama GGUF quantized by llama.cpp's own llama-quantize (Q4_K_M), and
tests/data/tiny_q4km_refs.json: the gguf Python package's dequantization of every tensor of that file.

    pip install gguf==0.19.0 numpy         # only to MAKE the data; the C++ tests need neither
    tools/make_tiny_q4km.py --llama-quantize build-llamacpp-cpu/build/bin/llama-quantize
    tools/make_tiny_q4km.py --refs-only     # the JSON again from the committed file (no llama-quantize needed)

What it does:
 1. writes a float GGUF (F32 everywhere) with the gguf package: Llama architecture, dim 256, ffn 768, 2 layers,
    4 heads / 2 KV heads (head size 64), vocabulary of 300 sentencepiece-style tokens (<unk>, <s>, </s>, the 256 byte
    tokens <0x00>..<0xFF>, "\u2581", then word pieces "\u2581tN", as write-gguf's stand-in vocabulary plus the "\u2581"
    piece), untied output head.
    Every row is a multiple of 256 wide, so llama-quantize needs no stand-in types. The weights are synthetic and
    reproducible in C++ bit for bit (tests/cpu/tiny_q4km_test.cpp regenerates them): tensor number i of the file
    holds, in float32, irwin_hall(SEED, i, count) * SCALE, where irwin_hall is the approximately normal tensor of
    tools/quant_refs.py (the float32 sum of 12 counter-based uniforms of core/counter_rng.h, minus 6), SCALE 0.02 for
    matrices (the spread of real projection weights) and, for norms, 1 + irwin_hall * 0.05;
 2. runs `llama-quantize F32.gguf OUT.gguf Q4_K_M 1` (llama.cpp 0c1e570 as vendored by llama-cpp-python 0.3.36,
    built CPU-only from .stage/llamacpp-src.tar.xz, see tests/data/models/tiny-q4km/README.md);
 3. dequantizes every tensor of the result with gguf.quants.dequantize and writes, per tensor: its GGML type, dims,
    the sha256 of its raw bytes and of its dequantized float32 values (little-endian), a few sampled values as the hex
    of their float32 bytes, and the source of its float values (seed, tensor number, scale, offset); plus the RMS
    error of llama-quantize's Q4_K tensors against their float source, computed here in float64. The per-tensor part
    is tools/gguf_dequant_refs.py's tensor_entry(), which also writes the default model's references.

The float file is regenerated each time (--keep-f32 PATH keeps it); it is not committed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from quant_refs import irwin_hall  # noqa: E402  (mirrored by the C++ tests)
from gguf_dequant_refs import file_sha256, generator_note, tensor_entry  # noqa: E402  (shared with SmolLM2's refs)

OUT_DIR = os.path.join(ROOT, "tests", "data", "models", "tiny-q4km")
OUT_NAME = "tiny-q4km.gguf"
REFS = os.path.join(ROOT, "tests", "data", "tiny_q4km_refs.json")

SEED = 2013  # issue 13
DIM, FFN, LAYERS, HEADS, KV_HEADS, VOCAB, CTX = 256, 768, 2, 4, 2, 300, 256
HEAD_DIM = DIM // HEADS
MATRIX_SCALE = 0.02
NORM_OFFSET, NORM_SCALE = 1.0, 0.05
N_SAMPLES = 12  # sampled values per tensor in the JSON (besides the hashes)

# token_type values (llama.cpp's, = sentencepiece's piece types)
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_BYTE = 1, 2, 3, 6


def vocabulary():
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [TOK_UNKNOWN, TOK_CONTROL, TOK_CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(TOK_BYTE)
    tokens.append("\u2581")  # the word boundary as its own piece, so that text round-trips (no byte fallback for it)
    scores.append(-float(len(scores)))
    types.append(TOK_NORMAL)
    while len(tokens) < VOCAB:
        i = len(tokens)
        tokens.append("\u2581t" + str(i))
        scores.append(-float(i))
        types.append(TOK_NORMAL)
    return tokens, scores, types


def tensor_list():
    """(name, numpy shape [rows, cols] or [n], is_norm) in file order; the tensor number is the index."""
    t = [("token_embd.weight", (VOCAB, DIM), False)]
    for l in range(LAYERS):
        p = f"blk.{l}."
        t += [(p + "attn_norm.weight", (DIM,), True),
              (p + "attn_q.weight", (HEADS * HEAD_DIM, DIM), False),
              (p + "attn_k.weight", (KV_HEADS * HEAD_DIM, DIM), False),
              (p + "attn_v.weight", (KV_HEADS * HEAD_DIM, DIM), False),
              (p + "attn_output.weight", (DIM, HEADS * HEAD_DIM), False),
              (p + "ffn_norm.weight", (DIM,), True),
              (p + "ffn_gate.weight", (FFN, DIM), False),
              (p + "ffn_up.weight", (FFN, DIM), False),
              (p + "ffn_down.weight", (DIM, FFN), False)]
    t += [("output_norm.weight", (DIM,), True), ("output.weight", (VOCAB, DIM), False)]
    return t


def source_of(index, shape, is_norm):
    """The float32 values of tensor `index`, as the C++ test regenerates them: float32 ops, rounded at each step."""
    count = int(np.prod(shape))
    x = irwin_hall(SEED, index, count)
    if is_norm:
        v = (np.float32(NORM_OFFSET) + (x * np.float32(NORM_SCALE)).astype(np.float32)).astype(np.float32)
    else:
        v = (x * np.float32(MATRIX_SCALE)).astype(np.float32)
    return v.reshape(shape)


def write_f32(path):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-q4km (synthetic weights, llama-gemv tests)")
    w.add_context_length(CTX)
    w.add_embedding_length(DIM)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    for i, (name, shape, is_norm) in enumerate(tensor_list()):
        w.add_tensor(name, source_of(i, shape, is_norm))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_refs(q4km_path, refs_path, llama_commit):
    r = gguf.GGUFReader(q4km_path)
    names = {name: (i, shape, is_norm) for i, (name, shape, is_norm) in enumerate(tensor_list())}
    out = {
        "generator": generator_note("tools/make_tiny_q4km.py"),
        "file": os.path.relpath(q4km_path, ROOT),
        "file_sha256": file_sha256(q4km_path),
        "llama_cpp_commit": llama_commit,
        "source": {"seed": SEED, "matrix_scale": MATRIX_SCALE, "norm_offset": NORM_OFFSET, "norm_scale": NORM_SCALE,
                   "what": "tensor number i (file order of the float model, the 'tensor_id' below) holds float32 "
                           "irwin_hall(seed, i, count) * scale (norms: offset + irwin_hall * scale); irwin_hall as "
                           "tools/quant_refs.py"},
        "tensors": {},
    }
    q4k_sq, q4k_n = 0.0, 0
    for t in r.tensors:
        e, y = tensor_entry(t, N_SAMPLES)  # type, dims, raw and dequantized sha256, samples
        qtype = gguf.GGMLQuantizationType(e["type_id"])
        i, shape, is_norm = names[t.name]
        assert y.size == int(np.prod(shape)), t.name
        src = source_of(i, shape, is_norm).reshape(-1).astype(np.float64)
        err = float(np.sqrt(np.mean((y.astype(np.float64) - src) ** 2)))
        if qtype == gguf.GGMLQuantizationType.Q4_K:
            q4k_sq += float(np.sum((y.astype(np.float64) - src) ** 2))
            q4k_n += y.size
        out["tensors"][t.name] = {
            "type": e["type"],
            "type_id": e["type_id"],
            "dims": e["dims"],  # GGUF order: innermost (row length) first
            "tensor_id": i,
            "is_norm": is_norm,
            "raw_sha256": e["raw_sha256"],
            "dequant_sha256": e["dequant_sha256"],
            "samples": e["samples"],
            "rms_error_vs_source": err,
        }
    out["llama_quantize_q4_k_rms_error"] = {
        "value": (q4k_sq / q4k_n) ** 0.5 if q4k_n else None, "weights": q4k_n,
        "what": "RMS over every Q4_K tensor of the file of (gguf dequantization - float source), float64"}
    with open(refs_path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    types = {}
    for name, e in out["tensors"].items():
        types.setdefault(e["type"], []).append(name)
    for ty, ns in sorted(types.items()):
        print(f"{ty} x {len(ns)}: {', '.join(ns)}")
    print(f"wrote {refs_path}: {len(out['tensors'])} tensors; llama-quantize Q4_K RMS error "
          f"{out['llama_quantize_q4_k_rms_error']['value']:.8f} over {q4k_n} weights")


def llama_commit_of(args):
    if args.llama_commit:
        return args.llama_commit
    # DIR/build/bin/llama-quantize was built from DIR/llama.cpp, whose PEER_SOURCE.txt names the commit.
    work = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.llama_quantize or "."))))
    for cand in [os.path.join(work, "llama.cpp", "PEER_SOURCE.txt"),
                 os.path.join(ROOT, "build-llamacpp-cpu", "llama.cpp", "PEER_SOURCE.txt")]:
        if os.path.exists(cand):
            for line in open(cand):
                if line.startswith("llama.cpp commit: "):
                    return line.split(": ", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-quantize", help="path of llama.cpp's llama-quantize (needed unless --refs-only)")
    ap.add_argument("--out-dir", default=OUT_DIR)
    ap.add_argument("--refs", default=REFS)
    ap.add_argument("--keep-f32", metavar="PATH", help="also keep the float GGUF at PATH")
    ap.add_argument("--refs-only", action="store_true", help="only rewrite the JSON from the existing Q4_K_M file")
    ap.add_argument("--llama-commit", help="llama.cpp commit to record (default: from PEER_SOURCE.txt beside the "
                                           "build, else the refs' existing value)")
    args = ap.parse_args()
    q4km = os.path.join(args.out_dir, OUT_NAME)
    if args.refs_only:
        commit = args.llama_commit
        if not commit and os.path.exists(args.refs):
            commit = json.load(open(args.refs)).get("llama_cpp_commit")
        make_refs(q4km, args.refs, commit or llama_commit_of(args))
        return
    if not args.llama_quantize:
        ap.error("--llama-quantize PATH is needed (or --refs-only)")
    os.makedirs(args.out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        f32 = args.keep_f32 or os.path.join(tmp, "tiny-f32.gguf")
        write_f32(f32)
        print(f"wrote {f32} ({os.path.getsize(f32)} bytes)")
        subprocess.run([args.llama_quantize, f32, q4km, "Q4_K_M", "1"], check=True)
    print(f"wrote {q4km} ({os.path.getsize(q4km)} bytes)")
    make_refs(q4km, args.refs, llama_commit_of(args))


if __name__ == "__main__":
    main()
