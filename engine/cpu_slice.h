// The CPU reference's forward pass in pieces, over a SLICE of the model: the whole model (the CPU reference,
// engine/cpu_backend.cpp) or the shards one tensor-parallel rank holds (engine/cpu_tp_backend.cpp, engine/tp_plan.h).
// One code path for both, so the simulated ranks check the sharding, not a second copy of the math. Each piece takes
// n tokens at positions pos .. pos + n - 1 (speculative verify and prefill: each weight row read once for the n;
// decode: n = 1), with the same logits, bit for bit, as n calls of one token.
//
// A slice holds FP32 weights (optionally rounded through BF16 first), its own KV cache for its KV heads and its own
// scratch. Per layer it computes a PARTIAL block output: for the whole model that is the block output itself; for a
// rank, its share of it (o and down are split by input columns), which the ranks' all-reduce sums. The caller owns
// the residual stream x and adds the (summed) outputs to it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/kv_dtype.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace llm {

struct BackendOptions;

namespace cpu {

// y[r] = sum_c W[r, c] * x[c] for r < rows; W [rows, cols] row-major. Large matrices are split over the cores by
// output rows (each row's sum is the same whatever the split).
void matmul(float* y, const float* x, const float* W, int64_t rows, int64_t cols);
// The k-vector form: Y[j, r] = sum_c W[r, c] * X[j, c] for j < k (X [k, cols], Y [k, rows]), each Y[j] bit for bit
// what matmul gives for X[j] alone; k = 1 is matmul. The vectors go kLanes at a time.
constexpr int kLanes = 8;
void matmul_k(float* Y, const float* X, const float* W, int64_t rows, int64_t cols, int k);
// h[i] = silu(h[i]) * u[i]
void swiglu(float* h, const float* u, int n);
// out = x * 1/sqrt(mean(x^2) + eps) * w.   out may alias x.
void rmsnorm(float* out, const float* x, const float* w, int n, float eps);
// Rotates interleaved pairs (2i, 2i+1) of every head by pos * inv_freq[i].   v [n_heads, head_dim]
void rope(float* v, int n_heads, int head_dim, int pos, const std::vector<float>& inv_freq);
void softmax(float* x, int n);

// Bytes of memory the kernel says could be given to a new allocation without swapping (0: unknown).
uint64_t available_host_bytes();
// FP32 bytes of every weight the CPU reference converts (the head counted once when tied).
uint64_t weight_bytes(const Model& model);
// The context the CPU reference runs with: opt.ctx_size, or the default capped so the KV cache fits in memory
// (said on stderr); refuses (llm::Error, prefixed by `who`) a context or a model that does not fit in host memory.
// `weights` are the FP32 weight bytes the backend will hold.
int choose_ctx(const Model& model, const BackendOptions& opt, KvDtype kv_dtype, uint64_t weights, const char* who);

// The counts a slice holds: the whole model's, or one rank's share (engine/tp_plan.h).
struct SliceShape {
  int n_heads = 0;     // query heads (whole; their GQA groups complete)
  int n_kv_heads = 0;  // KV heads
  int hidden = 0;      // FFN rows of gate/up, columns of down
  int vocab = 0;       // rows of the head
};

class CpuSlice {
 public:
  // `w` holds the slice's tensors in their sliced shapes (for a rank: engine/tp_plan.h shard_weights). When
  // `head_is_embedding`, the head is the embedding itself (a tied model run whole) and w.head is not read.
  CpuSlice(const ModelConfig& c, const SliceShape& shape, const ModelWeights& w, bool head_is_embedding,
           bool bf16_weights, KvDtype kv_dtype, int ctx);

  const SliceShape& shape() const { return shape_; }
  // x [dim] = the embedding row of `token`.
  void embed(int token, float* x) const;
  // For each of n tokens j at position pos + j (x, out [n, dim]): out[j] = Wo * attention(Wq*xn; cached K/V up to
  // and including its position), xn = rmsnorm(x[j]): this slice's heads only. Each token's K/V row is stored just
  // before it attends, as n single-token calls would.
  void attention(int layer, int pos, int n, const float* x, float* out);
  // out[j] = W_down * (silu(W_gate * xn) * (W_up * xn)), xn = rmsnorm(x[j]): this slice's FFN rows only.
  void ffn(int layer, int n, const float* x, float* out);
  // x[j] = final rmsnorm(x[j]) (in place), logits [n, shape.vocab] = head * x[j]: this slice's vocabulary rows.
  void head(int n, float* x, float* logits);

 private:
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
  };

  ModelConfig c_;
  SliceShape shape_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  bool head_is_embedding_;

  std::vector<float> embedding_;   // [vocab, dim]
  std::vector<float> head_;        // [shape.vocab, dim], empty when the head is the embedding
  std::vector<float> final_norm_;  // [dim]
  std::vector<Layer> layers_;

  // out [q_dim] = softmax(q . K[0..pos] / sqrt(head_dim)) V[0..pos] per query head, from `layer`'s cache as stored.
  void attend(const float* q_all, int layer, int pos, float* out_all);
  void reserve(int n);  // scratch for n tokens

  std::unique_ptr<CpuKvCache> kv_;  // K and V [n_layers, ctx, shape.n_kv_heads * head_dim]
  std::vector<float> kv_row_;       // [head_dim] one cached row decoded (BF16, FP8)
  int n_ = 0;                       // tokens the scratch below holds
  std::vector<float> xb_;           // [n, max(dim, q_dim)] normed input ([n, dim]), then attention output ([n, q_dim])
  std::vector<float> q_, k_, v_;    // [n, q_dim], [n, kv_dim], [n, kv_dim] of the slice
  std::vector<float> att_;          // [ctx] attention scores of one head
  std::vector<float> hb_, hb2_;     // [n, hidden] gate, up
};

}  // namespace cpu
}  // namespace llm
