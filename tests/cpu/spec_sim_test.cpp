// The speculative replay (measure/spec_sim.h): a recorded greedy run replayed through the speculative loop counts the
// same verify passes, drafts and acceptances as the loop run against the model; the verify-cost table and the trace
// files' refusals.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/decode_loop.h"
#include "engine/speculative.h"
#include "measure/spec_sim.h"
#include "models/model.h"
#include "models_test_util.h"  // expect_error, TempDir
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";

TEST(SpecSim, ReplayCountsWhatTheLoopAgainstTheModelCounts) {
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  auto tok = llm::load_tokenizer(m, kStories + "/tok512.model");
  const std::vector<int> prompt = tok->encode("Once upon a time, there was a little girl named Lily. Lily", true);
  llm::DecodeLoopOptions opt;
  opt.max_new = 150;
  opt.sampler.temperature = 0.0f;
  auto plain_backend = llm::make_cpu_backend(m, llm::BackendOptions{});
  const llm::DecodeLoopResult plain = llm::decode_loop(*plain_backend, prompt, opt);
  ASSERT_EQ(plain.tokens.size(), 150u);

  for (int draft_max : {1, 4, 8}) {
    SCOPED_TRACE("draft max " + std::to_string(draft_max));
    llm::SpecOptions spec;
    spec.draft_max = draft_max;
    auto target = llm::make_cpu_backend(m, llm::BackendOptions{});
    llm::LookupDrafter lookup;
    llm::SpecStats real;
    const llm::DecodeLoopResult got = llm::speculative_loop(*target, lookup, prompt, opt, spec, &real);
    ASSERT_EQ(got.tokens, plain.tokens) << "the model's speculative run left its greedy tokens";
    ASSERT_GT(real.drafted, 0);

    llm::LookupDrafter replay_lookup;
    const llm::SpecTrace trace{"stories", prompt, plain.tokens};
    const llm::SpecSimResult sim =
        llm::simulate_spec(trace, m.config.vocab_size, replay_lookup, spec, llm::parse_verify_costs("1:1,8:2"));
    EXPECT_TRUE(sim.same);
    EXPECT_EQ(sim.tokens, 150);
    EXPECT_EQ(sim.stats.steps, real.steps);
    EXPECT_EQ(sim.stats.drafted, real.drafted);
    EXPECT_EQ(sim.stats.accepted, real.accepted);
    // Passes by token count add up to the steps and the drafts; their cost is the table's. The first step takes the
    // prefill's logits for its pending token: with drafts a pass of the drafts alone (n drafts in a pass of n), else
    // only a sample of them (no pass, no decode step).
    long long passes = sim.decode_steps, drafts = 0;
    double cost = double(sim.decode_steps);
    for (size_t n = 1; n < sim.passes_by_tokens.size(); ++n) {
      passes += sim.passes_by_tokens[n];
      drafts += sim.passes_by_tokens[n] * (long long)(n - 1);
      cost += double(sim.passes_by_tokens[n]) * (1.0 + double(n - 1) / 7.0);
    }
    const bool first_drafted = passes == real.steps;
    EXPECT_EQ(passes + (first_drafted ? 0 : 1), real.steps);
    EXPECT_EQ(drafts + (first_drafted ? 1 : 0), real.drafted);
    EXPECT_NEAR(sim.cost_steps, cost, 1e-9);
    EXPECT_LE(int(sim.passes_by_tokens.size()), draft_max + 2);
  }
}

TEST(SpecSim, DraftsTheRecordDoesNotHoldAreRejected) {
  // A drafter that proposes what the record does not hold is judged against the record: the replay still emits the
  // recorded tokens (the drafts are rejected), so `same` holds and acceptance is what it is.
  const llm::SpecTrace t{"t", {1, 2, 3, 1, 2}, {3, 1, 2, 3, 1, 2, 9, 9, 9, 9}};
  llm::LookupDrafter lookup;
  const llm::SpecSimResult r = llm::simulate_spec(t, 16, lookup, llm::SpecOptions{}, llm::parse_verify_costs("1:1"));
  EXPECT_TRUE(r.same);
  EXPECT_EQ(r.tokens, 10);
  EXPECT_GT(r.stats.accepted, 0);              // 3 1 2 3 1 2 follow the repeated pattern
  EXPECT_LT(r.stats.accepted, r.stats.drafted);  // 9 9 9 9 do not
  // Ids outside the vocabulary are refused by name.
  llm_test::expect_error([&] { llm::TraceBackend b(t, 5); }, {"trace t: '9' (item 12) is not a token id in [0, 5)"});
}

TEST(SpecSim, TheDefaultLookupBeatsSingleTokenMatchesOnTheCommittedTraces) {
  // bench/spec_traces: 22 recorded SmolLM2 runs. Under the loop costs fitted to an H100's spec-bench run (a pass 1.459
  // decode steps + 0.239 per draft token), the default n-gram range (kLookupNgramMin..Max) must beat 1..3, and every
  // replay must emit its recorded tokens.
  const std::string dir = std::string(LLM_SOURCE_DIR) + "/bench/spec_traces/smollm2-135m-instruct-q4_1-cpu";
  const llm::VerifyCosts costs = llm::parse_verify_costs("1:1.459,9:3.371");
  double tokens = 0, cost_default = 0, cost_short = 0;
  int runs = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".ids") continue;
    const llm::SpecTrace t = llm::read_spec_trace(e.path().string());
    llm::LookupDrafter def, short_ngrams(3, 1);
    const llm::SpecSimResult a = llm::simulate_spec(t, 49152, def, llm::SpecOptions{}, costs);
    const llm::SpecSimResult b = llm::simulate_spec(t, 49152, short_ngrams, llm::SpecOptions{}, costs);
    ASSERT_TRUE(a.same && b.same) << t.name;
    tokens += a.tokens;
    cost_default += a.cost_steps;
    cost_short += b.cost_steps;
    ++runs;
  }
  ASSERT_EQ(runs, 22);
  std::printf("committed traces: default lookup %.3fx, n-grams 1..3 %.3fx\n", tokens / cost_default,
              tokens / cost_short);
  EXPECT_GT(tokens / cost_default, 1.05 * tokens / cost_short);
}

TEST(SpecSim, VerifyCostsInterpolateAndRefuseBadTables) {
  const llm::VerifyCosts c = llm::parse_verify_costs("1:1.23,4:1.38,8:1.78");
  EXPECT_DOUBLE_EQ(c.at(1), 1.23);
  EXPECT_NEAR(c.at(2), 1.28, 1e-12);
  EXPECT_DOUBLE_EQ(c.at(4), 1.38);
  EXPECT_NEAR(c.at(6), 1.58, 1e-12);
  EXPECT_NEAR(c.at(10), 1.98, 1e-12);  // extrapolated from the last two points
  for (const char* bad : {"", "1", "1:", "x:1", "1:1,1:2", "2:1,1:1", "0:1", "1:-1", "1:1.2x"})
    llm_test::expect_error([&] { llm::parse_verify_costs(bad); }, {"verify costs '" + std::string(bad) + "'"});
}

TEST(SpecSim, TraceFilesAreReadOrRefusedByName) {
  llm_test::TempDir dir;
  const std::string good = dir.str("run.ids"), bad = dir.str("bad.ids"), short_file = dir.str("short.ids");
  llm_test::write_file(good, "1 2 3\n4 5\n");
  llm_test::write_file(bad, "1 2 x3\n4\n");
  llm_test::write_file(short_file, "1 2 3\n");
  const llm::SpecTrace t = llm::read_spec_trace(good);
  EXPECT_EQ(t.name, "run");
  EXPECT_EQ(t.prompt, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.generated, (std::vector<int>{4, 5}));
  llm_test::expect_error([&] { llm::read_spec_trace(bad); }, {bad + ": line 1", "'x3'", "is not a token id"});
  llm_test::expect_error([&] { llm::read_spec_trace(short_file); }, {short_file, "two lines"});
  llm_test::expect_error([&] { llm::read_spec_trace(dir.str("none.ids")); }, {"cannot open trace", "none.ids"});
}

}  // namespace
