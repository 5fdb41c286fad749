// Hostile numbers in model files (issue 11): RoPE theta and RMSNorm epsilon checked as read (in the file's own
// type) against stated ranges and printed faithfully, sizes within the engine's limits, a hidden size the heads do
// not divide refused naming both; the default context capped at kDefaultCtxCap whatever the file claims; NaN/Inf
// logits stop the run with an error naming the step (exit 1); a vocabulary smaller than the (padded) embedding is
// never sampled past.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "gguf_writer_util.h"
#include "hostile_model_util.h"
#include "models/config.h"
#include "models/hf_config.h"
#include "models/hf_writer.h"
#include "models/model.h"
#include "tokenizer/load.h"
#include "models_test_util.h"
#include "run_program_util.h"  // run_program, lines, expect_run_llama_refused


namespace {

namespace fs = std::filesystem;
using llm_test::expect_error;
using llm_test::GgufWriter;
using llm_test::TempDir;
using nlohmann::json;

const std::string kRunLlama = std::string(LLM_BINARY_DIR) + "/run-llama";
const std::string kTok512 = std::string(LLM_TEST_MODELS) + "/stories260K/tok512.model";

// ---- A tiny F32 GGUF with every numeric key under the test's control ----

struct GgufSpec {
  uint32_t dim = 64, heads = 4, kv_heads = 2, hidden = 96, layers = 1, vocab = 256, ctx = 256;
  bool key_length = true;  // write llama.attention.key_length (else head_dim = dim / heads)
  // rope.freq_base and the RMSNorm epsilon: as float32 (type 6) or float64 (type 12) values.
  bool theta_f64 = false;
  double theta = 10000.0;
  bool eps_f64 = false;
  double eps = 1e-5;
  // Metadata written with another value than the tensors are made for (e.g. llama.block_count = 2^30 over one
  // layer's tensors): key -> value.
  std::map<std::string, uint32_t> claimed;
};

std::string f32_tensor(uint64_t n, float scale) {
  std::string s;
  for (uint64_t i = 0; i < n; ++i) llm_test::gguf_put<float>(s, scale * std::sin(0.37f * float(i) + 0.1f));
  return s;
}

void put_number(GgufWriter& w, const std::string& key, double v, bool f64) {
  if (f64) {
    w.header(key, 12);  // GGUF float64
    llm_test::gguf_put<double>(w.kv, v);
  } else {
    w.f32(key, float(v));
  }
}

std::string tiny_gguf(const GgufSpec& s) {
  GgufWriter w;
  w.str("general.architecture", "llama");
  const auto u32 = [&](const std::string& key, uint32_t v) {
    const auto it = s.claimed.find(key);
    w.u32(key, it == s.claimed.end() ? v : it->second);
  };
  u32("llama.embedding_length", s.dim);
  u32("llama.block_count", s.layers);
  u32("llama.attention.head_count", s.heads);
  u32("llama.attention.head_count_kv", s.kv_heads);
  u32("llama.feed_forward_length", s.hidden);
  u32("llama.context_length", s.ctx);
  const uint32_t hd = s.key_length ? 16 : s.dim / s.heads;
  if (s.key_length) u32("llama.attention.key_length", hd);
  put_number(w, "llama.rope.freq_base", s.theta, s.theta_f64);
  put_number(w, "llama.attention.layer_norm_rms_epsilon", s.eps, s.eps_f64);
  auto add = [&](const std::string& name, uint64_t rows, uint64_t cols, float scale) {
    w.tensors.push_back({name, rows == 1 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{cols, rows}, 0,
                         f32_tensor(rows * cols, scale)});
  };
  const uint64_t q = uint64_t(s.heads) * hd, kv = uint64_t(s.kv_heads) * hd;
  add("token_embd.weight", s.vocab, s.dim, 0.5f);
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 1, s.dim, 1.0f);
    add(p + "attn_q.weight", q, s.dim, 0.1f);
    add(p + "attn_k.weight", kv, s.dim, 0.1f);
    add(p + "attn_v.weight", kv, s.dim, 0.1f);
    add(p + "attn_output.weight", s.dim, q, 0.1f);
    add(p + "ffn_norm.weight", 1, s.dim, 1.0f);
    add(p + "ffn_gate.weight", s.hidden, s.dim, 0.1f);
    add(p + "ffn_up.weight", s.hidden, s.dim, 0.1f);
    add(p + "ffn_down.weight", s.dim, s.hidden, 0.1f);
  }
  add("output_norm.weight", 1, s.dim, 1.0f);
  return w.build();
}

std::string write_gguf(const TempDir& tmp, const GgufSpec& s, const std::string& name = "model.gguf") {
  llm_test::write_file(tmp.path() / name, tiny_gguf(s));
  return tmp.str(name);
}

// ---- A Hugging Face config.json with one key edited ----

template <typename F>
std::string hf_config_with(const TempDir& tmp, const std::string& name, F edit) {
  llm::ModelConfig c = llm::load_synthetic("tiny-gqa").config;
  json j = json::parse(llm::hf_config_json(c, llm::DType::F32, false));
  edit(j);
  fs::create_directories(tmp.path() / name);
  const fs::path p = tmp.path() / name / "config.json";
  llm_test::write_file(p, j.dump());
  return p.string();
}

// ---- run-llama as a child process ----

using Outcome = llm_test::ProgramRun;

Outcome run_llama(const std::vector<std::string>& args, const TempDir& tmp, const std::string& stdin_path = "/dev/null") {
  return llm_test::run_program(kRunLlama, args, tmp, stdin_path);
}

// The last line of s (without its newline).
std::string last_line(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

#define REQUIRE_RUN_LLAMA() ASSERT_TRUE(fs::exists(kRunLlama)) << kRunLlama << " not built (build run-llama)"

// =====================================================================================================================

TEST(HostileNumbers, FormatNumberPrintsTheValueAsRead) {
  EXPECT_EQ(llm::format_number(1e-50), "1e-50");
  EXPECT_EQ(llm::format_number(1e300), "1e+300");
  EXPECT_EQ(llm::format_number(double(1e-40f)), "1e-40");  // a float32 denormal, as a float
  EXPECT_EQ(llm::format_number(10000.5), "10000.5");
  EXPECT_EQ(llm::format_number(0.1), "0.1");
  EXPECT_EQ(llm::format_number(1.0000001), "1.0000001");
  EXPECT_EQ(llm::format_number(std::numeric_limits<double>::denorm_min()), "5e-324");
  EXPECT_EQ(llm::format_number(0.0), "0");
  EXPECT_EQ(llm::format_number(-10000.0), "-10000");
  EXPECT_EQ(llm::format_number(500000.0), "500000");
  EXPECT_EQ(llm::format_number(std::nan("")), "nan");
}

TEST(HostileNumbers, GgufRopeThetaCheckedAsRead) {
  TempDir tmp;
  struct Case {
    double v;
    bool f64;
    const char* shown;
  };
  for (const Case& c : {Case{double(1e-40f), false, "found 1e-40"}, Case{1e-50, true, "found 1e-50"},
                        Case{1e300, true, "found 1e+300"}, Case{0.5, false, "found 0.5"},
                        Case{0.0, false, "found 0"}, Case{-10000.0, true, "found -10000"},
                        Case{std::numeric_limits<double>::infinity(), true, "found inf"},
                        Case{std::nan(""), false, "found nan"}, Case{1e13, true, "found 1e+13"}}) {
    SCOPED_TRACE(c.shown);
    GgufSpec s;
    s.theta = c.v;
    s.theta_f64 = c.f64;
    const std::string path = write_gguf(tmp, s);
    expect_error([&] { llm::load_gguf(path); },
                 {path, "llama.rope.freq_base must be between 1 and 1e+12", c.shown});
  }
  GgufSpec ok;
  ok.theta = 500000.0;
  EXPECT_EQ(llm::load_gguf(write_gguf(tmp, ok)).config.rope_theta, 500000.0f);
  ok.theta = 1.0;
  ok.theta_f64 = true;
  EXPECT_EQ(llm::load_gguf(write_gguf(tmp, ok)).config.rope_theta, 1.0f);
}

TEST(HostileNumbers, GgufRmsEpsilonRange) {
  TempDir tmp;
  for (double eps : {0.0, 2.0, 1e-13, -1e-5}) {
    GgufSpec s;
    s.eps = eps;
    s.eps_f64 = true;
    const std::string path = write_gguf(tmp, s);
    expect_error([&] { llm::load_gguf(path); },
                 {path, "llama.attention.layer_norm_rms_epsilon must be between 1e-12 and 1",
                  "found " + llm::format_number(eps)});
  }
  GgufSpec ok;
  ok.eps = 1.0;
  EXPECT_EQ(llm::load_gguf(write_gguf(tmp, ok)).config.norm_eps, 1.0f);
}

TEST(HostileNumbers, HfRopeThetaAndEpsilonCheckedAsRead) {
  TempDir tmp;
  struct Case {
    double v;
    const char* shown;
  };
  for (const Case& c : {Case{1e-50, "found 1e-50"}, Case{1e300, "found 1e+300"},
                        Case{std::numeric_limits<double>::denorm_min(), "found 5e-324"},
                        Case{0.99, "found 0.99"}}) {
    SCOPED_TRACE(c.shown);
    const std::string p = hf_config_with(tmp, "theta", [&](json& j) { j["rope_theta"] = c.v; });
    expect_error([&] { llm::load_hf_config(p); }, {p, "rope_theta must be between 1 and 1e+12", c.shown});
    // transformers 5 form: rope_parameters.rope_theta
    const std::string q = hf_config_with(tmp, "params", [&](json& j) {
      j.erase("rope_theta");
      j.erase("rope_scaling");
      j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.v}};
    });
    expect_error([&] { llm::load_hf_config(q); },
                 {q, "rope_parameters.rope_theta must be between 1 and 1e+12", c.shown});
  }
  for (double eps : {0.0, 2.0}) {
    const std::string p = hf_config_with(tmp, "eps", [&](json& j) { j["rms_norm_eps"] = eps; });
    expect_error([&] { llm::load_hf_config(p); },
                 {p, "rms_norm_eps must be between 1e-12 and 1", "found " + llm::format_number(eps)});
  }
  const std::string ok = hf_config_with(tmp, "ok", [](json& j) { j["rope_theta"] = 1e9; });
  EXPECT_EQ(llm::load_hf_config(ok).rope_theta, 1e9f);
}

TEST(HostileNumbers, HiddenSizeNotDivisibleByHeadsNamesBoth) {
  TempDir tmp;
  GgufSpec s;
  s.dim = 64;
  s.heads = 5;
  s.kv_heads = 1;
  s.key_length = false;
  const std::string path = write_gguf(tmp, s);
  expect_error([&] { llm::load_gguf(path); },
               {path, "llama.embedding_length 64 is not a multiple of llama.attention.head_count 5"});
  const std::string p = hf_config_with(tmp, "heads", [](json& j) {
    j.erase("head_dim");
    j["num_attention_heads"] = 5;
    j["num_key_value_heads"] = 1;
  });
  expect_error([&] { llm::load_hf_config(p); }, {p, "hidden_size 64 is not a multiple of num_attention_heads 5"});
}

TEST(HostileNumbers, SizesOutsideTheEngineLimitsAreNamed) {
  const llm::ModelConfig good = llm::load_synthetic("tiny-gqa").config;
  EXPECT_NO_THROW(good.validate("cfg"));
  struct Case {
    int llm::ModelConfig::*field;
    int value;
    const char* want;
  };
  for (const Case& c : {Case{&llm::ModelConfig::dim, (1 << 20) + 1, "hidden_size must be between 1 and 1048576"},
                        Case{&llm::ModelConfig::n_layers, 5000, "num_hidden_layers must be between 1 and 4096"},
                        Case{&llm::ModelConfig::n_heads, 0, "num_attention_heads must be between 1 and 4096"},
                        Case{&llm::ModelConfig::n_kv_heads, 8192, "num_key_value_heads must be between 1 and 4096"},
                        Case{&llm::ModelConfig::head_dim, 8192, "head_dim must be between 1 and 4096"},
                        Case{&llm::ModelConfig::hidden_dim, -3, "intermediate_size must be between 1 and 4194304"},
                        Case{&llm::ModelConfig::vocab_size, (1 << 24) + 1, "vocab_size must be between 1 and 16777216"},
                        Case{&llm::ModelConfig::max_seq_len, (1 << 24) + 1,
                             "max_position_embeddings must be between 1 and 16777216"}}) {
    SCOPED_TRACE(c.want);
    llm::ModelConfig bad = good;
    bad.*c.field = c.value;
    expect_error([&] { bad.validate("cfg"); }, {"cfg: ", c.want, "found " + std::to_string(c.value)});
  }
  llm::ModelConfig eps = good;
  eps.norm_eps = 0.0f;
  expect_error([&] { eps.validate("cfg"); }, {"rms_norm_eps must be between 1e-12 and 1, found 0"});
  llm::ModelConfig theta = good;
  theta.rope_theta = 1e-40f;
  expect_error([&] { theta.validate("cfg"); }, {"rope_theta must be between 1 and 1e+12, found 1e-40"});
}

// A GGUF size past the engine's range is refused under the file's own key and value, never under the Hugging Face
// name the config field has (a llama.block_count of 2^30 was once reported as num_hidden_layers). Every size key
// goes through the same check; a value past 2^30 stops at the read, also naming the key and value.
TEST(HostileNumbers, GgufSizesAreRefusedUnderTheFilesOwnKeys) {
  TempDir tmp;
  struct Case {
    const char* key;
    uint32_t value;
    const char* want;
  };
  const uint32_t big = 1u << 30;
  for (const Case& c :
       {Case{"llama.block_count", big, "llama.block_count must be between 1 and 4096, found 1073741824"},
        Case{"llama.embedding_length", big, "llama.embedding_length must be between 1 and 1048576, found 1073741824"},
        Case{"llama.feed_forward_length", big,
             "llama.feed_forward_length must be between 1 and 4194304, found 1073741824"},
        Case{"llama.attention.head_count", 8192, "llama.attention.head_count must be between 1 and 4096, found 8192"},
        Case{"llama.attention.head_count_kv", 8192,
             "llama.attention.head_count_kv must be between 1 and 4096, found 8192"},
        Case{"llama.attention.key_length", 8192, "llama.attention.key_length must be between 1 and 4096, found 8192"},
        Case{"llama.context_length", big, "llama.context_length must be between 1 and 16777216, found 1073741824"},
        Case{"llama.attention.key_length", 15, "llama.attention.key_length must be even for RoPE, found 15"},
        Case{"llama.attention.head_count_kv", 3,
             "llama.attention.head_count (4) is not a multiple of llama.attention.head_count_kv (3)"},
        Case{"llama.block_count", big + 1, "GGUF metadata key 'llama.block_count' = 1073741825 is implausible"}}) {
    SCOPED_TRACE(c.want);
    GgufSpec s;
    s.claimed[c.key] = c.value;
    const std::string path = write_gguf(tmp, s);
    try {
      llm::load_gguf(path);
      ADD_FAILURE() << "accepted";
    } catch (const llm::Error& e) {
      EXPECT_EQ(std::string(e.what()), path + ": " + c.want);
    }
  }
}

// ---- the default context ----

TEST(HostileNumbers, DefaultContextIsCappedAndRaisable) {
  llm::ModelConfig c = llm::load_synthetic("tiny-gqa").config;
  c.max_seq_len = 1 << 24;
  EXPECT_EQ(llm::default_ctx_size(c), llm::kDefaultCtxCap);
  EXPECT_EQ(llm::kDefaultCtxCap, 8192);
  c.max_seq_len = 300;
  EXPECT_EQ(llm::default_ctx_size(c), 300);

  TempDir tmp;
  GgufSpec s;
  s.ctx = 1u << 24;
  const llm::Model m = llm::load_gguf(write_gguf(tmp, s));
  ASSERT_EQ(m.config.max_seq_len, 1 << 24);
  llm::BackendOptions bo;
  bo.device = "cpu";
  EXPECT_EQ(llm::make_cpu_backend(m, bo)->ctx_size(), 8192);
  bo.ctx_size = 10000;  // --ctx-size raises it up to the model's maximum
  EXPECT_EQ(llm::make_cpu_backend(m, bo)->ctx_size(), 10000);
}

TEST(HostileNumbers, ModelClaiming16MPositionsRunsSmallAndSaysTheCap) {
  REQUIRE_RUN_LLAMA();
  TempDir tmp;
  GgufSpec s;
  s.ctx = 1u << 24;
  const std::string path = write_gguf(tmp, s);
  EXPECT_LT(fs::file_size(path), 1u << 20);
  const Outcome r = run_llama({"--model", path, "--prompt-ids", "1,2,3,4", "-n", "2", "--temp", "0", "--device",
                               "cpu"},
                              tmp);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("context: 8192 positions (model maximum 16777216; raise with --ctx-size)\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("on cpu, context 8192"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10.0);  // a 16M-position cache would be 2 x 1 x 16M x 32 floats = 4 GiB to allocate and zero
}

TEST(HostileNumbers, HelpStatesTheDefaultContext) {
  REQUIRE_RUN_LLAMA();
  TempDir tmp;
  const Outcome r = run_llama({"--help"}, tmp);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(llm_test::unwrapped(r.out).find("the model's maximum, at most 8192 on cpu and 131072 on cuda"), std::string::npos) << r.out;
}

// ---- non-finite logits ----

TEST(HostileNumbers, NonFiniteLogitsStopTheCpuRunNamingTheStep) {
  TempDir tmp;
  llm_test::Llama2cSpec spec;
  spec.nan_final_norm = true;
  llm_test::write_file(tmp.path() / "nan.bin", llm_test::llama2c_bytes(spec));
  const llm::Model m = llm::load_llama2c(tmp.str("nan.bin"));
  llm::BackendOptions bo;
  bo.ctx_size = 8;
  auto be = llm::make_cpu_backend(m, bo);
  const int tok = 1;
  be->prefill(&tok, 1, 0);
  for (float temp : {0.0f, 1.0f}) {
    llm::SamplerParams p;
    p.temperature = temp;
    expect_error([&] { be->sample(p, 3); },
                 {"step 3: the logits hold NaN or Inf (model weights or config produce non-finite values)"});
  }
}

TEST(HostileNumbers, NanWeightThroughRunLlamaExitsOneWithTheStep) {
  REQUIRE_RUN_LLAMA();
  TempDir tmp;
  llm_test::Llama2cSpec spec;
  spec.nan_final_norm = true;
  llm_test::write_file(tmp.path() / "nan.bin", llm_test::llama2c_bytes(spec));
  for (const char* temp : {"0", "0.8"}) {
    SCOPED_TRACE(std::string("--temp ") + temp);
    const Outcome r = run_llama({"--model", tmp.str("nan.bin"), "--tokenizer", kTok512, "--prompt", "Once upon",
                                 "-n", "4", "--temp", temp, "--device", "cpu"},
                                tmp);
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(last_line(r.err),
              "error: step 0: the logits hold NaN or Inf (model weights or config produce non-finite values)")
        << r.err;
  }
}

// The chat reports other errors and goes on, but broken weights break every turn: it ends with the error, exit 1.
TEST(HostileNumbers, NanWeightEndsTheChatWithTheStep) {
  REQUIRE_RUN_LLAMA();
  TempDir tmp;
  llm_test::Llama2cSpec spec;
  spec.nan_final_norm = true;
  llm_test::write_file(tmp.path() / "nan.bin", llm_test::llama2c_bytes(spec));
  llm_test::write_file(tmp.path() / "turns.txt", "Hello\nAnd again\n");
  const Outcome r = run_llama({"--model", tmp.str("nan.bin"), "--tokenizer", kTok512, "--chat", "--chat-template",
                               "zephyr", "-n", "4", "--device", "cpu"},
                              tmp, tmp.str("turns.txt"));
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("error: step 0: the logits hold NaN or Inf"), std::string::npos) << r.err;
}

// ---- a vocabulary smaller than the embedding ----

TEST(HostileNumbers, SamplingNeverPicksPastTheVocabulary) {
  TempDir tmp;
  llm_test::Llama2cSpec spec;  // 600 rows, the first 512 real, padding logits far above
  llm_test::write_file(tmp.path() / "padded.bin", llm_test::llama2c_bytes(spec));
  const llm::Model m = llm::load_llama2c(tmp.str("padded.bin"));
  ASSERT_EQ(m.config.vocab_size, 600);
  const auto tok = llm::load_tokenizer(m, kTok512);  // loads: 512 pieces, fewer than the 600 rows
  ASSERT_TRUE(tok);
  ASSERT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(llm::sampling_vocab(m.config, tok->vocab_size()), 512);
  EXPECT_EQ(llm::sampling_vocab(m.config, 600), 0);
  EXPECT_EQ(llm::sampling_vocab(m.config, 0), 0);

  llm::BackendOptions bo;
  bo.ctx_size = 8;
  const int first = 1;
  {  // control: without the limit the padding wins (so the test data really tempts the sampler)
    auto be = llm::make_cpu_backend(m, bo);
    be->prefill(&first, 1, 0);
    EXPECT_GE(be->sample(llm::SamplerParams{0.0f, 0, 1.0f, 1}, 0), 512);
  }
  bo.sample_vocab = 512;
  auto be = llm::make_cpu_backend(m, bo);
  be->prefill(&first, 1, 0);
  EXPECT_EQ(be->sample(llm::SamplerParams{0.0f, 0, 1.0f, 1}, 0), 6);  // the highest real logit
  std::set<int> seen;
  for (const llm::SamplerParams& p : {llm::SamplerParams{1.0f, 0, 1.0f, 7}, llm::SamplerParams{2.0f, 40, 0.95f, 8},
                                      llm::SamplerParams{5.0f, 600, 1.0f, 9}}) {
    for (uint64_t step = 0; step < 200; ++step) {
      const int id = be->sample(p, step);
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 512) << "step " << step;
      seen.insert(id);
    }
  }
  EXPECT_GT(seen.size(), 10u);  // the draws really spread over the real vocabulary
  bo.sample_vocab = 601;
  expect_error([&] { llm::make_cpu_backend(m, bo); }, {"sample_vocab 601"});
}

TEST(HostileNumbers, PaddedEmbeddingRunsThroughRunLlama) {
  REQUIRE_RUN_LLAMA();
  TempDir tmp;
  llm_test::Llama2cSpec spec;
  llm_test::write_file(tmp.path() / "padded.bin", llm_test::llama2c_bytes(spec));
  for (const char* temp : {"0", "1"}) {
    SCOPED_TRACE(std::string("--temp ") + temp);
    const Outcome r = run_llama({"--model", tmp.str("padded.bin"), "--tokenizer", kTok512, "--prompt", "Once",
                                 "-n", "16", "--temp", temp, "--top-k", "0", "--top-p", "1", "--ignore-eos",
                                 "--device", "cpu"},
                                tmp);
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Once", 0), 0u) << r.out;
  }
}

}  // namespace
