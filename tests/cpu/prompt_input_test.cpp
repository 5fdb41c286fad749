// Prompt files and id lists (engine/prompt_input.h) as functions: separators (commas, whitespace, newlines, mixed),
// every refusal with the value and its place named, a 32,768-id file (longer than one argv string may be) bounded by a
// real vocabulary size, -f's llama.cpp newline rule. And llama-ab's --depth plumbing on the CPU (measure/ab_run.h):
// the tokens of a depth, the refusal when depth + steps do not fit, a pass at depth giving the ids of the full prefill,
// and the depth carried by the report, JSON and CSV.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/prompt_input.h"
#include "measure/ab_render.h"
#include "measure/ab_run.h"
#include "measure/ab_stats.h"
#include "models/model.h"
#include "ab_depth_check.h"      // expect_depth_pass_matches_full_prefill
#include "ab_spec_check.h"       // expect_spec_pass_matches_plain
#include "models_test_util.h"  // TempDir, write_file, expect_error

namespace {

namespace fs = std::filesystem;
using llm_test::expect_error;
using llm_test::TempDir;
using llm_test::write_file;

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

// The message of the llm::Error f throws ("" when it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const llm::Error& e) {
    return e.what();
  }
  return "";
}

// ---- id lists ----

TEST(PromptIds, CommasWhitespaceAndNewlinesMix) {
  const std::vector<int> want = {1, 2, 3, 4, 5, 6, 7, 8};
  for (const char* text : {"1,2,3,4,5,6,7,8", "1 2 3 4 5 6 7 8", "1\n2\n3\n4\n5\n6\n7\n8\n", "1, 2 ,3\t4\r\n5,\n6 ,\n 7\n\n8,",
                           "  1,2\n3 4,\t5\r\n6,7 , 8  \n"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(llm::parse_token_ids(text, "--prompt-ids", 256), want);
  }
  EXPECT_EQ(llm::parse_token_ids("0", "--prompt-ids", 1), std::vector<int>{0});
  EXPECT_EQ(llm::parse_token_ids("255", "--prompt-ids", 256), std::vector<int>{255});
  // Unbounded (the vocabulary checked later): up to 2^31 - 1.
  EXPECT_EQ(llm::parse_token_ids("2147483647", "--prompt-ids", 0), std::vector<int>{2147483647});
}

TEST(PromptIds, EveryBadItemIsNamedWithItsPlace) {
  const std::string s = "--prompt-ids";
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("1,2,x7", s, 256); }),
            "--prompt-ids: 'x7' (item 3) is not a token id in [0, 256)");
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("1\n2\n3 abc 5\n", "--prompt-ids @ids.txt", 256); }),
            "--prompt-ids @ids.txt: 'abc' (item 4, line 3) is not a token id in [0, 256)");
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("255,256", s, 256); }),
            "--prompt-ids: '256' (item 2) is not a token id in [0, 256)");
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("-1", s, 256); }),
            "--prompt-ids: '-1' (item 1) is not a token id in [0, 256)");
  for (const char* bad : {"1.5", "+3", "0x10", "1e3", "3;4", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(error_of([&] { llm::parse_token_ids(std::string("7 ") + bad, s, 256); }),
              std::string("--prompt-ids: '") + bad + "' (item 2) is not a token id in [0, 256)");
  }
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("2147483648", s, 0); }),
            "--prompt-ids: '2147483648' (item 1) is not a token id (decimal ids separated by commas or whitespace)");
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("1,,2", s, 256); }),
            "--prompt-ids: empty id between two commas (after item 1)");
  EXPECT_EQ(error_of([&] { llm::parse_token_ids("1\n2 ,\n , 3", s, 256); }),
            "--prompt-ids: empty id between two commas (after item 2, line 3)");
  EXPECT_EQ(error_of([&] { llm::parse_token_ids(",1", s, 256); }), "--prompt-ids: empty id before the first comma");
  for (const char* none : {"", " ", "\n\n", " \t\r\n"}) {
    SCOPED_TRACE(none);
    EXPECT_EQ(error_of([&] { llm::parse_token_ids(none, s, 256); }), "--prompt-ids: no ids given");
  }
  // A long item is shown cut, its size said; control bytes escaped.
  const std::string msg = error_of([&] { llm::parse_token_ids(std::string(5000, 'z') + "\x1b", s, 256); });
  EXPECT_NE(msg.find("... (5001 bytes)"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 200u) << msg;
}

TEST(PromptIds, CheckAgainstTheVocabularyNamesTheItem) {
  EXPECT_NO_THROW(llm::check_token_ids({0, 5, 255}, "--prompt-ids", 256));
  EXPECT_EQ(error_of([] { llm::check_token_ids({0, 5, 256, 7}, "--prompt-ids @f", 256); }),
            "--prompt-ids @f: '256' (item 3) is not a token id in [0, 256)");
  EXPECT_EQ(error_of([] { llm::check_token_ids({-4}, "--prompt-ids", 256); }),
            "--prompt-ids: '-4' (item 1) is not a token id in [0, 256)");
}

// 32,768 ids (Llama 3's vocabulary bounds them): more bytes than one argv string may hold (MAX_ARG_STRLEN, 128 KiB),
// read from a file, separators mixed.
TEST(PromptIds, A32KIdFileIsReadWhole) {
  const int kVocab = 128256, kIds = 32768;
  TempDir tmp;
  std::vector<int> want;
  std::string text;
  for (int i = 0; i < kIds; ++i) {
    want.push_back(int((int64_t(i) * 7919 + 128000) % kVocab));
    text += std::to_string(want.back());
    text += i % 16 == 15 ? ",\n" : i % 3 ? ", " : " ";
  }
  ASSERT_GT(text.size(), size_t(128 * 1024));
  write_file(tmp.path() / "ids.txt", text);
  EXPECT_EQ(llm::prompt_ids_from_arg("@" + tmp.str("ids.txt"), kVocab), want);
  // One id out of range deep in the file: named with its item and line.
  const std::string path = tmp.str("bad.txt");
  write_file(path, text + "128256\n");
  EXPECT_EQ(error_of([&] { llm::prompt_ids_from_arg("@" + path, kVocab); }),
            "--prompt-ids @" + path + ": '128256' (item 32769, line 2049) is not a token id in [0, 128256)");
}

TEST(PromptIds, TheArgumentIsTheListOrAFile) {
  TempDir tmp;
  write_file(tmp.path() / "ids.txt", "5 6\n7\n");
  const llm::PromptIdsArg f = llm::read_prompt_ids_arg("@" + tmp.str("ids.txt"));
  EXPECT_EQ(f.source, "--prompt-ids @" + tmp.str("ids.txt"));
  EXPECT_EQ(f.text, "5 6\n7\n");
  const llm::PromptIdsArg l = llm::read_prompt_ids_arg("1,2");
  EXPECT_EQ(l.source, "--prompt-ids");
  EXPECT_EQ(l.text, "1,2");
  EXPECT_EQ(llm::prompt_ids_from_arg("@" + tmp.str("ids.txt"), 8), (std::vector<int>{5, 6, 7}));
  EXPECT_EQ(error_of([] { llm::read_prompt_ids_arg("@"); }),
            "--prompt-ids @: no file name after '@' (use --prompt-ids @FILE)");
  const std::string missing = tmp.str("missing.txt");
  EXPECT_EQ(error_of([&] { llm::read_prompt_ids_arg("@" + missing); }),
            "--prompt-ids: cannot read " + missing + ": No such file or directory");
  write_file(tmp.path() / "empty.txt", "");
  EXPECT_EQ(error_of([&] { llm::read_prompt_ids_arg("@" + tmp.str("empty.txt")); }),
            "--prompt-ids: " + tmp.str("empty.txt") + " is empty");
}

// ---- prompt files ----

TEST(PromptFile, OneTrailingNewlineIsRemovedAsLlamaCpp) {
  TempDir tmp;
  const auto read = [&](const std::string& bytes) {
    write_file(tmp.path() / "p.txt", bytes);
    return llm::read_prompt_file(tmp.str("p.txt"));
  };
  EXPECT_EQ(read("Once upon a time\n"), "Once upon a time");
  EXPECT_EQ(read("Once upon a time"), "Once upon a time");
  EXPECT_EQ(read("two lines\nend\n\n"), "two lines\nend\n");
  EXPECT_EQ(read("crlf\r\n"), "crlf\r");  // llama.cpp removes '\n' only
  EXPECT_EQ(read(std::string("nul\0byte", 8)), std::string("nul\0byte", 8));
  const std::string big(100 * 1024, 'a');
  EXPECT_EQ(read(big + "\n"), big);
}

TEST(PromptFile, MissingEmptyAndDirectoryAreRefusedByName) {
  TempDir tmp;
  const std::string missing = tmp.str("no/such.txt");
  EXPECT_EQ(error_of([&] { llm::read_prompt_file(missing); }),
            "--file: cannot read " + missing + ": No such file or directory");
  write_file(tmp.path() / "empty.txt", "");
  EXPECT_EQ(error_of([&] { llm::read_prompt_file(tmp.str("empty.txt")); }),
            "--file: " + tmp.str("empty.txt") + " is empty");
  write_file(tmp.path() / "nl.txt", "\n");
  EXPECT_EQ(error_of([&] { llm::read_prompt_file(tmp.str("nl.txt")); }),
            "--file: " + tmp.str("nl.txt") + " is empty (one newline, no text)");
  EXPECT_EQ(error_of([&] { llm::read_prompt_file(tmp.str()); }), "--file: " + tmp.str() + " is a directory");
  EXPECT_EQ(error_of([&] { llm::read_prompt_file(""); }), "--file: no file name given");
  if (fs::exists("/dev/zero")) {  // a file that never ends stops at the cap
    EXPECT_EQ(error_of([] { llm::read_input_file("--file", "/dev/zero"); }),
              "--file: /dev/zero is larger than " + std::to_string(llm::kMaxPromptFileBytes) + " bytes; not a prompt");
  }
}

// ---- llama-ab --depth, on the CPU ----

TEST(AbDepth, TokensAreThePromptRepeatedAndCut) {
  EXPECT_EQ(llm::ab_depth_tokens({1, 2, 3}, 7), (std::vector<int>{1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(llm::ab_depth_tokens({1, 2, 3}, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(llm::ab_depth_tokens({1, 2, 3}, 0), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(llm::ab_depth_tokens({9}, 32768).size(), 32768u);
  EXPECT_THROW(llm::ab_depth_tokens({}, 4), llm::Error);
  EXPECT_THROW(llm::ab_depth_tokens({1}, -1), llm::Error);
}

TEST(AbDepth, DepthPlusStepsBeyondTheContextIsOneLine) {
  EXPECT_EQ(llm::ab_context_refusal(16, 300, 64, 256, true), "--depth 300 and -n 64 need 364 positions, more than --ctx-size 256");
  EXPECT_EQ(llm::ab_context_refusal(16, 131072, 128, 131072, false),
            "--depth 131072 and -n 128 need 131200 positions, more than the model's maximum of 131072");
  EXPECT_EQ(llm::ab_context_refusal(20, 0, 64, 80, true),
            "the prompt (20 tokens) and -n 64 need 84 positions, more than --ctx-size 80");
  EXPECT_EQ(llm::ab_context_refusal(16, 192, 64, 256, true), "");  // exactly full
  EXPECT_EQ(llm::ab_context_refusal(16, 0, 64, 80, true), "");
  EXPECT_EQ(llm::ab_context_refusal(1000, 10, 64, 80, true), "");  // at depth the prompt's length does not count
  EXPECT_NE(llm::ab_context_refusal(0, 1 << 24, 1000000, 1 << 24, false), "");  // no int overflow
}

// A pass at depth N (the context prefilled once, then only its last token re-prefilled at N - 1) samples the ids of a
// pass that prefills all N tokens itself (tests/cpu/ab_depth_check.h; the GPU test runs the same check).
TEST(AbDepth, APassAtDepthContinuesTheContextPrefilledOnce) {
  ASSERT_TRUE(fs::exists(kStories + "/stories260K.bin")) << "stories260K is missing from the checkout: " << kStories;
  const llm::Model model = llm::load_model(kStories + "/stories260K.bin");
  llm::BackendOptions bo;
  bo.device = "cpu";
  bo.ctx_size = 128;
  llm_test::expect_depth_pass_matches_full_prefill(model, bo, {1, 403, 407, 261, 378, 429, 261, 287}, 70, 24);
}

llm::AbReportData depth_report(int depth) {
  llm::AbReportData d;
  d.model = "synthetic:llama3.1-8b";
  d.device = "NVIDIA H200";
  d.sm_count = 132;
  d.max_warps_per_sm = 64;
  d.prompt_tokens = 16;
  d.depth = depth;
  d.depth_prefill_ms = 2000.0;
  d.n_decode = 128;
  d.repeats = 2;
  d.warmup = 1;
  d.gemv_bytes_per_token = 16000000000LL;
  d.projections = {{"q", 4096, 4096, 32}, {"head", 128256, 4096, 1}};
  d.roofline_gbps = {4000, 4000};
  d.roofline_method = "stream read";
  d.profiling_method = "events";
  llm::AbMappingRun r;
  r.mapping = "warp-r2";
  r.ms_per_token = {5.0, 5.0};
  r.profiled_ms_per_token = {5.5, 5.5};
  llm::PartMs parts{};
  parts[llm::ProfileParts::kQ] = 1.0;
  parts[llm::ProfileParts::kOther] = 4.0;
  r.part_ms = {parts, parts};
  r.tokens_matching_first = 129;
  d.runs.push_back(r);
  return d;
}

TEST(AbDepth, TheReportJsonAndCsvRecordTheDepth) {
  const llm::AbReportData d = depth_report(8192);
  const llm::AbSummary s = llm::summarize_ab(d);
  const std::string md = llm::ab_markdown(d, s);
  EXPECT_NE(md.find("| warp-r2 | tg128 @ d8192 |"), std::string::npos) << md;
  EXPECT_NE(md.find("a context of 8192 tokens (the prompt's 16 ids repeated; prefilled once in 2000.0 ms = 4096 "
                    "tokens/s), then exactly 128 greedy decode steps from position 8192"),
            std::string::npos)
      << md;
  const llm::AbReportData back = llm::ab_data_from_json(llm::ab_json(d, s));
  EXPECT_EQ(back.depth, 8192);
  EXPECT_DOUBLE_EQ(back.depth_prefill_ms, 2000.0);
  const std::string csv = llm::ab_csv(d, s);
  // The depth column, and the decode path's after it (measure/ab_render.cpp ab_csv).
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find(",tokens_matching_first,depth,decode,"), std::string::npos) << header;
  EXPECT_NE(csv.find(",129,8192,graph,"), std::string::npos) << csv;
  // Without a depth: the plain test name, and JSON written before --depth existed reads back as depth 0.
  const llm::AbReportData d0 = depth_report(0);
  const std::string md0 = llm::ab_markdown(d0, llm::summarize_ab(d0));
  EXPECT_NE(md0.find("| warp-r2 | tg128 |"), std::string::npos) << md0;
  EXPECT_NE(md0.find("- protocol: prompt of 16 tokens, then exactly 128 greedy decode steps (EOS ignored"),
            std::string::npos)
      << md0;
  std::string old = llm::ab_json(d, s);
  for (const char* key : {"\"depth\": 8192,", "\"depth_prefill_ms\": 2000.0,"}) {
    const size_t at = old.find(key);
    ASSERT_NE(at, std::string::npos) << key << " not in\n" << old;
    old.erase(at, std::string(key).size());
  }
  EXPECT_EQ(llm::ab_data_from_json(old).depth, 0);
}

// llama-ab --spec's pass (tests/cpu/ab_spec_check.h; the GPU test runs the same check): lookup drafting gives the plain
// pass's greedy tokens, at depth 0 and at a depth whose context is the drafter's history.
TEST(AbSpec, ALookupPassProducesThePlainPassTokens) {
  ASSERT_TRUE(fs::exists(kStories + "/stories260K.bin")) << "stories260K is missing from the checkout: " << kStories;
  const llm::Model model = llm::load_model(kStories + "/stories260K.bin");
  llm::BackendOptions bo;
  bo.device = "cpu";
  bo.ctx_size = 160;
  const std::vector<int> story = {1, 403, 407, 261, 378, 429, 261, 287};
  std::vector<int> repeated;
  for (int i = 0; i < 4; ++i) repeated.insert(repeated.end(), story.begin() + (i ? 1 : 0), story.end());
  {
    SCOPED_TRACE("depth 0");
    llm_test::expect_spec_pass_matches_plain(model, bo, repeated, 0, 40, true);
  }
  {
    SCOPED_TRACE("depth 70");
    llm_test::expect_spec_pass_matches_plain(model, bo, repeated, 70, 40, false);
  }
}

// The speculative passes' figures reach the markdown (llama.cpp's draft line beside the speed-up) and survive the JSON;
// JSON written before --spec reads back without them.
TEST(AbSpec, TheReportAndJsonCarryTheSpeculativePasses) {
  llm::AbReportData d = depth_report(0);
  llm::AbReportData::SpecRun sp;
  sp.drafter = "lookup";
  sp.mapping = "warp-r2";
  sp.ms_per_token = 2.5;
  sp.plain_ms_per_token = 5.0;
  sp.drafted = 120;
  sp.accepted = 90;
  sp.steps = 50;
  sp.tokens = 129;
  sp.tokens_matching_plain = 129;
  d.spec.push_back(sp);
  d.verify.push_back({8, 6.0, 5.0});
  const llm::AbSummary s = llm::summarize_ab(d);
  const std::string md = llm::ab_markdown(d, s);
  EXPECT_NE(md.find("Speculative decoding (--spec lookup, warp-r2, graph path; medians of 2): 400.0 tokens/s against "
                    "200.0 plain (2.00x); n_drafted = 120, n_accept = 90, accept = 75.000%, 50 steps for 129 tokens; "
                    "129/129 leading tokens equal to the plain pass's."),
            std::string::npos)
      << md;
  const std::string text = llm::ab_json(d, s);
  const llm::AbReportData back = llm::ab_data_from_json(text);
  ASSERT_EQ(back.spec.size(), 1u);
  EXPECT_EQ(back.spec[0].drafter, "lookup");
  EXPECT_EQ(back.spec[0].mapping, "warp-r2");
  EXPECT_DOUBLE_EQ(back.spec[0].ms_per_token, 2.5);
  EXPECT_DOUBLE_EQ(back.spec[0].plain_ms_per_token, 5.0);
  EXPECT_EQ(back.spec[0].drafted, 120);
  EXPECT_EQ(back.spec[0].accepted, 90);
  EXPECT_EQ(back.spec[0].steps, 50);
  EXPECT_EQ(back.spec[0].tokens, 129);
  EXPECT_EQ(back.spec[0].tokens_matching_plain, 129);
  ASSERT_EQ(back.verify.size(), 1u);
  EXPECT_EQ(back.verify[0].k, 8);
  EXPECT_DOUBLE_EQ(back.verify[0].ms, 6.0);
  const llm::AbReportData none = depth_report(0);
  const std::string md0 = llm::ab_markdown(none, llm::summarize_ab(none));
  EXPECT_EQ(md0.find("Speculative decoding"), std::string::npos) << md0;
  nlohmann::json j = nlohmann::json::parse(text);
  j["data"].erase("spec");
  j["data"].erase("verify");
  EXPECT_TRUE(llm::ab_data_from_json(j.dump()).spec.empty());
}

}  // namespace
