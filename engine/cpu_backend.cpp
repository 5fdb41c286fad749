// CPU reference backend: FP32 weights and math, the plainest forward pass (after llama2.c's run.c) with separate
// head_dim, grouped-query attention, llama3 RoPE frequencies and a tied or untied head. Correctness first.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/kv_cache.h"  // CpuKvCache: F32 (default), BF16 or FP8 rows

namespace llm {

namespace {

// Bytes of memory the kernel says could be given to a new allocation without swapping.
uint64_t available_host_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// y[r] = sum_c W[r, c] * x[c] for r < rows.   W [rows, cols] row-major.
void matmul_rows(float* y, const float* x, const float* W, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* w = W + r * cols;
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) s += w[c] * x[c];
    y[r] = s;
  }
}

// Large matrices are split over the cores by output rows; small ones are not worth a thread start.
void matmul(float* y, const float* x, const float* W, int64_t rows, int64_t cols) {
  static const int n_threads = int(std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
  if (n_threads == 1 || rows * cols < (int64_t(1) << 18)) {
    matmul_rows(y, x, W, 0, rows, cols);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (rows + n_threads - 1) / n_threads;
  for (int t = 0; t < n_threads; ++t) {
    int64_t r0 = t * chunk, r1 = std::min(rows, r0 + chunk);
    if (r0 < r1) pool.emplace_back(matmul_rows, y, x, W, r0, r1, cols);
  }
  for (auto& th : pool) th.join();
}

// The k-vector form (speculative verify): Y[j, r] = sum_c W[r, c] * X[j, c] for j < k, rows r0 .. r1. The vectors go
// in groups of kLanes, transposed into xt [cols, kLanes] (zeros past k), so each weight element is loaded once for the
// group and multiplies a row of lanes held in SIMD registers (GCC/clang vector types), two weight rows at a time so
// the two rows' add chains overlap. Every lane still adds its products in matmul_rows' order (a multiply, then an
// add), so each Y[j] is bit for bit what matmul would give for X[j] alone.
constexpr int kLanes = 8;
typedef float Lanes4 __attribute__((vector_size(16)));

void matmul_k_rows(float* Y, const float* xt, const float* W, int64_t r0, int64_t r1, int64_t rows, int64_t cols,
                   int lanes) {
  int64_t r = r0;
  for (; r < r1; r += 2) {
    const bool two = r + 1 < r1;
    const float* w0 = W + r * cols;
    const float* w1 = two ? w0 + cols : w0;
    Lanes4 a0 = {}, a1 = {}, b0 = {}, b1 = {};  // row r lanes 0-3, 4-7; row r + 1 the same
    for (int64_t c = 0; c < cols; ++c) {
      Lanes4 x0, x1;
      std::memcpy(&x0, xt + c * kLanes, sizeof x0);
      std::memcpy(&x1, xt + c * kLanes + 4, sizeof x1);
      const Lanes4 p0 = w0[c] * x0, p1 = w0[c] * x1, q0 = w1[c] * x0, q1 = w1[c] * x1;
      a0 += p0;
      a1 += p1;
      b0 += q0;
      b1 += q1;
    }
    for (int j = 0; j < lanes; ++j) {
      Y[j * rows + r] = j < 4 ? a0[j] : a1[j - 4];
      if (two) Y[j * rows + r + 1] = j < 4 ? b0[j] : b1[j - 4];
    }
  }
}

void matmul_k(float* Y, const float* X, const float* W, int64_t rows, int64_t cols, int k) {
  if (k == 1) return matmul(Y, X, W, rows, cols);
  static const int n_threads = int(std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
  std::vector<float> xt(size_t(cols) * kLanes);
  for (int j0 = 0; j0 < k; j0 += kLanes) {
    const int lanes = std::min(kLanes, k - j0);
    std::fill(xt.begin(), xt.end(), 0.0f);
    for (int j = 0; j < lanes; ++j)
      for (int64_t c = 0; c < cols; ++c) xt[size_t(c) * kLanes + size_t(j)] = X[(j0 + j) * cols + c];
    float* y = Y + j0 * rows;
    if (n_threads == 1 || rows * cols < (int64_t(1) << 18)) {
      matmul_k_rows(y, xt.data(), W, 0, rows, rows, cols, lanes);
      continue;
    }
    std::vector<std::thread> pool;
    const int64_t chunk = (rows + n_threads - 1) / n_threads;
    for (int t = 0; t < n_threads; ++t) {
      int64_t r0 = t * chunk, r1 = std::min(rows, r0 + chunk);
      if (r0 < r1) pool.emplace_back(matmul_k_rows, y, xt.data(), W, r0, r1, rows, cols, lanes);
    }
    for (auto& th : pool) th.join();
  }
}

// out = x * 1/sqrt(mean(x^2) + eps) * w.   out may alias x.
void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(float(ss / n) + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

// Rotates interleaved pairs (2i, 2i+1) of every head by pos * inv_freq[i].   v [n_heads, head_dim]
void rope(float* v, int n_heads, int head_dim, int pos, const std::vector<float>& inv_freq) {
  for (int h = 0; h < n_heads; ++h) {
    float* x = v + size_t(h) * head_dim;
    for (int i = 0; i < head_dim / 2; ++i) {
      const float a = float(pos) * inv_freq[size_t(i)];
      const float c = std::cos(a), s = std::sin(a);
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * c - x1 * s;
      x[2 * i + 1] = x0 * s + x1 * c;
    }
  }
}

// h[i] = silu(h[i]) * u[i]
void swiglu(float* h, const float* u, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = h[i];
    h[i] = g / (1.0f + std::exp(-g)) * u[i];
  }
}

void softmax(float* x, int n) {
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] - mx);
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

// A weight matrix as FP32, optionally through BF16 first (the GPU's storage type).
std::vector<float> load_f32(const HostTensor& t, bool round_to_bf16) {
  std::vector<float> v = t.to_f32();
  if (round_to_bf16)
    for (float& f : v) f = round_bf16(f);
  return v;
}

struct CpuLayer {
  std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const BackendOptions& opt)
      : c_(model.config),
        inv_freq_(rope_inv_freq(c_)),
        kv_dtype_(opt.kv_dtype == KvDtype::Default ? KvDtype::F32 : opt.kv_dtype) {
    if (opt.sample_vocab < 0 || opt.sample_vocab > c_.vocab_size)
      fail("cpu: sample_vocab ", opt.sample_vocab, " outside 0..", c_.vocab_size);
    sample_vocab_ = opt.sample_vocab > 0 ? opt.sample_vocab : c_.vocab_size;
    ctx_ = choose_ctx(model, opt);
    load_weights(model, opt.bf16_weights);
    kv_ = std::make_unique<CpuKvCache>(kv_dtype_, c_.n_layers, ctx_, c_.n_kv_heads, c_.head_dim);
    kv_row_.resize(size_t(c_.head_dim));
    x_.resize(size_t(c_.dim));
    xb_.resize(size_t(std::max(c_.dim, c_.q_dim())));
    xb2_.resize(size_t(c_.dim));
    q_.resize(size_t(c_.q_dim()));
    k_.resize(size_t(c_.kv_dim()));
    v_.resize(size_t(c_.kv_dim()));
    att_.resize(size_t(ctx_));
    hb_.resize(size_t(c_.hidden_dim));
    hb2_.resize(size_t(c_.hidden_dim));
    logits_.resize(size_t(c_.vocab_size));
  }

  std::string name() const override { return "cpu"; }
  int ctx_size() const override { return ctx_; }

  // In passes of kLanes tokens through verify's batched forward (the same logits as one decode per token, bit for bit).
  void prefill(const int* tokens, int n, int pos) override {
    if (n <= 0) fail("cpu: prefill of ", n, " tokens (need at least one)");
    for (int i = 0; i < n; i += kLanes) verify(tokens + i, std::min(kLanes, n - i), pos + i);
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
  int prefill_piece() const override { return 2 * kLanes; }  // check Ctrl-C every two passes

  bool supports_verify() const override { return true; }
  int sample_vocab() const override { return sample_vocab_; }

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
  int choose_ctx(const Model& model, const BackendOptions& opt) const {
    if (opt.ctx_size < 0) fail("cpu: ctx-size must be >= 0, found ", opt.ctx_size);
    if (opt.ctx_size > c_.max_seq_len)
      fail("cpu: ctx-size ", opt.ctx_size, " exceeds the model's maximum of ", c_.max_seq_len, " positions");
    const uint64_t weights = weight_bytes(model);
    // KV bytes per position (FP8: its scales spread over their block, rounded up); F32: 2 * n_layers * kv_dim * 4.
    const uint64_t per_pos =
        (kv_bytes(kKvFp8Block) + uint64_t(kKvFp8Block) - 1) / uint64_t(kKvFp8Block);
    const uint64_t avail = available_host_bytes();
    const int dflt = opt.ctx_size > 0 ? 0 : default_ctx_size(c_, stderr);
    int ctx = opt.ctx_size > 0 ? opt.ctx_size : dflt;
    if (opt.ctx_size == 0 && avail > weights && weights + per_pos * uint64_t(ctx) > avail) {
      // Leave a quarter of what remains for everything else in the process and the system.
      const uint64_t fit = (avail - weights) / 4 * 3 / per_pos;
      if (fit >= 1) {
        ctx = int(std::min<uint64_t>(fit, uint64_t(ctx)));
        std::fprintf(stderr, "cpu: context capped to %d positions (of %d) so the KV cache fits in memory\n", ctx,
                     dflt);
      }
    }
    const uint64_t need = weights + kv_bytes(ctx);
    if (avail > 0 && need > avail)
      fail("cpu: not enough host memory for ", model.source, ": need ", need, " bytes (FP32 weights ", weights,
           " + KV cache ", kv_bytes(ctx), " for ", ctx, " positions", kv_dtype_ == KvDtype::F32 ? "" : " in ",
           kv_dtype_ == KvDtype::F32 ? "" : kv_dtype_name(kv_dtype_), "), available ", avail);
    return ctx;
  }

  uint64_t kv_bytes(int ctx) const {
    return CpuKvCache::bytes(kv_dtype_, c_.n_layers, c_.kv_dim(), c_.n_kv_heads, ctx);
  }

  uint64_t weight_bytes(const Model& model) const {
    const ModelWeights& w = model.weights;
    uint64_t n = uint64_t(w.embedding.numel()) + uint64_t(w.final_norm.numel());
    if (!c_.tied_embeddings) n += uint64_t(w.head.numel());
    for (const LayerWeights& l : w.layers)
      for (const HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
        n += uint64_t(t->numel());
    return n * 4;
  }

  void load_weights(const Model& model, bool bf16) {
    const ModelWeights& w = model.weights;
    if (int(w.layers.size()) != c_.n_layers)
      fail("cpu: ", model.source, " has ", w.layers.size(), " layers of weights, config says ", c_.n_layers);
    embedding_ = load_f32(w.embedding, bf16);
    if (!c_.tied_embeddings) head_ = load_f32(w.head, bf16);
    final_norm_ = load_f32(w.final_norm, false);  // norm weights stay FP32 on the GPU as well
    layers_.resize(w.layers.size());
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const LayerWeights& s = w.layers[i];
      CpuLayer& d = layers_[i];
      d.attn_norm = load_f32(s.attn_norm, false);
      d.ffn_norm = load_f32(s.ffn_norm, false);
      d.wq = load_f32(s.wq, bf16);
      d.wk = load_f32(s.wk, bf16);
      d.wv = load_f32(s.wv, bf16);
      d.wo = load_f32(s.wo, bf16);
      d.w_gate = load_f32(s.w_gate, bf16);
      d.w_up = load_f32(s.w_up, bf16);
      d.w_down = load_f32(s.w_down, bf16);
    }
  }

  // One token at one position: embedding -> n_layers x (attention, SwiGLU FFN) -> final norm -> logits.
  void forward(int token, int pos) {
    const int dim = c_.dim;
    std::copy_n(embedding_.data() + size_t(token) * dim, dim, x_.data());
    for (int l = 0; l < c_.n_layers; ++l) {
      attention_block(layers_[size_t(l)], l, pos);
      ffn_block(layers_[size_t(l)]);
    }
    rmsnorm(x_.data(), x_.data(), final_norm_.data(), dim, c_.norm_eps);
    const std::vector<float>& head = c_.tied_embeddings ? embedding_ : head_;
    matmul(logits_.data(), x_.data(), head.data(), c_.vocab_size, dim);
  }

  // x += Wo * attention(q = Wq*xn, cached k/v including this position), xn = rmsnorm(x).
  void attention_block(const CpuLayer& w, int l, int pos) {
    const int dim = c_.dim, hd = c_.head_dim, kv_dim = c_.kv_dim(), q_dim = c_.q_dim();
    rmsnorm(xb_.data(), x_.data(), w.attn_norm.data(), dim, c_.norm_eps);
    matmul(q_.data(), xb_.data(), w.wq.data(), q_dim, dim);
    matmul(k_.data(), xb_.data(), w.wk.data(), kv_dim, dim);
    matmul(v_.data(), xb_.data(), w.wv.data(), kv_dim, dim);
    rope(q_.data(), c_.n_heads, hd, pos, inv_freq_);
    rope(k_.data(), c_.n_kv_heads, hd, pos, inv_freq_);

    // Caches [n_layers, ctx, kv_dim] (engine/kv_cache.h); attention reads them back as stored (FP8: decoded).
    kv_->store(l, pos, 1, k_.data(), v_.data());

    attend(q_.data(), l, pos, xb_.data());
    matmul(xb2_.data(), xb_.data(), w.wo.data(), dim, q_dim);
    for (int i = 0; i < dim; ++i) x_[size_t(i)] += xb2_[size_t(i)];
  }

  // out [q_dim] = softmax(q . K[0..pos] / sqrt(head_dim)) V[0..pos] per query head, from `layer`'s cache as stored.
  void attend(const float* q_all, int l, int pos, float* out_all) {
    const int hd = c_.head_dim;
    const int group = c_.n_heads / c_.n_kv_heads;  // query heads sharing one kv head
    const float scale = 1.0f / std::sqrt(float(hd));
    for (int h = 0; h < c_.n_heads; ++h) {
      const float* q = q_all + size_t(h) * hd;
      const int kv_head = h / group;
      for (int t = 0; t <= pos; ++t) {
        const float* k = kv_->key(l, t, kv_head, kv_row_.data());
        float s = 0.0f;
        for (int i = 0; i < hd; ++i) s += q[i] * k[i];
        att_[size_t(t)] = s * scale;
      }
      softmax(att_.data(), pos + 1);
      float* out = out_all + size_t(h) * hd;
      std::fill(out, out + hd, 0.0f);
      for (int t = 0; t <= pos; ++t) {
        const float* v = kv_->value(l, t, kv_head, kv_row_.data());
        const float a = att_[size_t(t)];
        for (int i = 0; i < hd; ++i) out[i] += a * v[i];
      }
    }
  }

  // forward() for n tokens at positions pos .. pos+n-1: every projection as one matmul_k over the n vectors. Within a
  // layer each token's K/V row is stored just before that token attends, so attention (FP8 scales included) sees
  // what n decode() calls would; returns the logits [n, vocab].
  std::vector<float> forward_batch(const int* tokens, int n, int pos) {
    const int dim = c_.dim, hd = c_.head_dim, kv_dim = c_.kv_dim(), q_dim = c_.q_dim(), hid = c_.hidden_dim;
    const size_t nn = size_t(n);
    std::vector<float> x(nn * dim), xb(nn * std::max(dim, q_dim)), xb2(nn * dim), q(nn * q_dim), k(nn * kv_dim),
        v(nn * kv_dim), hb(nn * hid), hb2(nn * hid), logits(nn * size_t(c_.vocab_size));
    auto at = [](std::vector<float>& a, int j, int width) { return a.data() + size_t(j) * size_t(width); };
    for (int j = 0; j < n; ++j) std::copy_n(embedding_.data() + size_t(tokens[j]) * dim, dim, at(x, j, dim));
    for (int l = 0; l < c_.n_layers; ++l) {
      const CpuLayer& w = layers_[size_t(l)];
      for (int j = 0; j < n; ++j) rmsnorm(at(xb, j, dim), at(x, j, dim), w.attn_norm.data(), dim, c_.norm_eps);
      matmul_k(q.data(), xb.data(), w.wq.data(), q_dim, dim, n);
      matmul_k(k.data(), xb.data(), w.wk.data(), kv_dim, dim, n);
      matmul_k(v.data(), xb.data(), w.wv.data(), kv_dim, dim, n);
      for (int j = 0; j < n; ++j) {
        rope(at(q, j, q_dim), c_.n_heads, hd, pos + j, inv_freq_);
        rope(at(k, j, kv_dim), c_.n_kv_heads, hd, pos + j, inv_freq_);
        kv_->store(l, pos + j, 1, at(k, j, kv_dim), at(v, j, kv_dim));
        attend(at(q, j, q_dim), l, pos + j, at(xb, j, q_dim));
      }
      matmul_k(xb2.data(), xb.data(), w.wo.data(), dim, q_dim, n);
      for (size_t i = 0; i < nn * dim; ++i) x[i] += xb2[i];
      for (int j = 0; j < n; ++j) rmsnorm(at(xb, j, dim), at(x, j, dim), w.ffn_norm.data(), dim, c_.norm_eps);
      matmul_k(hb.data(), xb.data(), w.w_gate.data(), hid, dim, n);
      matmul_k(hb2.data(), xb.data(), w.w_up.data(), hid, dim, n);
      swiglu(hb.data(), hb2.data(), n * hid);
      matmul_k(xb2.data(), hb.data(), w.w_down.data(), dim, hid, n);
      for (size_t i = 0; i < nn * dim; ++i) x[i] += xb2[i];
    }
    for (int j = 0; j < n; ++j) rmsnorm(at(x, j, dim), at(x, j, dim), final_norm_.data(), dim, c_.norm_eps);
    const std::vector<float>& head = c_.tied_embeddings ? embedding_ : head_;
    matmul_k(logits.data(), x.data(), head.data(), c_.vocab_size, dim, n);
    return logits;
  }

  // x += W_down * (silu(W_gate * xn) * (W_up * xn)), xn = rmsnorm(x).
  void ffn_block(const CpuLayer& w) {
    const int dim = c_.dim, hid = c_.hidden_dim;
    rmsnorm(xb_.data(), x_.data(), w.ffn_norm.data(), dim, c_.norm_eps);
    matmul(hb_.data(), xb_.data(), w.w_gate.data(), hid, dim);
    matmul(hb2_.data(), xb_.data(), w.w_up.data(), hid, dim);
    swiglu(hb_.data(), hb2_.data(), hid);
    matmul(xb2_.data(), hb_.data(), w.w_down.data(), dim, hid);
    for (int i = 0; i < dim; ++i) x_[size_t(i)] += xb2_[size_t(i)];
  }

  ModelConfig c_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  int ctx_ = 0;
  int sample_vocab_ = 0;  // sample() picks ids in [0, sample_vocab_)

  std::vector<float> embedding_;   // [vocab, dim]
  std::vector<float> head_;        // [vocab, dim], empty when tied to the embedding
  std::vector<float> final_norm_;  // [dim]
  std::vector<CpuLayer> layers_;

  KvDtype kv_dtype_;                      // F32 (the default), BF16 or FP8
  std::unique_ptr<CpuKvCache> kv_;        // K and V [n_layers, ctx, kv_dim] in that form
  std::vector<float> kv_row_;             // [head_dim] one cached row decoded (BF16, FP8)
  std::vector<float> x_;                  // [dim] residual stream
  std::vector<float> xb_;                 // [max(dim, q_dim)] normed input, then attention output
  std::vector<float> xb2_;                // [dim] block output before the residual add
  std::vector<float> q_, k_, v_;          // [q_dim], [kv_dim], [kv_dim]
  std::vector<float> att_;                // [ctx] attention scores of one head
  std::vector<float> hb_, hb2_;           // [hidden_dim] gate, up
  std::vector<float> logits_;             // [vocab]
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(model, opt);
}

}  // namespace llm
