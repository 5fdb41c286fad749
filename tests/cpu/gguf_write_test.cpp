// write-gguf (models/gguf_writer.h, apps/write-gguf.cpp): a model written as GGUF and loaded back by our own loader
// computes the same logits as the model in memory (stories260K as float and through every --quantize scheme; a Hugging
// Face directory whose q/k rows are permuted at load; a synthetic model with Llama 3 scaling), its vocabulary encodes
// and decodes as the original tokenizer does (sentencepiece and byte-level BPE), the file's metadata and tensor table
// as an independent reader here sees them, and the command line's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "models/gguf.h"
#include "models/gguf_writer.h"
#include "models/hf_writer.h"
#include "models/model.h"
#include "models/quantize_model.h"
#include "models_test_util.h"
#include "run_program_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/load.h"
#include "tokenizer/sentencepiece.h"

namespace {

namespace fs = std::filesystem;
using llm_test::TempDir;

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";
const std::string kStoriesBin = kStories + "/stories260K.bin";
const std::string kTok512 = kStories + "/tok512.model";
const std::string kBin = LLM_BINARY_DIR;

const std::vector<int> kIds = {1, 403, 407, 261, 378, 13, 2, 290, 84, 499};  // BOS, then a spread over the 512 ids

std::vector<float> logits_of(const llm::Model& m, const std::vector<int>& ids = kIds) {
  llm::BackendOptions bo;
  bo.ctx_size = 32;
  auto b = llm::make_backend(m, bo);
  return llm::teacher_forced_logits(*b, ids);
}

// Largest |a - b| / max(|b|, 1e-3) over the elements; sizes must agree.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), 1e-3));
  return worst;
}

size_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += llm::f32_to_bits(a[i]) != llm::f32_to_bits(b[i]);
  return n;
}

// Every (engine name, tensor) pair of a model, in a fixed order, for comparing two models' tensors.
std::vector<const llm::HostTensor*> tensors_of(const llm::Model& m) {
  std::vector<const llm::HostTensor*> v{&m.weights.embedding};
  for (const auto& l : m.weights.layers)
    for (const llm::HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up,
                                     &l.w_down})
      v.push_back(t);
  v.push_back(&m.weights.final_norm);
  v.push_back(&m.weights.head);
  return v;
}

const std::vector<std::string> kTexts = {"Once upon a time, there was a little girl named Lily.",
                                         "She liked to play outside\nwith her dog.", "x", "Hello world",
                                         "The sun is 93 million miles away!", "caf\xC3\xA9 na\xC3\xAFve \xE2\x82\xAC"};

// ---- (a) round trips -----------------------------------------------------------------------------------------------

TEST(WriteGguf, Stories260KFloatAndEveryQuantizeSchemeReloadsToTheSameLogits) {
  TempDir tmp;
  const llm::EmbeddedVocab vocab = llm::vocab_of_tokenizer_file(kTok512);
  for (const std::string scheme : {"", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m"}) {
    SCOPED_TRACE(scheme.empty() ? "float" : scheme);
    // The model in memory: loaded, and quantized in place as run-llama --quantize does.
    llm::Model mem = llm::load_llama2c(kStoriesBin);
    llm::GgufWriteOptions opt;
    opt.threads = 2;
    if (!scheme.empty()) {
      opt.quantize = llm::parse_quantize_type(scheme);
      llm::quantize_model(mem, *opt.quantize, 2);
    }
    const std::vector<float> want = logits_of(mem);
    // The file: written from the float model, quantized on the way (the write-gguf path), then loaded back.
    const std::string path = tmp.str("s_" + (scheme.empty() ? "f32" : scheme) + ".gguf");
    const llm::GgufWriteSummary sum = llm::write_gguf(llm::load_llama2c(kStoriesBin), &vocab, path, opt);
    EXPECT_EQ(sum.file_bytes, fs::file_size(path));
    const llm::Model back = llm::load_gguf(path);
    // Every tensor came back in the type and with the values of the in-memory one.
    const auto a = tensors_of(mem), b = tensors_of(back);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(a[i]->name);
      EXPECT_EQ(b[i]->quant, a[i]->quant);
      if (!a[i]->quant && a[i]->rows > 1) {
        EXPECT_EQ(b[i]->dtype, a[i]->dtype);
      }
      EXPECT_EQ(bit_mismatches(b[i]->to_f32(), a[i]->to_f32()), 0u);
    }
    const std::vector<float> got = logits_of(back);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(bit_mismatches(got, want), 0u) << "max relative difference " << max_rel_diff(got, want);
    // The vocabulary: same ids and text as the original tokenizer.model.
    ASSERT_TRUE(back.vocab);
    EXPECT_EQ(back.vocab->tokens.size(), 512u);
    const auto orig = llm::load_sentencepiece(kTok512);
    const auto tok = llm::load_tokenizer(back, "");
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->bos_id(), orig->bos_id());
    EXPECT_EQ(tok->eos_id(), orig->eos_id());
    for (const std::string& text : kTexts) {
      const std::vector<int> ids = orig->encode(text, true);
      EXPECT_EQ(tok->encode(text, true), ids) << text;
      EXPECT_EQ(tok->decode(ids), orig->decode(ids)) << text;
    }
  }
}

TEST(WriteGguf, QuantizedRowsAreTheInMemoryBlocksByteForByte) {
  // The strongest form of "the same file": the blocks the writer streams are the bytes quantize_model keeps.
  TempDir tmp;
  llm::Model mem = llm::load_synthetic("tiny-gqa", 7);
  const llm::QuantizeScheme s = llm::parse_quantize_type("q4_0");
  llm::quantize_model(mem, s, 2);
  llm::GgufWriteOptions opt;
  opt.quantize = s;
  const std::string path = tmp.str("t.gguf");
  llm::write_gguf(llm::load_synthetic("tiny-gqa", 7), nullptr, path, opt);
  const llm::GgufFile f = llm::open_gguf(path);
  const llm::GgufTensor* q = f.find("blk.1.attn_q.weight");
  ASSERT_TRUE(q);
  const llm::HostTensor& wq = mem.weights.layers[1].wq;
  ASSERT_EQ(q->nbytes, wq.nbytes());
  EXPECT_EQ(std::memcmp(q->data, wq.data, q->nbytes), 0);
}

TEST(WriteGguf, HuggingFaceRotateHalfRowsAreWrittenInterleaved) {
  // An HF directory stores q/k rows rotate-half; the loader permutes them (rope_head_dim); the GGUF holds them
  // interleaved, as llama.cpp's converter writes them, so our GGUF loader (which never permutes) gets the same rows.
  TempDir tmp;
  llm::HfWriteOptions hf;
  hf.dtype = llm::DType::F32;
  llm::write_hf_model(llm::load_synthetic("tiny-gqa", 3), tmp.str("hf"), hf);
  const llm::Model hf_model = llm::load_hf_dir(tmp.str("hf"));
  ASSERT_NE(hf_model.weights.layers[0].wq.rope_head_dim, 0) << "the test needs a permuted q";
  const std::vector<int> ids = {1, 5, 9, 3, 7, 2};
  const std::vector<float> want = logits_of(hf_model, ids);
  for (const std::string scheme : {"", "q8_0"}) {
    SCOPED_TRACE(scheme.empty() ? "float" : scheme);
    llm::GgufWriteOptions opt;
    llm::Model mem = llm::load_hf_dir(tmp.str("hf"));
    if (!scheme.empty()) {
      opt.quantize = llm::parse_quantize_type(scheme);
      llm::quantize_model(mem, *opt.quantize, 2);
    }
    const std::string path = tmp.str("hf" + scheme + ".gguf");
    llm::write_gguf(hf_model, nullptr, path, opt);
    const llm::Model back = llm::load_gguf(path);
    EXPECT_EQ(back.weights.layers[0].wq.rope_head_dim, 0);
    EXPECT_EQ(bit_mismatches(logits_of(back, ids), logits_of(mem, ids)), 0u);
    if (scheme.empty()) {
      EXPECT_EQ(bit_mismatches(logits_of(back, ids), want), 0u);
    }
  }
  // Negative control: q/k rows in the file's (rotate-half) order change the logits, so the check above can fail.
  llm::Model wrong = llm::load_hf_dir(tmp.str("hf"));
  for (auto& l : wrong.weights.layers) l.wq.rope_head_dim = l.wk.rope_head_dim = 0;
  EXPECT_GT(max_rel_diff(logits_of(wrong, ids), want), 1e-3);
}

TEST(WriteGguf, Llama3ScalingTravelsAsRopeFreqs) {
  // tiny-gqa carries llama3 rope scaling; GGUF carries it as rope_freqs.weight (llama.cpp's way), so the loaded
  // frequencies differ from the in-memory ones by the float rounding of the factors only.
  TempDir tmp;
  const llm::Model mem = llm::load_synthetic("tiny-gqa");
  ASSERT_EQ(mem.config.rope_scaling.type, "llama3");
  const std::string path = tmp.str("t.gguf");
  llm::write_gguf(mem, nullptr, path);
  const llm::Model back = llm::load_gguf(path);
  ASSERT_EQ(back.config.rope_freq_factors.size(), size_t(mem.config.head_dim / 2));
  const std::vector<float> f0 = llm::rope_inv_freq(mem.config), f1 = llm::rope_inv_freq(back.config);
  for (size_t i = 0; i < f0.size(); ++i) EXPECT_NEAR(f1[i], f0[i], 4e-7 * f0[i]) << i;
  const std::vector<int> ids = {1, 5, 9, 3, 7, 2, 11, 200, 64, 3};
  EXPECT_LT(max_rel_diff(logits_of(back, ids), logits_of(mem, ids)), 1e-4);
  // Without the factors the long wavelengths would rotate 8x faster: far off.
  llm::Model unscaled = mem;
  unscaled.config.rope_scaling = llm::RopeScaling();
  EXPECT_GT(max_rel_diff(logits_of(unscaled, ids), logits_of(mem, ids)), 1e-3);
}

TEST(WriteGguf, ByteLevelBpeVocabulariesRoundTrip) {
  // tokenizer.json -> GGUF "gpt2" vocabulary -> our loader: the ids of the json tokenizer, with llama.cpp's
  // pre-tokenizer names. The model is a synthetic one with its embedding widened to the vocabulary.
  TempDir tmp;
  std::ifstream rf(std::string(LLM_SOURCE_DIR) + "/tests/data/bpe_refs.json");
  const nlohmann::json refs = nlohmann::json::parse(rf);
  const std::vector<std::pair<std::string, std::string>> cases = {{"bpe_smollm_style.json", "smollm"},
                                                                  {"bpe_llama3_style.json", "llama-bpe"}};
  for (const auto& [file, pre] : cases) {
    SCOPED_TRACE(file);
    const std::string json_path = std::string(LLM_SOURCE_DIR) + "/tests/data/" + file;
    const llm::EmbeddedVocab v = llm::vocab_of_tokenizer_file(json_path);
    EXPECT_EQ(v.model, "gpt2");
    EXPECT_EQ(v.pre, pre);
    llm::Model m = llm::load_synthetic("tiny-gqa");
    m.config.vocab_size = 1024;
    m.config.bos_id = v.bos_id;
    m.config.eos_ids = {v.eos_id >= 0 ? v.eos_id : 0};
    m.weights.embedding.rows = m.weights.head.rows = 1024;
    const std::string path = tmp.str(pre + ".gguf");
    llm::write_gguf(m, &v, path);
    const llm::Model back = llm::load_gguf(path);
    ASSERT_TRUE(back.vocab);
    EXPECT_EQ(back.vocab->tokens.size(), 1024u);  // padded with [PADn] to the embedding, as llama.cpp wants
    EXPECT_EQ(back.vocab->pre, pre);
    const auto orig = llm::load_tokenizer_file(json_path);
    const auto tok = llm::tokenizer_from_vocab(*back.vocab);
    EXPECT_EQ(tok->adds_bos(), orig->adds_bos());
    for (const auto& s : refs.at("strings")) {
      const std::string text = s.get<std::string>();
      EXPECT_EQ(tok->encode(text, false), orig->encode(text, false)) << text;
      const std::vector<int> ids = orig->encode(text, false);
      EXPECT_EQ(tok->decode(ids), orig->decode(ids)) << text;
    }
  }
}

// ---- (b) the file as an independent reader sees it -----------------------------------------------------------------

// A reader written here, sharing nothing with models/gguf.cpp: header, key-values, tensor infos, data offset.
struct RawKv {
  uint32_t type = 0, elem = 0;
  uint64_t u = 0;
  float f = 0;
  std::string s;
  std::vector<std::string> strs;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  uint64_t n = 0;
};
struct RawTensor {
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  uint64_t offset = 0;
};
struct RawGguf {
  uint32_t version = 0;
  std::map<std::string, RawKv> kv;
  std::vector<std::string> order;  // tensor names in file order
  std::map<std::string, RawTensor> tensors;
  uint64_t data_start = 0, size = 0;
};

RawGguf read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto take = [&](size_t n) {
    if (at + n > b.size()) throw std::runtime_error("truncated at " + std::to_string(at));
    const char* p = b.data() + at;
    at += n;
    return p;
  };
  auto u64 = [&] { uint64_t v; std::memcpy(&v, take(8), 8); return v; };
  auto u32 = [&] { uint32_t v; std::memcpy(&v, take(4), 4); return v; };
  auto str = [&] { const uint64_t n = u64(); return std::string(take(size_t(n)), size_t(n)); };
  RawGguf g;
  if (std::string(take(4), 4) != "GGUF") throw std::runtime_error("no magic");
  g.version = u32();
  const uint64_t nt = u64(), nkv = u64();
  for (uint64_t i = 0; i < nkv; ++i) {
    const std::string key = str();
    RawKv v;
    v.type = u32();
    switch (v.type) {
      case 4: v.u = u32(); break;                                  // u32
      case 6: std::memcpy(&v.f, take(4), 4); break;                // f32
      case 7: v.u = uint8_t(*take(1)); break;                      // bool
      case 8: v.s = str(); break;                                  // string
      case 9:                                                      // array
        v.elem = u32();
        v.n = u64();
        for (uint64_t k = 0; k < v.n; ++k) {
          if (v.elem == 8) v.strs.push_back(str());
          else if (v.elem == 5) v.ints.push_back(int32_t(u32()));
          else if (v.elem == 6) { float f; std::memcpy(&f, take(4), 4); v.floats.push_back(f); }
          else throw std::runtime_error("unexpected array type in " + key);
        }
        break;
      default: throw std::runtime_error("unexpected value type " + std::to_string(v.type) + " of " + key);
    }
    if (!g.kv.emplace(key, v).second) throw std::runtime_error("repeated key " + key);
  }
  for (uint64_t i = 0; i < nt; ++i) {
    const std::string name = str();
    RawTensor t;
    const uint32_t nd = u32();
    for (uint32_t d = 0; d < nd; ++d) t.dims.push_back(u64());
    t.type = u32();
    t.offset = u64();
    g.order.push_back(name);
    g.tensors[name] = t;
  }
  g.data_start = (at + 31) / 32 * 32;
  g.size = b.size();
  return g;
}

uint64_t raw_bytes(const RawTensor& t) {
  uint64_t n = 1;
  for (uint64_t d : t.dims) n *= d;
  switch (t.type) {
    case 0: return n * 4;
    case 1: case 30: return n * 2;
    case 2: return n / 32 * 18;   // Q4_0
    case 6: return n / 32 * 22;   // Q5_0
    case 8: return n / 32 * 34;   // Q8_0
    case 12: return n / 256 * 144;  // Q4_K
    case 14: return n / 256 * 210;  // Q6_K
  }
  throw std::runtime_error("unexpected tensor type " + std::to_string(t.type));
}

void expect_u32(const RawGguf& g, const std::string& key, uint64_t want) {
  const auto it = g.kv.find(key);
  ASSERT_NE(it, g.kv.end()) << key;
  EXPECT_EQ(it->second.type, 4u) << key << " is not a uint32";
  EXPECT_EQ(it->second.u, want) << key;
}

void expect_table_well_formed(const RawGguf& g) {
  uint64_t end = 0;
  for (const std::string& name : g.order) {
    const RawTensor& t = g.tensors.at(name);
    EXPECT_EQ(t.offset % 32, 0u) << name;
    EXPECT_GE(t.offset, end) << name << " overlaps the tensor before it";
    end = t.offset + raw_bytes(t);
  }
  EXPECT_EQ(g.data_start % 32, 0u);
  EXPECT_EQ(g.size, g.data_start + end) << "the file ends where the last tensor's data ends";
}

TEST(WriteGguf, MetadataAndTensorTableOfASyntheticModel) {
  TempDir tmp;
  const llm::Model m = llm::load_synthetic("tiny-gqa");  // untied, GQA 4/2, llama3 scaling, vocab 256
  llm::GgufWriteOptions opt;
  opt.quantize = llm::parse_quantize_type("q8_0");
  const std::string path = tmp.str("t.gguf");
  llm::write_gguf(m, nullptr, path, opt);
  const RawGguf g = read_raw(path);
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.kv.at("general.architecture").s, "llama");
  expect_u32(g, "general.alignment", 32);
  expect_u32(g, "general.file_type", 7);  // MOSTLY_Q8_0
  expect_u32(g, "general.quantization_version", 2);
  expect_u32(g, "llama.context_length", 256);
  expect_u32(g, "llama.embedding_length", 64);
  expect_u32(g, "llama.block_count", 2);
  expect_u32(g, "llama.feed_forward_length", 160);
  expect_u32(g, "llama.attention.head_count", 4);
  expect_u32(g, "llama.attention.head_count_kv", 2);
  expect_u32(g, "llama.rope.dimension_count", 16);
  expect_u32(g, "llama.vocab_size", 256);
  EXPECT_EQ(g.kv.count("llama.attention.key_length"), 0u);  // head_dim = dim / heads
  EXPECT_EQ(g.kv.at("llama.attention.layer_norm_rms_epsilon").type, 6u);
  EXPECT_EQ(g.kv.at("llama.attention.layer_norm_rms_epsilon").f, 1e-5f);
  EXPECT_EQ(g.kv.at("llama.rope.freq_base").f, 10000.0f);
  // The stand-in vocabulary: exactly vocab_size sentencepiece tokens with byte tokens, newline among them.
  EXPECT_EQ(g.kv.at("tokenizer.ggml.model").s, "llama");
  const RawKv& tokens = g.kv.at("tokenizer.ggml.tokens");
  const RawKv& types = g.kv.at("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.strs.size(), 256u);
  ASSERT_EQ(types.ints.size(), 256u);
  EXPECT_EQ(types.elem, 5u);  // int32
  EXPECT_EQ(g.kv.at("tokenizer.ggml.scores").floats.size(), 256u);
  std::map<std::string, int64_t> type_of;
  for (size_t i = 0; i < 256; ++i) type_of[tokens.strs[i]] = types.ints[i];
  EXPECT_EQ(type_of.size(), 256u) << "tokens are unique";
  EXPECT_EQ(type_of.at("<unk>"), 2);
  EXPECT_EQ(type_of.at("<s>"), 3);
  EXPECT_EQ(type_of.at("</s>"), 3);
  EXPECT_EQ(type_of.at("<0x0A>"), 6);
  EXPECT_EQ(type_of.at("<0x00>"), 6);
  expect_u32(g, "tokenizer.ggml.bos_token_id", 1);
  expect_u32(g, "tokenizer.ggml.eos_token_id", 2);
  EXPECT_EQ(tokens.strs[1], "<s>");
  EXPECT_EQ(tokens.strs[2], "</s>");
  // The tensor table: llama.cpp's names, dims innermost first, the types asked for.
  std::vector<std::string> want = {"token_embd.weight", "rope_freqs.weight"};
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                          "ffn_down"})
      want.push_back("blk." + std::to_string(l) + "." + n + ".weight");
  want.push_back("output_norm.weight");
  want.push_back("output.weight");
  EXPECT_EQ(g.order, want);
  EXPECT_EQ(g.tensors.at("token_embd.weight").dims, (std::vector<uint64_t>{64, 256}));
  EXPECT_EQ(g.tensors.at("token_embd.weight").type, 30u);  // BF16, as the synthetic fill is (untied: not quantized)
  EXPECT_EQ(g.tensors.at("rope_freqs.weight").dims, (std::vector<uint64_t>{8}));
  EXPECT_EQ(g.tensors.at("blk.0.attn_k.weight").dims, (std::vector<uint64_t>{64, 32}));
  EXPECT_EQ(g.tensors.at("blk.0.attn_k.weight").type, 8u);  // Q8_0
  EXPECT_EQ(g.tensors.at("blk.1.ffn_down.weight").dims, (std::vector<uint64_t>{160, 64}));
  EXPECT_EQ(g.tensors.at("blk.1.attn_norm.weight").dims, (std::vector<uint64_t>{64}));
  EXPECT_EQ(g.tensors.at("blk.1.attn_norm.weight").type, 0u);  // norms as F32
  EXPECT_EQ(g.tensors.at("output.weight").type, 8u);
  expect_table_well_formed(g);
}

TEST(WriteGguf, MetadataOfATiedModelWithItsTokenizer) {
  TempDir tmp;
  const llm::Model m = llm::load_llama2c(kStoriesBin);  // tied, 5 layers, 8/4 heads
  const llm::EmbeddedVocab v = llm::vocab_of_tokenizer_file(kTok512);
  llm::GgufWriteOptions opt;
  opt.quantize = llm::parse_quantize_type("q4_k_m");
  const std::string path = tmp.str("s.gguf");
  llm::write_gguf(m, &v, path, opt);
  const RawGguf g = read_raw(path);
  expect_u32(g, "general.file_type", 15);  // MOSTLY_Q4_K_M
  expect_u32(g, "llama.block_count", 5);
  expect_u32(g, "llama.attention.head_count_kv", 4);
  EXPECT_EQ(g.tensors.count("output.weight"), 0u) << "tied: no output.weight";
  EXPECT_EQ(g.tensors.count("rope_freqs.weight"), 0u);
  EXPECT_EQ(g.tensors.at("token_embd.weight").type, 8u);  // the tied output rule: Q8_0 for rows not a multiple of 256
  EXPECT_EQ(g.tensors.at("blk.2.attn_v.weight").type, 8u);  // use_more_bits layer: Q6_K -> Q8_0 (64 wide)
  EXPECT_EQ(g.tensors.at("blk.1.attn_v.weight").type, 6u);  // Q4_K -> Q5_0 (64 wide)
  EXPECT_EQ(g.tensors.at("blk.1.ffn_down.weight").type, 1u);  // 172 wide: F16
  const RawKv& tokens = g.kv.at("tokenizer.ggml.tokens");
  const auto sp = llm::load_sentencepiece(kTok512);
  ASSERT_EQ(tokens.strs.size(), 512u);
  for (int id = 0; id < 512; ++id) ASSERT_EQ(tokens.strs[size_t(id)], sp->piece(id)) << id;
  EXPECT_EQ(g.kv.at("tokenizer.ggml.add_space_prefix").u, 1u);
  EXPECT_EQ(g.kv.at("tokenizer.ggml.add_bos_token").u, 1u);
  expect_u32(g, "tokenizer.ggml.unknown_token_id", 0);
  expect_table_well_formed(g);
}

TEST(WriteGguf, StandInVocabularyPlacesTheSpecialsAtTheModelsIds) {
  // Llama 3 shapes: BOS 128000, EOS 128001; unk and the 256 bytes at the lowest free ids.
  const llm::EmbeddedVocab v = llm::stand_in_vocab(128256, 128000, 128001);
  ASSERT_EQ(v.tokens.size(), 128256u);
  EXPECT_EQ(v.tokens[128000], "<s>");
  EXPECT_EQ(v.tokens[128001], "</s>");
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<0x00>");
  EXPECT_EQ(v.tokens[11], "<0x0A>");
  EXPECT_EQ(v.token_types[11], 6);
  EXPECT_EQ(v.tokens[256], "<0xFF>");
  EXPECT_EQ(v.token_types[257], 1);
  EXPECT_EQ(std::set<std::string>(v.tokens.begin(), v.tokens.end()).size(), v.tokens.size());
  // and our own loader takes it (the sentencepiece library builds a tokenizer of it)
  EXPECT_EQ(llm::tokenizer_from_vocab(llm::stand_in_vocab(300, 1, 2))->vocab_size(), 300);
}

// ---- (e) the command line ------------------------------------------------------------------------------------------

// write-gguf refusing: exit `code`, nothing on stdout, one "error: " line holding every needle (and, for bad usage,
// the fixed --help hint after it), no partial output file.
void expect_refused(const std::vector<std::string>& args, int code, std::initializer_list<std::string> needles,
                    const TempDir& tmp, const std::string& out = "") {
  const std::string exe = kBin + "/write-gguf";
  ASSERT_TRUE(fs::exists(exe)) << exe << " is not built";
  const llm_test::ProgramRun r = llm_test::run_program(exe, args, tmp);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(r.out, "");
  std::vector<std::string> err = llm_test::lines(r.err);
  if (code == 2 && !err.empty()) {
    EXPECT_EQ(err.back(), "run 'write-gguf --help' for the options");
    err.pop_back();
  }
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_EQ(err[0].rfind("error: ", 0), 0u) << err[0];
  for (const std::string& n : needles)
    EXPECT_NE(err[0].find(n), std::string::npos) << "'" << n << "' not in: " << err[0];
  if (!out.empty()) {
    EXPECT_FALSE(fs::exists(out)) << "a partial " << out << " was left behind";
  }
}

TEST(WriteGgufCli, BadInputIsOneLineNamingTheValue) {
  TempDir tmp;
  const std::string out = tmp.str("o.gguf");
  expect_refused({"--model", kStoriesBin, "--quantize", "q3_k", "--out", out}, 2, {"--quantize", "'q3_k'", "q4_k_m"},
                 tmp, out);
  expect_refused({"--model", kStoriesBin, "--tokenizer", kTok512, "--out", tmp.str("no/such/dir/o.gguf")}, 1,
                 {"cannot write", tmp.str("no/such/dir/o.gguf")}, tmp);
  expect_refused({"--model", tmp.str("missing.bin"), "--out", out}, 1, {tmp.str("missing.bin")}, tmp, out);
  expect_refused({"--model", "synthetic:no-such-model", "--out", out}, 1, {"no-such-model"}, tmp, out);
  expect_refused({"--model", kStoriesBin, "--out", out, "--tokenizer", tmp.str("none.model")}, 1,
                 {tmp.str("none.model")}, tmp, out);
  expect_refused({"--model", kStoriesBin}, 2, {"--out"}, tmp);
  expect_refused({"--model", kStoriesBin, "--seed", "3", "--out", out}, 2, {"--seed", kStoriesBin}, tmp, out);
}

TEST(WriteGgufCli, WritesAFileThatLoadsAndRefusesToQuantizeItAgain) {
  TempDir tmp;
  const std::string exe = kBin + "/write-gguf";
  ASSERT_TRUE(fs::exists(exe)) << exe << " is not built";
  const std::string q8 = tmp.str("q8.gguf");
  const llm_test::ProgramRun r =
      llm_test::run_program(exe, {"--model", kStoriesBin, "--tokenizer", kTok512, "--quantize", "q8_0", "--out", q8},
                            tmp);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("Q8_0 x 31"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fall back as llama.cpp does"), std::string::npos) << "the 172-wide w2 rows are named" << r.err;
  const llm::Model m = llm::load_gguf(q8);
  EXPECT_EQ(m.weights.layers[0].wq.quant, uint32_t(llm::GgmlQuantType::Q8_0));
  expect_refused({"--model", q8, "--quantize", "q4_0", "--out", tmp.str("again.gguf")}, 1,
                 {"already quantized (Q8_0 x"}, tmp, tmp.str("again.gguf"));
  // Re-writing it without --quantize keeps every block.
  const llm_test::ProgramRun r2 = llm_test::run_program(exe, {"--model", q8, "--out", tmp.str("copy.gguf")}, tmp);
  ASSERT_EQ(r2.code, 0) << r2.err;
  EXPECT_EQ(bit_mismatches(logits_of(llm::load_gguf(tmp.str("copy.gguf"))), logits_of(m)), 0u);
  expect_refused({"--model", q8, "--out", q8}, 1, {"is the model file itself"}, tmp);
}

}  // namespace
