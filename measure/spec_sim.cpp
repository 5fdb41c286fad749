#include "measure/spec_sim.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.h"
#include "engine/decode_loop.h"
#include "engine/prompt_input.h"  // parse_token_ids, check_token_ids

namespace llm {

SpecTrace read_spec_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open trace ", path);
  std::string a, b;
  if (!std::getline(in, a) || !std::getline(in, b))
    fail(path, ": a trace is two lines (prompt ids, generated ids; run-llama --dump-ids)");
  SpecTrace t;
  t.name = path.substr(path.find_last_of('/') + 1);
  if (const size_t dot = t.name.rfind('.'); dot != std::string::npos && dot > 0) t.name.resize(dot);
  t.prompt = parse_token_ids(a, path + ": line 1", 0);  // the vocabulary is checked by the replay's backend
  t.generated = parse_token_ids(b, path + ": line 2", 0);
  if (t.prompt.empty()) fail(path, ": the prompt has no ids");
  if (t.generated.empty()) fail(path, ": no generated ids");
  return t;
}

TraceBackend::TraceBackend(const SpecTrace& trace, int vocab) : vocab_(vocab) {
  ids_ = trace.prompt;
  ids_.insert(ids_.end(), trace.generated.begin(), trace.generated.end());
  check_token_ids(ids_, "trace " + trace.name, vocab);
}

int TraceBackend::sample(const SamplerParams& p, uint64_t) {
  if (!is_greedy(p)) fail("trace backend: greedy runs only (a recorded run has no distribution to sample)");
  return next_after(pos_);
}

std::vector<float> TraceBackend::logits() {
  std::vector<float> l(size_t(vocab_), 0.0f);
  l[size_t(next_after(pos_))] = 1.0f;
  return l;
}

std::vector<float> TraceBackend::verify(const int*, int, int) {
  fail("trace backend: greedy runs only (verify_argmax)");
}

std::vector<int> TraceBackend::verify_argmax(const int*, int n, int pos, int, std::vector<float>* margins) {
  if (n < 1) fail("trace backend: a verify pass of ", n, " tokens");
  if (margins) margins->assign(size_t(n), INFINITY);  // a recorded run has no logits: no row is near a tie
  if (passes_.size() <= size_t(n)) passes_.resize(size_t(n) + 1, 0);
  passes_[size_t(n)]++;
  std::vector<int> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = next_after(pos + i);
  pos_ = pos + n - 1;
  return ids;
}

double VerifyCosts::at(int n) const {
  if (points.empty()) fail("verify costs: no points");
  if (points.size() == 1 || n <= points.front().first) return points.front().second;
  for (size_t i = 1; i < points.size(); ++i)
    if (n <= points[i].first || i + 1 == points.size()) {
      const auto [n0, c0] = points[i - 1];
      const auto [n1, c1] = points[i];
      return c0 + (c1 - c0) * double(n - n0) / double(n1 - n0);
    }
  return points.back().second;
}

VerifyCosts parse_verify_costs(const std::string& text) {
  VerifyCosts c;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t colon = item.find(':');
    int n = 0;
    double cost = 0;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      size_t used = 0;
      n = std::stoi(item.substr(0, colon), &used);
      if (used != colon) throw std::invalid_argument("n");
      const std::string rest = item.substr(colon + 1);
      cost = std::stod(rest, &used);
      if (used != rest.size()) throw std::invalid_argument("cost");
    } catch (const std::exception&) {
      fail("verify costs '", text, "': '", item, "' is not N:COST (e.g. 1:1.23,4:1.38,8:1.78)");
    }
    if (n < 1 || !(cost > 0) || (!c.points.empty() && n <= c.points.back().first))
      fail("verify costs '", text, "': '", item, "' needs N >= 1 ascending and COST > 0");
    c.points.emplace_back(n, cost);
  }
  if (c.points.empty()) fail("verify costs '", text, "': no N:COST pairs");
  return c;
}

SpecSimResult simulate_spec(const SpecTrace& trace, int vocab, Drafter& drafter, const SpecOptions& spec,
                            const VerifyCosts& costs) {
  TraceBackend target(trace, vocab);
  DecodeLoopOptions opt;
  opt.max_new = int(trace.generated.size());
  opt.sampler.temperature = 0.0f;
  SpecSimResult r;
  r.name = trace.name;
  const DecodeLoopResult out = speculative_loop(target, drafter, trace.prompt, opt, spec, &r.stats);
  r.tokens = int(out.tokens.size());
  r.same = out.tokens == trace.generated;
  r.passes_by_tokens = target.passes_by_tokens();
  r.decode_steps = target.decode_steps();
  r.cost_steps = double(r.decode_steps);
  for (size_t n = 1; n < r.passes_by_tokens.size(); ++n)
    r.cost_steps += double(r.passes_by_tokens[n]) * costs.at(int(n));
  return r;
}

}  // namespace llm
