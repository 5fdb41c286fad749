// Prompts from files, end to end on the built programs (LLM_BINARY_DIR): run-llama -f/--file gives the greedy tokens
// of --prompt with the same text, --prompt-ids @FILE those of the list; every mistake (a missing, empty or directory
// file, an id that is not a number or not in the vocabulary, two prompt options at once) is one "error:" line naming
// the file or value; a 100 KB text file and a 32,768-id file are read whole and refused by the context, as a prompt
// too long for it is. llama-ab reads the same options before it asks for a GPU, so its refusals show here too, with
// --depth + -n beyond --ctx-size.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "models_test_util.h"
#include "run_program_util.h"  // run_program, lines, expect_run_llama_refused

namespace {

namespace fs = std::filesystem;
using llm_test::TempDir;
using llm_test::write_file;
using Outcome = llm_test::ProgramRun;
using llm_test::lines;

const std::string kBin = LLM_BINARY_DIR;
const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

Outcome run(const std::string& program, const std::vector<std::string>& args, const TempDir& tmp) {
  return llm_test::run_program(kBin + "/" + program, args, tmp);
}

std::string words(size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += "Once upon a time there was a little dog. ";
  return s;
}

class PromptFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* p : {"run-llama", "llama-ab"})
      if (!fs::exists(kBin + "/" + p)) FAIL() << "(every tree that runs this test builds it) " << kBin << "/" << p << " not built";
    ASSERT_TRUE(fs::exists(kStories + "/stories260K.bin")) << "stories260K is missing from the checkout: " << kStories;
  }

  std::vector<std::string> stories(std::vector<std::string> more) const {
    std::vector<std::string> args{"--model", kStories + "/stories260K.bin", "--tokenizer", kStories + "/tok512.model",
                                  "--device", "cpu", "--temp", "0", "-n", "24", "--ignore-eos"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  void refused(const std::vector<std::string>& args, int code, std::initializer_list<std::string> needles) {
    llm_test::expect_run_llama_refused(kBin + "/run-llama", args, code, needles, tmp_);
  }

  // llama-ab's refusal: exactly "error: MSG" (and the --help hint for bad usage), nothing on stdout.
  void ab_refused(const std::vector<std::string>& args, int code, const std::string& message) {
    std::string cmd = "llama-ab";
    for (const std::string& a : args) cmd += " " + a;
    SCOPED_TRACE(cmd);
    const Outcome r = run("llama-ab", args, tmp_);
    ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "\n" << r.err;
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(r.out, "");
    std::vector<std::string> want{"error: " + message};
    if (code == 2) want.push_back("run 'llama-ab --help' for the options");
    EXPECT_EQ(lines(r.err), want) << r.err;
  }

  std::string file(const std::string& name, const std::string& bytes) const {
    write_file(tmp_.path() / name, bytes);
    return tmp_.str(name);
  }

  TempDir tmp_;
};

// ---- the same tokens as the command line ----

TEST_F(PromptFiles, FileGivesTheGreedyTokensOfPromptWithTheSameText) {
  const std::string text = "Once upon a time, there was a little girl named Lily";
  const Outcome want = run("run-llama", stories({"--prompt", text}), tmp_);
  ASSERT_TRUE(want.exited && want.code == 0) << want.err;
  ASSERT_EQ(want.out.rfind(text, 0), 0u) << want.out;     // the prompt echoed, then the continuation
  ASSERT_GT(want.out.size(), text.size() + 20) << want.out;
  // With the editor's final newline (removed, as llama.cpp's -f) and without it; -f and --file alike.
  for (const auto& [flag, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"--file", text + "\n"}, {"-f", text + "\n"}, {"--file", text}}) {
    SCOPED_TRACE(flag + " " + bytes);
    const Outcome got = run("run-llama", stories({flag, file("prompt.txt", bytes)}), tmp_);
    ASSERT_TRUE(got.exited && got.code == 0) << got.err;
    EXPECT_EQ(got.out, want.out);
  }
  // Another text in the file gives another continuation: the file is what is read.
  const Outcome other = run("run-llama", stories({"--file", file("other.txt", "The big red ball\n")}), tmp_);
  ASSERT_TRUE(other.exited && other.code == 0) << other.err;
  EXPECT_EQ(other.out.rfind("The big red ball", 0), 0u) << other.out;
  EXPECT_NE(other.out, want.out);
}

TEST_F(PromptFiles, IdFileGivesTheTokensOfTheList) {
  const Outcome want = run("run-llama", stories({"--prompt-ids", "1,403,407,261,378,429"}), tmp_);
  ASSERT_TRUE(want.exited && want.code == 0) << want.err;
  ASSERT_FALSE(want.out.empty());
  for (const char* bytes : {"1,403,407,261,378,429\n", "1 403\n407,\t261\n\n378 , 429", "1\n403\n407\n261\n378\n429\n"}) {
    SCOPED_TRACE(bytes);
    const Outcome got = run("run-llama", stories({"--prompt-ids", "@" + file("ids.txt", bytes)}), tmp_);
    ASSERT_TRUE(got.exited && got.code == 0) << got.err;
    EXPECT_EQ(got.out, want.out);
  }
  // The inline list takes whitespace too (one quoted argument).
  const Outcome spaced = run("run-llama", stories({"--prompt-ids", "1 403 407 261 378 429"}), tmp_);
  ASSERT_TRUE(spaced.exited && spaced.code == 0) << spaced.err;
  EXPECT_EQ(spaced.out, want.out);
}

// ---- every mistake is one line ----

TEST_F(PromptFiles, MissingEmptyAndDirectoryFilesAreNamed) {
  const std::string missing = tmp_.str("no-such-prompt.txt");
  refused(stories({"--file", missing}), 1, {"--file: cannot read " + missing + ": No such file or directory"});
  refused(stories({"--prompt-ids", "@" + missing}), 1,
          {"--prompt-ids: cannot read " + missing + ": No such file or directory"});
  const std::string empty = file("empty.txt", "");
  refused(stories({"-f", empty}), 1, {"--file: " + empty + " is empty"});
  refused(stories({"--prompt-ids", "@" + empty}), 1, {"--prompt-ids: " + empty + " is empty"});
  refused(stories({"--prompt-ids", "@" + file("blank.txt", " \n\n")}), 1,
          {"--prompt-ids @" + tmp_.str("blank.txt") + ": no ids given"});
  refused(stories({"--file", tmp_.str()}), 1, {"--file: " + tmp_.str() + " is a directory"});
  refused(stories({"--prompt-ids", "@"}), 1, {"--prompt-ids @: no file name after '@'"});
}

TEST_F(PromptFiles, BadIdsAreNamedWithTheirPlace) {
  const std::string ids = file("ids.txt", "1, 403\n407 x9 378\n");
  refused(stories({"--prompt-ids", "@" + ids}), 1,
          {"--prompt-ids @" + ids + ": 'x9' (item 4, line 2) is not a token id in [0, 512)"});
  const std::string big = file("big.txt", "1\n403\n512\n");
  refused(stories({"--prompt-ids", "@" + big}), 1,
          {"--prompt-ids @" + big + ": '512' (item 3, line 3) is not a token id in [0, 512)"});
  refused(stories({"--prompt-ids", "1,403,99999"}), 1, {"--prompt-ids: '99999' (item 3) is not a token id in [0, 512)"});
  refused(stories({"--prompt-ids", "1,,403"}), 1, {"--prompt-ids: empty id between two commas (after item 1)"});
  refused(stories({"--prompt-ids", "1,-5"}), 1, {"--prompt-ids: '-5' (item 2) is not a token id in [0, 512)"});
}

TEST_F(PromptFiles, TwoPromptOptionsAreBadUsage) {
  const std::string p = file("p.txt", "Once upon a time\n");
  refused(stories({"--prompt", "hi", "--file", p}), 2, {"--prompt and --file exclude each other: give the prompt once"});
  refused(stories({"-f", p, "-p", "hi"}), 2, {"--file and --prompt exclude each other"});
  refused(stories({"--file", p, "--prompt-ids", "1,2"}), 2, {"--file and --prompt-ids exclude each other"});
  refused(stories({"--prompt-ids", "1,2", "--prompt", "hi"}), 2, {"--prompt-ids and --prompt exclude each other"});
  refused(stories({"--chat", "--file", p}), 2, {"--chat reads the conversation", "takes no --prompt, --file,"});
  // The same option twice is not two prompts: the last one counts, as before.
  const Outcome r = run("run-llama", stories({"--prompt", "nothing", "--prompt", "Once upon a time"}), tmp_);
  ASSERT_TRUE(r.exited && r.code == 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
}

TEST_F(PromptFiles, DumpIdsWritesThePromptAndTheGenerationOrIsRefused) {
  const std::string out = tmp_.str("run.ids");
  const Outcome r = run("run-llama", stories({"--prompt-ids", "1,403,407", "-n", "5", "--temp", "0", "--ignore-eos",
                                              "--dump-ids", out}),
                        tmp_);
  ASSERT_TRUE(r.exited && r.code == 0) << r.err;
  std::ifstream in(out);
  std::string prompt_line, gen_line, extra;
  ASSERT_TRUE(std::getline(in, prompt_line) && std::getline(in, gen_line)) << out;
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_EQ(prompt_line, "1 403 407");
  std::istringstream ids(gen_line);
  int id = 0, count = 0;
  while (ids >> id) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 512);
    ++count;
  }
  EXPECT_EQ(count, 5) << gen_line;
  const std::string p = file("text.txt", "Once upon a time\n");
  refused(stories({"--perplexity", p, "--dump-ids", out}), 2, {"--dump-ids writes one generation's ids"});
  refused(stories({"--prompt", "hi", "--dump-logits", tmp_.str("l.f32"), "--dump-ids", out}), 2,
          {"--dump-ids", "takes no --chat, --perplexity or --dump-logits"});
  refused(stories({"--prompt", "hi", "-n", "2", "--dump-ids", tmp_.str("no/such/dir/x.ids")}), 1,
          {"cannot write", "/no/such/dir/x.ids"});
}

// ---- large files: read whole, then refused by the context as any long prompt ----

TEST_F(PromptFiles, A100KBTextFileIsReadWholeAndTooLongForTheContext) {
  const std::string p = file("long.txt", words(100 * 1024) + "\n");
  const Outcome r = run("run-llama", stories({"--file", p}), tmp_);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  // The whole file is tokenized: 102,400 bytes of these words are far more than 10,000 tokens.
  const std::vector<std::string> err = lines(r.err);
  ASSERT_FALSE(err.empty());
  const std::string msg = err.back();
  ASSERT_EQ(msg.rfind("error: the prompt has ", 0), 0u) << r.err;
  EXPECT_GT(std::stol(msg.substr(std::string("error: the prompt has ").size())), 10000) << msg;
  EXPECT_NE(msg.find(" tokens, longer than the context of 512 positions"), std::string::npos) << msg;
  // A short one fits: the same file cut to a few words runs.
  const Outcome ok = run("run-llama", stories({"--file", file("short.txt", words(200) + "\n")}), tmp_);
  EXPECT_TRUE(ok.exited && ok.code == 0) << ok.err;
}

TEST_F(PromptFiles, A32KIdFileIsParsedAndTooLongForTheContext) {
  // 32,768 ids of tiny-gqa's vocabulary (256): 163,840 bytes, more than one argv string may hold (128 KiB).
  std::string text;
  for (int i = 0; i < 32768; ++i) text += std::to_string(100 + i % 156) + (i % 20 == 19 ? "\n" : ", ");
  ASSERT_GT(text.size(), size_t(128 * 1024));
  const std::string ids = file("ids32k.txt", text);
  refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "@" + ids, "--device", "cpu"}, 1,
          {"the prompt has 32768 tokens, longer than the context of 256 positions"});
  // The same file with one id past the vocabulary, last: found at its place.
  const std::string bad = file("bad32k.txt", text + "256\n");
  refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "@" + bad, "--device", "cpu"}, 1,
          {"'256' (item 32769, line 1639) is not a token id in [0, 256)"});
}

// ---- llama-ab: the same options, refused before any GPU is needed ----

TEST_F(PromptFiles, LlamaAbRefusesBadPromptFilesAndDepthBeforeTheGpu) {
  const std::string missing = tmp_.str("missing.txt");
  ab_refused({"--model", "synthetic:tiny-gqa", "--file", missing}, 1,
             "--file: cannot read " + missing + ": No such file or directory");
  const std::string empty = file("empty.txt", "");
  ab_refused({"--model", "synthetic:tiny-gqa", "-f", empty}, 1, "--file: " + empty + " is empty");
  ab_refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "@" + empty}, 1, "--prompt-ids: " + empty + " is empty");
  const std::string ids = file("ids.txt", "1 2\n3 four\n");
  ab_refused({"--model", "synthetic:tiny-gqa", "--prompt-ids", "@" + ids}, 1,
             "--prompt-ids @" + ids + ": 'four' (item 4, line 2) is not a token id (decimal ids separated by commas "
             "or whitespace)");
  const std::string p = file("p.txt", "Once upon a time\n");
  ab_refused({"--prompt", "hi", "--file", p}, 2, "--prompt and --file exclude each other: give the prompt once");
  ab_refused({"--prompt-ids", "1,2", "-f", p}, 2, "--prompt-ids and --file exclude each other: give the prompt once");
  ab_refused({"--depth", "300", "-c", "256", "-n", "64"}, 2,
             "--depth 300 and -n 64 need 364 positions, more than --ctx-size 256");
  ab_refused({"-c", "256", "-d", "200"}, 2, "--depth 200 and -n 128 need 328 positions, more than --ctx-size 256");
  ab_refused({"--depth", "-1"}, 2, "--depth: invalid value '-1' (allowed: 0 to 16777216)");
  // Fitting exactly is not refused here (without a GPU the run then stops at the one no-GPU line, exit 1).
  const Outcome fits = run("llama-ab", {"--model", "synthetic:tiny-gqa", "--depth", "192", "-c", "256", "-n", "64"}, tmp_);
  ASSERT_TRUE(fits.exited) << fits.err;
  EXPECT_EQ(fits.err.find("--depth"), std::string::npos) << fits.err;
}

}  // namespace
