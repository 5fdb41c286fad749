// What users hit, end to end on the built programs (LLM_BINARY_DIR): --gemv checked on every path and listed in
// --help, the one line every CUDA program prints without a GPU (this test machine has none; a GPU machine skips
// that test), a byte-level vocabulary without byte tokens refused by name, --perplexity on a vocabulary without BOS,
// and the piped chat (no terminal hints, "1 turn", a system prompt too long for the context named as such).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "chat/session.h"
#include "chat/template.h"
#include "core/gemv_table.h"
#include "engine/backend.h"
#include "engine/gemv_choice.h"  // decode_path_refusal: llama-ab --decode's refusal
#include "models/hf_writer.h"
#include "models/model.h"
#include "models/vocab.h"
#include "models_test_util.h"
#include "run_program_util.h"  // run_program, lines, expect_run_llama_refused
#include "tokenizer/bpe.h"
#include "tokenizer/load.h"


namespace {

namespace fs = std::filesystem;
using llm_test::TempDir;
using llm_test::write_file;
using nlohmann::json;

const std::string kBin = LLM_BINARY_DIR;
const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

using Outcome = llm_test::ProgramRun;
using llm_test::lines;

// Runs kBin/program with `args` (no shell), stdin from `stdin_path` (or /dev/null), capturing stdout and stderr.
// `program` may name a section of a program ("bench gemv"): the first word is the executable, the second its first
// argument.
Outcome run(const std::string& program, std::vector<std::string> args, const TempDir& tmp,
            const std::string& stdin_path = "/dev/null") {
  const size_t space = program.find(' ');
  if (space != std::string::npos) args.insert(args.begin(), program.substr(space + 1));
  return llm_test::run_program(kBin + "/" + program.substr(0, space), args, tmp, stdin_path);
}

bool built(const std::string& program) { return fs::exists(kBin + "/" + program.substr(0, program.find(' '))); }

// About `bytes` of ordinary words.
std::string words(size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += "Once upon a time there was a little dog. ";
  return s;
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

void expect_refused(const std::vector<std::string>& args, int code, std::initializer_list<std::string> needles,
                    const TempDir& tmp) {
  llm_test::expect_run_llama_refused(kBin + "/run-llama", args, code, needles, tmp);
}

class UserErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!built("run-llama")) FAIL() <<  "(every tree that runs this test builds it) " << kBin << "/run-llama not built (build the run-llama target)";
  }
  TempDir tmp_;
};

// ---- --gemv on every path, and every mapping in --help ----

TEST_F(UserErrors, GemvUnknownNameIsBadUsageOnEveryPath) {
  for (const char* device : {"cpu", "cuda", "auto"})
    expect_refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "1,2", "--device", device, "--gemv", "nope"}, 2,
                   {"--gemv: unknown GEMV mapping 'nope' (known: " + llm::gemv_mapping_names() + ")"}, tmp_);
}

TEST_F(UserErrors, GemvOtherThanTheDefaultIsRefusedOnTheCpuPath) {
  expect_refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "1,2", "--device", "cpu", "--gemv", "warp"}, 2,
                 {"--gemv warp: GEMV mappings apply to --device cuda"}, tmp_);
  if (!llm::cuda_device_available())  // auto resolves to the CPU here: the same refusal, saying why
    expect_refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "1,2", "--gemv", "thread"}, 2,
                   {"--gemv thread: GEMV mappings apply to --device cuda", "--device auto chose the CPU",
                    "no CUDA device is available"},
                   tmp_);
  // The default names what the CPU path does anyway: it runs.
  const Outcome r = run("run-llama", {"--model", "synthetic:tiny-gqa", "--prompt-ids", "1,2", "-n", "2", "--device",
                                      "cpu", "--gemv", llm::kGemvDefaultMapping},
                        tmp_);
  EXPECT_TRUE(r.exited && r.code == 0) << r.err;
}

// --decode persistent runs what its kernel takes; the rest is bad usage (exit 2) named before any GPU work.
TEST_F(UserErrors, DecodePathRefusalsAreBadUsage) {
  const std::vector<std::string> base = {"--model", "synthetic:tiny-gqa", "--prompt-ids", "1,2", "-n", "2"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  expect_refused(with({"--decode", "nope"}), 2, {"--decode: invalid value 'nope' (allowed: graph, persistent)"}, tmp_);
  expect_refused(with({"--device", "cpu", "--decode", "persistent"}), 2,
                 {"--decode persistent runs on the CUDA engine, not on the CPU reference"}, tmp_);
  // With --device cuda a machine without a GPU stops at "no CUDA device" first (tests/cpu/gemv_choice_test.cpp covers
  // these refusals there); with one, they come before any GPU work.
  if (!llm::cuda_device_available()) return;
  expect_refused(with({"--device", "cuda", "--decode", "persistent", "--gemv", "cublas"}), 2,
                 {"--decode persistent runs the lanes-along-K GEMV mappings", "'cublas' cannot run inside it"}, tmp_);
  expect_refused(with({"--device", "cuda", "--decode", "persistent", "--kv-dtype", "fp8"}), 2,
                 {"--decode persistent keeps the KV cache in BF16"}, tmp_);
  expect_refused({"--model", "synthetic:tiny-hd", "--prompt-ids", "1,2", "--device", "cuda", "--decode", "persistent"},
                 2, {"head_dim 24", "use --decode graph"}, tmp_);
}

TEST_F(UserErrors, HelpListsEveryMappingAndTheDefault) {
  for (const char* program : {"run-llama", "gemv-sectors", "llama-ab", "bench gemv", "bench profile-target"}) {
    SCOPED_TRACE(program);
    if (!built(program)) continue;  // bench, a CUDA program, exists only in a CUDA build
    const Outcome r = run(program, {"--help"}, tmp_);
    ASSERT_TRUE(r.exited && r.code == 0) << r.err;
    EXPECT_TRUE(has(r.out, std::string(llm::kGemvDefaultMapping) + " (default)")) << r.out;
    for (const llm::GemvRow& m : llm::kGemvTable) {
      if (!m.has_bf16()) continue;
      EXPECT_TRUE(has(r.out, std::string("  ") + m.name + " ")) << m.name << " missing from\n" << r.out;
      EXPECT_TRUE(has(r.out, m.why)) << m.name;
    }
  }
}

TEST_F(UserErrors, AbListIsChecked) {
  if (!built("llama-ab")) FAIL() <<  "(every tree that runs this test builds it) " << "llama-ab not built";
  const Outcome r = run("llama-ab", {"--model", "synthetic:tiny-gqa", "--ab", "warp,nope"}, tmp_);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(lines(r.err).size(), 2u) << r.err;
  EXPECT_EQ(lines(r.err)[0], "error: --ab: unknown GEMV mapping 'nope' (known: " + llm::gemv_mapping_names() + ")");
}

// --decode runs every --ab mapping on every path listed, and --help says so. What the persistent path cannot run is
// bad usage named by decode_path_refusal, before any GPU work; without a GPU the run stops at the no-GPU line first.
TEST_F(UserErrors, AbDecodePathsAreDocumentedAndChecked) {
  if (!built("llama-ab")) FAIL() << "(every tree that runs this test builds it) " << "llama-ab not built";
  const Outcome h = run("llama-ab", {"--help"}, tmp_);
  ASSERT_TRUE(h.exited && h.code == 0) << h.err;
  EXPECT_TRUE(has(h.out, "      --decode LIST       decode paths every --ab mapping runs on")) << h.out;
  EXPECT_TRUE(has(llm_test::unwrapped(h.out), "NAME@graph or NAME@persistent runs NAME on that decode path alone"))
      << h.out;
  const Outcome r = run("llama-ab", {"--model", "synthetic:tiny-gqa", "-n", "2", "--ab", "warp-r2,cublas", "--decode",
                                     "graph,persistent"},
                        tmp_);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.out, "");
  if (!llm::cuda_device_available()) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_FALSE(has(r.err, "--decode")) << r.err;
    return;
  }
  EXPECT_EQ(r.code, 2) << r.err;
  ASSERT_EQ(lines(r.err).size(), 2u) << r.err;
  EXPECT_EQ(lines(r.err)[0], "error: " + llm::decode_path_refusal(llm::DecodePath::Persistent, "cublas",
                                                                  llm::load_model("synthetic:tiny-gqa"), false,
                                                                  false, true));
}

// The default lists of llama-ab --ab and bench profile-target --mappings are the registry: every mapping, in order.
TEST_F(UserErrors, DefaultMappingListsAreTheRegistry) {
  EXPECT_EQ(llm::gemv_mapping_list(), "warp-r2,warp,thread,colmajor,cublas,thread-splitk,warp-few");
  for (const char* program : {"llama-ab", "bench profile-target"}) {
    SCOPED_TRACE(program);
    if (!built(program)) continue;
    const Outcome r = run(program, {"--help"}, tmp_);
    ASSERT_TRUE(r.exited && r.code == 0) << r.err;
    EXPECT_TRUE(has(r.out, "every")) << r.out;
    size_t at = 0;  // the names, in registry order
    for (const llm::GemvRow& m : llm::kGemvTable) {
      if (!m.has_bf16()) continue;
      at = r.out.find(std::string("  ") + m.name + " ", at);
      ASSERT_NE(at, std::string::npos) << m.name << " missing or out of order in\n" << r.out;
    }
  }
}

// Every app reports bad usage through apps/cli.h the same way: "error: ..." then the --help hint, exit 2, stdout
// empty; before any model or GPU is touched.
TEST_F(UserErrors, EveryAppSaysBadUsageTheSameWay) {
  struct Case {
    const char* program;
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"run-llama", {"--nope"}, "unknown option '--nope'"},
      {"run-llama", {"--prompt", "x", "-n"}, "-n needs a value"},
      {"llama-ab", {"--nope"}, "unknown option '--nope'"},
      {"llama-ab", {"--repeats"}, "--repeats needs a value"},
      {"llama-ab", {"--warmup", "101"}, "--warmup: invalid value '101' (allowed: 0 to 100)"},
      {"llama-ab", {"--decode", "fast"}, "unknown --decode 'fast' (graph or persistent)"},
      {"llama-ab", {"--ab", "warp@fast"}, "A/B entry 'warp@fast': unknown decode path 'fast' (graph or persistent)"},
      {"llama-ab", {"--ab", "warp,warp@persistent", "--decode", "graph,persistent"},
       "A/B entry 'warp@persistent' is listed twice (a plain mapping runs on every --decode path, MAPPING@PATH on "
       "PATH alone)"},
      {"llama-ab", {"--spec", "draft"}, "--spec draft needs --model-draft PATH"},
      {"llama-ab", {"--model-draft", "x.gguf"}, "--model-draft needs --spec draft"},
      {"llama-ab", {"--spec", "lookup", "--draft-min", "9"}, "--draft-min 9 is above --draft-max 8"},
      {"serve-llama", {"--spec", "draft"}, "--spec draft needs --model-draft PATH"},
      {"spec-sim", {"--draft-costs", "1.5"},
       "--draft-costs: '1.5' is not PASS:PER_TOKEN (decode steps, PASS > 0, PER_TOKEN >= 0)"},
      {"spec-sim", {"--draft-costs", "0:0.1"},
       "--draft-costs: '0:0.1' is not PASS:PER_TOKEN (decode steps, PASS > 0, PER_TOKEN >= 0)"},
      {"gemv-sectors", {"--nope"}, "unknown option '--nope'"},
      {"gemv-sectors", {"--shape"}, "--shape needs a value"},
      {"gemv-sectors", {"--shape", "8x8"}, "--dtype is required: one of bf16, f16, q8_0, q4_0, int4"},
      {"bench gemv", {"--nope"}, "unknown option '--nope'"},
      {"bench gemv", {"--repeats", "0"}, "--repeats: invalid value '0' (allowed: 1 to 1000)"},
      {"bench gemv", {"--mappings", "warp,nope"},
       "--mappings: unknown GEMV mapping 'nope' (known: " + llm::gemv_mapping_names() + ")"},
      {"bench probes", {"--tiny-k", "8,x"}, "--tiny-k: invalid value 'x' (allowed: 1 to 65536)"},
      {"bench attn", {"--nope"}, "unknown option '--nope'"},
      {"bench attn", {"--reps", "0"}, "--reps: invalid value '0' (allowed: 1 to 1000)"},
      {"bench attn", {"--contexts", "8,x"}, "--contexts: invalid value 'x' (allowed: 1 to 16777216)"},
      {"bench probes", {"--repeats"}, "--repeats needs a value"},
      {"bench dep", {"--blocks", ""}, "--blocks: no value given"},
      {"bench profile-target", {"--warmup", "5x"}, "--warmup: invalid value '5x' (allowed: 1 to 100)"},
      {"bench profile-target", {"--mappings", "nope"},
       "--mappings: unknown GEMV mapping 'nope' (known: " + llm::gemv_mapping_names() + ")"},
      {"bench all", {"--json"}, "unknown option '--json'"},
      {"bench", {}, "no section given (gemv, probes, attn, dep, profile-target or all)"},
      {"bench", {"gemv-bench"},
       "unknown section 'gemv-bench' (allowed: gemv, probes, attn, dep, profile-target, all)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.program) + " " + c.message);
    if (!built(c.program)) continue;  // bench, a CUDA program, exists only in a CUDA build
    const Outcome r = run(c.program, c.args, tmp_);
    ASSERT_TRUE(r.exited) << r.err;
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(lines(r.err), (std::vector<std::string>{"error: " + c.message,
                                                      "run '" + std::string(c.program) + " --help' for the options"}))
        << r.err;
  }
}

// ---- without a GPU, every CUDA program says the same one line ----

TEST_F(UserErrors, WithoutAGpuEveryCudaProgramSaysTheSameLine) {
  if (llm::cuda_device_available()) GTEST_SKIP() << "a CUDA device is present: nothing to refuse";
  struct Program {
    const char* name;
    std::vector<std::string> args;
  };
  const std::vector<Program> programs = {
      {"run-llama", {"--model", "synthetic:tiny-gqa", "--prompt-ids", "1,2", "--device", "cuda"}},
      {"llama-ab", {"--model", "synthetic:tiny-gqa", "-n", "2"}},
      {"bench gemv", {}},
      {"bench probes", {}},
      {"bench profile-target", {}},
      {"bench attn", {}},
      {"bench dep", {}},
      {"bench all", {}},
  };
#if LLM_HAVE_CUDA
  const std::string want = "error: " + llm::cuda_no_device_message();
  EXPECT_EQ(want.rfind("error: no CUDA device is available (", 0), 0u) << want;
  EXPECT_TRUE(has(want, "); the CUDA programs need an NVIDIA GPU")) << want;
#else
  const std::string want = "error: this build has no CUDA engine (built without a CUDA toolkit)";
#endif
  int ran = 0;
  for (const Program& p : programs) {
    SCOPED_TRACE(p.name);
    if (!built(p.name)) continue;  // bench exists only in a CUDA build
    ++ran;
    const Outcome r = run(p.name, p.args, tmp_);
    ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "\n" << r.err;
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, want + "\n");
  }
  EXPECT_GE(ran, 2);
}

// ---- a byte-level vocabulary without its byte tokens ----

// The GPT-2 stand-in character of byte b (bytes_to_unicode).
std::string byte_char(int b) {
  int next = 0;
  for (int c = 0; c < 256; ++c) {
    const bool keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    const int cp = keep ? c : 256 + next++;
    if (c == b) return cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return "";
}

llm::EmbeddedVocab gguf_vocab(bool with_bytes, const std::vector<int>& leave_out = {}) {
  llm::EmbeddedVocab v;
  v.source = "test.gguf";
  v.model = "gpt2";
  v.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    bool skip = false;
    for (int x : leave_out) skip = skip || x == b;
    v.tokens.push_back(with_bytes && !skip ? byte_char(b) : "tok" + std::to_string(b));
    v.token_types.push_back(1);
  }
  return v;
}

TEST(ByteTokens, AVocabularyWithoutThemIsRefusedByName) {
  llm_test::expect_error([] { llm::make_bpe_tokenizer(gguf_vocab(false)); },
                         {"tokenizer test.gguf: byte-level BPE vocabulary lacks the byte token 'ĉ' (byte 0x09; 256 of "
                          "the 256 byte tokens are missing); not a byte-level vocabulary"});
  llm_test::expect_error([] { llm::make_bpe_tokenizer(gguf_vocab(true, {'e'})); },
                         {"lacks the byte token 'e' (byte 0x65; 1 of the 256"});
  // Real vocabularies lack a few bytes text rarely holds (SmolLM2: 0x04, 0x06, ..., 0xC0, 0xC1, 0xF5..0xFF): loaded.
  std::vector<int> rare = {4, 6, 19, 20, 22, 29, 0xC0, 0xC1};
  for (int b = 0xF5; b <= 0xFF; ++b) rare.push_back(b);
  EXPECT_NO_THROW(llm::make_bpe_tokenizer(gguf_vocab(true, rare)));
}

// A tiny-gqa Hugging Face directory (vocab 256) with a tokenizer.json of 256 tokens and no BOS: the byte tokens, or
// (with_bytes false) 256 tokens that stand for no byte.
std::string hf_with_tokenizer_json(const TempDir& tmp, const std::string& name, bool with_bytes) {
  llm::HfWriteOptions opt;
  opt.dtype = llm::DType::F32;
  const std::string dir = tmp.str(name);
  llm::write_hf_model(llm::load_synthetic("tiny-gqa"), dir, opt);
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[with_bytes ? byte_char(b) : "tok" + std::to_string(b)] = b;
  const json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                    {"decoder", {{"type", "ByteLevel"}}},
                    {"post_processor", nullptr},
                    {"added_tokens", json::array()}};
  write_file(fs::path(dir) / "tokenizer.json", tok.dump());
  return dir;
}

TEST_F(UserErrors, ByteLessVocabularyIsRefusedAtLoad) {
  const std::string dir = hf_with_tokenizer_json(tmp_, "byteless", false);
  expect_refused({"--model", dir, "--prompt", "hello", "--device", "cpu"}, 1,
                 {"tokenizer " + dir + "/tokenizer.json: byte-level BPE vocabulary lacks the byte token 'ĉ' (byte "
                  "0x09; 256 of the 256 byte tokens are missing); not a byte-level vocabulary"},
                 tmp_);
}

// ---- --perplexity on a vocabulary without BOS ----

TEST_F(UserErrors, PerplexityWithoutBosScoresFromTheSecondToken) {
  const std::string dir = hf_with_tokenizer_json(tmp_, "nobos", true);
  write_file(tmp_.path() / "text.txt", "hello world");  // no merges: 11 byte tokens, 10 scored
  const Outcome r = run("run-llama", {"--model", dir, "--perplexity", tmp_.str("text.txt"), "--device", "cpu"}, tmp_);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "perplexity: " + tmp_.str("text.txt") + ": 10 tokens scored")) << r.out;
  EXPECT_TRUE(has(r.err, "run-llama: the vocabulary has no BOS token: scoring from the text's second token on"))
      << r.err;
  // One token is not enough to score: an error, not a crash or exit 0.
  write_file(tmp_.path() / "one.txt", "h");
  expect_refused({"--model", dir, "--perplexity", tmp_.str("one.txt"), "--device", "cpu"}, 1,
                 {"--perplexity: " + tmp_.str("one.txt") + " is too short to score: 1 token; scoring needs at least 2"}, tmp_);
  // An empty prompt still needs a BOS to start from.
  expect_refused({"--model", dir, "--prompt", "", "--device", "cpu"}, 1, {"no BOS token"}, tmp_);
}

// ---- the piped chat ----

TEST_F(UserErrors, PipedChatHasNoTerminalHintsAndCountsRight) {
  ASSERT_TRUE(fs::exists(kStories + "/stories260K.bin")) << "stories260K is missing from the checkout: " << kStories;
  const std::string in = tmp_.str("chat.txt");
  write_file(in, "/help\nHello\n/stats\n/gemv\n/gemv warp\n/gemv nope\n/decode persistent\n/decode fast\n/system " +
                     words(1 << 20) +
                     "\nHi again\n");
  const Outcome r = run("run-llama", {"--model", kStories + "/stories260K.bin", "--tokenizer",
                                      kStories + "/tok512.model", "--chat-template", "zephyr", "--chat", "--device",
                                      "cpu", "--temp", "0", "-n", "1", "--ignore-eos", "-c", "64"},
                        tmp_, in);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(has(r.err, "Ctrl-")) << r.err;
  EXPECT_FALSE(has(r.err, "\033")) << r.err;
  EXPECT_TRUE(has(r.err, "the end of the input also ends the chat")) << r.err;
  EXPECT_TRUE(has(r.err, "\n[length: 1 token, ")) << r.err;
  EXPECT_TRUE(has(r.err, " positions in use, 1 turn\n")) << r.err;
  EXPECT_TRUE(has(r.err, "last reply: prompt ")) << r.err;
  EXPECT_TRUE(has(r.err, ", reply 1 token in ")) << r.err;
  // /gemv on the CPU: the list with the default named, a non-default mapping refused, an unknown name refused.
  EXPECT_TRUE(has(r.err, "GEMV mappings apply to --device cuda; this chat runs on the CPU reference, which has none."))
      << r.err;
  EXPECT_TRUE(has(r.err, "  warp-r2 (default)  ")) << r.err;
  EXPECT_TRUE(has(r.err, "error: /gemv warp: GEMV mappings apply to --device cuda; this chat runs on the CPU reference"))
      << r.err;
  EXPECT_TRUE(has(r.err, "error: /gemv: unknown GEMV mapping 'nope' (known: " + llm::gemv_mapping_names() + ")"))
      << r.err;
  // /decode on the CPU: said to be a CUDA matter; an unknown path refused by name.
  EXPECT_TRUE(has(r.err, "decode paths apply to --device cuda; this chat runs on the CPU reference")) << r.err;
  EXPECT_TRUE(has(r.err, "error: /decode: unknown decode path 'fast' (graph or persistent)")) << r.err;
  EXPECT_TRUE(has(r.err, "/decode [PATH] CUDA: show the decode path")) << r.err;
  // The 1 MB system prompt is what is too long, not the user's two words.
  EXPECT_TRUE(has(r.err, "the system prompt is too long for the context: with the template's markup it needs "))
      << r.err;
  EXPECT_TRUE(has(r.err, "the context holds 64 (raise --ctx-size or set a shorter one with /system TEXT)")) << r.err;
  EXPECT_FALSE(has(r.err, "shorten the message")) << r.err;
}

// The same at the ChatSession level: a system prompt that alone overflows the context is named, a long user message
// beside a short system prompt still is the message.
TEST(ChatSystemPrompt, TooLongForTheContextIsNamed) {
  ASSERT_TRUE(fs::exists(kStories + "/stories260K.bin")) << "stories260K is missing from the checkout: " << kStories;
  const llm::Model model = llm::load_model(kStories + "/stories260K.bin");
  const auto tok = llm::load_tokenizer(model, kStories + "/tok512.model");
  llm::BackendOptions bo;
  bo.ctx_size = 128;
  const auto backend = llm::make_cpu_backend(model, bo);
  const llm::ChatTemplate tmpl(llm::ChatFormat::kZephyr);
  llm::ChatSessionOptions o;
  o.system = words(100000);
  llm::ChatSession s(*backend, *tok, model.config, tmpl, o);
  llm::ChatReply r = s.send("Hi", 4, nullptr);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_TRUE(has(r.message, "the system prompt is too long for the context")) << r.message;
  EXPECT_TRUE(has(r.message, "the context holds 128")) << r.message;
  EXPECT_TRUE(s.ids().empty());

  s.set_system("Be brief.");
  r = s.send(words(4000), 4, nullptr);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_TRUE(has(r.message, "the turn does not fit in the context")) << r.message;
  EXPECT_TRUE(has(r.message, "shorten the message")) << r.message;
}

}  // namespace
