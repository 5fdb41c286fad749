// Tensor parallelism simulated on the CPU (--tp N --device cpu): N ranks, each holding only its shards
// (engine/tp_plan.h) and running the CPU reference's pieces (engine/cpu_slice.h) on them, one after the other in
// one thread. Between them only what GPUs would exchange: the all-reduce (sum) of the partial o and down outputs,
// in host form, and the head's per-rank logits for sampling. Each rank keeps its own copy of the residual stream;
// all of them hold the same bits, since every rank adds the same all-reduced sums.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cpu_slice.h"
#include "engine/kv_cache.h"  // kv_exact_rewind_end
#include "engine/tp_plan.h"

namespace llm {

namespace {

struct Rank {
  std::unique_ptr<cpu::CpuSlice> slice;  // its weights, KV cache (its KV heads) and scratch
  std::vector<float> x;                  // [n, dim] its copy of the residual stream of the tokens being run
  std::vector<float> part;               // [n, dim] its partial block outputs, then the all-reduced sums
  std::vector<float> logits;             // [n, its vocabulary rows]; sample() and logits() read the last token's
  int64_t first_id = 0;                  // the global id of its first head row
  int64_t rows = 0;                      // its vocabulary rows
};

class CpuTpBackend final : public Backend {
 public:
  CpuTpBackend(const Model& model, const BackendOptions& opt)
      : c_(model.config),
        plan_(plan_tp(c_, opt.tp, model.source)),
        kv_dtype_(opt.kv_dtype == KvDtype::Default ? KvDtype::F32 : opt.kv_dtype) {
    if (opt.sample_vocab < 0 || opt.sample_vocab > c_.vocab_size)
      fail(name(), ": sample_vocab ", opt.sample_vocab, " outside 0..", c_.vocab_size);
    if (int(model.weights.layers.size()) != c_.n_layers)
      fail(name(), ": ", model.source, " has ", model.weights.layers.size(), " layers of weights, config says ",
           c_.n_layers);
    if (const std::string why = tp_weight_refusal(model.weights, plan_); !why.empty()) fail(why);
    sample_vocab_ = opt.sample_vocab > 0 ? opt.sample_vocab : c_.vocab_size;
    // Every rank holds the embedding and the norms (and, for a tied model, its rows of the head besides).
    const uint64_t n = uint64_t(plan_.n_ranks);
    const uint64_t replicated =
        (uint64_t(model.weights.embedding.numel()) + uint64_t(c_.dim) * uint64_t(2 * c_.n_layers + 1)) * 4;
    const uint64_t weights = cpu::weight_bytes(model) + (n - 1) * replicated +
                             (c_.tied_embeddings ? uint64_t(model.weights.embedding.numel()) * 4 : 0);
    ctx_ = cpu::choose_ctx(model, opt, kv_dtype_, weights, "cpu");
    for (int r = 0; r < plan_.n_ranks; ++r) {
      const TpRank& k = plan_.ranks[size_t(r)];
      const cpu::SliceShape shape{int(k.q_heads.size()), int(k.kv_heads.size()), int(k.ffn.size()),
                                  int(k.vocab.size())};
      Rank rank;
      rank.slice = std::make_unique<cpu::CpuSlice>(c_, shape, shard_weights(model, plan_, r),
                                                   /*head_is_embedding=*/false, opt.bf16_weights, kv_dtype_, ctx_);
      rank.first_id = k.vocab.begin;
      rank.rows = k.vocab.size();
      ranks_.push_back(std::move(rank));
    }
    forward(nullptr, 0, 0);  // sizes the buffers; the logits of no token are zero
  }

  std::string name() const override { return "cpu (tp " + std::to_string(plan_.n_ranks) + ", simulated ranks)"; }
  int ctx_size() const override { return ctx_; }

  void prefill(const int* tokens, int n, int pos) override {
    if (n <= 0) fail(name(), ": prefill of ", n, " tokens (need at least one)");
    for (int i = 0; i < n; i += cpu::kLanes) verify(tokens + i, std::min(cpu::kLanes, n - i), pos + i);
  }

  void decode(int token, int pos) override {
    check(&token, 1, pos);
    forward(&token, 1, pos);
  }

  // As the CPU reference's: the n tokens through each rank's layers together, the logits of every position
  // [n, vocab] (each row gathered from the ranks), the last row also the current logits.
  bool supports_verify() const override { return true; }
  int sample_vocab() const override { return sample_vocab_; }
  int exact_rewind_end(int pos) const override { return kv_exact_rewind_end(kv_dtype_, pos); }
  std::vector<float> verify(const int* tokens, int n, int pos) override {
    check(tokens, n, pos);
    forward(tokens, n, pos);
    std::vector<float> out;
    out.reserve(size_t(n) * size_t(c_.vocab_size));
    for (int j = 0; j < n; ++j)
      for (const Rank& r : ranks_) {
        const auto row = r.logits.begin() + std::ptrdiff_t(j * r.rows);
        out.insert(out.end(), row, row + std::ptrdiff_t(r.rows));
      }
    return out;
  }
  // Nothing to undo, as on the CPU reference: each rank's cache is overwritten from pos on.
  void rewind(int pos) override {
    if (pos < 0 || pos > ctx_)
      fail(name(), ": rewind to position ", pos, " outside the context of ", ctx_, " positions");
  }

  // As the CPU reference: ids past sample_vocab_ are never candidates, NaN or Inf among the candidates stops the
  // run. Greedy combines each rank's (value, id); other sampling gathers the logits and samples them as one vector.
  int sample(const SamplerParams& p, uint64_t step) override {
    for (const Rank& r : ranks_)
      for (int64_t i = 0; i < r.rows && r.first_id + i < sample_vocab_; ++i)
        if (!std::isfinite(last(r)[i])) fail_non_finite_logits(step);
    if (p.temperature <= 0.0f || p.top_k == 1) {  // sample_cpu's greedy rule
      std::vector<RankPick> picks;
      for (const Rank& r : ranks_) picks.push_back(rank_argmax(last(r), r.rows, r.first_id, sample_vocab_));
      return int(combine_argmax(picks));
    }
    const std::vector<float> all = logits();
    return sample_cpu(all.data(), sample_vocab_, p, step);
  }

  // The ranks' vocabulary rows, gathered in rank order (= vocabulary order).
  std::vector<float> logits() override {
    std::vector<float> all;
    all.reserve(size_t(c_.vocab_size));
    for (const Rank& r : ranks_) all.insert(all.end(), last(r), last(r) + r.rows);
    return all;
  }
  int prefill_piece() const override { return 2 * cpu::kLanes; }

 private:
  void check(const int* tokens, int n, int pos) const {
    if (n <= 0) fail(name(), ": verify of ", n, " tokens (need at least one)");
    if (pos < 0 || int64_t(pos) + n > ctx_)
      fail(name(), ": position ", int64_t(pos) + n - 1, " is outside the context of ", ctx_, " positions");
    for (int i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
        fail(name(), ": token id ", tokens[i], " is outside the vocabulary of ", c_.vocab_size);
  }

  // The last token's logits of rank r.
  static const float* last(const Rank& r) { return r.logits.data() + r.logits.size() - size_t(r.rows); }

  // n tokens at positions pos .. pos + n - 1 on every rank, an all-reduce after each o and each down.
  void forward(const int* tokens, int n, int pos) {
    const size_t len = size_t(std::max(n, 1)) * size_t(c_.dim);
    parts_.clear();
    for (Rank& r : ranks_) {
      r.x.assign(len, 0.0f);
      r.part.assign(len, 0.0f);
      r.logits.assign(size_t(std::max(n, 1)) * size_t(r.rows), 0.0f);
      parts_.push_back(r.part.data());
      for (int j = 0; j < n; ++j) r.slice->embed(tokens[j], r.x.data() + size_t(j) * size_t(c_.dim));
    }
    if (n == 0) return;
    for (int l = 0; l < c_.n_layers; ++l) {
      for (Rank& r : ranks_) r.slice->attention(l, pos, n, r.x.data(), r.part.data());
      all_reduce_and_add(len);
      for (Rank& r : ranks_) r.slice->ffn(l, n, r.x.data(), r.part.data());
      all_reduce_and_add(len);
    }
    for (Rank& r : ranks_) r.slice->head(n, r.x.data(), r.logits.data());
  }

  // The all-reduce after o and after down: every rank's part becomes the sum, which each adds to its own x.
  void all_reduce_and_add(size_t len) {
    host_all_reduce_sum(parts_.data(), plan_.n_ranks, len);
    for (Rank& r : ranks_)
      for (size_t i = 0; i < len; ++i) r.x[i] += r.part[i];
  }

  ModelConfig c_;
  TpPlan plan_;
  KvDtype kv_dtype_;
  int ctx_ = 0;
  int sample_vocab_ = 0;
  std::vector<Rank> ranks_;
  std::vector<float*> parts_;  // each rank's part buffer, for the all-reduce
};

}  // namespace

std::unique_ptr<Backend> make_cpu_tp_backend(const Model& model, const BackendOptions& opt) {
  return std::make_unique<CpuTpBackend>(model, opt);
}

}  // namespace llm
