// The CPU reference's forward pass in pieces (engine/cpu_slice.h): FP32 weights and math, the plainest forward pass
// (after llama2.c's run.c) with separate head_dim, grouped-query attention and llama3 RoPE frequencies.
#include "engine/cpu_slice.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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
  const int hd = c_.head_dim, q_dim = shape_.n_heads * hd, kv_dim = shape_.n_kv_heads * hd;
  kv_ = std::make_unique<CpuKvCache>(kv_dtype, c_.n_layers, ctx, shape_.n_kv_heads, hd);
  kv_row_.resize(size_t(hd));
  xb_.resize(size_t(std::max(c_.dim, q_dim)));
  q_.resize(size_t(q_dim));
  k_.resize(size_t(kv_dim));
  v_.resize(size_t(kv_dim));
  att_.resize(size_t(ctx));
  hb_.resize(size_t(shape_.hidden));
  hb2_.resize(size_t(shape_.hidden));
}

void CpuSlice::embed(int token, float* x) const {
  std::copy_n(embedding_.data() + size_t(token) * size_t(c_.dim), c_.dim, x);
}

void CpuSlice::attention(int l, int pos, const float* x, float* out) {
  const Layer& w = layers_[size_t(l)];
  const int dim = c_.dim, hd = c_.head_dim, n_heads = shape_.n_heads, n_kv = shape_.n_kv_heads;
  const int q_dim = n_heads * hd, kv_dim = n_kv * hd;
  rmsnorm(xb_.data(), x, w.attn_norm.data(), dim, c_.norm_eps);
  matmul(q_.data(), xb_.data(), w.wq.data(), q_dim, dim);
  matmul(k_.data(), xb_.data(), w.wk.data(), kv_dim, dim);
  matmul(v_.data(), xb_.data(), w.wv.data(), kv_dim, dim);
  rope(q_.data(), n_heads, hd, pos, inv_freq_);
  rope(k_.data(), n_kv, hd, pos, inv_freq_);

  // Caches [n_layers, ctx, kv_dim] (engine/kv_cache.h); attention reads them back as stored (FP8: decoded).
  kv_->store(l, pos, 1, k_.data(), v_.data());

  const int group = c_.n_heads / c_.n_kv_heads;  // query heads sharing one kv head (a slice holds whole groups)
  const float scale = 1.0f / std::sqrt(float(hd));
  for (int h = 0; h < n_heads; ++h) {
    const float* q = q_.data() + size_t(h) * hd;
    const int kv_head = h / group;
    for (int t = 0; t <= pos; ++t) {
      const float* k = kv_->key(l, t, kv_head, kv_row_.data());
      float s = 0.0f;
      for (int i = 0; i < hd; ++i) s += q[i] * k[i];
      att_[size_t(t)] = s * scale;
    }
    softmax(att_.data(), pos + 1);
    float* o = xb_.data() + size_t(h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int t = 0; t <= pos; ++t) {
      const float* v = kv_->value(l, t, kv_head, kv_row_.data());
      const float a = att_[size_t(t)];
      for (int i = 0; i < hd; ++i) o[i] += a * v[i];
    }
  }
  matmul(out, xb_.data(), w.wo.data(), dim, q_dim);
}

void CpuSlice::ffn(int l, const float* x, float* out) {
  const Layer& w = layers_[size_t(l)];
  const int dim = c_.dim, hid = shape_.hidden;
  rmsnorm(xb_.data(), x, w.ffn_norm.data(), dim, c_.norm_eps);
  matmul(hb_.data(), xb_.data(), w.w_gate.data(), hid, dim);
  matmul(hb2_.data(), xb_.data(), w.w_up.data(), hid, dim);
  for (int i = 0; i < hid; ++i) {
    const float g = hb_[size_t(i)];
    hb_[size_t(i)] = g / (1.0f + std::exp(-g)) * hb2_[size_t(i)];
  }
  matmul(out, hb_.data(), w.w_down.data(), dim, hid);
}

void CpuSlice::head(float* x, float* logits) {
  rmsnorm(x, x, final_norm_.data(), c_.dim, c_.norm_eps);
  const std::vector<float>& head = head_is_embedding_ ? embedding_ : head_;
  matmul(logits, x, head.data(), shape_.vocab, c_.dim);
}

}  // namespace llm::cpu
