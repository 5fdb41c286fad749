// spec-sim: speculative decoding replayed from recorded greedy runs (measure/spec_sim.h): per run, the verify passes
// the prompt-lookup drafter and the adaptive draft length ask for, the acceptance, and the speed-up a device's
// measured verify costs give. Drafting policies compared in milliseconds, not in model runs.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "core/error.h"
#include "measure/spec_sim.h"

namespace {

const char* kUsage =
    "usage: spec-sim --traces DIR [options]\n"
    "\n"
    "Replays each recorded greedy run in DIR (*.ids: run-llama --temp 0 --ignore-eos --dump-ids FILE) through the\n"
    "speculative loop with prompt lookup, and prints per run: verify passes, drafted and accepted tokens, the mean\n"
    "tokens per pass, and the speed-up over plain decoding that the verify costs give (tokens / the passes' cost in\n"
    "decode steps; a step with no draft is a plain decode step). Greedy speculation emits the recorded tokens (the\n"
    "'same' column checks it).\n";

struct Args {
  std::string traces, costs = "1:1.23,4:1.38,8:1.78";
  llm::DraftCosts draft_costs;  // --draft-costs: what the loop's adaptive length weighs a pass by
  int vocab = 49152, draft_max = 8, draft_min = 1, ngram_min = llm::kLookupNgramMin, ngram_max = llm::kLookupNgramMax;
  bool summary = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  llm::cli::Options o(kUsage);
  o.text("--traces", "DIR", &a.traces, "directory of recorded runs (*.ids)");
  o.integer("--vocab", "N", &a.vocab, 1, 1 << 24, "the model's vocabulary size (ids are checked against it)");
  o.text("--costs", "LIST", &a.costs,
         "a verify pass of N tokens costs C decode steps: N:C pairs, N ascending; the default was measured on "
         "SmolLM2's shape in Q4_1 on an H100 by llama-ab --verify-k 1,4,8");
  o.custom("--draft-costs", "P:T", [&a](const std::string& flag, const std::string& t) {
    const size_t colon = t.find(':');
    char* e1 = nullptr;
    char* e2 = nullptr;
    const std::string p = t.substr(0, colon), q = colon == std::string::npos ? "" : t.substr(colon + 1);
    a.draft_costs.pass = std::strtod(p.c_str(), &e1);
    a.draft_costs.per_token = std::strtod(q.c_str(), &e2);
    if (colon == std::string::npos || p.empty() || q.empty() || *e1 || *e2 || !(a.draft_costs.pass > 0) ||
        !(a.draft_costs.per_token >= 0) || a.draft_costs.pass > 100 || a.draft_costs.per_token > 100)
      llm::cli::usage_error(flag + ": '" + t + "' is not PASS:PER_TOKEN (decode steps, PASS > 0, PER_TOKEN >= 0)");
  }, "the costs the loop's adaptive draft length weighs a verify pass by: PASS decode steps plus PER_TOKEN per draft "
     "(engine/speculative.h DraftCosts)")
      .default_is("the loop's default, 1.25:0.1");
  o.integer("--draft-max", "N", &a.draft_max, 1, 64, "tokens drafted per step at most");
  o.integer("--draft-min", "N", &a.draft_min, 0, 64, "the adaptive draft length's floor");
  o.integer("--ngram-min", "N", &a.ngram_min, 1, 64, "shortest n-gram prompt lookup matches");
  o.integer("--ngram-max", "N", &a.ngram_max, 1, 64, "longest n-gram prompt lookup matches");
  o.flag("--summary", &a.summary, "one line for all runs instead of the table");
  o.parse(argc, argv);
  if (a.traces.empty()) llm::cli::usage_error("--traces DIR is required");
  if (a.ngram_min > a.ngram_max)
    llm::cli::usage_error("--ngram-min " + std::to_string(a.ngram_min) + " is above --ngram-max " +
                          std::to_string(a.ngram_max));
  return a;
}

int run(const Args& a) {
  const llm::VerifyCosts costs = llm::parse_verify_costs(a.costs);
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(a.traces, ec))
    if (e.path().extension() == ".ids") files.push_back(e.path().string());
  if (ec) llm::fail("cannot read the trace directory ", a.traces, ": ", ec.message());
  if (files.empty()) llm::fail("no *.ids traces in ", a.traces);
  std::sort(files.begin(), files.end());
  llm::SpecOptions spec;
  spec.draft_max = a.draft_max;
  spec.draft_min = a.draft_min;
  spec.costs = a.draft_costs;
  int tokens = 0, differ = 0;
  double cost = 0;
  llm::SpecStats all;
  if (!a.summary)
    std::printf("| run | tokens | passes | drafted | accepted | accept | tokens/pass | speed-up | same |\n"
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const std::string& f : files) {
    const llm::SpecTrace t = llm::read_spec_trace(f);
    llm::LookupDrafter drafter(a.ngram_max, a.ngram_min);
    const llm::SpecSimResult r = llm::simulate_spec(t, a.vocab, drafter, spec, costs);
    tokens += r.tokens;
    cost += r.cost_steps;
    all.add(r.stats);
    differ += r.same ? 0 : 1;
    if (!a.summary)
      std::printf("| %s | %d | %lld | %lld | %lld | %.1f%% | %.2f | %.2fx | %s |\n", r.name.c_str(), r.tokens,
                  (long long)r.stats.steps, (long long)r.stats.drafted, (long long)r.stats.accepted,
                  100.0 * r.stats.accept_rate(), double(r.tokens) / double(r.stats.steps), r.speedup(),
                  r.same ? "yes" : "NO");
  }
  std::printf("%s%zu runs, %d tokens: %lld passes, %.1f%% of %lld drafts accepted, %.2f tokens/pass, speed-up "
              "%.2fx (draft max %d min %d, n-grams %d..%d, draft costs %g:%g, verify costs %s; a step with no draft: a plain "
              "step, 1)\n",
              a.summary ? "" : "\n", files.size(), tokens, (long long)all.steps, 100.0 * all.accept_rate(),
              (long long)all.drafted, double(tokens) / double(all.steps), double(tokens) / cost, a.draft_max,
              a.draft_min, a.ngram_min, a.ngram_max, a.draft_costs.pass, a.draft_costs.per_token, a.costs.c_str());
  if (differ) llm::fail(differ, " replays did not emit their recorded tokens");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("spec-sim", argc, argv, parse_args, run); }
