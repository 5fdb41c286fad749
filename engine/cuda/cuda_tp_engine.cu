// Tensor parallelism on the CUDA engine (--tp N --device cuda): one process, one host thread, N ranks. Rank r is the
// CUDA engine over its shard (engine/cuda/tp_rank.h, engine/tp_plan.h) on GPU r mod the device count (so ranks share
// a GPU where there are fewer GPUs than ranks: the sharding then runs, and is checked, on one GPU), with its own
// stream, CUDA graph and KV cache. The ranks meet in the one-shot all-reduce over peer memory
// (kernels/collective/all_reduce.h) after o and after down; the driver queues each call on every rank in turn before it
// waits for any (a rank's queued work waits for the others' all-reduces), and combines the ranks' head rows:
// greedy from each rank's (value, id) on its device, other sampling from the gathered logits on the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cuda/tp_all_reduce.h"
#include "engine/cuda/tp_rank.h"
#include "engine/sampler.h"
#include "engine/tp_plan.h"
#include "kernels/cuda_check.h"

namespace llm {

namespace {

class CudaTpEngine final : public Backend {
 public:
  CudaTpEngine(const Model& model, const BackendOptions& opt)
      : c_(model.config), plan_(plan_tp(c_, opt.tp, model.source)) {
    c_.validate(model.source);
    if (opt.sample_vocab < 0 || opt.sample_vocab > c_.vocab_size)
      fail(name(), ": sample_vocab ", opt.sample_vocab, " outside 0..", c_.vocab_size);
    if (opt.persistent)
      fail("--tp ", plan_.n_ranks, ": the tensor-parallel ranks run the CUDA graph path; --decode persistent is not "
           "supported with --tp");
    if (const std::string why = tp_weight_refusal(model.weights, plan_); !why.empty()) fail(why);
    if (opt.gemv == "cublas")  // its kernels load inside a decode step, where a rank may wait for a spinning peer
      fail("--tp ", plan_.n_ranks, ": --gemv cublas is not supported with --tp (cuBLAS loads its kernels inside the "
           "step, which may wait for another rank's all-reduce); use another mapping");
    if (const char* m = std::getenv("CUDA_MODULE_LOADING"); !m || std::string(m) != "EAGER")
      fail("--tp ", plan_.n_ranks, ": the ranks wait for each other inside their kernels, and a kernel CUDA loads "
           "lazily mid-step would wait for them: set CUDA_MODULE_LOADING=EAGER before the program starts (run-llama, "
           "its chat and serve-llama do for --tp)");
    sample_vocab_ = opt.sample_vocab > 0 ? opt.sample_vocab : c_.vocab_size;
    int n_dev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n_dev));
    for (int r = 0; r < plan_.n_ranks; ++r) devices_.push_back(r % n_dev);
    if (n_dev < plan_.n_ranks)
      std::fprintf(stderr, "--tp %d: %d GPU%s: the ranks share %s (the sharding runs; the speed-up needs a GPU each)\n",
                   plan_.n_ranks, n_dev, n_dev == 1 ? "" : "s", n_dev == 1 ? "it" : "them");
    for (int r = 0; r < plan_.n_ranks; ++r) {
      CUDA_CHECK(cudaSetDevice(devices_[size_t(r)]));
      Model shard;
      shard.source = model.source + " (tp rank " + std::to_string(r) + " of " + std::to_string(plan_.n_ranks) + ")";
      shard.format = model.format;
      shard.config = tp_rank_config(c_, plan_, r);
      shard.weights = shard_weights(model, plan_, r);
      BackendOptions o = opt;
      o.tp = 1;
      o.sample_vocab = 0;  // the driver limits the ids (greedy_pick, sample)
      if (r > 0) o.ctx_size = ranks_[0]->ctx_size();  // every rank's cache holds the same positions
      CudaRankRole role;
      role.rank = r;
      role.n_ranks = plan_.n_ranks;
      role.embed_rows = c_.vocab_size;
      role.all_reduce = [this, r](float* x, size_t n, cudaStream_t s) { all_reduce_sum(group_->peers(r), x, n, s); };
      ranks_.push_back(make_cuda_rank_engine(shard, o, role));
      if (ranks_.back()->ctx_size() != ranks_[0]->ctx_size())
        fail(name(), ": rank ", r, " holds ", ranks_.back()->ctx_size(), " positions, rank 0 ",
             ranks_[0]->ctx_size());
    }
    // The exchange buffers hold the longest pass's residual rows.
    group_ = std::make_unique<TpAllReduceGroup>(devices_, size_t(ranks_[0]->max_prefill_chunk()) * size_t(c_.dim));
    // The warm-up: call i on every rank, then call i + 1 (each rank's work waits for the others' all-reduces).
    std::vector<std::vector<std::function<void()>>> plans;
    for (int r = 0; r < plan_.n_ranks; ++r) {
      on(r);
      plans.push_back(ranks_[size_t(r)]->warm_up_plan());
      if (plans.back().size() != plans[0].size()) fail(name(), ": the ranks' warm-ups differ");
    }
    for (size_t i = 0; i < plans[0].size(); ++i)
      for (int r = 0; r < plan_.n_ranks; ++r) {
        on(r);
        plans[size_t(r)][i]();
      }
    on(0);
  }

  ~CudaTpEngine() override {
    for (int r = 0; r < int(ranks_.size()); ++r) {
      cudaSetDevice(devices_[size_t(r)]);
      ranks_[size_t(r)].reset();
    }
  }

  std::string name() const override { return "cuda (tp " + std::to_string(plan_.n_ranks) + ")"; }
  int ctx_size() const override { return ranks_[0]->ctx_size(); }

  // Pass by pass, every rank in turn: a rank's prefill waits on the host for its previous pass's token copy, which
  // its stream reaches only once the other ranks have queued that pass. Before a pass, every rank primes its cuBLAS
  // GEMMs for it (CudaRankEngine::prime_prefill) while no rank has anything queued.
  void prefill(const int* tokens, int n, int pos) override {
    check(tokens, n, pos);
    const int chunk = ranks_[0]->max_prefill_chunk();
    for (int t0 = 0; t0 < n; t0 += chunk) {
      const int c = std::min(chunk, n - t0);
      for (int r = 0; r < plan_.n_ranks; ++r) {
        on(r);
        ranks_[size_t(r)]->prime_prefill(c);
      }
      for (int r = 0; r < plan_.n_ranks; ++r) {
        on(r);
        ranks_[size_t(r)]->prefill(tokens + t0, c, pos + t0);
      }
    }
  }

  void decode(int token, int pos) override {
    check(&token, 1, pos);
    for (int r = 0; r < plan_.n_ranks; ++r) {
      on(r);
      ranks_[size_t(r)]->decode(token, pos);
    }
  }

  // Greedy: each rank's candidate among its ids below sample_vocab_, combined as the whole vocabulary's argmax (the
  // lowest id on ties). Otherwise the gathered logits through the CPU sampler, as one vector.
  int sample(const SamplerParams& p, uint64_t step) override {
    if (p.temperature <= 0.0f || p.top_k == 1) {
      std::vector<RankPick> picks;
      for (int r = 0; r < plan_.n_ranks; ++r) {
        const TpRange v = plan_.ranks[size_t(r)].vocab;
        const int64_t limit = std::min<int64_t>(v.size(), std::max<int64_t>(0, sample_vocab_ - v.begin));
        if (limit < 1) continue;
        on(r);
        RankPick pick = ranks_[size_t(r)]->greedy_pick(int(limit));
        if (pick.id < 0) fail_non_finite_logits(step);
        pick.id += v.begin;
        picks.push_back(pick);
      }
      on(0);
      return int(combine_argmax(picks));
    }
    const std::vector<float> all = logits();
    for (int i = 0; i < sample_vocab_; ++i)
      if (!std::isfinite(all[size_t(i)])) fail_non_finite_logits(step);
    return sample_cpu(all.data(), sample_vocab_, p, step);
  }

  // The ranks' head rows, gathered in rank order (= vocabulary order).
  std::vector<float> logits() override {
    std::vector<float> all;
    all.reserve(size_t(c_.vocab_size));
    for (int r = 0; r < plan_.n_ranks; ++r) {
      on(r);
      const std::vector<float> part = ranks_[size_t(r)]->logits();
      all.insert(all.end(), part.begin(), part.end());
    }
    on(0);
    return all;
  }

  int sample_vocab() const override { return sample_vocab_; }
  int prefill_piece() const override { return ranks_[0]->prefill_piece(); }

 private:
  void on(int r) const { CUDA_CHECK(cudaSetDevice(devices_[size_t(r)])); }

  void check(const int* tokens, int n, int pos) const {
    if (n <= 0) fail(name(), ": a pass of ", n, " tokens (need at least one)");
    if (pos < 0 || int64_t(pos) + n > ctx_size())
      fail(name(), ": position ", int64_t(pos) + n - 1, " is outside the context of ", ctx_size(), " positions");
    for (int i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
        fail(name(), ": token id ", tokens[i], " is outside the vocabulary of ", c_.vocab_size);
  }

  ModelConfig c_;
  TpPlan plan_;
  int sample_vocab_ = 0;
  std::vector<int> devices_;
  std::unique_ptr<TpAllReduceGroup> group_;  // made after the ranks (sized by their pass), used only by their passes
  std::vector<std::unique_ptr<CudaRankEngine>> ranks_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_tp_backend(const Model& model, const BackendOptions& opt) {
  return std::make_unique<CudaTpEngine>(model, opt);
}

}  // namespace llm
