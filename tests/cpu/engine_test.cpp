// CPU reference path end to end: llama2.c loader, CPU backend, decode loop and sampler, run-llama's command line.
// The golden is llama2.c's own published output for stories260K (tests/data/models/stories260K/EXPECTED.txt).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gemv_table.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "models/model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"
#include "engine_test_util.h"  // logits_per_position, rel_err

namespace fs = std::filesystem;
using namespace llm;

namespace {

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";
const std::string kStoriesBin = kStories + "/stories260K.bin";

// The model is committed (tests/data/models): a missing file is a failure, not a skip.
#define REQUIRE_STORIES() \
  ASSERT_TRUE(fs::exists(kStoriesBin)) << "stories260K is missing from the checkout: " << kStoriesBin

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A scratch file name unique to this test and process (ctest runs tests in parallel).
std::string temp_path(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return (fs::temp_directory_path() / (std::string("llm_engine_test_") + info->name() + "_" + tag + "_" +
                                        std::to_string(::getpid()) + ".bin"))
      .string();
}

using llm_test::logits_per_position;
using llm_test::rel_err;

const std::vector<int> kSomeTokens = {1, 403, 407, 261, 378, 11, 56, 299};

}  // namespace

// ---- llama2.c loader ----

TEST(Llama2cLoader, Stories260KHeaderAndLayout) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  const ModelConfig& c = m.config;
  EXPECT_EQ(m.format, "llama2c");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  ASSERT_EQ(m.weights.layers.size(), 5u);
  EXPECT_EQ(m.weights.layers[0].wk.rows, 32);
  EXPECT_EQ(m.weights.layers[0].w_down.cols, 172);
  EXPECT_EQ(m.weights.head.data, m.weights.embedding.data);
  EXPECT_EQ(m.tokenizer_path, kStories + "/tok512.model");
  // The first weight is the float right after the 28-byte header; the final norm sits just before the RoPE tables.
  const std::string raw = read_file(kStoriesBin);
  float first, final_last;
  std::memcpy(&first, raw.data() + 28, 4);
  std::memcpy(&final_last, raw.data() + raw.size() - 2 * 512 * 4 * 4 - 4, 4);
  EXPECT_EQ(m.weights.embedding.to_f32()[0], first);
  EXPECT_EQ(m.weights.final_norm.to_f32()[63], final_last);
}

TEST(Llama2cLoader, MissingFileNamesIt) {
  const std::string path = "/nonexistent/dir/model.bin";
  try {
    load_llama2c(path);
    FAIL() << "expected llm::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Llama2cLoader, TruncatedFileSaysExpectedAndFoundBytes) {
  REQUIRE_STORIES();
  const std::string raw = read_file(kStoriesBin);
  const std::string path = temp_path("truncated");
  write_file(path, raw.substr(0, 1000));
  try {
    load_llama2c(path);
    FAIL() << "expected llm::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected 1056540 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("found 1000"), std::string::npos) << msg;
  }
  write_file(path, raw + "x");  // one byte too many is just as wrong
  EXPECT_THROW(load_llama2c(path), Error);
  write_file(path, raw.substr(0, 10));  // shorter than the header
  try {
    load_llama2c(path);
    FAIL() << "expected llm::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too small"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(Llama2cLoader, GarbageHeaderNamesFieldAndValue) {
  const std::string path = temp_path("garbage");
  struct Case {
    int32_t header[7];
    const char* expect;
  };
  const Case cases[] = {
      {{-5, 172, 5, 8, 4, 512, 512}, "dim = -5"},
      {{64, 172, 100000, 8, 4, 512, 512}, "n_layers = 100000"},
      {{64, 172, 5, 8, 0, 512, 512}, "n_kv_heads = 0"},
      {{64, 172, 5, 8, 3, 512, 512}, "n_kv_heads (3)"},
      {{0x20202020, 0x20202020, 0x20202020, 0x20202020, 0x20202020, 0x20202020, 0x20202020}, "dim = 538976288"},
  };
  for (const Case& c : cases) {
    write_file(path, std::string(reinterpret_cast<const char*>(c.header), sizeof(c.header)) + std::string(64, '\0'));
    try {
      load_llama2c(path);
      FAIL() << "expected llm::Error for " << c.expect;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    }
  }
  fs::remove(path);
}

// ---- the CPU forward pass against llama2.c's published output ----

TEST(CpuEngine, Stories260KGreedyMatchesLlama2c) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  auto tok = load_tokenizer_file(kStories + "/tok512.model");
  auto backend = make_cpu_backend(m, BackendOptions{});
  EXPECT_EQ(backend->ctx_size(), 512);

  // run.c: BOS at position 0, one token per forward pass, 200 passes, stop if BOS comes out; EOS is not special.
  GenerateOptions opt;
  opt.n_predict = 200;
  opt.sampler.temperature = 0.0f;
  opt.ignore_eos = true;
  opt.stop_on_bos = true;
  StreamDecoder dec(*tok, /*strip_leading_space=*/true);
  std::string text;
  GenerateResult r = generate(*backend, m.config, {m.config.bos_id}, opt, [&](int id) { text += dec.push(id); });
  text += dec.flush();

  EXPECT_EQ(r.tokens.size(), 200u);
  EXPECT_EQ(r.stop_reason, "length");
  EXPECT_EQ(r.timings.prompt_tokens, 1);
  EXPECT_EQ(r.timings.eval_tokens, 199);  // 200 forward passes in all
  EXPECT_EQ(text, read_file(kStories + "/EXPECTED.txt"));
}

TEST(CpuEngine, SampleFollowsCurrentLogits) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  auto b = make_cpu_backend(m, BackendOptions{});
  b->prefill(kSomeTokens.data(), int(kSomeTokens.size()), 0);
  std::vector<float> l = b->logits();
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(b->sample(greedy, 0), argmax(l.data(), int(l.size())));
  // prefill == decoding the same tokens one by one.
  auto b2 = make_cpu_backend(m, BackendOptions{});
  EXPECT_EQ(logits_per_position(*b2, kSomeTokens).back(), l);
}

TEST(CpuEngine, PositionOutsideContextIsAnError) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  BackendOptions o;
  o.ctx_size = 8;
  auto b = make_cpu_backend(m, o);
  EXPECT_EQ(b->ctx_size(), 8);
  EXPECT_NO_THROW(b->decode(1, 7));
  EXPECT_THROW(b->decode(1, 8), Error);
  o.ctx_size = 513;  // beyond the model's 512 positions
  EXPECT_THROW(make_cpu_backend(m, o), Error);
}

TEST(CpuEngine, PromptLongerThanContextNamesBothNumbers) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  BackendOptions o;
  o.ctx_size = 8;
  auto b = make_cpu_backend(m, o);
  std::vector<int> prompt(10, 300);
  prompt[0] = 1;
  try {
    generate(*b, m.config, prompt, GenerateOptions{}, nullptr);
    FAIL() << "expected llm::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("10 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8 positions"), std::string::npos) << msg;
  }
  // A prompt that fills the context exactly still yields one token, then stops.
  prompt.resize(8);
  GenerateResult r = generate(*b, m.config, prompt, GenerateOptions{}, nullptr);
  EXPECT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.stop_reason, "context");
}

TEST(CpuEngine, GenerateStopsAtEosUnlessIgnored) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  auto b = make_cpu_backend(m, BackendOptions{});
  GenerateOptions opt;
  opt.n_predict = 30;
  opt.sampler.temperature = 0.0f;
  // Make every token of the greedy run an end-of-sequence id: the loop must stop before emitting the first.
  ModelConfig c = m.config;
  GenerateResult first = generate(*b, c, {1}, opt, nullptr);
  ASSERT_FALSE(first.tokens.empty());
  c.eos_ids = {first.tokens[0]};
  int streamed = 0;
  GenerateResult r = generate(*b, c, {1}, opt, [&](int) { ++streamed; });
  EXPECT_EQ(r.stop_reason, "eos");
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(streamed, 0);
  opt.ignore_eos = true;
  r = generate(*b, c, {1}, opt, [&](int) { ++streamed; });
  EXPECT_EQ(r.tokens, first.tokens);
  EXPECT_EQ(streamed, 30);
}

TEST(CpuEngine, InterruptFlagStopsAfterCurrentToken) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  auto b = make_cpu_backend(m, BackendOptions{});
  volatile std::sig_atomic_t flag = 0;
  GenerateOptions opt;
  opt.n_predict = 50;
  opt.interrupt = &flag;
  int n = 0;
  GenerateResult r = generate(*b, m.config, {1}, opt, [&](int) {
    if (++n == 5) flag = 1;
  });
  EXPECT_EQ(r.stop_reason, "interrupted");
  EXPECT_EQ(r.tokens.size(), 5u);
}

// ---- untied classifier: negative vocab_size, wcls after the RoPE tables ----

TEST(CpuEngine, UntiedClassifierEqualToEmbeddingGivesSameLogits) {
  REQUIRE_STORIES();
  const std::string raw = read_file(kStoriesBin);
  const size_t emb_bytes = size_t(512) * 64 * 4;
  std::string untied = raw;
  int32_t neg_vocab = -512;
  std::memcpy(&untied[5 * 4], &neg_vocab, 4);
  const std::string embedding = raw.substr(28, emb_bytes);

  const std::string same_path = temp_path("same"), half_path = temp_path("half");
  write_file(same_path, untied + embedding);
  // A classifier of embedding / 2: scaling by a power of two is exact, so every logit must halve exactly.
  std::string half = embedding;
  for (size_t i = 0; i < half.size(); i += 4) {
    float f;
    std::memcpy(&f, &half[i], 4);
    f *= 0.5f;
    std::memcpy(&half[i], &f, 4);
  }
  write_file(half_path, untied + half);

  Model tied = load_llama2c(kStoriesBin);
  Model same = load_llama2c(same_path);
  Model halved = load_llama2c(half_path);
  EXPECT_FALSE(same.config.tied_embeddings);
  EXPECT_EQ(same.config.vocab_size, 512);
  EXPECT_NE(same.weights.head.data, same.weights.embedding.data);
  EXPECT_EQ(same.weights.head.name, "wcls");

  auto lt = logits_per_position(*make_cpu_backend(tied, {}), kSomeTokens);
  auto ls = logits_per_position(*make_cpu_backend(same, {}), kSomeTokens);
  auto lh = logits_per_position(*make_cpu_backend(halved, {}), kSomeTokens);
  for (size_t p = 0; p < kSomeTokens.size(); ++p) {
    EXPECT_EQ(ls[p], lt[p]) << "position " << p;
    EXPECT_NE(lh[p], lt[p]) << "position " << p;
    for (size_t i = 0; i < lt[p].size(); ++i) ASSERT_EQ(lh[p][i], 0.5f * lt[p][i]) << "position " << p << " id " << i;
  }
  // An untied file without its classifier is short by exactly vocab * dim floats.
  write_file(same_path, untied);
  try {
    load_llama2c(same_path);
    FAIL() << "expected llm::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected " + std::to_string(raw.size() + emb_bytes)), std::string::npos)
        << e.what();
  }
  fs::remove(same_path);
  fs::remove(half_path);
}

// ---- BF16 weights on the CPU (what the CUDA engine stores) ----

TEST(CpuEngine, Bf16WeightsCloseToFp32) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  BackendOptions o;
  o.bf16_weights = true;
  auto l32 = logits_per_position(*make_cpu_backend(m, {}), kSomeTokens);
  auto l16 = logits_per_position(*make_cpu_backend(m, o), kSomeTokens);
  for (size_t p = 0; p < kSomeTokens.size(); ++p) {
    double e = rel_err(l32[p], l16[p]);
    EXPECT_LT(e, 2e-2) << "position " << p;
    EXPECT_GT(e, 0.0) << "position " << p << ": BF16 rounding changed nothing";
  }
}

TEST(CpuEngine, MakeBackendPicksCpu) {
  REQUIRE_STORIES();
  Model m = load_llama2c(kStoriesBin);
  BackendOptions o;
  o.device = "cpu";
  EXPECT_EQ(make_backend(m, o)->name(), "cpu");
  o.device = "tpu";
  EXPECT_THROW(make_backend(m, o), Error);
#ifndef LLM_HAVE_CUDA
  EXPECT_FALSE(cuda_device_available());
  o.device = "auto";
  EXPECT_EQ(make_backend(m, o)->name(), "cpu");
  o.device = "cuda";
  try {
    make_backend(m, o);
    FAIL() << "expected llm::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA engine"), std::string::npos) << e.what();
  }
#endif
}

// --device is decided in one place: cpu and cuda as asked, auto by whether a device is there (saying why when it
// picks the CPU), anything else refused; the --gemv check on the CPU carries that reason.
TEST(CpuEngine, ResolveDeviceIsTheOnePlaceAutoIsDecided) {
  EXPECT_EQ(resolve_device("cpu").device, "cpu");
  EXPECT_EQ(resolve_device("cpu").why, "");
  EXPECT_EQ(resolve_device("cuda").device, "cuda");  // checked later by require_cuda_device / make_backend
  EXPECT_EQ(resolve_device("cuda").why, "");
  EXPECT_THROW(resolve_device("tpu"), Error);
  EXPECT_THROW(resolve_device("Auto"), Error);
  const ResolvedDevice a = resolve_device("auto");
  EXPECT_EQ(resolve_device("").device, a.device);
  if (cuda_device_available()) {
    EXPECT_EQ(a.device, "cuda");
    EXPECT_EQ(a.why, "");
  } else {
    EXPECT_EQ(a.device, "cpu");
    EXPECT_EQ(a.why, "--device auto chose the CPU: no CUDA device is available (" + cuda_unavailable_reason() + ")");
  }
  const ResolvedDevice cpu_by_auto{"cpu", "--device auto chose the CPU: because"};
  EXPECT_NO_THROW(check_gemv_for_device("--gemv", "", cpu_by_auto));
  EXPECT_NO_THROW(check_gemv_for_device("--gemv", kGemvDefaultMapping, cpu_by_auto));
  EXPECT_NO_THROW(check_gemv_for_device("--gemv", "thread", ResolvedDevice{"cuda", ""}));
  try {
    check_gemv_for_device("--gemv", "thread", cpu_by_auto);
    ADD_FAILURE() << "a non-default mapping accepted on the CPU";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--gemv thread: GEMV mappings apply to --device cuda"), std::string::npos) << m;
    EXPECT_EQ(m.substr(m.size() - std::string("; --device auto chose the CPU: because").size()),
              "; --device auto chose the CPU: because") << m;
  }
  try {
    check_gemv_for_device("--gemv", "nope", cpu_by_auto);
    ADD_FAILURE() << "an unknown mapping accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--gemv: unknown GEMV mapping 'nope' (known: " + gemv_mapping_names() + ")");
  }
}

// ---- sampler ----

namespace {
std::vector<int> draw(const std::vector<float>& logits, const SamplerParams& p, int steps) {
  std::vector<int> out;
  for (int s = 0; s < steps; ++s) out.push_back(sample_cpu(logits.data(), int(logits.size()), p, uint64_t(s)));
  return out;
}
std::vector<float> pseudo_random_logits(int n) {
  std::vector<float> l(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) l[size_t(i)] = float(std::sin(i * 12.9898) * 4.0);
  return l;
}
}  // namespace

TEST(Sampler, TopK1IsGreedy) {
  const auto l = pseudo_random_logits(300);
  const int best = argmax(l.data(), 300);
  SamplerParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  p.top_p = 1.0f;
  for (int t : draw(l, p, 200)) ASSERT_EQ(t, best);
  p.top_k = 2;  // and two candidates really do spread over both
  const auto two = draw(l, p, 200);
  EXPECT_EQ(std::set<int>(two.begin(), two.end()).size(), 2u);
}

TEST(Sampler, TopPKeepsTheSmallestHeadAndDropsTheTail) {
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3: exactly the first two
  auto toks = draw(l, p, 4000);
  int count[4] = {0, 0, 0, 0};
  for (int t : toks) count[t]++;
  EXPECT_EQ(count[2] + count[3], 0);
  EXPECT_GT(count[1], 0);
  // Renormalised over the kept two: P(0) = 0.5 / 0.8 = 0.625.
  EXPECT_NEAR(count[0] / 4000.0, 0.625, 0.03);

  p.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95: three kept, the 0.05 tail never drawn
  int seen[4] = {0, 0, 0, 0};
  for (int t : draw(l, p, 4000)) seen[t]++;
  EXPECT_GT(seen[2], 0);
  EXPECT_EQ(seen[3], 0);
  EXPECT_NEAR(seen[2] / 4000.0, 0.15 / 0.95, 0.03);
}

TEST(Sampler, SeedDeterminesTheDraws) {
  const std::vector<float> l(64, 0.0f);  // uniform: the draws depend on the random numbers alone
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.seed = 7;
  auto a = draw(l, p, 100), b = draw(l, p, 100);
  EXPECT_EQ(a, b);
  p.seed = 8;
  EXPECT_NE(draw(l, p, 100), a);
  EXPECT_GT(std::set<int>(a.begin(), a.end()).size(), 20u);
}

// ---- run-llama's command line (the executable is built beside the tests) ----

namespace {
struct RunResult {
  int status;
  std::string out;
};
RunResult run_llama(const std::string& args) {
  const std::string exe = std::string(LLM_BINARY_DIR) + "/run-llama";
  const std::string err_path = temp_path("stderr");
  std::string cmd = exe + " " + args + " 2>" + err_path;
  RunResult r{-1, ""};
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out += "\n[stderr]\n" + read_file(err_path);
  fs::remove(err_path);
  return r;
}
}  // namespace

TEST(RunLlama, ExitCodesAndOutput) {
  REQUIRE_STORIES();
  if (!fs::exists(std::string(LLM_BINARY_DIR) + "/run-llama")) FAIL() <<  "(every tree that runs this test builds it) " << "run-llama not built";
  const std::string model = "--model " + kStoriesBin + " --tokenizer " + kStories + "/tok512.model";

  RunResult r = run_llama(model + " --prompt 'Once upon a time' -n 12 --temp 0 --device cpu");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("eval time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("llama_perf_context_print:  first token time = "), std::string::npos) << r.out;

  for (const char* bad : {"-n abc", "-n 0", "--top-p 0", "--top-p 1.5", "--temp -1", "--top-k -3", "--ctx-size 0",
                          "--device tpu", "--bogus"}) {
    r = run_llama(model + " --prompt hi " + bad);
    EXPECT_EQ(r.status, 2) << bad << "\n" << r.out;
    EXPECT_NE(r.out.find("error: "), std::string::npos) << bad << "\n" << r.out;
  }
  r = run_llama(model + " --prompt hi -n abc");
  EXPECT_NE(r.out.find("-n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 to 1000000"), std::string::npos) << r.out;

  r = run_llama("--model /nonexistent/model.bin --prompt hi");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/model.bin"), std::string::npos) << r.out;

  r = run_llama("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* group : {"general", "model", "sampling", "device"}) EXPECT_NE(r.out.find(group), std::string::npos);
}
