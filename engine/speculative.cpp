// Speculative decoding: drafters, the accept rule and the loop (see engine/speculative.h).
#include "engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/counter_rng.h"
#include "core/error.h"

namespace llm {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

SpecMode parse_spec_mode(const std::string& flag, const std::string& value) {
  if (value == "none") return SpecMode::kNone;
  if (value == "lookup") return SpecMode::kLookup;
  if (value == "draft") return SpecMode::kDraft;
  fail(flag, ": unknown value '", value, "' (allowed: ", kSpecModeNames, ")");
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::kNone: return "none";
    case SpecMode::kLookup: return "lookup";
    case SpecMode::kDraft: return "draft";
  }
  return "unknown";
}

float SpecRng::next() { return rng_unit(seed, kSpecStream, counter++); }

// ----- prompt lookup -----

std::vector<int> lookup_proposal(const std::vector<int>& context, int max, int ngram_max, int ngram_min) {
  const int len = int(context.size());
  if (max < 1 || ngram_min < 1) return {};
  for (int n = std::min(ngram_max, len - 1); n >= ngram_min; --n) {
    const int key = len - n;  // the n-gram context[key, len)
    for (int j = key - 1; j >= 0; --j) {  // most recent earlier occurrence first
      if (!std::equal(context.begin() + j, context.begin() + j + n, context.begin() + key)) continue;
      const int from = j + n, count = std::min(max, len - from);
      return std::vector<int>(context.begin() + from, context.begin() + from + count);
    }
  }
  return {};
}

std::vector<int> LookupDrafter::propose(const std::vector<int>& context, int max, const SamplerParams&, SpecRng&,
                                        std::vector<std::vector<double>>* q) {
  if (q) q->clear();
  return lookup_proposal(context, max, ngram_max_, ngram_min_);
}

// ----- draft model -----

DraftModelDrafter::DraftModelDrafter(Backend& draft, const SamplerParams* own) : draft_(draft) {
  if (!draft.supports_verify())
    fail("--model-draft: the ", draft.name(), " backend cannot draft (it has no rewind; use --device cpu)");
  if (own) {
    has_own_ = true;
    own_ = *own;
  }
}

std::vector<int> DraftModelDrafter::propose(const std::vector<int>& context, int max, const SamplerParams& sp,
                                            SpecRng& rng, std::vector<std::vector<double>>* q) {
  if (q) q->clear();
  const int len = int(context.size());
  if (len == 0 || max < 1) return {};
  // Keep what the draft's cache shares with the context; the context's last id is always run again, so its logits
  // are the current ones.
  const auto diverge = std::mismatch(cached_.begin(), cached_.end(), context.begin(), context.end());
  const int keep = std::min(int(diverge.first - cached_.begin()), len - 1);
  draft_.rewind(keep);
  cached_.assign(context.begin(), context.begin() + keep);
  draft_.prefill(context.data() + keep, len - keep, keep);
  cached_.insert(cached_.end(), context.begin() + keep, context.end());

  const SamplerParams& p = has_own_ ? own_ : sp;
  const int n = std::min(max, draft_.ctx_size() - len + 1);  // the last proposal is not decoded
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<float> logits = draft_.logits();
    const int nv = draft_.sample_vocab() > 0 ? draft_.sample_vocab() : int(logits.size());
    for (int t = 0; t < nv; ++t)
      if (!std::isfinite(logits[size_t(t)])) fail("--model-draft: the draft model's logits hold NaN or Inf");
    int x;
    if (is_greedy(sp)) {
      x = argmax(logits.data(), nv);  // greedy target: only whether x is its argmax matters, q is not needed
    } else {
      std::vector<double> probs = sampler_probs(logits.data(), nv, p);
      x = draw_from(probs, 1.0, rng.next());
      if (q) q->push_back(std::move(probs));
    }
    out.push_back(x);
    if (i + 1 < n) {
      draft_.decode(x, len + i);
      cached_.push_back(x);
    }
  }
  return out;
}

std::string draft_vocab_mismatch(const ModelConfig& target, const Tokenizer* target_tok, const ModelConfig& draft,
                                 const Tokenizer* draft_tok) {
  const auto str = [](auto v) { return std::to_string(v); };
  if (draft.vocab_size != target.vocab_size)
    return "its vocabulary has " + str(draft.vocab_size) + " tokens, the target's " + str(target.vocab_size);
  if (draft.bos_id != target.bos_id)
    return "its BOS id is " + str(draft.bos_id) + ", the target's " + str(target.bos_id);
  if (draft.eos_ids != target.eos_ids) return "its end-of-sequence ids differ from the target's";
  if (!target_tok || !draft_tok)
    return target_tok || draft_tok ? std::string(draft_tok ? "the target" : "it") + " has no tokenizer to compare"
                                   : "";
  if (draft_tok->vocab_size() != target_tok->vocab_size())
    return "its tokenizer has " + str(draft_tok->vocab_size()) + " pieces, the target's " +
           str(target_tok->vocab_size());
  if (draft_tok->bos_id() != target_tok->bos_id() || draft_tok->eos_id() != target_tok->eos_id())
    return "its tokenizer's BOS/EOS ids (" + str(draft_tok->bos_id()) + "/" + str(draft_tok->eos_id()) +
           ") differ from the target's (" + str(target_tok->bos_id()) + "/" + str(target_tok->eos_id()) + ")";
  for (int i = 0; i < target_tok->vocab_size(); ++i)
    if (draft_tok->piece(i) != target_tok->piece(i))
      return "token " + str(i) + " is '" + draft_tok->piece(i) + "' in it, '" + target_tok->piece(i) +
             "' in the target";
  return "";
}

// ----- adaptive length -----

DraftLength::DraftLength(int min, int max, DraftCosts costs) : min_(min), max_(max), costs_(costs) {
  if (max < 1 || min < 0 || min > max) fail("draft length: need 0 <= --draft-min <= --draft-max and --draft-max >= 1, "
                                            "found min ", min, ", max ", max);
  if (!(costs.pass > 0) || !(costs.per_token >= 0))
    fail("draft length: a verify pass must cost more than 0 decode steps and a draft token at least 0, found ",
         costs.pass, " and ", costs.per_token);
  n_ = best_length();
}

int DraftLength::best_length() const {
  const double a = acceptance();
  int best = std::max(min_, 1);
  double best_rate = -1.0;
  double yield = 1.0, run = 1.0;  // tokens a k-token draft yields: 1 + a + ... + a^k
  for (int k = 1; k <= max_; ++k) {
    run *= a;
    yield += run;
    const double rate = yield / (costs_.pass + costs_.per_token * double(k));
    if (k >= std::max(min_, 1) && rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

void DraftLength::update(int drafted, int accepted) {
  if (drafted <= 0) return;
  s_ = 0.9 * s_ + double(accepted);
  f_ = 0.9 * f_ + (accepted < drafted ? 1.0 : 0.0);
  n_ = best_length();
}

// ----- the loop -----

namespace {

// The tokens one verify pass yields: the accepted drafts then one token of the target's own.
struct Verdict {
  int accepted = 0;
  std::vector<int> emit;
};

void check_finite(const float* row, int n, uint64_t step) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(row[i])) fail_non_finite_logits(step);
}

// Judges drafts d against the target's rows L [d.size() + 1, V] by the accept/reject rule (sampling over ids [0, n));
// greedy targets go through judge_ids.
Verdict judge(const std::vector<float>& L, int V, int n, const std::vector<int>& d,
              const std::vector<std::vector<double>>& q, const SamplerParams& sp, AcceptRule rule, SpecRng& rng) {
  Verdict v;
  for (size_t i = 0; i <= d.size(); ++i) {
    const float* row = L.data() + i * size_t(V);
    check_finite(row, n, rng.counter);
    std::vector<double> p = sampler_probs(row, n, sp);
    if (i == d.size()) {  // every draft accepted: one more from the last position's p
      v.emit.push_back(draw_from(p, 1.0, rng.next()));
      return v;
    }
    const int x = d[i];
    const double px = x < n ? p[size_t(x)] : 0.0;
    const double qx = q.empty() ? 1.0 : q[i][size_t(x)];
    if (rule == AcceptRule::kAcceptAll || double(rng.next()) * qx < px) {  // u < p(x) / q(x), q(x) > 0
      v.emit.push_back(x);
      v.accepted++;
      continue;
    }
    // Rejected: draw from normalize(max(0, p - q)) (lookup: p without x).
    double total = 0.0;
    for (int t = 0; t < n; ++t) {
      const double qt = q.empty() ? (t == x ? 1.0 : 0.0) : q[i][size_t(t)];
      total += p[size_t(t)] = std::max(0.0, p[size_t(t)] - qt);
    }
    if (total <= 0.0) p = sampler_probs(row, n, sp), total = 1.0;  // p == q up to rounding: p itself
    v.emit.push_back(draw_from(p, total, rng.next()));
    return v;
  }
  return v;
}

// Greedy: the target's ids of the rows (Backend::verify_argmax, -1 where a row is not finite) against drafts d.
Verdict judge_ids(const std::vector<int>& ids, const std::vector<int>& d, uint64_t step) {
  Verdict v;
  for (size_t i = 0; i <= d.size() && i < ids.size(); ++i) {
    if (ids[i] < 0) fail_non_finite_logits(step);
    v.emit.push_back(ids[i]);
    if (i == d.size() || ids[i] != d[i]) return v;
    v.accepted++;
  }
  return v;
}

}  // namespace

DecodeLoopResult speculative_loop(Backend& target, Drafter& drafter, const std::vector<int>& prompt,
                                  const DecodeLoopOptions& opt, const SpecOptions& spec, SpecStats* stats,
                                  const std::function<bool(int)>& on_token) {
  check_decode_loop_args(target, prompt, opt);
  if (!target.supports_verify())
    fail("speculative decoding: the ", target.name(), " backend has no verify() pass yet (use --device cpu)");
  DraftLength len(spec.draft_min, spec.draft_max, spec.costs.value_or(target.verify_costs()));
  const int n_prompt = int(prompt.size()), ctx = target.ctx_size();
  auto interrupted = [&] { return opt.interrupt && *opt.interrupt; };
  auto is_stop = [&](int id) {
    return std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end();
  };
  std::vector<int> seq = spec.history ? *spec.history : std::vector<int>{};
  seq.insert(seq.end(), prompt.begin(), prompt.end());
  SpecRng rng{opt.sampler.seed, opt.first_step};
  DecodeLoopResult r;
  SpecStats st;

  // The whole prompt, in the backend's pieces (an interrupt is seen between them), as the plain loop prefills it: the
  // last prompt token's K and V rows then come from the same pass as there. (Run through the first verify instead,
  // that one row took the decode step's arithmetic where the plain loop's took the prefill pass's, and on the GPU the
  // difference drifted greedy output apart 50 to 250 tokens later on 4 of 22 spec-bench prompts, H100 2026-12-07.)
  auto t0 = Clock::now();
  const int piece = std::max(1, target.prefill_piece());
  for (int p0 = 0; p0 < n_prompt; p0 += piece) {
    if (interrupted() || (p0 > 0 && opt.cancelled && opt.cancelled())) {  // as decode_loop: between pieces
      r.prompt_ms = ms_since(t0);
      r.stop = StopReason::kInterrupted;
      r.next_step = rng.counter;
      return r;
    }
    const int n = std::min(piece, n_prompt - p0);
    target.prefill(prompt.data() + p0, n, opt.start_pos + p0);
    r.prefilled += n;
  }
  r.prompt_ms = ms_since(t0);
  t0 = Clock::now();

  int pos = opt.start_pos + n_prompt - 1;  // where `pending` goes (the prompt's last id: in the cache already)
  int pending = prompt.back();
  // The first step: pending is cached and its row is the current logits (the prefill's), so its verify runs the drafts
  // alone, at pos + 1, and row 0 is those logits (with no draft: no decode step, a sample of them).
  bool pending_cached = true;
  for (bool done = false; !done;) {
    if (pos >= ctx) { r.stop = StopReason::kContext; break; }
    const int remaining = opt.max_new - int(r.tokens.size());
    // Drafts stop where a rewind would no longer be exact (an FP8 cache's block boundary: Backend::exact_rewind_end).
    const int k = std::max(0, std::min({len.next(), ctx - pos - 1, remaining - 1,
                                        target.exact_rewind_end(pos) - pos - 1}));  // INT_MAX - pos - 1: no bound
    std::vector<std::vector<double>> q;
    std::vector<int> in{pending};
    if (k > 0) {
      std::vector<int> d = drafter.propose(seq, k, opt.sampler, rng, &q);
      if (int(d.size()) > k) d.resize(size_t(k));
      in.insert(in.end(), d.begin(), d.end());
    }
    const std::vector<int> drafts(in.begin() + 1, in.end());
    // What the verify runs: every id of `in` from pos, or, while pending is cached, the drafts alone from pos + 1 (row
    // 0 is then the current logits: read before the verify replaces them).
    const int skip = pending_cached ? 1 : 0;
    const int* vin = in.data() + skip;
    const int vn = int(in.size()) - skip, vpos = pos + skip;
    Verdict v;
    if (drafts.empty()) {
      // Nothing to verify: a plain decode step, which costs less than a verify pass of one token (on the CUDA engine
      // its captured step against a pass that also copies rows and judges them: ~1.0 against ~1.2-1.5 steps).
      if (!pending_cached) target.decode(pending, pos);
      if (is_greedy(opt.sampler)) {
        v.emit.push_back(target.sample(opt.sampler, rng.counter));
      } else {
        const std::vector<float> L = target.logits();
        const int V = int(L.size());
        const int nv = target.sample_vocab() > 0 ? std::min(target.sample_vocab(), V) : V;
        v = judge(L, V, nv, drafts, q, opt.sampler, spec.rule, rng);
      }
    } else if (is_greedy(opt.sampler)) {  // n ids from the target, not n rows of the vocabulary
      std::vector<float> margins;
      const int first = skip ? target.sample(opt.sampler, rng.counter) : -1;
      std::vector<int> ids =
          target.verify_argmax(vin, vn, vpos, target.sample_vocab(), spec.guard > 0 ? &margins : nullptr);
      if (skip) {  // row 0's id (no margin: plain decoding takes it from the same logits)
        ids.insert(ids.begin(), first);
        if (spec.guard > 0) margins.insert(margins.begin(), INFINITY);
      }
      v = judge_ids(ids, drafts, rng.counter);
      // SpecOptions::guard: the first row that decides a token (rows 0 .. accepted) with its top-2 margin under the
      // guard keeps the rows before it; its token comes from a decode step at its position (the plain loop's
      // arithmetic), after a rewind past the verify's rows from there on.
      for (int i = 0; spec.guard > 0 && i <= v.accepted && i < int(margins.size()); ++i) {
        if (!(margins[size_t(i)] < spec.guard)) continue;
        v.accepted = i;
        v.emit.resize(size_t(i));
        target.rewind(pos + i);
        target.decode(in[size_t(i)], pos + i);
        v.emit.push_back(target.sample(opt.sampler, rng.counter));
        st.guarded++;
        break;
      }
    } else {
      std::vector<float> L = skip ? target.logits() : std::vector<float>{};
      const std::vector<float> rows = target.verify(vin, vn, vpos);
      L.insert(L.end(), rows.begin(), rows.end());
      const int V = int(L.size() / in.size());
      const int nv = target.sample_vocab() > 0 ? std::min(target.sample_vocab(), V) : V;
      v = judge(L, V, nv, drafts, q, opt.sampler, spec.rule, rng);
    }
    pending_cached = false;
    st.steps++;
    st.drafted += int64_t(drafts.size());
    st.accepted += v.accepted;
    len.update(int(drafts.size()), v.accepted);

    // Emit in order; emit[i] goes at position pos + 1 + i (those before emit.back() are in the cache already).
    int valid = pos + 1 + v.accepted;  // cache positions that hold the sequence after this step
    for (size_t i = 0; i < v.emit.size() && !done; ++i) {
      const int id = v.emit[i], at = pos + 1 + int(i);
      const bool cached = int(i) < v.accepted;
      if (is_stop(id)) { r.stop = StopReason::kEos; valid = at; done = true; break; }
      if (opt.stop_bos_id >= 0 && id == opt.stop_bos_id) { r.stop = StopReason::kBos; valid = at; done = true; break; }
      if (opt.cache_every_token && at >= ctx) { r.stop = StopReason::kContext; valid = at; done = true; break; }
      r.tokens.push_back(id);
      seq.push_back(id);
      const bool keep_going = on_token ? on_token(id) : true;
      const bool full = int(r.tokens.size()) >= opt.max_new;
      if (!(full || !keep_going || interrupted())) continue;
      r.stop = full ? StopReason::kLength : !keep_going ? StopReason::kCallback : StopReason::kInterrupted;
      done = true;
      valid = at + (cached ? 1 : 0);
      if (!cached && opt.cache_every_token) {  // the chat's last token is decoded so the next turn follows it
        target.decode(id, at);
        valid = at + 1;
      }
    }
    target.rewind(valid);
    pos = valid;
    pending = v.emit.back();
  }
  r.eval_ms = ms_since(t0);
  r.eval_tokens = int(r.tokens.size());
  r.next_step = rng.counter;
  if (stats) stats->add(st);
  return r;
}

void print_spec_stats(const SpecStats& s, std::FILE* out) {
  std::fprintf(out, "draft: n_drafted = %lld, n_accept = %lld, accept = %.3f%%, verify steps = %lld",
               (long long)s.drafted, (long long)s.accepted, 100.0 * s.accept_rate(), (long long)s.steps);
  if (s.guarded > 0) std::fprintf(out, ", guarded rows = %lld", (long long)s.guarded);
  std::fprintf(out, "\n");
}

}  // namespace llm
