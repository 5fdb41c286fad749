// CPU reference backend: FP32 weights and math, the plainest forward pass (after llama2.c's run.c) with separate
// head_dim, grouped-query attention, llama3 RoPE frequencies and a tied or untied head. Correctness first. The
// per-layer pieces are engine/cpu_slice.h's, run here over the whole model (the tensor-parallel simulation,
// engine/cpu_tp_backend.cpp, runs the same pieces over each rank's shards).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cpu_slice.h"
#include "engine/kv_cache.h"  // kv_exact_rewind_end

namespace llm {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const BackendOptions& opt)
      : c_(model.config), kv_dtype_(opt.kv_dtype == KvDtype::Default ? KvDtype::F32 : opt.kv_dtype) {
    if (opt.sample_vocab < 0 || opt.sample_vocab > c_.vocab_size)
      fail("cpu: sample_vocab ", opt.sample_vocab, " outside 0..", c_.vocab_size);
    sample_vocab_ = opt.sample_vocab > 0 ? opt.sample_vocab : c_.vocab_size;
    ctx_ = cpu::choose_ctx(model, opt, kv_dtype_, cpu::weight_bytes(model), "cpu");
    if (int(model.weights.layers.size()) != c_.n_layers)
      fail("cpu: ", model.source, " has ", model.weights.layers.size(), " layers of weights, config says ",
           c_.n_layers);
    const cpu::SliceShape whole{c_.n_heads, c_.n_kv_heads, c_.hidden_dim, c_.vocab_size};
    model_ = std::make_unique<cpu::CpuSlice>(c_, whole, model.weights, c_.tied_embeddings, opt.bf16_weights,
                                             kv_dtype_, ctx_);
    logits_.resize(size_t(c_.vocab_size));
  }

  std::string name() const override { return "cpu"; }
  int ctx_size() const override { return ctx_; }

  // In passes of kLanes tokens through verify's batched forward (the same logits as one decode per token, bit for bit).
  void prefill(const int* tokens, int n, int pos) override {
    if (n <= 0) fail("cpu: prefill of ", n, " tokens (need at least one)");
    for (int i = 0; i < n; i += cpu::kLanes) verify(tokens + i, std::min(cpu::kLanes, n - i), pos + i);
  }

  void decode(int token, int pos) override {
    if (pos < 0 || pos >= ctx_) fail("cpu: position ", pos, " is outside the context of ", ctx_, " positions");
    if (token < 0 || token >= c_.vocab_size)
      fail("cpu: token id ", token, " is outside the vocabulary of ", c_.vocab_size);
    logits_ = forward_batch(&token, 1, pos);
  }

  // Ids past sample_vocab_ (padding rows of the embedding) are never candidates; NaN or Inf logits stop the run.
  int sample(const SamplerParams& p, uint64_t step) override {
    for (int i = 0; i < sample_vocab_; ++i)
      if (!std::isfinite(logits_[size_t(i)])) fail_non_finite_logits(step);
    return sample_cpu(logits_.data(), sample_vocab_, p, step);
  }

  std::vector<float> logits() override { return logits_; }
  int prefill_piece() const override { return 2 * cpu::kLanes; }  // check Ctrl-C every two passes

  bool supports_verify() const override { return true; }
  int sample_vocab() const override { return sample_vocab_; }
  int exact_rewind_end(int pos) const override { return kv_exact_rewind_end(kv_dtype_, pos); }

  // All n tokens through each layer together (matmul_k: each weight row read once for the n vectors); the logits of
  // every position, equal bit for bit to n decode() calls (tests/cpu/speculative_test.cpp).
  std::vector<float> verify(const int* tokens, int n, int pos) override {
    if (n <= 0) fail("cpu: verify of ", n, " tokens (need at least one)");
    if (pos < 0 || int64_t(pos) + n > ctx_)
      fail("cpu: positions ", pos, "..", int64_t(pos) + n - 1, " are outside the context of ", ctx_, " positions");
    for (int i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
        fail("cpu: token id ", tokens[i], " is outside the vocabulary of ", c_.vocab_size);
    std::vector<float> out = forward_batch(tokens, n, pos);
    std::copy(out.end() - c_.vocab_size, out.end(), logits_.begin());
    return out;
  }

  // Nothing to undo: attention reads rows [0, pos] only and the next write at pos overwrites. F32 and BF16 rows are
  // stored as they come; FP8 follows CpuKvCache's rule (engine/kv_cache.h): a rewind inside the open block is exact
  // (its rows are kept as computed), one back into an earlier block rounds that block's earlier rows once more.
  void rewind(int pos) override {
    if (pos < 0 || pos > ctx_) fail("cpu: rewind to position ", pos, " outside the context of ", ctx_, " positions");
  }

 private:
  // n tokens at positions pos .. pos+n-1: embedding -> n_layers x (attention, SwiGLU FFN) -> final norm -> logits
  // [n, vocab]. Within a layer each token's K/V row is stored just before that token attends (engine/cpu_slice.h).
  std::vector<float> forward_batch(const int* tokens, int n, int pos) {
    const size_t dim = size_t(c_.dim), nn = size_t(n);
    std::vector<float> x(nn * dim), xb2(nn * dim), logits(nn * size_t(c_.vocab_size));
    for (int j = 0; j < n; ++j) model_->embed(tokens[j], x.data() + size_t(j) * dim);
    for (int l = 0; l < c_.n_layers; ++l) {
      model_->attention(l, pos, n, x.data(), xb2.data());
      for (size_t i = 0; i < nn * dim; ++i) x[i] += xb2[i];
      model_->ffn(l, n, x.data(), xb2.data());
      for (size_t i = 0; i < nn * dim; ++i) x[i] += xb2[i];
    }
    model_->head(n, x.data(), logits.data());
    return logits;
  }

  ModelConfig c_;
  KvDtype kv_dtype_;      // F32 (the default), BF16 or FP8
  int ctx_ = 0;
  int sample_vocab_ = 0;  // sample() picks ids in [0, sample_vocab_)
  std::unique_ptr<cpu::CpuSlice> model_;  // the whole model's weights, KV cache and scratch
  std::vector<float> logits_;             // [vocab] of the last token run
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(model, opt);
}

}  // namespace llm
