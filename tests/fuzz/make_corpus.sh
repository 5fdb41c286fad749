#!/usr/bin/env bash
# Regenerates the seed corpora in tests/fuzz/corpus/<target>/ (committed; a few hundred bytes each). Crash
# reproducers (crash-*, regress-*) committed beside the seeds are kept; fuzz_server_request's seeds are hand-written
# request bodies (its first byte: odd = chat) and are not regenerated here. Needs python3 and a build with make-hf-model
# (BUILD_DIR, default build) for the real shard index.
set -euo pipefail
cd "$(dirname "$0")"
B=${BUILD_DIR:-../../build}
C=corpus
mkdir -p $C/fuzz_safetensors $C/fuzz_hf_config $C/fuzz_llama2c $C/fuzz_tokenizer $C/fuzz_gguf
rm -f $C/fuzz_{safetensors,hf_config,llama2c,tokenizer,gguf}/seed-*  # fuzz_bpe: tools/bpe_refs.py

python3 - "$C" <<'PY'
import json, struct, sys
C = sys.argv[1]
def put(target, name, data):
    if isinstance(data, str): data = data.encode()
    open(f"{C}/{target}/seed-{name}", "wb").write(data)

# safetensors: first byte 0 = a .safetensors file (1 = an index, below).
def st(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return b"\0" + struct.pack("<Q", len(h)) + h + data
f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
put("fuzz_safetensors", "valid-f32-bf16", st(
    {"__metadata__": {"format": "pt"},
     "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
     "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}, f32 + b"\x80\x3f\x00\x40\x00\xc0"))
put("fuzz_safetensors", "valid-f16-empty", st(
    {"e": {"dtype": "F16", "shape": [0, 4], "data_offsets": [0, 0]},
     "h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\x00\x3c\x00\xc0"))
put("fuzz_safetensors", "overlap", st(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32))
put("fuzz_safetensors", "bad-dtype", st({"a": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}}, b"1234"))
put("fuzz_safetensors", "header-past-end", b"\0" + struct.pack("<Q", 1 << 40) + b"{}")

# config.json (+ NUL + generation_config.json).
base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "hidden_act": "silu"}
put("fuzz_hf_config", "classic", json.dumps(base))
l3 = dict(base, head_dim=24, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
          eos_token_id=[2, 3])
put("fuzz_hf_config", "llama3-with-generation", json.dumps(l3) + "\0" + json.dumps({"bos_token_id": 1, "eos_token_id": [2, 5]}))
rp = {k: v for k, v in base.items() if k != "rope_theta"}
rp["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
put("fuzz_hf_config", "rope-parameters", json.dumps(rp))

# llama2.c: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then FP32 weights.
def l2c(dim, hid, layers, heads, kv, vocab, seq):
    hd = dim // heads
    v = abs(vocab)
    n = v * dim + layers * dim * 2 + layers * (dim * dim + 2 * kv * hd * dim + dim * dim) + layers * 3 * hid * dim \
        + dim + seq * hd + (v * dim if vocab < 0 else 0)
    w = [((i * 37) % 17 - 8) / 8.0 for i in range(n)]
    return struct.pack("<7i", dim, hid, layers, heads, kv, vocab, seq) + struct.pack(f"<{n}f", *w)
put("fuzz_llama2c", "tiny-tied", l2c(4, 4, 1, 2, 1, 5, 3))
put("fuzz_llama2c", "tiny-untied", l2c(2, 2, 1, 1, 1, -3, 2))
put("fuzz_llama2c", "truncated-header", struct.pack("<7i", 64, 172, 5, 8, 4, 512, 512)[:20])
put("fuzz_llama2c", "header-only", struct.pack("<7i", 64, 172, 5, 8, 4, 512, 512))

# GGUF v3, llama: dim 32, 1 layer, 2 heads / 1 kv head (head_dim 16), hidden 32, vocab 8; the embedding Q8_0,
# q Q4_1, k Q4_0, v F16, the rest F32, rope_freqs.weight present; tied.
def gguf_str(s): b = s.encode(); return struct.pack("<Q", len(b)) + b
def gguf_value(t, v):  # 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array given as (element type, list)
    if t == 9: return struct.pack("<IQ", v[0], len(v[1])) + b"".join(gguf_value(v[0], x) for x in v[1])
    return gguf_str(v) if t == 8 else struct.pack({4: "<I", 5: "<i", 6: "<f", 7: "<B"}[t], v)
def gguf(kvs, tensors):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, (t, v) in kvs.items():
        out += gguf_str(k) + struct.pack("<I", t) + gguf_value(t, v)
    data = b""
    for name, dims, typ, raw in tensors:
        data += b"\0" * (-len(data) % 32)
        out += gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) \
            + struct.pack("<IQ", typ, len(data))
        data += raw
    return out + b"\0" * (-len(out) % 32) + data
def fvals(n): return [((i * 37) % 17 - 8) / 16.0 for i in range(n)]
def f32(n): return struct.pack(f"<{n}f", *fvals(n))
def f16(n): return struct.pack(f"<{n}e", *fvals(n))
def q8_0(n): return (struct.pack("<e", 0.03125) + bytes((i * 7) % 256 for i in range(32))) * (n // 32)
def q4_0(n): return (struct.pack("<e", 0.125) + bytes((i * 29) % 256 for i in range(16))) * (n // 32)
def q4_1(n): return (struct.pack("<ee", 0.0625, -0.5) + bytes((i * 53) % 256 for i in range(16))) * (n // 32)
kvs = {"general.architecture": (8, "llama"), "llama.embedding_length": (4, 32), "llama.block_count": (4, 1),
       "llama.attention.head_count": (4, 2), "llama.attention.head_count_kv": (4, 1),
       "llama.feed_forward_length": (4, 32), "llama.context_length": (4, 8), "llama.rope.dimension_count": (4, 16),
       "llama.rope.freq_base": (6, 10000.0), "llama.attention.layer_norm_rms_epsilon": (6, 1e-5),
       "tokenizer.ggml.bos_token_id": (4, 1), "tokenizer.ggml.eos_token_id": (4, 2)}
tensors = [("token_embd.weight", [32, 8], 8, q8_0(256)), ("blk.0.attn_norm.weight", [32], 0, f32(32)),
           ("blk.0.attn_q.weight", [32, 32], 3, q4_1(1024)), ("blk.0.attn_k.weight", [32, 16], 2, q4_0(512)),
           ("blk.0.attn_v.weight", [32, 16], 1, f16(512)), ("blk.0.attn_output.weight", [32, 32], 0, f32(1024)),
           ("blk.0.ffn_norm.weight", [32], 0, f32(32)), ("blk.0.ffn_gate.weight", [32, 32], 0, f32(1024)),
           ("blk.0.ffn_up.weight", [32, 32], 0, f32(1024)), ("blk.0.ffn_down.weight", [32, 32], 0, f32(1024)),
           ("output_norm.weight", [32], 0, f32(32)), ("rope_freqs.weight", [8], 0, struct.pack("<8f", *[1, 1, 2, 2, 4, 4, 8, 8]))]
put("fuzz_gguf", "tiny-quantized", gguf(kvs, tensors))
put("fuzz_gguf", "header-only", gguf(kvs, [])[:200])
# The same model with an 8-token vocabulary of each kind: byte-level BPE (gpt2, pre smollm) and sentencepiece (llama).
bpe = {"tokenizer.ggml.model": (8, "gpt2"), "tokenizer.ggml.pre": (8, "smollm"),
       "tokenizer.ggml.tokens": (9, (8, ["<|endoftext|>", "<s>", "</s>", "a", "b", "\u0120", "ab", "\u0120a"])),
       "tokenizer.ggml.token_type": (9, (5, [3, 3, 3, 1, 1, 1, 1, 1])),
       "tokenizer.ggml.merges": (9, (8, ["a b", "\u0120 a"])), "tokenizer.ggml.add_bos_token": (7, 0)}
put("fuzz_gguf", "tiny-vocab-gpt2", gguf({**kvs, **bpe}, tensors))
sp = {"tokenizer.ggml.model": (8, "llama"),
      "tokenizer.ggml.tokens": (9, (8, ["<unk>", "<s>", "</s>", "A", "\u2581", "a", "b", "\u2581a"])),
      "tokenizer.ggml.scores": (9, (6, [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5])),
      "tokenizer.ggml.token_type": (9, (5, [2, 3, 3, 1, 1, 1, 1, 1]))}
put("fuzz_gguf", "tiny-vocab-llama", gguf({**kvs, **sp}, tensors))

# Prompts: text, multi-byte characters, and invalid UTF-8.
put("fuzz_tokenizer", "story", "Once upon a time, there was a little girl named Lily.")
put("fuzz_tokenizer", "unicode", "caf\u00e9 \u20ac 100 \u2014 \U0001F600 \u65e5\u672c")
put("fuzz_tokenizer", "invalid-utf8", b"ab\xff\xfe c\xe2\x82 d\xc0\xaf e\xed\xa0\x80 f\xf4\x90\x80\x80\x80")
put("fuzz_tokenizer", "controls", b"\x00\x01\t\n\r <s></s><unk> \x7f")
PY

# A real two-shard index for the fixed shards fuzz_safetensors writes (tiny-gqa, F32); first byte 1 = an index.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$B/make-hf-model" --synthetic tiny-gqa --out "$tmp/m" --dtype f32 --shards 2 >/dev/null 2>&1
{ printf '\1'; cat "$tmp/m/model.safetensors.index.json"; } > $C/fuzz_safetensors/seed-index-valid
{ printf '\1'; echo '{"weight_map": {"model.embed_tokens.weight": "../../etc/passwd"}}'; } \
  > $C/fuzz_safetensors/seed-index-escape
du -sh --apparent-size $C/*
