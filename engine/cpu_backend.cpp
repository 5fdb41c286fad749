// CPU reference backend: FP32 weights and math, the plainest forward pass (after llama2.c's run.c) with separate
// head_dim, grouped-query attention, llama3 RoPE frequencies and a tied or untied head. Correctness first. The
// per-layer pieces are engine/cpu_slice.h's, run here over the whole model (the tensor-parallel simulation,
// engine/cpu_tp_backend.cpp, runs the same pieces over each rank's shards).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cpu_slice.h"

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
    x_.resize(size_t(c_.dim));
    xb2_.resize(size_t(c_.dim));
    logits_.resize(size_t(c_.vocab_size));
  }

  std::string name() const override { return "cpu"; }
  int ctx_size() const override { return ctx_; }

  void prefill(const int* tokens, int n, int pos) override {
    if (n <= 0) fail("cpu: prefill of ", n, " tokens (need at least one)");
    for (int i = 0; i < n; ++i) decode(tokens[i], pos + i);
  }

  void decode(int token, int pos) override {
    if (pos < 0 || pos >= ctx_) fail("cpu: position ", pos, " is outside the context of ", ctx_, " positions");
    if (token < 0 || token >= c_.vocab_size)
      fail("cpu: token id ", token, " is outside the vocabulary of ", c_.vocab_size);
    forward(token, pos);
  }

  // Ids past sample_vocab_ (padding rows of the embedding) are never candidates; NaN or Inf logits stop the run.
  int sample(const SamplerParams& p, uint64_t step) override {
    for (int i = 0; i < sample_vocab_; ++i)
      if (!std::isfinite(logits_[size_t(i)])) fail_non_finite_logits(step);
    return sample_cpu(logits_.data(), sample_vocab_, p, step);
  }

  std::vector<float> logits() override { return logits_; }
  int prefill_piece() const override { return 4; }  // token by token anyway: check Ctrl-C every few tokens

 private:
  // One token at one position: embedding -> n_layers x (attention, SwiGLU FFN) -> final norm -> logits.
  void forward(int token, int pos) {
    model_->embed(token, x_.data());
    for (int l = 0; l < c_.n_layers; ++l) {
      model_->attention(l, pos, x_.data(), xb2_.data());
      for (int i = 0; i < c_.dim; ++i) x_[size_t(i)] += xb2_[size_t(i)];
      model_->ffn(l, x_.data(), xb2_.data());
      for (int i = 0; i < c_.dim; ++i) x_[size_t(i)] += xb2_[size_t(i)];
    }
    model_->head(x_.data(), logits_.data());
  }

  ModelConfig c_;
  KvDtype kv_dtype_;      // F32 (the default), BF16 or FP8
  int ctx_ = 0;
  int sample_vocab_ = 0;  // sample() picks ids in [0, sample_vocab_)
  std::unique_ptr<cpu::CpuSlice> model_;  // the whole model's weights, KV cache and scratch
  std::vector<float> x_;       // [dim] residual stream
  std::vector<float> xb2_;     // [dim] block output before the residual add
  std::vector<float> logits_;  // [vocab]
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(model, opt);
}

}  // namespace llm
