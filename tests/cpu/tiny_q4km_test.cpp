// A Q4_K_M file written by llama.cpp's own llama-quantize (tests/data/models/tiny-q4km, made by
// tools/make_tiny_q4km.py; synthetic weights): every tensor our code dequantizes equals the gguf Python package's
// gguf.quants.dequantize bit for bit (tests/data/tiny_q4km_refs.json), the types llama-quantize chose are those of our
// own Q4_K_M rule, the model runs on the CPU path and --quantize refuses it naming its types, and our Q4_K quantizer's
// RMS error on the file's float source is within 5% of llama-quantize's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "gguf_refs_util.h"  // the comparison with gguf.quants.dequantize's references, shared with SmolLM2's
#include "models/dequant.h"
#include "models/gguf.h"
#include "models/model.h"
#include "models/quant.h"
#include "models/quantize_model.h"
#include "run_program_util.h"  // run_program, expect_run_llama_refused, TempDir
#include "sha256_util.h"
#include "tokenizer/load.h"

namespace llm {
namespace {

using Q = GgmlQuantType;
const std::string kFile = std::string(LLM_TEST_MODELS) + "/tiny-q4km/tiny-q4km.gguf";
const std::string kRunLlama = std::string(LLM_BINARY_DIR) + "/run-llama";

const nlohmann::json& refs() {
  static const nlohmann::json j =
      llm_test::read_source_json("tests/data/tiny_q4km_refs.json", "tools/make_tiny_q4km.py");
  return j;
}

using llm_test::sample_mismatches;
using llm_test::sha_of;
std::vector<float> dequant(const GgufTensor& t, const uint8_t* data) { return llm_test::dequant_gguf_tensor(t, data); }

// The float source of a tensor, regenerated as tools/make_tiny_q4km.py made it: float32 Irwin-Hall values (the sum of
// 12 counter-based uniforms minus 6, as tools/quant_refs.py) times the scale, norms offset by 1.
std::vector<float> source_of(const nlohmann::json& r, int64_t count) {
  const auto& src = refs().at("source");
  const uint64_t seed = src.at("seed"), id = r.at("tensor_id");
  const bool norm = r.at("is_norm");
  const float scale = float(double(norm ? src.at("norm_scale") : src.at("matrix_scale")));
  const float offset = float(double(src.at("norm_offset")));
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    float acc = 0.0f;
    for (int t = 0; t < 12; ++t) acc += rng_unit(seed, id, uint64_t(12 * i + t));
    volatile float v = (acc - 6.0f) * scale;  // volatile: no FMA contraction with the add below
    out[size_t(i)] = norm ? offset + v : v;
  }
  return out;
}

double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
  return std::sqrt(s / double(a.size()));
}

TEST(TinyQ4KM, Sha256OfTheFipsExamples) {
  EXPECT_EQ(llm_test::sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(llm_test::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 bytes: two tail blocks
  EXPECT_EQ(llm_test::sha256_hex(two.data(), two.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(llm_test::sha256_hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(TinyQ4KM, TheFileIsTheOneTheReferencesDescribe) {
  const GgufFile f = open_gguf(kFile);
  const auto& r = refs();
  EXPECT_EQ(llm_test::sha256_hex(f.mapping->data(), f.mapping->size()), r.at("file_sha256").get<std::string>())
      << "tests/data/models/tiny-q4km changed without tools/make_tiny_q4km.py --refs-only";
  ASSERT_EQ(f.tensors.size(), r.at("tensors").size());
  std::map<std::string, int> types;
  for (const auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(r.at("tensors").contains(name));
    llm_test::expect_gguf_tensor_is_the_reference_one(t, r.at("tensors").at(name));
    types[ggml_type_name(t.type)]++;
  }
  // What llama-quantize made of it: Q4_K and Q6_K projections, F32 norms (tools/make_tiny_q4km.py prints the list).
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 5}, {"Q4_K", 13}, {"Q6_K", 3}}));
}

TEST(TinyQ4KM, EveryTensorDequantizesExactlyAsTheGgufPackage) {
  const GgufFile f = open_gguf(kFile);
  const Model m = load_gguf(kFile);
  const std::map<std::string, const HostTensor*> loaded = llm_test::tensors_by_name(m);
  ASSERT_EQ(loaded.size(), f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name + " (" + ggml_type_name(t.type) + ")");
    const auto& e = refs().at("tensors").at(name);
    const std::string want = e.at("dequant_sha256");
    // 1. the reference dequantizer over the file's blocks
    const std::vector<float> y = dequant(t, t.data);
    EXPECT_EQ(sha_of(y), want);
    EXPECT_EQ(sample_mismatches(e, y), 0);
    // 2. the loaded model's tensor (what the CPU reference path reads), kept as its blocks
    ASSERT_TRUE(loaded.count(name));
    const HostTensor& h = *loaded.at(name);
    EXPECT_EQ(h.quant, t.type == 0 ? 0u : t.type);
    EXPECT_EQ(h.numel(), int64_t(y.size()));
    const std::vector<float> read = h.to_f32();
    EXPECT_EQ(sha_of(read), want);
    // 3. the prepacked layout the GPU kernels read
    if (t.type != 0) {
      const PackedQuant p = pack_quant(t.data, Q(t.type), int64_t(t.dims[1]), int64_t(t.dims[0]), name);
      EXPECT_EQ(sha_of(unpack_quant(p)), want);
    }
  }
}

TEST(TinyQ4KM, OneFlippedBitFailsTheComparison) {
  // Negative control: the comparison above sees a single flipped code bit and a single flipped scale bit, of both
  // K-quant types.
  const GgufFile f = open_gguf(kFile);
  for (const char* name : {"blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "output.weight"}) {
    SCOPED_TRACE(name);
    const GgufTensor& t = f.tensors.at(name);
    const auto& e = refs().at("tensors").at(name);
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    ASSERT_EQ(sha_of(dequant(t, bytes.data())), e.at("dequant_sha256").get<std::string>());
    const size_t block = ggml_quant_block_bytes(Q(t.type));
    std::vector<uint8_t> bad = bytes;
    bad[3 * block + block / 2] ^= 0x01;  // a code bit of block 3 (Q4_K: qs; Q6_K: ql/qh)
    EXPECT_NE(sha_of(dequant(t, bad.data())), e.at("dequant_sha256").get<std::string>());
    bad = bytes;
    bad[5 * block + (t.type == uint32_t(Q::Q6_K) ? 192 : 4)] ^= 0x01;  // a sub-block scale bit of block 5
    EXPECT_NE(sha_of(dequant(t, bad.data())), e.at("dequant_sha256").get<std::string>());
  }
}

TEST(TinyQ4KM, LlamaQuantizeChoseOurQ4KMRuleTypes) {
  // llama.cpp's choice per tensor and models/quantize_model.h's rule agree (2 layers: layer 1 is the "more bits" one,
  // so its attn_v and ffn_down are Q6_K; the untied output is Q6_K; everything else Q4_K).
  const Model m = load_gguf(kFile);
  const int n = m.config.n_layers;
  ASSERT_EQ(n, 2);
  ASSERT_FALSE(m.config.tied_embeddings);
  auto want = [&](WeightRole role, int layer, const HostTensor& t) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.quant, uint32_t(q4_k_m_type(role, layer, n, t.cols, false)));
    EXPECT_EQ(ggml_type_name(t.quant), refs().at("tensors").at(t.name).at("type").get<std::string>());
  };
  want(WeightRole::TokenEmbd, -1, m.weights.embedding);
  want(WeightRole::Output, -1, m.weights.head);
  for (int l = 0; l < n; ++l) {
    const LayerWeights& lw = m.weights.layers[size_t(l)];
    want(WeightRole::AttnQ, l, lw.wq);
    want(WeightRole::AttnK, l, lw.wk);
    want(WeightRole::AttnV, l, lw.wv);
    want(WeightRole::AttnOutput, l, lw.wo);
    want(WeightRole::FfnGate, l, lw.w_gate);
    want(WeightRole::FfnUp, l, lw.w_up);
    want(WeightRole::FfnDown, l, lw.w_down);
  }
  EXPECT_EQ(m.weights.layers[1].wv.quant, uint32_t(Q::Q6_K));
  EXPECT_EQ(m.weights.layers[0].wv.quant, uint32_t(Q::Q4_K));
}

TEST(TinyQ4KM, DecodesOnTheCpuWithFiniteLogits) {
  const Model m = load_gguf(kFile);
  EXPECT_EQ(m.config.dim, 256);
  EXPECT_EQ(m.config.hidden_dim, 768);
  EXPECT_EQ(m.config.vocab_size, 300);
  // The file's own vocabulary is a valid sentencepiece one (bytes fall back to <0xXX> pieces and decode back).
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(m, "");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 300);
  const std::vector<int> ids = tok->encode("Hi, 5!", true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tok->decode(ids), "Hi, 5!");

  BackendOptions bo;
  bo.device = "cpu";
  bo.ctx_size = 16;
  auto b = make_backend(m, bo);
  const std::vector<int> steps = {1, 80, 299, 3, 150, 2};  // BOS, bytes, a word piece, EOS: six decode steps
  const std::vector<float> logits = teacher_forced_logits(*b, steps);
  ASSERT_EQ(logits.size(), steps.size() * 300);
  size_t non_finite = 0;
  double spread = 0.0;
  for (float v : logits) non_finite += !std::isfinite(v);
  EXPECT_EQ(non_finite, 0u);
  for (size_t i = 0; i < 300; ++i) spread = std::max(spread, std::fabs(double(logits[i]) - double(logits[300 + i])));
  EXPECT_GT(spread, 0.0) << "the logits do not depend on the input";

  // The same through run-llama: a prompt from the file's vocabulary, a few greedy decode steps on the CPU path.
  llm_test::TempDir tmp;
  ASSERT_TRUE(std::ifstream(kRunLlama).good()) << kRunLlama << " is not built";
  const llm_test::ProgramRun r = llm_test::run_program(
      kRunLlama, {"--model", kFile, "--prompt", "Once upon a time", "-n", "4", "--temp", "0", "--device", "cpu",
                  "--ignore-eos"},
      tmp);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;  // the prompt, then the continuation
  EXPECT_GT(r.out.size(), std::string("Once upon a time").size()) << r.out;
  EXPECT_NE(r.err.find("/     3 runs"), std::string::npos) << r.err;  // 4 tokens: 1 from the prefill, 3 decode steps
}

TEST(TinyQ4KM, QuantizeIsRefusedNamingTheFilesTypes) {
  // Counts from the references: the projections and the head (token_embd too for the q4_k_m mix).
  std::map<std::string, int> proj;
  for (const auto& [name, e] : refs().at("tensors").items())
    if (e.at("type") != "F32" && name != "token_embd.weight") proj[e.at("type")]++;
  const std::string types = "Q4_K x " + std::to_string(proj["Q4_K"]) + ", Q6_K x " + std::to_string(proj["Q6_K"]);
  EXPECT_EQ(types, "Q4_K x 12, Q6_K x 3");
  for (const char* scheme : {"q4_k", "q8_0", "q4_k_m"}) {
    SCOPED_TRACE(scheme);
    Model m = load_gguf(kFile);
    const std::string want = std::string(scheme) == "q4_k_m" ? "Q4_K x 13, Q6_K x 3" : types;
    try {
      quantize_model(m, parse_quantize_type(scheme), 1);
      ADD_FAILURE() << "a Q4_K_M file was quantized again";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already quantized (" + want + ")"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(kFile), std::string::npos) << e.what();
    }
  }
  llm_test::TempDir tmp;
  llm_test::expect_run_llama_refused(kRunLlama,
                                     {"--model", kFile, "--quantize", "q4_k", "--prompt", "Hi", "-n", "2",
                                      "--device", "cpu"},
                                     1, {"already quantized (" + types + ")", kFile}, tmp);
}

// ---- the Q4_K quantizer against llama-quantize ---------------------------------------------------------------------

TEST(TinyQ4KM, FloatSourceRegeneratesBitForBit) {
  // The norms are F32 in the file, copied by llama-quantize unchanged: our regeneration of the float model's values
  // (the same generator as its matrices) must give their bits, and the matrices must sit near their dequantization.
  const GgufFile f = open_gguf(kFile);
  for (const auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    const auto& e = refs().at("tensors").at(name);
    const std::vector<float> y = dequant(t, t.data);
    const std::vector<float> src = source_of(e, int64_t(y.size()));
    if (t.type == 0) {
      EXPECT_EQ(sha_of(src), sha_of(y));
    } else {
      double rms = 0.0;
      for (float v : src) rms += double(v) * double(v);
      rms = std::sqrt(rms / double(src.size()));
      EXPECT_NEAR(rms, 0.02, 0.001);
      EXPECT_LT(rms_diff(y, src), 0.15 * rms);                            // within a 4- or 6-bit step
      EXPECT_NEAR(rms_diff(y, src), double(e.at("rms_error_vs_source")), 1e-12);  // as the Python side measured
    }
  }
}

// RMS errors against the float source over every tensor of type t in the file: llama-quantize's (its dequantized
// blocks) and ours (models/quant.cpp's quantizer on the same source, dequantized by the same code), and ours with one
// code per block moved (a negative control: what a slightly wrong quantizer would give).
struct RmsComparison {
  double theirs = 0, ours = 0, bad = 0;
  int64_t weights = 0, blocks = 0, same_blocks = 0;
};
RmsComparison compare_with_llama_quantize(Q type) {
  const GgufFile f = open_gguf(kFile);
  const size_t bb = ggml_quant_block_bytes(type);
  const size_t code_byte = type == Q::Q4_K ? 16 : 0;  // Q4_K: qs[0]; Q6_K: ql[0]
  RmsComparison c;
  for (const auto& [name, t] : f.tensors) {
    if (t.type != uint32_t(type)) continue;
    const auto& e = refs().at("tensors").at(name);
    const int64_t k = int64_t(t.dims[0]), rows = int64_t(t.dims[1]);
    const std::vector<float> src = source_of(e, rows * k);
    const std::vector<float> theirs = dequant(t, t.data);
    std::vector<uint8_t> mine = quantize_matrix(type, src.data(), rows, k);
    if (mine.size() != t.nbytes) throw std::runtime_error(name + ": our blocks differ in size");
    for (size_t b = 0; b < mine.size(); b += bb, ++c.blocks) c.same_blocks += std::memcmp(&mine[b], t.data + b, bb) == 0;
    const std::vector<float> ours = dequant(t, mine.data());
    for (size_t b = 0; b < mine.size(); b += bb) mine[b + code_byte] ^= 0x0F;
    const std::vector<float> bad = dequant(t, mine.data());
    for (size_t i = 0; i < src.size(); ++i) {
      c.theirs += (double(theirs[i]) - src[i]) * (double(theirs[i]) - src[i]);
      c.ours += (double(ours[i]) - src[i]) * (double(ours[i]) - src[i]);
      c.bad += (double(bad[i]) - src[i]) * (double(bad[i]) - src[i]);
    }
    c.weights += int64_t(src.size());
  }
  if (c.weights == 0) throw std::runtime_error("no tensor of that type in the file");
  for (double* v : {&c.theirs, &c.ours, &c.bad}) *v = std::sqrt(*v / double(c.weights));
  std::printf("%s RMS error over %lld weights: llama-quantize %.8f, ours %.8f, ratio %.6f; %lld of %lld blocks "
              "byte-identical; negative control (one code per block moved) %.8f\n",
              ggml_quant_name(type), (long long)c.weights, c.theirs, c.ours, c.ours / c.theirs,
              (long long)c.same_blocks, (long long)c.blocks, c.bad);
  return c;
}

TEST(TinyQ4KM, OurQ4KQuantizerRmsWithinFivePercentOfLlamaQuantize) {
  // Every Q4_K tensor of the file: 13 tensors, 1,420,288 weights of an approximately normal float source (sigma 0.02).
  const RmsComparison c = compare_with_llama_quantize(Q::Q4_K);
  const auto& r = refs().at("llama_quantize_q4_k_rms_error");
  ASSERT_EQ(c.weights, int64_t(r.at("weights")));
  EXPECT_NEAR(c.theirs, double(r.at("value")), 1e-12);  // as the Python side measured it
  EXPECT_LE(c.ours, 1.05 * c.theirs);
  EXPECT_GE(c.ours, 0.95 * c.theirs);  // much lower would mean the comparison measures something else
  EXPECT_GT(c.bad, 1.05 * c.theirs);   // the 5% check catches a quantizer with one wrong code per block
}

TEST(TinyQ4KM, OurQ6KQuantizerRmsWithinFivePercentOfLlamaQuantize) {
  // The same for the file's three Q6_K tensors (output, blk.1.attn_v, blk.1.ffn_down: 306,176 weights).
  const RmsComparison c = compare_with_llama_quantize(Q::Q6_K);
  EXPECT_EQ(c.weights, 300 * 256 + 128 * 256 + 256 * 768);
  EXPECT_LE(c.ours, 1.05 * c.theirs);
  EXPECT_GE(c.ours, 0.95 * c.theirs);
  EXPECT_GT(c.bad, 1.05 * c.theirs);
}

}  // namespace
}  // namespace llm
