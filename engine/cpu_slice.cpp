// The CPU reference's forward pass in pieces (engine/cpu_slice.h): FP32 weights and math, the plainest forward pass
// (after llama2.c's run.c) with separate head_dim, grouped-query attention and llama3 RoPE frequencies.
#include "engine/cpu_slice.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/backend.h"  // BackendOptions, default_ctx_size

namespace llm::cpu {

namespace {

void matmul_rows(float* y, const float* x, const float* W, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* w = W + r * cols;
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) s += w[c] * x[c];
    y[r] = s;
  }
}

// The vectors go in groups of kLanes, transposed into xt [cols, kLanes] (zeros past k), so each weight element is
// loaded once for the group and multiplies a row of lanes held in SIMD registers (GCC/clang vector types), two weight
// rows at a time so the two rows' add chains overlap. Every lane still adds its products in matmul_rows' order (a
// multiply, then an add), so each Y[j] is bit for bit what matmul would give for X[j] alone.
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

// A weight matrix as FP32, optionally through BF16 first (the GPU's storage type).
std::vector<float> load_f32(const HostTensor& t, bool round_to_bf16) {
  std::vector<float> v = t.to_f32();
  if (round_to_bf16)
    for (float& f : v) f = round_bf16(f);
  return v;
}

uint64_t kv_bytes(const ModelConfig& c, KvDtype kv_dtype, int ctx) {
  return CpuKvCache::bytes(kv_dtype, c.n_layers, c.kv_dim(), c.n_kv_heads, ctx);
}

}  // namespace

// Small matrices are not worth a thread start.
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

void swiglu(float* h, const float* u, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = h[i];
    h[i] = g / (1.0f + std::exp(-g)) * u[i];
  }
}

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(float(ss / n) + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

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

void softmax(float* x, int n) {
  const float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] - mx);
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

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

uint64_t weight_bytes(const Model& model) {
  const ModelWeights& w = model.weights;
  uint64_t n = uint64_t(w.embedding.numel()) + uint64_t(w.final_norm.numel());
  if (!model.config.tied_embeddings) n += uint64_t(w.head.numel());
  for (const LayerWeights& l : w.layers)
    for (const HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += uint64_t(t->numel());
  return n * 4;
}

int choose_ctx(const Model& model, const BackendOptions& opt, KvDtype kv_dtype, uint64_t weights, const char* who) {
  const ModelConfig& c = model.config;
  if (opt.ctx_size < 0) fail(who, ": ctx-size must be >= 0, found ", opt.ctx_size);
  if (opt.ctx_size > c.max_seq_len)
    fail(who, ": ctx-size ", opt.ctx_size, " exceeds the model's maximum of ", c.max_seq_len, " positions");
  // KV bytes per position (FP8: its scales spread over their block, rounded up); F32: 2 * n_layers * kv_dim * 4.
  const uint64_t per_pos = (kv_bytes(c, kv_dtype, kKvFp8Block) + uint64_t(kKvFp8Block) - 1) / uint64_t(kKvFp8Block);
  const uint64_t avail = available_host_bytes();
  const int dflt = opt.ctx_size > 0 ? 0 : default_ctx_size(c, stderr);
  int ctx = opt.ctx_size > 0 ? opt.ctx_size : dflt;
  if (opt.ctx_size == 0 && avail > weights && weights + per_pos * uint64_t(ctx) > avail) {
    // Leave a quarter of what remains for everything else in the process and the system.
    const uint64_t fit = (avail - weights) / 4 * 3 / per_pos;
    if (fit >= 1) {
      ctx = int(std::min<uint64_t>(fit, uint64_t(ctx)));
      std::fprintf(stderr, "%s: context capped to %d positions (of %d) so the KV cache fits in memory\n", who, ctx,
                   dflt);
    }
  }
  const uint64_t kv = kv_bytes(c, kv_dtype, ctx);
  const uint64_t need = weights + kv;
  if (avail > 0 && need > avail)
    fail(who, ": not enough host memory for ", model.source, ": need ", need, " bytes (FP32 weights ", weights,
         " + KV cache ", kv, " for ", ctx, " positions", kv_dtype == KvDtype::F32 ? "" : " in ",
         kv_dtype == KvDtype::F32 ? "" : kv_dtype_name(kv_dtype), "), available ", avail);
  return ctx;
}

CpuSlice::CpuSlice(const ModelConfig& c, const SliceShape& shape, const ModelWeights& w, bool head_is_embedding,
                   bool bf16, KvDtype kv_dtype, int ctx)
    : c_(c), shape_(shape), inv_freq_(rope_inv_freq(c)), head_is_embedding_(head_is_embedding) {
  embedding_ = load_f32(w.embedding, bf16);
  if (!head_is_embedding_) head_ = load_f32(w.head, bf16);
  final_norm_ = load_f32(w.final_norm, false);  // norm weights stay FP32 on the GPU as well
  layers_.resize(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& s = w.layers[i];
    Layer& d = layers_[i];
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
  kv_ = std::make_unique<CpuKvCache>(kv_dtype, c_.n_layers, ctx, shape_.n_kv_heads, c_.head_dim);
  kv_row_.resize(size_t(c_.head_dim));
  att_.resize(size_t(ctx));
  reserve(1);
}

void CpuSlice::reserve(int n) {
  if (n <= n_) return;
  n_ = n;
  const size_t hd = size_t(c_.head_dim), q_dim = size_t(shape_.n_heads) * hd, kv_dim = size_t(shape_.n_kv_heads) * hd;
  xb_.resize(size_t(n) * std::max(size_t(c_.dim), q_dim));
  q_.resize(size_t(n) * q_dim);
  k_.resize(size_t(n) * kv_dim);
  v_.resize(size_t(n) * kv_dim);
  hb_.resize(size_t(n) * size_t(shape_.hidden));
  hb2_.resize(size_t(n) * size_t(shape_.hidden));
}

void CpuSlice::embed(int token, float* x) const {
  std::copy_n(embedding_.data() + size_t(token) * size_t(c_.dim), c_.dim, x);
}

void CpuSlice::attention(int l, int pos, int n, const float* x, float* out) {
  reserve(n);
  const Layer& w = layers_[size_t(l)];
  const int dim = c_.dim, hd = c_.head_dim, n_heads = shape_.n_heads, n_kv = shape_.n_kv_heads;
  const int q_dim = n_heads * hd, kv_dim = n_kv * hd;
  const auto at = [](std::vector<float>& a, int j, int width) { return a.data() + size_t(j) * size_t(width); };
  for (int j = 0; j < n; ++j)
    rmsnorm(at(xb_, j, dim), x + size_t(j) * size_t(dim), w.attn_norm.data(), dim, c_.norm_eps);
  matmul_k(q_.data(), xb_.data(), w.wq.data(), q_dim, dim, n);
  matmul_k(k_.data(), xb_.data(), w.wk.data(), kv_dim, dim, n);
  matmul_k(v_.data(), xb_.data(), w.wv.data(), kv_dim, dim, n);
  for (int j = 0; j < n; ++j) {
    rope(at(q_, j, q_dim), n_heads, hd, pos + j, inv_freq_);
    rope(at(k_, j, kv_dim), n_kv, hd, pos + j, inv_freq_);
    // Caches [n_layers, ctx, kv_dim] (engine/kv_cache.h); attention reads them back as stored (FP8: decoded).
    kv_->store(l, pos + j, 1, at(k_, j, kv_dim), at(v_, j, kv_dim));
    attend(at(q_, j, q_dim), l, pos + j, at(xb_, j, q_dim));
  }
  matmul_k(out, xb_.data(), w.wo.data(), dim, q_dim, n);
}

void CpuSlice::attend(const float* q_all, int l, int pos, float* out_all) {
  const int hd = c_.head_dim;
  const int group = c_.n_heads / c_.n_kv_heads;  // query heads sharing one kv head (a slice holds whole groups)
  const float scale = 1.0f / std::sqrt(float(hd));
  for (int h = 0; h < shape_.n_heads; ++h) {
    const float* q = q_all + size_t(h) * hd;
    const int kv_head = h / group;
    for (int t = 0; t <= pos; ++t) {
      const float* k = kv_->key(l, t, kv_head, kv_row_.data());
      float s = 0.0f;
      for (int i = 0; i < hd; ++i) s += q[i] * k[i];
      att_[size_t(t)] = s * scale;
    }
    softmax(att_.data(), pos + 1);
    float* o = out_all + size_t(h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int t = 0; t <= pos; ++t) {
      const float* v = kv_->value(l, t, kv_head, kv_row_.data());
      const float a = att_[size_t(t)];
      for (int i = 0; i < hd; ++i) o[i] += a * v[i];
    }
  }
}

void CpuSlice::ffn(int l, int n, const float* x, float* out) {
  reserve(n);
  const Layer& w = layers_[size_t(l)];
  const int dim = c_.dim, hid = shape_.hidden;
  for (int j = 0; j < n; ++j)
    rmsnorm(xb_.data() + size_t(j) * size_t(dim), x + size_t(j) * size_t(dim), w.ffn_norm.data(), dim, c_.norm_eps);
  matmul_k(hb_.data(), xb_.data(), w.w_gate.data(), hid, dim, n);
  matmul_k(hb2_.data(), xb_.data(), w.w_up.data(), hid, dim, n);
  swiglu(hb_.data(), hb2_.data(), n * hid);
  matmul_k(out, hb_.data(), w.w_down.data(), dim, hid, n);
}

void CpuSlice::head(int n, float* x, float* logits) {
  for (int j = 0; j < n; ++j) {
    float* xj = x + size_t(j) * size_t(c_.dim);
    rmsnorm(xj, xj, final_norm_.data(), c_.dim, c_.norm_eps);
  }
  const std::vector<float>& head = head_is_embedding_ ? embedding_ : head_;
  matmul_k(logits, x, head.data(), shape_.vocab, c_.dim, n);
}

}  // namespace llm::cpu
