// Tiny llama GGUF models whose projections are GGML-quantized (any of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K),
// F32 or F16, per tensor; plus the same model with every quantized tensor written as its exactly dequantized FP32
// values (the "twin": a model whose reads must equal the quantized one's bit for bit). Shared by
// tests/cpu/gemv_choice_test.cpp and tests/gpu/quant_model_test.cu. Host code only.
//
// Shapes: dim 256 and hidden 512 by default, so every row length is a multiple of 256 (what Q4_K and Q6_K need).
// Q8_0, Q4_0 and Q4_K blocks come from models/quant.h's quantizers on random normal floats; Q4_1, Q5_0, Q5_1 and
// Q6_K blocks are random valid blocks (random code bytes, fp16 scales/mins chosen so the weights have about the
// wanted spread), since models/quant.h has no quantizer for them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gguf_writer_util.h"
#include "models/quant.h"

namespace llm_test {

enum : uint32_t {
  kTqF32 = 0,
  kTqF16 = 1,
  kTqQ4_0 = 2,
  kTqQ4_1 = 3,
  kTqQ5_0 = 6,
  kTqQ5_1 = 7,
  kTqQ8_0 = 8,
  kTqQ4_K = 12,
  kTqQ5_K = 13,
  kTqQ6_K = 14,
};

inline const char* tq_type_name(uint32_t t) {
  switch (t) {
    case kTqF32: return "F32";
    case kTqF16: return "F16";
    default: return llm::ggml_quant_name(llm::GgmlQuantType(t));
  }
}

struct TinyQuantSpec {
  int dim = 256, hidden = 512, layers = 2, heads = 4, kv_heads = 2, vocab = 256, ctx = 256;
  bool tied = false;       // no output.weight: the head is token_embd
  uint32_t embd = kTqF32;  // token_embd (values rounded to BF16 first when F32, so the GPU's BF16 table is exact)
  uint32_t wq = kTqQ8_0, wk = kTqQ8_0, wv = kTqQ8_0, wo = kTqQ8_0;
  uint32_t gate = kTqQ8_0, up = kTqQ8_0, down = kTqQ8_0;
  uint32_t head = kTqQ8_0;  // output.weight (ignored when tied)
  uint32_t seed = 1;

  static TinyQuantSpec all(uint32_t t) {
    TinyQuantSpec s;
    s.wq = s.wk = s.wv = s.wo = s.gate = s.up = s.down = s.head = t;
    return s;
  }
};

struct TinyQuantGguf {
  GgufWriter quant;  // as specified
  GgufWriter twin;   // every quantized tensor replaced by F32 of its dequantized values (same order, same names)
};

namespace tq_detail {

inline void put_f16(std::string& s, size_t at, float v) {
  const uint16_t h = llm::f32_to_f16(v);
  s[at] = char(h & 0xff);
  s[at + 1] = char(h >> 8);
}

inline std::string f32_bytes(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
}

// Random valid blocks of a type without a quantizer here; weights spread about `sigma`.
inline std::string random_blocks(llm::GgmlQuantType t, int64_t rows, int64_t cols, float sigma, std::mt19937& gen) {
  using Q = llm::GgmlQuantType;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> jitter(0.7f, 1.3f);
  const size_t bb = llm::ggml_quant_block_bytes(t);
  const int64_t blocks = rows * cols / llm::ggml_quant_block_weights(t);
  std::string out(size_t(blocks) * bb, '\0');
  for (auto& c : out) c = char(byte(gen));
  for (int64_t i = 0; i < blocks; ++i) {
    const size_t b = size_t(i) * bb;
    const float j = jitter(gen);
    switch (t) {
      case Q::Q4_1: {  // w = q * d + m, q in 0..15 (std 4.6, mean 7.5)
        const float d = j * sigma / 4.6f;
        put_f16(out, b, d);
        put_f16(out, b + 2, -7.5f * d + 0.1f * sigma * (jitter(gen) - 1.0f));
        break;
      }
      case Q::Q5_0:  // w = (q - 16) * d, q in 0..31 (std 9.2)
        put_f16(out, b, (i % 2 ? -1.0f : 1.0f) * j * sigma / 9.2f);
        break;
      case Q::Q5_1: {  // w = q * d + m, q in 0..31 (mean 15.5)
        const float d = j * sigma / 9.2f;
        put_f16(out, b, d);
        put_f16(out, b + 2, -15.5f * d);
        break;
      }
      case Q::Q6_K:  // w = d * sc * (q - 32), sc random int8 (std ~74), q in 0..63 (std 18.5); d at byte 208
        put_f16(out, b + 208, j * sigma / (18.5f * 74.0f));
        break;
      default:
        throw std::logic_error("random_blocks: use quantize_matrix for this type");
    }
  }
  return out;
}

}  // namespace tq_detail

// Encodes an [rows, cols] FP32 matrix as type t; `deq` gets the values the file then holds (exact reads).
inline std::string tq_encode(uint32_t t, const std::vector<float>& x, int64_t rows, int64_t cols, float sigma,
                             std::mt19937& gen, std::vector<float>* deq) {
  using Q = llm::GgmlQuantType;
  if (t == kTqF32) {
    *deq = x;
    return tq_detail::f32_bytes(x);
  }
  if (t == kTqF16) {
    std::string s;
    deq->resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t h = llm::f32_to_f16(x[i]);
      gguf_put(s, h);
      (*deq)[i] = llm::f16_to_f32(h);
    }
    return s;
  }
  const Q q = Q(t);
  std::string bytes;
  if (q == Q::Q8_0 || q == Q::Q4_0 || q == Q::Q4_K || q == Q::Q5_K) {
    const std::vector<uint8_t> b = llm::quantize_matrix(q, x.data(), rows, cols);
    bytes.assign(reinterpret_cast<const char*>(b.data()), b.size());
  } else {
    bytes = tq_detail::random_blocks(q, rows, cols, sigma, gen);
  }
  deq->assign(size_t(rows * cols), 0.0f);
  const int64_t n_blocks = rows * cols / llm::ggml_quant_block_weights(q);
  llm::dequantize_blocks(q, reinterpret_cast<const uint8_t*>(bytes.data()), n_blocks, deq->data());
  return bytes;
}

inline TinyQuantGguf tiny_quant_gguf(const TinyQuantSpec& s) {
  TinyQuantGguf g;
  for (GgufWriter* w : {&g.quant, &g.twin}) {
    w->str("general.architecture", "llama");
    w->u32("llama.embedding_length", uint32_t(s.dim));
    w->u32("llama.block_count", uint32_t(s.layers));
    w->u32("llama.attention.head_count", uint32_t(s.heads));
    w->u32("llama.attention.head_count_kv", uint32_t(s.kv_heads));
    w->u32("llama.feed_forward_length", uint32_t(s.hidden));
    w->u32("llama.context_length", uint32_t(s.ctx));
    w->u32("llama.rope.dimension_count", uint32_t(s.dim / s.heads));
    w->f32("llama.rope.freq_base", 10000.0f);
    w->f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w->u32("tokenizer.ggml.bos_token_id", 1);
    w->u32("tokenizer.ggml.eos_token_id", 2);
  }
  std::mt19937 gen(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, uint32_t type, float sigma, float mean,
                 bool round_bf16) {
    std::vector<float> x(size_t(rows * cols));
    for (float& v : x) {
      v = mean + sigma * normal(gen);
      if (round_bf16) v = llm::round_bf16(v);
    }
    std::vector<float> deq;
    const std::string bytes = tq_encode(type, x, rows, cols, sigma, gen, &deq);
    const std::vector<uint64_t> dims =
        rows == 1 ? std::vector<uint64_t>{uint64_t(cols)} : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)};
    g.quant.tensors.push_back({name, dims, type, bytes});
    if (type == kTqF32 || type == kTqF16)
      g.twin.tensors.push_back({name, dims, type, bytes});
    else
      g.twin.tensors.push_back({name, dims, kTqF32, tq_detail::f32_bytes(deq)});
  };
  const int hd = s.dim / s.heads, kv = s.kv_heads * hd;
  const float pd = 1.0f / std::sqrt(float(s.dim)), ph = 1.0f / std::sqrt(float(s.hidden));
  add("token_embd.weight", s.vocab, s.dim, s.embd, 1.0f, 0.0f, s.embd == kTqF32);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 1, s.dim, kTqF32, 0.1f, 1.0f, false);
    add(p + "attn_q.weight", s.dim, s.dim, s.wq, pd, 0.0f, false);
    add(p + "attn_k.weight", kv, s.dim, s.wk, pd, 0.0f, false);
    add(p + "attn_v.weight", kv, s.dim, s.wv, pd, 0.0f, false);
    add(p + "attn_output.weight", s.dim, s.dim, s.wo, pd, 0.0f, false);
    add(p + "ffn_norm.weight", 1, s.dim, kTqF32, 0.1f, 1.0f, false);
    add(p + "ffn_gate.weight", s.hidden, s.dim, s.gate, pd, 0.0f, false);
    add(p + "ffn_up.weight", s.hidden, s.dim, s.up, pd, 0.0f, false);
    add(p + "ffn_down.weight", s.dim, s.hidden, s.down, ph, 0.0f, false);
  }
  add("output_norm.weight", 1, s.dim, kTqF32, 0.1f, 1.0f, false);
  if (!s.tied) add("output.weight", s.vocab, s.dim, s.head, 2.0f * pd, 0.0f, false);
  return g;
}

// BOS, then a fixed spread of ids over the vocabulary.
inline std::vector<int> tq_tokens(int vocab, int n) {
  std::vector<int> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = i == 0 ? 1 : int((int64_t(i) * 7919 + 13) % vocab);
  return t;
}

inline double tq_rel_l2(const float* got, const float* want, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / (den > 1e-30 ? den : 1e-30));
}

}  // namespace llm_test
