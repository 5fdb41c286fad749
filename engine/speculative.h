// Speculative decoding: a drafter proposes the next few tokens, the target runs them all in one verify() pass
// (engine/backend.h: the logits of every position, each weight read once for the k vectors) and keeps the longest
// prefix it agrees with, plus one token of its own; the KV cache is rewound past the rest. Greedy: a draft token is
// kept when it is the target's argmax, so the output is the non-speculative one token for token. Sampling: the
// standard rule (Leviathan et al. 2023, Chen et al. 2023) keeps the target's distribution exactly: draft token x
// (drawn from the drafter's q) is accepted with probability min(1, p(x) / q(x)); on a rejection the token is drawn
// from normalize(max(0, p - q)); when every draft is accepted one more comes from the last position's p. p and q
// are sample_cpu's distributions (engine/sampler.h: temperature, top_k, top_p). Prompt lookup's q is a point mass on
// its proposal (accepted with probability p(x), else drawn from p without x). Random numbers come from
// rng_unit(seed, kSpecStream, n) (core/counter_rng.h), one counter per run: same seed, same tokens.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/decode_loop.h"
#include "tokenizer/tokenizer.h"

namespace llm {

// --spec none|lookup|draft
enum class SpecMode { kNone, kLookup, kDraft };
constexpr const char* kSpecModeNames = "none, lookup, draft";
SpecMode parse_spec_mode(const std::string& flag, const std::string& value);  // llm::Error naming the value
const char* spec_mode_name(SpecMode m);

constexpr uint64_t kSpecStream = 0x53504543;  // "SPEC": the speculative loop's own random stream

// The speculative loop's random numbers: rng_unit(seed, kSpecStream, counter++).
struct SpecRng {
  uint64_t seed = 0;
  uint64_t counter = 0;
  float next();
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Up to `max` tokens to follow `context` (the whole sequence so far, position 0 first). A drafter that samples
  // (a draft model) draws with `sp` and `rng` and appends one probability row [vocab] per proposal to *q (q(x) for
  // the accept rule); one that does not (prompt lookup) leaves *q empty: a point mass on each proposal.
  virtual std::vector<int> propose(const std::vector<int>& context, int max, const SamplerParams& sp, SpecRng& rng,
                                   std::vector<std::vector<double>>* q) = 0;
};

// Prompt lookup: the longest n-gram (ngram_max down to ngram_min tokens) ending the context that also occurs earlier
// in it (the most recent such occurrence) proposes the up to `max` tokens that followed that occurrence. No model.
std::vector<int> lookup_proposal(const std::vector<int>& context, int max, int ngram_max = 3, int ngram_min = 1);

// The drafter's n-gram range by default: a match of two tokens at least, up to six. Chosen by replaying 22 recorded
// input-grounded runs of SmolLM2 (apps/spec-sim.cpp) under the speculative loop's costs measured on an H100 (a verify
// pass ~1.46 decode steps plus ~0.24 per draft token): 2..6 gave 1.54x where 1..3 gave 1.40x (single-token matches
// draft often and miss often: 70% accepted against 78%), and it stays the better of the two where a pass costs little
// beside a decode step (an 8B model's verify: 2.54x against 2.43x at 1.1 + 0.03 per token).
inline constexpr int kLookupNgramMin = 2, kLookupNgramMax = 6;

class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(int ngram_max = kLookupNgramMax, int ngram_min = kLookupNgramMin)
      : ngram_max_(ngram_max), ngram_min_(ngram_min) {}
  std::string name() const override { return "lookup"; }
  std::vector<int> propose(const std::vector<int>& context, int max, const SamplerParams& sp, SpecRng& rng,
                           std::vector<std::vector<double>>* q) override;

 private:
  int ngram_max_, ngram_min_;
};

// A second model drafting for the target: a Backend with verify/rewind (its own KV cache), over a model with the
// target's vocabulary (draft_vocab_mismatch). It keeps the ids its cache holds, rewinds to the longest prefix they
// share with the context, runs the rest, then decodes its proposals one at a time (greedy with a greedy sampler,
// else drawn from its own distribution under `sp`, or under `own` when given: tests use a q unlike p).
class DraftModelDrafter final : public Drafter {
 public:
  explicit DraftModelDrafter(Backend& draft, const SamplerParams* own = nullptr);
  std::string name() const override { return "draft"; }
  std::vector<int> propose(const std::vector<int>& context, int max, const SamplerParams& sp, SpecRng& rng,
                           std::vector<std::vector<double>>* q) override;

 private:
  Backend& draft_;
  bool has_own_ = false;
  SamplerParams own_;
  std::vector<int> cached_;  // the ids in the draft's KV cache, position order
};

// "" when a draft model can draft for the target: the same vocabulary size, and where both have a tokenizer the same
// pieces, BOS and EOS ids (and the models' BOS/EOS ids); otherwise the first difference, naming it:
//   "its vocabulary has 512 tokens, the target's 49152"   "token 17 is 'a' in it, '<0x0E>' in the target".
std::string draft_vocab_mismatch(const ModelConfig& target, const Tokenizer* target_tok, const ModelConfig& draft,
                                 const Tokenizer* draft_tok);

// The draft length adapts to the acceptance seen, by cost: each draft token is taken as accepted with probability a
// given the ones before it (a geometric run), a = s / (s + f) over counts decayed by 0.9 per step (s: tokens accepted,
// f: steps that rejected one; prior s = 3, f = 1), so k drafts yield (1 - a^(k+1)) / (1 - a) tokens for
// costs.pass + costs.per_token * k decode steps; the next length is the k in [max(min, 1), max] with the most tokens
// per step of cost (the shortest on ties). Steps with no draft (lookup found nothing) leave it.
class DraftLength {
 public:
  DraftLength(int min, int max, DraftCosts costs = {});
  int next() const { return n_; }
  void update(int drafted, int accepted);
  double acceptance() const { return s_ / (s_ + f_); }

 private:
  int best_length() const;
  int min_, max_;
  DraftCosts costs_;
  double s_ = 3.0, f_ = 1.0;
  int n_;
};

// How drafts are judged. kAcceptAll keeps every draft token without looking at p: the negative control of the
// sampling test (tests/cpu/speculative_sampling_test.cpp), which must show it breaks the target's distribution.
enum class AcceptRule { kExact, kAcceptAll };

struct SpecOptions {
  int draft_max = 8;   // tokens drafted per step at most (>= 1)
  int draft_min = 1;   // the adaptive length's floor (0 .. draft_max)
  std::optional<DraftCosts> costs;  // what the adaptive length weighs a pass by (unset: the target's verify_costs())
  AcceptRule rule = AcceptRule::kExact;
  // Greedy only: a verify row whose top-2 logit margin is under `guard` does not decide its token; the step keeps the
  // rows before it and a decode step at that position decides (the plain loop's arithmetic, where a backend's verify
  // sums in another order: the CUDA engine's, 5e-4 relative L2 from decode on SmolLM2). 0: off.
  float guard = 0.0f;
  const std::vector<int>* history = nullptr;  // the ids already in the cache, positions [0, start_pos) (the chat's
                                              // earlier turns): the drafters see them as context
};

struct SpecStats {
  int64_t drafted = 0;   // draft tokens verified
  int64_t accepted = 0;  // of those, accepted
  int64_t steps = 0;     // verify passes, and plain decode steps where there was no draft
  int64_t guarded = 0;   // verify rows under SpecOptions::guard whose token a decode step decided
  double accept_rate() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
  void add(const SpecStats& o) {
    drafted += o.drafted;
    accepted += o.accepted;
    steps += o.steps;
    guarded += o.guarded;
  }
};

// decode_loop's contract (engine/decode_loop.h: stop ids, stop_bos_id, max_new, the context limit, interrupt,
// cache_every_token, on_token, the StopReason vocabulary) run speculatively: the prompt's last token goes into the
// first verify pass with the first drafts. prompt_ms is the prefill of the other prompt tokens; eval_ms the verify
// steps, eval_tokens the tokens produced in them; next_step continues the random counter. Throws llm::Error when the
// target has no verify() (naming the backend) or the options are out of range. `stats` (if given) gets the counts.
DecodeLoopResult speculative_loop(Backend& target, Drafter& drafter, const std::vector<int>& prompt,
                                  const DecodeLoopOptions& opt, const SpecOptions& spec, SpecStats* stats = nullptr,
                                  const std::function<bool(int)>& on_token = nullptr);

// llama.cpp's line: "draft: n_drafted = 120, n_accept = 90, accept = 75.000%" (and the verify steps).
void print_spec_stats(const SpecStats& s, std::FILE* out = stderr);

}  // namespace llm
