// GGUF reader and loader: hand-computed quantized blocks, a GGUF written here for a tiny-gqa-shaped model loading
// back with its config and values, tied/untied heads, rope_freqs.weight, and the bad-input catalogue.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/backend.h"
#include "models/config.h"
#include "models/dequant.h"
#include "models/gguf.h"
#include "models/model.h"
#include "gguf_writer_util.h"
#include "models_test_util.h"

namespace {

using llm_test::TempDir;

// ---- Hand-computed blocks (bytes and expected floats derived from the format definitions in the issue) ----

TEST(GgufDequant, Q8_0HandComputed) {
  // Block 0: d = 0x3400 = 0.25; block 1: d = 0xC000 = -2.0, every q = 3.
  std::vector<uint8_t> bytes = {0x00, 0x34, 0x80, 0xFF, 0x00, 0x01, 0x7F, 0x02, 0xFE, 0x10, 0xF0, 0x03, 0xFD, 0x20,
                                0xE0, 0x40, 0xC0, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0xF6, 0xF5, 0x64, 0x9C, 0x11,
                                0xEF, 0x33, 0xCD, 0x04, 0xFC, 0x7E, 0x00, 0xC0};
  bytes.insert(bytes.end(), 32, 0x03);
  ASSERT_EQ(bytes.size(), 2 * llm::kQ8_0Bytes);
  const float want0[32] = {-32,  -0.25, 0,   0.25, 31.75, 0.5,   -0.5, 4,     -4,   0.75,  -0.75,
                           8,    -8,    16,  -16,  1.25,  1.5,   1.75, 2,     2.25, 2.5,   -2.5,
                           -2.75, 25,   -25, 4.25, -4.25, 12.75, -12.75, 1,   -1,   31.5};
  std::vector<float> out(64, 99.0f);
  llm::dequant_q8_0(bytes.data(), 2, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[size_t(j)], want0[j]) << "block 0 element " << j;
  for (int j = 32; j < 64; ++j) EXPECT_EQ(out[size_t(j)], -6.0f) << "block 1 element " << j;
}

// The 16 nibble bytes shared by the Q4 tests: low nibbles give elements 0..15, high nibbles 16..31.
const uint8_t kNibbles[16] = {0x80, 0x08, 0xF0, 0x0F, 0x12, 0x34, 0x56, 0x78,
                              0x9A, 0xBC, 0xDE, 0xF1, 0x00, 0xFF, 0x7F, 0xA5};

TEST(GgufDequant, Q4_0HandComputed) {
  // d = 0xB800 = -0.5; x = (nibble - 8) * d.
  std::vector<uint8_t> bytes = {0x00, 0xB8};
  bytes.insert(bytes.end(), kNibbles, kNibbles + 16);
  ASSERT_EQ(bytes.size(), llm::kQ4_0Bytes);
  const float want[32] = {4,   0,   4,    -3.5, 3,    2,    1,    0,    -1, -2,   -3,  3.5, 4,   -3.5, -3.5, 1.5,
                          0,   4,   -3.5, 4,    3.5,  2.5,  1.5,  0.5,  -0.5, -1.5, -2.5, -3.5, 4, -3.5, 0.5,  -1};
  std::vector<float> out(32, 99.0f);
  llm::dequant_q4_0(bytes.data(), 1, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[size_t(j)], want[j]) << "element " << j;
}

TEST(GgufDequant, Q4_1HandComputed) {
  // d = 0x3800 = 0.5, m = 0xC200 = -3.0; x = nibble * d + m.
  std::vector<uint8_t> bytes = {0x00, 0x38, 0x00, 0xC2};
  bytes.insert(bytes.end(), kNibbles, kNibbles + 16);
  ASSERT_EQ(bytes.size(), llm::kQ4_1Bytes);
  const float want[32] = {-3,  1,    -3,  4.5,  -2,   -1,   0,    1,   2,   3,   4,   -2.5, -3, 4.5, 4.5, -0.5,
                          1,   -3,   4.5, -3,   -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5,  -3, 4.5, 0.5, 2};
  std::vector<float> out(32, 99.0f);
  llm::dequant_q4_1(bytes.data(), 1, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[size_t(j)], want[j]) << "element " << j;
}

// ---- The GGUF writer (tests/cpu/gguf_writer_util.h) ----

using llm_test::GgufWriter;
using TensorSpec = llm_test::GgufTensorSpec;
template <typename T>
void put(std::string& s, T v) {
  llm_test::gguf_put(s, v);
}

// ---- Test tensor values and encoders ----

float value(int tensor, int64_t i) {
  return 0.5f * std::sin(0.37f * float(i) + 1.3f * float(tensor)) + 0.01f * float(tensor % 3);
}

std::string f32_bytes(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4);
}
std::string f16_bytes(const std::vector<float>& x) {
  std::string s;
  for (float v : x) put<uint16_t>(s, llm::f32_to_f16(v));
  return s;
}
// Q8_0 as llama.cpp quantizes: d = amax / 127 (stored fp16), q = round(x / d).
std::string q8_0_bytes(const std::vector<float>& x) {
  std::string s;
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const uint16_t dh = llm::f32_to_f16(amax / 127.0f);
    const float d = llm::f16_to_f32(dh);
    put(s, dh);
    for (size_t j = 0; j < 32; ++j) {
      float q = d == 0 ? 0 : std::round(x[b + j] / d);
      put<int8_t>(s, int8_t(std::max(-127.0f, std::min(127.0f, q))));
    }
  }
  return s;
}

enum : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ3_K = 11, kQ6_K = 14 };

struct Built {
  GgufWriter w;
  std::vector<std::vector<float>> values;  // by tensor index
};

// tiny-gqa's shapes: dim 64, 2 layers, 4 heads, 2 kv heads, head_dim 16, hidden 160, vocab 256.
Built tiny_gguf(bool untied, bool rope_freqs) {
  Built b;
  GgufWriter& w = b.w;
  w.str("general.architecture", "llama");
  w.str_array("general.languages", {"en", "fr"});
  w.u32("llama.embedding_length", 64);
  w.u32("llama.block_count", 2);
  w.u32("llama.attention.head_count", 4);
  w.u32("llama.attention.head_count_kv", 2);
  w.u32("llama.feed_forward_length", 160);
  w.u32("llama.context_length", 256);
  w.u32("llama.rope.dimension_count", 16);
  w.f32("llama.rope.freq_base", 500000.0f);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.u32("tokenizer.ggml.bos_token_id", 7);
  w.u32("tokenizer.ggml.eos_token_id", 9);
  auto add = [&](const std::string& name, uint64_t rows, uint64_t cols, uint32_t type) {
    const int idx = int(b.values.size());
    std::vector<float> x(rows * cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = value(idx, int64_t(i));
    std::string bytes = type == kF32 ? f32_bytes(x) : type == kF16 ? f16_bytes(x) : q8_0_bytes(x);
    w.tensors.push_back({name, rows == 1 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{cols, rows}, type,
                         bytes});
    b.values.push_back(x);
  };
  add("token_embd.weight", 256, 64, kQ8_0);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 1, 64, kF32);
    add(p + "attn_q.weight", 64, 64, kF16);
    add(p + "attn_k.weight", 32, 64, kQ8_0);
    add(p + "attn_v.weight", 32, 64, kF32);
    add(p + "attn_output.weight", 64, 64, kQ8_0);
    add(p + "ffn_norm.weight", 1, 64, kF32);
    add(p + "ffn_gate.weight", 160, 64, kF16);
    add(p + "ffn_up.weight", 160, 64, kQ8_0);
    add(p + "ffn_down.weight", 64, 160, kF32);
  }
  add("output_norm.weight", 1, 64, kF32);
  if (untied) add("output.weight", 256, 64, kF16);
  if (rope_freqs) {
    w.tensors.push_back({"rope_freqs.weight", {8}, kF32, f32_bytes({1, 1, 1, 2, 4, 8, 8, 8})});
    b.values.push_back({1, 1, 1, 2, 4, 8, 8, 8});
  }
  return b;
}

std::string write(const TempDir& tmp, const std::string& bytes, const std::string& name = "model.gguf") {
  llm_test::write_file(tmp.path() / name, bytes);
  return tmp.str(name);
}

void expect_values(const llm::HostTensor& t, const std::vector<float>& want, uint32_t type) {
  ASSERT_EQ(size_t(t.numel()), want.size()) << t.name;
  const std::vector<float> got = t.to_f32();
  for (size_t b = 0; b < want.size(); b += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(want[b + j]));
    for (size_t j = b; j < b + 32; ++j) {
      if (type == kF32) {
        ASSERT_EQ(got[j], want[j]) << t.name << " element " << j;
      } else if (type == kF16) {
        ASSERT_EQ(got[j], llm::f16_to_f32(llm::f32_to_f16(want[j]))) << t.name << " element " << j;
      } else {  // Q8_0 then BF16: half a quantization step plus BF16 rounding
        const float step = amax / 127.0f;
        ASSERT_NEAR(got[j], want[j], 0.5f * step * 1.01f + std::fabs(want[j]) / 256.0f + 1e-7f)
            << t.name << " element " << j;
      }
    }
  }
}

TEST(GgufLoad, TinyGqaConfigAndValues) {
  TempDir tmp;
  Built b = tiny_gguf(false, false);
  const llm::Model m = llm::load_model(write(tmp, b.w.build()));
  EXPECT_EQ(m.format, "gguf");
  const llm::ModelConfig& c = m.config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.hidden_dim, 160);
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.max_seq_len, 256);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.bos_id, 7);
  EXPECT_EQ(c.eos_ids, std::vector<int>{9});
  EXPECT_TRUE(c.rope_freq_factors.empty());
  EXPECT_EQ(m.tokenizer_path, "");

  // Tensors in the order tiny_gguf added them.
  const llm::ModelWeights& w = m.weights;
  std::vector<const llm::HostTensor*> order{&w.embedding};
  for (const auto& l : w.layers)
    for (const llm::HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up,
                                     &l.w_down})
      order.push_back(t);
  order.push_back(&w.final_norm);
  ASSERT_EQ(order.size(), b.values.size());
  for (size_t i = 0; i < order.size(); ++i) {
    SCOPED_TRACE(b.w.tensors[i].name);
    EXPECT_EQ(order[i]->name, b.w.tensors[i].name);
    EXPECT_EQ(order[i]->rope_head_dim, 0);  // GGUF q/k rows are already interleaved
    expect_values(*order[i], b.values[i], b.w.tensors[i].type);
  }
  EXPECT_EQ(w.layers[0].wq.dtype, llm::DType::F16);
  EXPECT_EQ(w.layers[0].wk.quant, uint32_t(kQ8_0));  // kept as its blocks; reads dequantize exactly
  EXPECT_EQ(w.layers[0].wk.dtype, llm::DType::F32);
  EXPECT_EQ(w.layers[0].wk.nbytes(), size_t(w.layers[0].wk.rows) * size_t(w.layers[0].wk.cols / 32) * 34);
  EXPECT_EQ(w.layers[0].wq.quant, 0u);
  EXPECT_EQ(w.layers[1].attn_norm.rows, 1);
  EXPECT_EQ(w.layers[1].w_down.rows, 64);
  EXPECT_EQ(w.layers[1].w_down.cols, 160);
}

TEST(GgufLoad, TiedAndUntiedHead) {
  TempDir tmp;
  const llm::Model tied = llm::load_gguf(write(tmp, tiny_gguf(false, false).w.build(), "tied.gguf"));
  EXPECT_TRUE(tied.config.tied_embeddings);
  EXPECT_EQ(tied.weights.head.data, tied.weights.embedding.data);

  Built b = tiny_gguf(true, false);
  const llm::Model untied = llm::load_gguf(write(tmp, b.w.build(), "untied.gguf"));
  EXPECT_FALSE(untied.config.tied_embeddings);
  EXPECT_NE(untied.weights.head.data, untied.weights.embedding.data);
  EXPECT_EQ(untied.weights.head.name, "output.weight");
  expect_values(untied.weights.head, b.values.back(), kF16);
}

TEST(GgufLoad, GeneralAlignmentMovesTheDataSection) {
  TempDir tmp;
  Built b = tiny_gguf(false, false);
  b.w.alignment = 256;
  b.w.u32("general.alignment", 256);
  const llm::Model m = llm::load_gguf(write(tmp, b.w.build()));
  expect_values(m.weights.layers[1].wv, b.values[13], kF32);
  // The same file read with the default alignment of 32 would look for the data in the wrong place
  // (as long as the tensor infos do not happen to end on a multiple of 256).
  GgufWriter w = tiny_gguf(false, false).w;
  size_t header = 24 + w.kv.size();
  for (const auto& t : w.tensors) header += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
  ASSERT_NE(header % 256, 0u);
  w.alignment = 256;
  const llm::Model shifted = llm::load_gguf(write(tmp, w.build(), "shifted.gguf"));
  EXPECT_NE(shifted.weights.layers[1].wv.to_f32(), b.values[13]);
}

TEST(GgufLoad, RopeFreqFactorsDivideTheFrequencies) {
  TempDir tmp;
  const llm::Model m = llm::load_gguf(write(tmp, tiny_gguf(false, true).w.build()));
  const std::vector<float> factors{1, 1, 1, 2, 4, 8, 8, 8};
  EXPECT_EQ(m.config.rope_freq_factors, factors);
  const std::vector<float> inv = llm::rope_inv_freq(m.config);
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const double base = 1.0 / std::pow(500000.0, double(2 * i) / 16.0);
    EXPECT_NEAR(inv[size_t(i)], base / factors[size_t(i)], 1e-6 * base) << "pair " << i;
  }
}

TEST(GgufLoad, RunsOneCpuStep) {
  // Dequantized buffers, F16 views and rope factors together feed the CPU reference: one step samples in range.
  TempDir tmp;
  const llm::Model m = llm::load_gguf(write(tmp, tiny_gguf(true, true).w.build()));
  llm::BackendOptions bo;
  bo.ctx_size = 4;
  auto be = llm::make_cpu_backend(m, bo);
  const int token = 5;
  be->prefill(&token, 1, 0);
  llm::SamplerParams p;
  p.temperature = 0.0f;
  const int id = be->sample(p, 0);
  EXPECT_GE(id, 0);
  EXPECT_LT(id, 256);
}

// ---- Bad input ----

std::string load_error(const std::string& bytes) {
  TempDir tmp;
  const std::string path = write(tmp, bytes);
  try {
    llm::load_model(path);
  } catch (const llm::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "bad GGUF was accepted";
  return "";
}

void expect_error(const std::string& bytes, const std::vector<std::string>& parts) {
  const std::string msg = load_error(bytes);
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(GgufBadInput, WrongMagic) {
  std::string bytes = tiny_gguf(false, false).w.build();
  TempDir tmp;
  bytes[3] = 'X';  // load_model then takes it for llama2.c; load_gguf must say what is wrong
  const std::string path = write(tmp, bytes);
  try {
    llm::load_gguf(path);
    ADD_FAILURE() << "accepted";
  } catch (const llm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a GGUF file"), std::string::npos) << e.what();
  }
}

TEST(GgufBadInput, Version2) {
  GgufWriter w = tiny_gguf(false, false).w;
  w.version = 2;
  expect_error(w.build(), {"unsupported GGUF version 2"});
}

TEST(GgufBadInput, TruncatedHeader) {
  const GgufWriter w = tiny_gguf(false, false).w;
  const std::string bytes = w.build();
  expect_error(bytes.substr(0, 14), {"truncated", "tensor count"});
  // Past the key-values, part way into the 20 tensor infos (about 60 bytes each).
  expect_error(bytes.substr(0, 24 + w.kv.size() + 700), {"truncated", "tensor"});
}

TEST(GgufBadInput, HugeTensorCount) {
  std::string bytes = tiny_gguf(false, false).w.build();
  const uint64_t huge = uint64_t(1) << 60;
  std::memcpy(&bytes[8], &huge, 8);
  expect_error(bytes, {"tensor count", "cannot fit"});
}

TEST(GgufBadInput, StringLengthPastTheEnd) {
  std::string bytes = tiny_gguf(false, false).w.build();
  const uint64_t len = uint64_t(1) << 40;
  std::memcpy(&bytes[24], &len, 8);  // the first key's length
  expect_error(bytes, {"string length 1099511627776", "past the end"});
}

TEST(GgufBadInput, DataOffsetPastTheEnd) {
  GgufWriter w = tiny_gguf(false, false).w;
  w.find("blk.1.ffn_up.weight")->offset_override = int64_t(1) << 30;
  expect_error(w.build(), {"blk.1.ffn_up.weight", "past the end"});
}

TEST(GgufBadInput, MisalignedOffset) {
  GgufWriter w = tiny_gguf(false, false).w;
  w.find("blk.0.attn_v.weight")->offset_override = 8;
  expect_error(w.build(), {"blk.0.attn_v.weight", "not a multiple of the alignment 32"});
}

TEST(GgufBadInput, UnknownTensorTypeIsNamed) {
  GgufWriter w = tiny_gguf(false, false).w;
  w.find("blk.0.attn_q.weight")->type = kQ3_K;  // a K-quant without a kernel or a reader here
  expect_error(w.build(), {"blk.0.attn_q.weight", "unsupported tensor type Q3_K"});
  w.find("blk.0.attn_q.weight")->type = 999;
  expect_error(w.build(), {"blk.0.attn_q.weight", "type 999"});
}

TEST(GgufBadInput, MissingRequiredKeyIsNamed) {
  GgufWriter full = tiny_gguf(false, false).w;
  // Rebuild the metadata without llama.feed_forward_length.
  GgufWriter w;
  w.tensors = full.tensors;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", 64);
  w.u32("llama.block_count", 2);
  w.u32("llama.attention.head_count", 4);
  w.u32("llama.context_length", 256);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  expect_error(w.build(), {"llama.feed_forward_length", "missing"});
}

TEST(GgufBadInput, ShapeDisagreeingWithConfigNamesTheTensor) {
  GgufWriter w = tiny_gguf(false, false).w;
  TensorSpec* t = w.find("blk.1.attn_k.weight");
  t->dims = {64, 64};  // 64 rows where 2 kv heads of 16 give 32
  t->bytes += t->bytes;
  expect_error(w.build(), {"blk.1.attn_k.weight", "expected dims [64, 32]", "found [64, 64]"});
}

TEST(GgufBadInput, MissingTensorAndExtraLayer) {
  GgufWriter w = tiny_gguf(false, false).w;
  w.erase("blk.1.ffn_down.weight");
  expect_error(w.build(), {"blk.1.ffn_down.weight", "not found"});
  GgufWriter x = tiny_gguf(false, false).w;
  x.tensors.push_back({"blk.2.attn_norm.weight", {64}, kF32, std::string(256, '\0')});
  expect_error(x.build(), {"blk.2.attn_norm.weight", "block_count"});
}

TEST(GgufBadInput, BadRopeFreqs) {
  GgufWriter w = tiny_gguf(false, true).w;
  w.find("rope_freqs.weight")->bytes = f32_bytes({1, 1, 1, 0, 1, 1, 1, 1});
  expect_error(w.build(), {"rope_freqs.weight", "expected > 0"});
}

// ---- Every listed tensor type through load_gguf ----

// Blocks whose values are exact in BF16, written from the format definitions (not through models/dequant.cpp):
// Q4_0 x[j] = (low nibble of byte j - 8) * d, x[j + 16] = (high nibble - 8) * d; Q4_1 x = nibble * d + m.
std::string q4_bytes(int64_t n, bool with_min, std::vector<float>* want) {
  std::string s;
  const float d = 0.25f, m = -0.5f;
  for (int64_t b = 0; b < n / 32; ++b) {
    put<uint16_t>(s, llm::f32_to_f16(d));
    if (with_min) put<uint16_t>(s, llm::f32_to_f16(m));
    std::vector<float> x(32);
    for (int j = 0; j < 16; ++j) {
      const int lo = int((b * 7 + j * 5) % 16), hi = int((b * 3 + j * 11 + 1) % 16);
      put<uint8_t>(s, uint8_t(lo | hi << 4));
      x[size_t(j)] = with_min ? float(lo) * d + m : float(lo - 8) * d;
      x[size_t(j) + 16] = with_min ? float(hi) * d + m : float(hi - 8) * d;
    }
    want->insert(want->end(), x.begin(), x.end());
  }
  return s;
}

TEST(GgufLoad, Bf16Q4_0AndQ4_1TensorsLoadWithTheirValues) {
  GgufWriter w = tiny_gguf(false, false).w;
  std::vector<float> bf16_want, q4_0_want, q4_1_want;
  std::string bf16;
  for (int64_t i = 0; i < 64 * 64; ++i) {
    const uint16_t h = llm::f32_to_bf16(value(99, i));
    put(bf16, h);
    bf16_want.push_back(llm::bf16_to_f32(h));
  }
  w.find("blk.0.attn_q.weight")->type = 30;  // BF16, [64, 64]
  w.find("blk.0.attn_q.weight")->bytes = bf16;
  w.find("blk.0.ffn_up.weight")->type = 2;   // Q4_0, [160, 64]
  w.find("blk.0.ffn_up.weight")->bytes = q4_bytes(160 * 64, false, &q4_0_want);
  w.find("blk.1.ffn_gate.weight")->type = 3;  // Q4_1, [160, 64]
  w.find("blk.1.ffn_gate.weight")->bytes = q4_bytes(160 * 64, true, &q4_1_want);
  TempDir tmp;
  const llm::Model m = llm::load_gguf(write(tmp, w.build()));
  EXPECT_EQ(m.weights.layers[0].wq.dtype, llm::DType::BF16);
  EXPECT_EQ(m.weights.layers[0].wq.to_f32(), bf16_want);
  EXPECT_EQ(m.weights.layers[0].w_up.to_f32(), q4_0_want);
  EXPECT_EQ(m.weights.layers[1].w_gate.to_f32(), q4_1_want);
}

// ---- The tokenizer vocabulary and chat template (tokenizer.ggml.*, tokenizer.chat_template) ----

// tiny_gguf plus a gpt2-style vocabulary of `n_tokens` tokens.
GgufWriter with_vocab(int n_tokens) {
  GgufWriter w = tiny_gguf(false, false).w;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  for (int i = 0; i < n_tokens; ++i) {
    tokens.push_back(i < 3 ? "<|special" + std::to_string(i) + "|>" : "tok" + std::to_string(i));
    types.push_back(i < 3 ? 3 : 1);
    scores.push_back(-float(i));
  }
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", "smollm");
  w.str_array("tokenizer.ggml.tokens", tokens);
  w.i32_array("tokenizer.ggml.token_type", types);
  w.f32_array("tokenizer.ggml.scores", scores);
  w.str_array("tokenizer.ggml.merges", {"t o", "to k"});
  w.u32("tokenizer.ggml.eot_token_id", 2);
  w.boolean("tokenizer.ggml.add_bos_token", false);
  w.str("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}");
  return w;
}

TEST(GgufVocab, ArraysIdsFlagsAndTemplateReachTheModel) {
  TempDir tmp;
  const llm::Model m = llm::load_gguf(write(tmp, with_vocab(256).build()));
  ASSERT_TRUE(m.vocab);
  const llm::EmbeddedVocab& v = *m.vocab;
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "smollm");
  ASSERT_EQ(v.tokens.size(), 256u);
  EXPECT_EQ(v.tokens[1], "<|special1|>");
  EXPECT_EQ(v.tokens[255], "tok255");
  ASSERT_EQ(v.token_types.size(), 256u);
  EXPECT_EQ(v.token_types[2], 3);
  EXPECT_EQ(v.token_types[3], 1);
  ASSERT_EQ(v.scores.size(), 256u);
  EXPECT_EQ(v.scores[10], -10.0f);
  EXPECT_EQ(v.merges, (std::vector<std::string>{"t o", "to k"}));
  EXPECT_EQ(v.bos_id, 7);
  EXPECT_EQ(v.eos_id, 9);
  EXPECT_EQ(v.eot_id, 2);
  EXPECT_EQ(v.unk_id, -1);
  EXPECT_FALSE(v.add_bos);
  // The end-of-turn token ends generation as EOS does.
  EXPECT_EQ(m.config.eos_ids, (std::vector<int>{9, 2}));
  EXPECT_NE(m.chat_template.find("<|im_start|>"), std::string::npos);
}

TEST(GgufVocab, NoTokenizerKeysMeansNoVocabulary) {
  TempDir tmp;
  const llm::Model m = llm::load_gguf(write(tmp, tiny_gguf(false, false).w.build()));
  EXPECT_FALSE(m.vocab);
  EXPECT_EQ(m.chat_template, "");
}

TEST(GgufVocab, BadVocabularyIsNamed) {
  {
    GgufWriter w = tiny_gguf(false, false).w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.i32_array("tokenizer.ggml.tokens", {1, 2, 3});
    expect_error(w.build(), {"tokenizer.ggml.tokens", "must be an array of strings"});
  }
  {
    GgufWriter w = with_vocab(256);
    w.f32_array("tokenizer.ggml.scores", {1.0f});  // a second, shorter key: duplicate keys are refused first
    expect_error(w.build(), {"tokenizer.ggml.scores", "appears twice"});
  }
  {
    GgufWriter w = tiny_gguf(false, false).w;
    w.str("tokenizer.ggml.model", "llama");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.f32_array("tokenizer.ggml.scores", {1.0f});
    expect_error(w.build(), {"tokenizer.ggml.scores has 1 entries for 2 tokens"});
  }
  {
    GgufWriter w = tiny_gguf(false, false).w;  // bos 7 and eos 9 are outside a 4-token vocabulary
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b", "c", "d"});
    expect_error(w.build(), {"tokenizer.ggml.bos_token_id 7 is outside the 4 tokens"});
  }
  {
    expect_error(with_vocab(300).build(), {"300 tokens, more than the 256 rows of token_embd.weight"});
  }
  {
    GgufWriter w = with_vocab(256);
    w.u32("tokenizer.ggml.add_space_prefix", 1);
    expect_error(w.build(), {"tokenizer.ggml.add_space_prefix", "must be a bool"});
  }
  {
    GgufWriter w = tiny_gguf(false, false).w;
    w.u32("tokenizer.chat_template", 3);
    expect_error(w.build(), {"tokenizer.chat_template", "must be a string"});
  }
}

}  // namespace
