// Tensor parallelism simulated on the CPU (--tp N --device cpu): N ranks, each holding only its shards
// (engine/tp_plan.h) and running the CPU reference's pieces (engine/cpu_slice.h) on them, one after the other in
// one thread. Between them only what GPUs would exchange: the all-reduce (sum) of the partial o and down outputs,
// in host form, and the head's per-rank logits for sampling. Each rank keeps its own copy of the residual stream;
// all of them hold the same bits, since every rank adds the same all-reduced sums.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cpu_slice.h"
#include "engine/tp_plan.h"

namespace llm {

namespace {

struct Rank {
  std::unique_ptr<cpu::CpuSlice> slice;  // its weights, KV cache (its KV heads) and scratch
  std::vector<float> x;                  // [dim] its copy of the residual stream
  std::vector<float> part;               // [dim] its partial block output, then the all-reduced sum
  std::vector<float> logits;             // [its vocabulary rows]
  int64_t first_id = 0;                  // the global id of its first head row
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
      rank.x.resize(size_t(c_.dim));
      rank.part.resize(size_t(c_.dim));
      rank.logits.resize(size_t(k.vocab.size()));
      rank.first_id = k.vocab.begin;
      ranks_.push_back(std::move(rank));
    }
    for (Rank& r : ranks_) parts_.push_back(r.part.data());
  }

  std::string name() const override { return "cpu (tp " + std::to_string(plan_.n_ranks) + ", simulated ranks)"; }
  int ctx_size() const override { return ctx_; }

  void prefill(const int* tokens, int n, int pos) override {
    if (n <= 0) fail(name(), ": prefill of ", n, " tokens (need at least one)");
    for (int i = 0; i < n; ++i) decode(tokens[i], pos + i);
  }

  void decode(int token, int pos) override {
    if (pos < 0 || pos >= ctx_) fail(name(), ": position ", pos, " is outside the context of ", ctx_, " positions");
    if (token < 0 || token >= c_.vocab_size)
      fail(name(), ": token id ", token, " is outside the vocabulary of ", c_.vocab_size);
    for (Rank& r : ranks_) r.slice->embed(token, r.x.data());
    for (int l = 0; l < c_.n_layers; ++l) {
      for (Rank& r : ranks_) r.slice->attention(l, pos, r.x.data(), r.part.data());
      all_reduce_and_add();
      for (Rank& r : ranks_) r.slice->ffn(l, r.x.data(), r.part.data());
      all_reduce_and_add();
    }
    for (Rank& r : ranks_) r.slice->head(r.x.data(), r.logits.data());
  }

  // As the CPU reference: ids past sample_vocab_ are never candidates, NaN or Inf among the candidates stops the
  // run. Greedy combines each rank's (value, id); other sampling gathers the logits and samples them as one vector.
  int sample(const SamplerParams& p, uint64_t step) override {
    for (const Rank& r : ranks_)
      for (int64_t i = 0; i < int64_t(r.logits.size()) && r.first_id + i < sample_vocab_; ++i)
        if (!std::isfinite(r.logits[size_t(i)])) fail_non_finite_logits(step);
    if (p.temperature <= 0.0f || p.top_k == 1) {  // sample_cpu's greedy rule
      std::vector<RankPick> picks;
      for (const Rank& r : ranks_)
        picks.push_back(rank_argmax(r.logits.data(), int64_t(r.logits.size()), r.first_id, sample_vocab_));
      return int(combine_argmax(picks));
    }
    const std::vector<float> all = logits();
    return sample_cpu(all.data(), sample_vocab_, p, step);
  }

  // The ranks' vocabulary rows, gathered in rank order (= vocabulary order).
  std::vector<float> logits() override {
    std::vector<float> all;
    all.reserve(size_t(c_.vocab_size));
    for (const Rank& r : ranks_) all.insert(all.end(), r.logits.begin(), r.logits.end());
    return all;
  }
  int prefill_piece() const override { return 4; }

 private:
  // The all-reduce after o and after down: every rank's part becomes the sum, which each adds to its own x.
  void all_reduce_and_add() {
    host_all_reduce_sum(parts_.data(), plan_.n_ranks, size_t(c_.dim));
    for (Rank& r : ranks_)
      for (int i = 0; i < c_.dim; ++i) r.x[size_t(i)] += r.part[size_t(i)];
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
