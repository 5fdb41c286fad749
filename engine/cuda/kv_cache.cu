// The CUDA engine's KV cache in its two forms (engine/cuda/kv_cache.h): BF16 rows, and FP8 codes with per-block
// scales. Each form calls its own store and attention kernels; the forward passes see only the interface.
#include "engine/cuda/kv_cache.h"

#include <vector>

#include "core/error.h"
#include "kernels/attention/kv_fp8.h"  // Fp8KvLayer, rope_kv_store_fp8
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"  // rope_kv_store, attention_decode, attention_prefill and their FP8 forms

namespace llm {

namespace {

class Bf16KvCache final : public DeviceKvCache {
 public:
  Bf16KvCache(const ModelConfig& c, int ctx) : c_(c), ctx_(ctx) {}

  void allocate(DeviceArena& arena, cudaStream_t s) override {
    const size_t per_layer = size_t(ctx_) * size_t(c_.kv_dim());
    uint16_t* kv = arena.alloc<uint16_t>(2 * size_t(c_.n_layers) * per_layer);
    k_.resize(size_t(c_.n_layers));
    v_.resize(size_t(c_.n_layers));
    for (int l = 0; l < c_.n_layers; ++l) {
      k_[size_t(l)] = kv + (2 * size_t(l)) * per_layer;
      v_[size_t(l)] = kv + (2 * size_t(l) + 1) * per_layer;
    }
    clear(s);
  }
  // Rows are always written before attention reads them; zeros keep a stray read from producing NaN.
  void clear(cudaStream_t s) const override {
    const size_t per_layer = size_t(ctx_) * size_t(c_.kv_dim());
    if (!k_.empty()) CUDA_CHECK(cudaMemsetAsync(k_[0], 0, 2 * size_t(c_.n_layers) * per_layer * 2, s));
  }
  void store(int l, float* q, float* k, const float* v, const float* inv_freq, const int* d_pos0, int n,
             cudaStream_t s, TokenAxis tok) const override {
    rope_kv_store(q, k, v, inv_freq, d_pos0, n, c_.n_heads, c_.n_kv_heads, c_.head_dim, k_[size_t(l)], v_[size_t(l)],
                  s, tok);
  }
  bool token_axis() const override { return true; }
  void attend_decode(int l, const float* q, const int* d_pos, float* out, void* scratch, cudaStream_t s,
                     AttnSplitParts* defer, TokenAxis tok) const override {
    attention_decode(q, k_[size_t(l)], v_[size_t(l)], d_pos, c_.n_heads, c_.n_kv_heads, c_.head_dim, ctx_, out,
                     scratch, s, defer, tok);
  }
  bool store_attend_decode(int l, const float* q, const float* k, const float* v, const float* inv_freq,
                           const int* d_pos, float* out, void* scratch, cudaStream_t s,
                           AttnSplitParts* defer) const override {
    uint16_t* kc = k_[size_t(l)];
    uint16_t* vc = v_[size_t(l)];
    if (!attention_decode_rope_supported(c_.head_dim, c_.n_heads, c_.n_kv_heads, q, kc, vc, out)) return false;
    attention_decode_rope(q, k, v, inv_freq, kc, vc, d_pos, c_.n_heads, c_.n_kv_heads, c_.head_dim, ctx_, out,
                          scratch, s, defer);
    return true;
  }
  void attend_prefill(int l, const float* q, int pos0, int n, float* out, void* scratch, cudaStream_t s,
                      const int* d_pos0) const override {
    attention_prefill(q, k_[size_t(l)], v_[size_t(l)], pos0, n, c_.n_heads, c_.n_kv_heads, c_.head_dim, out, s,
                      d_pos0, scratch, ctx_);
  }
  uint16_t* k_bf16(int l) const override { return k_[size_t(l)]; }
  uint16_t* v_bf16(int l) const override { return v_[size_t(l)]; }
  bool fp8() const override { return false; }

 private:
  ModelConfig c_;
  int ctx_;
  std::vector<uint16_t*> k_, v_;  // [n_layers] each: [ctx, kv_dim] BF16 rows
};

class Fp8KvCache final : public DeviceKvCache {
 public:
  Fp8KvCache(const ModelConfig& c, int ctx) : c_(c), ctx_(ctx) {}

  void allocate(DeviceArena& arena, cudaStream_t s) override {
    const size_t per_layer = fp8_kv_layer_bytes(ctx_, c_.n_kv_heads, c_.head_dim, kKvFp8Block);
    uint8_t* kv = arena.alloc<uint8_t>(size_t(c_.n_layers) * per_layer);
    layers_.resize(size_t(c_.n_layers));
    for (int l = 0; l < c_.n_layers; ++l) {
      Fp8KvLayer& f = layers_[size_t(l)];
      f = fp8_kv_layer_carve(kv + size_t(l) * per_layer, ctx_, c_.n_kv_heads, c_.head_dim, kKvFp8Block);
    }
    clear(s);
  }
  void clear(cudaStream_t s) const override {
    for (const Fp8KvLayer& f : layers_) fp8_kv_layer_init(f, ctx_, c_.n_kv_heads, c_.head_dim, kKvFp8Block, s);
  }
  // One launch: q rotated in place, k rotated into the FP8 cache (k left as it was).
  void store(int l, float* q, float* k, const float* v, const float* inv_freq, const int* d_pos0, int n,
             cudaStream_t s, TokenAxis tok) const override {
    if (tok.many()) fail("cuda backend: the FP8 KV cache has no token axis (its verify runs as a prefill pass)");
    rope_kv_store_fp8(q, k, v, inv_freq, d_pos0, n, c_.n_heads, c_.n_kv_heads, c_.head_dim, kKvFp8Block, ctx_,
                      layers_[size_t(l)], s);
  }
  bool token_axis() const override { return false; }
  void attend_decode(int l, const float* q, const int* d_pos, float* out, void* scratch, cudaStream_t s,
                     AttnSplitParts* defer, TokenAxis tok) const override {
    if (tok.many()) fail("cuda backend: the FP8 KV cache has no token axis (its verify runs as a prefill pass)");
    const Fp8KvLayer& f = layers_[size_t(l)];
    attention_decode_fp8(q, f.k, f.v, f.k_scale, f.v_scale, d_pos, c_.n_heads, c_.n_kv_heads, c_.head_dim, ctx_, out,
                         scratch, s, defer);
  }
  bool store_attend_decode(int, const float*, const float*, const float*, const float*, const int*, float*, void*,
                           cudaStream_t, AttnSplitParts*) const override {
    return false;  // the FP8 store re-encodes the open block: its own launch (rope_kv_store_fp8)
  }
  void attend_prefill(int l, const float* q, int pos0, int n, float* out, void* scratch, cudaStream_t s,
                      const int* d_pos0) const override {
    if (d_pos0) fail("cuda backend: a captured prefill pass over the FP8 KV cache is not built");
    const Fp8KvLayer& f = layers_[size_t(l)];
    attention_prefill_fp8(q, f.k, f.v, f.k_scale, f.v_scale, pos0, n, c_.n_heads, c_.n_kv_heads, c_.head_dim, out, s,
                          scratch, ctx_);
  }
  uint16_t* k_bf16(int) const override { return nullptr; }
  uint16_t* v_bf16(int) const override { return nullptr; }
  bool fp8() const override { return true; }

 private:
  ModelConfig c_;
  int ctx_;
  std::vector<Fp8KvLayer> layers_;  // [n_layers]: codes, scales and the open block's rows (kernels/attention/kv_fp8.h)
};

}  // namespace

void DeviceKvCache::check(const ModelConfig& c, KvDtype kv, const std::string& source) {
  if (kv == KvDtype::FP8 && !attention_fp8_supported(c.head_dim, c.n_heads, c.n_kv_heads))
    fail("--kv-dtype fp8: the CUDA engine's FP8 attention needs head_dim 64 or 128 (", source, " has ", c.head_dim,
         "); run it with --kv-dtype bf16, or on the CPU reference (--device cpu)");
}

std::unique_ptr<DeviceKvCache> DeviceKvCache::make(const ModelConfig& c, KvDtype kv, int ctx) {
  if (kv == KvDtype::FP8) return std::make_unique<Fp8KvCache>(c, ctx);
  return std::make_unique<Bf16KvCache>(c, ctx);
}

double DeviceKvCache::bytes(const ModelConfig& c, KvDtype kv, int ctx) {
  if (kv == KvDtype::FP8)
    return double(c.n_layers) * double(fp8_kv_layer_bytes(ctx, c.n_kv_heads, c.head_dim, kKvFp8Block));
  return 2.0 * c.n_layers * double(ctx) * double(c.kv_dim()) * 2.0;
}

}  // namespace llm
