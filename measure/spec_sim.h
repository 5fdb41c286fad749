// Speculative decoding without the model: a recorded greedy run (its prompt and generated ids, run-llama --dump-ids)
// replayed through engine/speculative.h's own loop and drafters, and the verify passes it asks for priced by a
// device's measured verify costs (llama-ab --verify-k). Greedy speculation emits the greedy tokens, so the replay's
// verify passes, draft lengths and acceptance are those of a real run; what it leaves out is the drafting time on the
// host and where a device's batched rows round another way (near-ties).
#pragma once
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/speculative.h"

namespace llm {

// One recorded greedy run.
struct SpecTrace {
  std::string name;
  std::vector<int> prompt, generated;
};

// "PROMPT IDS\nGENERATED IDS\n" (run-llama --dump-ids); fails naming the file on a missing or malformed one.
SpecTrace read_spec_trace(const std::string& path);

// The target of a replay: verify_argmax answers with the recorded next ids (a row after a draft that left the record
// is never judged: the loop stops at the first mismatch). Greedy only: verify() and sample() at temperature > 0 fail.
// It counts the verify passes by their token count.
class TraceBackend final : public Backend {
 public:
  TraceBackend(const SpecTrace& trace, int vocab);
  std::string name() const override { return "trace"; }
  int ctx_size() const override { return int(ids_.size()) + 64; }
  void prefill(const int*, int n, int pos) override { pos_ = pos + n - 1; }
  void decode(int, int pos) override {
    pos_ = pos;
    ++decode_steps_;
  }
  int sample(const SamplerParams& p, uint64_t step) override;
  std::vector<float> logits() override;
  bool supports_verify() const override { return true; }
  std::vector<float> verify(const int* tokens, int n, int pos) override;
  std::vector<int> verify_argmax(const int* tokens, int n, int pos, int vocab_limit,
                                 std::vector<float>* margins = nullptr) override;
  void rewind(int) override {}
  // passes_by_tokens()[n]: verify passes of n tokens (the pending one and n - 1 drafts; the first step's, the drafts
  // alone: its pending token is the prompt's last, prefilled); decode_steps(): plain steps (the loop's steps with no
  // draft but the first, which samples the prefill's logits).
  const std::vector<long long>& passes_by_tokens() const { return passes_; }
  long long decode_steps() const { return decode_steps_; }

 private:
  int next_after(int pos) const { return pos + 1 < int(ids_.size()) ? ids_[size_t(pos) + 1] : 0; }
  std::vector<int> ids_;  // prompt then generated
  int vocab_ = 0, pos_ = 0;
  std::vector<long long> passes_;
  long long decode_steps_ = 0;
};

// A verify pass of n tokens costs at(n) decode steps: measured points (n, cost) interpolated linearly, extrapolated
// from the last two. (A step with no draft is a plain decode step: 1 by definition.)
struct VerifyCosts {
  std::vector<std::pair<int, double>> points;  // by n ascending
  double at(int n) const;
};
// "1:1.23,4:1.38,8:1.78" (n:cost pairs, n ascending from 1); fails naming the text otherwise.
VerifyCosts parse_verify_costs(const std::string& text);

struct SpecSimResult {
  std::string name;
  int tokens = 0;
  SpecStats stats;
  std::vector<long long> passes_by_tokens;
  long long decode_steps = 0;  // plain steps (no draft)
  double cost_steps = 0.0;     // the verify passes' and plain steps' cost in decode steps
  bool same = true;         // the replay emitted the recorded tokens
  double speedup() const { return cost_steps > 0 ? double(tokens) / cost_steps : 0.0; }
};

// Replays `trace` through speculative_loop with `drafter` and `spec`, as many new tokens as were recorded.
SpecSimResult simulate_spec(const SpecTrace& trace, int vocab, Drafter& drafter, const SpecOptions& spec,
                            const VerifyCosts& costs);

}  // namespace llm
