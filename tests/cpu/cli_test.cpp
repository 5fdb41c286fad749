// apps/cli.h, the command-line helper of every app: the option table (values, number ranges and their messages,
// --help), and which failures are bad usage (exit 2, with the --help hint). The apps' own runs are in
// user_errors_test.cpp.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/shared_options.h"  // add_tuning_options: the engine's knobs, from the command line only

namespace llm::cli {
namespace {

// The message of the UsageError f throws ("" and a test failure when it throws none or another type).
template <typename F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (...) {
    ADD_FAILURE() << "not a UsageError";
    return "";
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

TEST(Cli, ErrorsWhileParsingAreBadUsageAndOthersAreNot) {
  EXPECT_EQ(usage_message([] { as_usage([] { fail("--ab: unknown GEMV mapping 'x'"); }); }),
            "--ab: unknown GEMV mapping 'x'");
  EXPECT_EQ(as_usage([] { return 7; }), 7);
  std::vector<std::string> args = {"prog"};
  std::vector<char*> argv = {args[0].data()};
  const auto parse_fails = [](int, char**) -> int { fail("--shape NxK is required"); };
  const auto parse_ok = [](int, char**) { return 3; };
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main("prog", 1, argv.data(), parse_fails, [](int) { return 0; }), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "error: --shape NxK is required\nrun 'prog --help' for the options\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main("prog", 1, argv.data(), parse_ok, [](int) -> int { fail("model\x1b[31m gone"); }), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: model\\x1b[31m gone\n");
  EXPECT_EQ(run_main("prog", 1, argv.data(), parse_ok, [](int v) { return v; }), 3);
}

// ---- the option table ----

enum class Path { A, B };
Path parse_path(const std::string& s) { return s == "b" ? Path::B : Path::A; }

struct Parsed {
  std::string model = "m0";
  int n = 256;
  unsigned long long seed = 42;
  float top_p = 0.95f;
  double temp = 0.8;
  std::string device = "auto";
  Path path = Path::A;
  std::vector<int> ks{8};
  bool json = false;
  std::string prompt, file;
};

// Declares the test table over `p`; parse(args) runs it over "prog ARGS".
struct Table {
  Parsed p;
  Options o{"usage: prog [options]\n"};
  Table() {
    o.section("general");
    o.text("-m, --model", "PATH", &p.model, "the model");
    o.integer("-n, --n-predict, --n-decode", "N", &p.n, 1, 1000000, "tokens to generate");
    o.integer("-s, --seed", "S", &p.seed, 0, 1LL << 62, "seed").allowed("0 to 2^62");
    o.real("--top-p", "P", &p.top_p, 0.0, 1.0, "nucleus", Lower::open);
    o.real("--temp", "T", &p.temp, 0.0, 100.0, "temperature");
    o.choice("--device", "DEV", &p.device, {"cpu", "cuda", "auto"}, "where");
    o.choice("--path", "PATH", &p.path, {"a", "b"}, parse_path, "which path").default_is("a");
    o.integers("--ks", "A,B", &p.ks, 1, 65536, "sizes");
    o.flag("--json", &p.json, "JSON lines");
    o.text("-p, --prompt", "TEXT", &p.prompt, "prompt");
    o.text("-f, --file", "FILE", &p.file, "prompt file");
  }
  void parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    o.parse(int(argv.size()), argv.data());
  }
};

TEST(CliTable, ParsesEveryKindIntoItsField) {
  Table t;
  t.parse({"-m", "x.gguf", "--n-decode", "7", "--seed", "4611686018427387904", "--top-p", "1", "--device", "cpu",
           "--path", "b", "--ks", "1,,64", "--json", "-n", "9"});
  EXPECT_EQ(t.p.model, "x.gguf");
  EXPECT_EQ(t.p.n, 9);  // a repeated option (under any of its names) keeps its last value
  EXPECT_EQ(t.p.seed, 1ULL << 62);
  EXPECT_FLOAT_EQ(t.p.top_p, 1.0f);
  EXPECT_EQ(t.p.device, "cpu");
  EXPECT_EQ(t.p.path, Path::B);
  EXPECT_EQ(t.p.ks, (std::vector<int>{1, 64}));
  EXPECT_TRUE(t.p.json);
  EXPECT_TRUE(t.o.given("--n-predict") && t.o.given("-n") && t.o.given("--json"));
  EXPECT_FALSE(t.o.given("--prompt"));
  Table d;
  d.parse({});
  EXPECT_EQ(d.p.n, 256);  // defaults are the fields' initial values
  EXPECT_EQ(d.p.ks, (std::vector<int>{8}));
}

TEST(CliTable, BadUsageMessagesAreTheSharedVocabulary) {
  auto message = [](std::vector<std::string> args) {
    return usage_message([&] {
      Table t;
      t.parse(args);
    });
  };
  EXPECT_EQ(message({"--nope"}), "unknown option '--nope'");
  EXPECT_EQ(message({"-n"}), "-n needs a value");
  EXPECT_EQ(message({"-n", "0"}), "-n: invalid value '0' (allowed: 1 to 1000000)");  // the flag as spelled
  EXPECT_EQ(message({"--n-decode", "5x"}), "--n-decode: invalid value '5x' (allowed: 1 to 1000000)");
  EXPECT_EQ(message({"-s", "-1"}), "-s: invalid value '-1' (allowed: 0 to 2^62)");
  EXPECT_EQ(message({"--top-p", "0"}), "--top-p: invalid value '0' (allowed: greater than 0, at most 1)");
  EXPECT_EQ(message({"--device", "gpu"}), "--device: invalid value 'gpu' (allowed: cpu, cuda, auto)");
  EXPECT_EQ(message({"--path", "c"}), "--path: invalid value 'c' (allowed: a, b)");
  EXPECT_EQ(message({"--ks", "8,x"}), "--ks: invalid value 'x' (allowed: 1 to 65536)");
}

// The CUDA engine's tuning knobs (once environment variables read inside the engine) come from the command line into
// EngineTuning, with their ranges; nothing given keeps the engine's defaults.
TEST(CliTable, TuningOptionsFillEngineTuning) {
  auto parse = [](std::vector<std::string> args) {
    EngineTuning t;
    Options o("usage: prog [options]\n");
    add_tuning_options(o, &t);
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    o.parse(int(argv.size()), argv.data());
    return t;
  };
  const EngineTuning d = parse({});
  EXPECT_TRUE(d.run_ahead);
  EXPECT_EQ(d.persistent_max_blocks, 0);
  EXPECT_EQ(d.persistent_timeout_ms, 0u);
  EXPECT_FALSE(d.persistent_all_forms);
  EXPECT_TRUE(d.fuse_norm);
  EXPECT_FALSE(parse({"--fuse-norm", "off"}).fuse_norm);
  EXPECT_EQ(usage_message([&] { parse({"--fuse-norm", "no"}); }), "--fuse-norm: invalid value 'no' (allowed: on, off)");
  EXPECT_TRUE(d.fuse_swiglu_q8);
  EXPECT_TRUE(d.fuse_pass);
  EXPECT_FALSE(parse({"--fuse-pass", "off"}).fuse_pass);
  EXPECT_TRUE(d.norm_sums);
  EXPECT_FALSE(parse({"--norm-sums", "off"}).norm_sums);
  EXPECT_FALSE(parse({"--fuse-glu", "off"}).fuse_swiglu_q8);
  // --quantize TYPE [--quick-quant]: the scheme's search; --quick-quant alone is bad usage.
  EXPECT_EQ(llm::cli::quantize_scheme("q4_k_m", true).search, llm::QuantSearch::kQuick);
  EXPECT_TRUE(llm::cli::quantize_scheme("q4_k_m", true).q4_k_m);
  EXPECT_EQ(llm::cli::quantize_scheme("q6_k", false).search, llm::QuantSearch::kReference);
  EXPECT_EQ(usage_message([] { llm::cli::quantize_scheme("", true); }), "--quick-quant applies to --quantize only");
  EXPECT_TRUE(d.fuse_rope);
  EXPECT_FALSE(parse({"--fuse-rope", "off"}).fuse_rope);
  // SwiGLU and attention's split merge made as the next GEMV stages x: on by default, off for the A/B.
  EXPECT_TRUE(d.stage_glu);
  EXPECT_FALSE(d.stage_merge);  // measured slower: opt in
  EXPECT_FALSE(parse({"--stage-glu", "off"}).stage_glu);
  EXPECT_FALSE(parse({"--stage-glu", "off"}).stage_merge);
  EXPECT_TRUE(parse({"--o-merge", "on"}).stage_merge);
  EXPECT_EQ(usage_message([&] { parse({"--o-merge", "yes"}); }),
            "--o-merge: invalid value 'yes' (allowed: on, off)");
  EXPECT_FALSE(d.fork_pieces);
  EXPECT_TRUE(parse({"--fork-mix", "on"}).fork_pieces);
  // The batch-k GEMV's pass limit (0 = always dequantize, at most kQuantBatchPassMax) and the captured verify.
  EXPECT_EQ(d.quant_batch_rows, 64);
  EXPECT_TRUE(d.verify_graph);
  EXPECT_EQ(parse({"--batch-rows", "0"}).quant_batch_rows, 0);
  EXPECT_EQ(parse({"--batch-rows", "16"}).quant_batch_rows, 16);
  EXPECT_EQ(parse({"--batch-rows", "2048"}).quant_batch_rows, 2048);  // kQuantBatchPassMax: a whole prefill chunk
  EXPECT_NE(usage_message([&] { parse({"--batch-rows", "2049"}); }).find("--batch-rows"), std::string::npos);
  EXPECT_FALSE(parse({"--verify-cg", "off"}).verify_graph);
  // Short passes' attention: keys split across blocks by default, one block per KV head for comparison.
  EXPECT_TRUE(d.split_pass_attention);
  EXPECT_FALSE(parse({"--pass-attn", "whole"}).split_pass_attention);
  EXPECT_TRUE(parse({"--pass-attn", "split"}).split_pass_attention);
  EXPECT_NE(usage_message([&] { parse({"--pass-attn", "both"}); }).find("--pass-attn"), std::string::npos);
  // Where the batch-k GEMV moves to tensor cores (0 = the built-in default, 65 = never).
  EXPECT_EQ(d.batch_mma_from, 0);
  EXPECT_EQ(parse({"--batch-mma", "2"}).batch_mma_from, 2);
  EXPECT_EQ(parse({"--batch-mma", "65"}).batch_mma_from, llm::kBatchMmaNever);
  EXPECT_NE(usage_message([&] { parse({"--batch-mma", "66"}); }).find("--batch-mma"), std::string::npos);
  // The exact verify (off until run on a GPU) and the batched BF16 GEMV's pass limit (0 = always cuBLAS, at most
  // kGemvMaxBatch).
  EXPECT_EQ(d.exact_verify, llm::ExactVerify::kAuto);
  EXPECT_EQ(parse({"--exact-vfy", "on"}).exact_verify, llm::ExactVerify::kOn);
  EXPECT_EQ(parse({"--exact-vfy", "off"}).exact_verify, llm::ExactVerify::kOff);
  // The decode-order verify (the decode step's kernels over a token axis) by default; the prefill pass for comparison.
  EXPECT_EQ(d.verify_order, llm::VerifyOrder::kAuto);
  EXPECT_EQ(parse({"--vfy-order", "pass"}).verify_order, llm::VerifyOrder::kPass);
  EXPECT_EQ(parse({"--vfy-order", "decode"}).verify_order, llm::VerifyOrder::kDecode);
  EXPECT_EQ(usage_message([&] { parse({"--vfy-order", "steps"}); }),
            "--vfy-order: invalid value 'steps' (allowed: auto, decode, pass)");
  EXPECT_EQ(d.bf16_batch_rows, 16);
  EXPECT_EQ(parse({"--bf16-rows", "0"}).bf16_batch_rows, 0);
  EXPECT_EQ(parse({"--bf16-rows", "9"}).bf16_batch_rows, 9);
  EXPECT_NE(usage_message([&] { parse({"--bf16-rows", "17"}); }).find("--bf16-rows"), std::string::npos);
  const EngineTuning t = parse({"--run-ahead", "off", "--grid-cap", "96", "--wait-timeout", "250", "--all-forms"});
  EXPECT_FALSE(t.run_ahead);
  EXPECT_EQ(t.persistent_max_blocks, 96);
  EXPECT_EQ(t.persistent_timeout_ms, 250u);
  EXPECT_TRUE(t.persistent_all_forms);
  EXPECT_TRUE(parse({"--run-ahead", "on"}).run_ahead);
  EXPECT_EQ(usage_message([&] { parse({"--run-ahead", "no"}); }),
            "--run-ahead: invalid value 'no' (allowed: on, off)");
  EXPECT_EQ(usage_message([&] { parse({"--grid-cap", "-1"}); }),
            "--grid-cap: invalid value '-1' (allowed: 0 to 1048576)");
  EXPECT_EQ(d.persistent_cluster, 0);
  EXPECT_EQ(d.persistent_prefetch, 0);
  const EngineTuning c = parse({"--cluster", "16", "--prefetch", "2"});
  EXPECT_EQ(c.persistent_cluster, 16);
  EXPECT_EQ(c.persistent_prefetch, 2);
  EXPECT_EQ(usage_message([&] { parse({"--cluster", "32"}); }), "--cluster: invalid value '32' (allowed: 0 to 16)");
}

// A value is the next argument, whatever it looks like; a number is the whole text, in range, and (for reals) finite,
// with the range's open end excluded.
TEST(CliTable, ValuesAreTheNextArgumentAndNumbersTheWholeTextInRange) {
  Table t;
  t.parse({"-m", "--json", "--temp", "0", "--top-p", "1"});
  EXPECT_EQ(t.p.model, "--json");
  EXPECT_FALSE(t.p.json);
  EXPECT_DOUBLE_EQ(t.p.temp, 0.0);
  EXPECT_FLOAT_EQ(t.p.top_p, 1.0f);
  auto message = [](std::vector<std::string> args) {
    return usage_message([&] {
      Table t;
      t.parse(args);
    });
  };
  EXPECT_EQ(message({"-n", "5", "--seed"}), "--seed needs a value");
  for (const char* bad : {"", "5x", "1.0", "99999999999999999999999", "-0x1"})
    EXPECT_EQ(message({"-n", bad}), "-n: invalid value '" + std::string(bad) + "' (allowed: 1 to 1000000)") << bad;
  EXPECT_EQ(message({"--top-p", "1.5"}), "--top-p: invalid value '1.5' (allowed: greater than 0, at most 1)");
  EXPECT_EQ(message({"--temp", "-1"}), "--temp: invalid value '-1' (allowed: 0 to 100)");
  for (const char* bad : {"", "nan", "1e999", "0.5x"})
    EXPECT_EQ(message({"--temp", bad}), "--temp: invalid value '" + std::string(bad) + "' (allowed: 0 to 100)") << bad;
}

TEST(CliTable, ExclusiveNamesTheFirstTwoGivenInOrder) {
  Table t;
  t.parse({"-f", "p.txt", "-p", "hi"});
  EXPECT_EQ(usage_message([&] { t.o.exclusive({"--prompt", "--file"}, "give the prompt once"); }),
            "--file and --prompt exclude each other: give the prompt once");
  Table one;
  one.parse({"--prompt", "a", "--prompt", "b"});
  EXPECT_NO_THROW(one.o.exclusive({"--prompt", "--file"}, "give the prompt once"));
}

TEST(CliTable, HelpStatesDefaultsAndRangesFromTheTable) {
  Table t;
  const std::string h = t.o.help();
  EXPECT_EQ(h.rfind("usage: prog [options]\n\n----- general -----\n", 0), 0u) << h;
  for (const char* line :
       {"  -m, --model PATH        the model (default: m0)\n",
        "  -n, --n-predict N       tokens to generate (also --n-decode) (default: 256; allowed: 1 to 1000000)\n",
        "  -s, --seed S            seed (default: 42; allowed: 0 to 2^62)\n",
        "      --top-p P           nucleus (default: 0.95; allowed: greater than 0, at most 1)\n",
        "      --temp T            temperature (default: 0.8; allowed: 0 to 100)\n",
        "      --device DEV        where (default: auto; allowed: cpu, cuda, auto)\n",
        "      --path PATH         which path (default: a; allowed: a, b)\n",
        "      --ks A,B            sizes (default: 8; allowed: 1 to 65536)\n", "      --json              JSON lines\n",
        "  -h, --help              print this help and exit\n"})
    EXPECT_NE(h.find(line), std::string::npos) << line << "not in\n" << h;
  // Long help wraps under its first line (the column: 20 or the longest label and two spaces), within the width.
  Options w("usage: w\n");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "word" + std::to_string(i) + " ";
  bool b = false;
  w.flag("--long", &b, text);
  const std::string wh = w.help();
  EXPECT_NE(wh.find("\n                          word"), std::string::npos) << wh;
  for (const std::string& l : [&] {
         std::vector<std::string> v;
         std::istringstream in(wh);
         for (std::string s; std::getline(in, s);) v.push_back(s);
         return v;
       }())
    EXPECT_LE(l.size(), 118u) << l;
}

}  // namespace
}  // namespace llm::cli
