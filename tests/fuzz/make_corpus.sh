#!/usr/bin/env bash
# Regenerates the seed corpora in tests/fuzz/corpus/<target>/ (committed; a few hundred bytes each). Crash
# reproducers (crash-*, regress-*) committed beside the seeds are kept. Needs python3 and a build with make-hf-model
# (BUILD_DIR, default build) for the real shard index.
set -euo pipefail
cd "$(dirname "$0")"
B=${BUILD_DIR:-../../build}
C=corpus
mkdir -p $C/fuzz_safetensors $C/fuzz_hf_config $C/fuzz_llama2c $C/fuzz_tokenizer
rm -f $C/*/seed-*

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
