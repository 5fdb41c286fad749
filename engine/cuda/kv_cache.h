// The CUDA engine's KV cache: one type with two element forms behind one interface, the device twin of CpuKvCache
// (engine/kv_cache.h). BF16 (the default) keeps K and V as BF16 rows [ctx, kv_dim] per layer; FP8 (--kv-dtype fp8)
// keeps E4M3 codes with per-block scales and the open block's rows (kernels/attention/kv_fp8.h), byte for byte
// CpuKvCache's FP8 form. The forward passes only store (RoPE fused in), attend (decode and prefill) and ask for bytes;
// which form runs is decided here once, so no pass branches on the element type.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/kv_dtype.h"
#include "engine/cuda/resources.h"  // DeviceArena
#include "kernels/attention/split_rule.h"  // AttnSplitParts
#include "kernels/ops/token_axis.h"        // TokenAxis
#include "models/config.h"

namespace llm {

class DeviceKvCache {
 public:
  virtual ~DeviceKvCache() = default;

  // FP8 fails by name for a shape its attention does not take (head_dim other than 64 and 128), naming `source`;
  // called before the memory plan, so that refusal comes first.
  static void check(const ModelConfig& c, KvDtype kv, const std::string& source);
  // The cache for c at ctx positions in form `kv` (FP8, else BF16; nothing is allocated yet).
  static std::unique_ptr<DeviceKvCache> make(const ModelConfig& c, KvDtype kv, int ctx);
  // Device bytes of every layer's cache at ctx positions (the memory plan asks before anything exists).
  static double bytes(const ModelConfig& c, KvDtype kv, int ctx);

  // Allocates every layer's cache from arena and initialises it on s (BF16: zeros, so a stray read gives no NaN;
  // FP8: CpuKvCache's fresh state).
  virtual void allocate(DeviceArena& arena, cudaStream_t s) = 0;
  // Back to the state allocate() left (BF16: zeros; FP8: the fresh state), on s.
  virtual void clear(cudaStream_t s) const = 0;

  // RoPE on q [n, q_dim] (in place) and k [n, kv_dim] at positions *d_pos0 .. *d_pos0 + n - 1, and the rotated k
  // with v [n, kv_dim] into layer `layer`'s rows, in one launch. k may be left unrotated (only the cache is read
  // afterwards). *d_pos0 is read on the device, so a captured decode step replays at every position.
  // tok (store and attend_decode; BF16 only, token_axis()): the decode step's launch for tok.n tokens side by side,
  // each its own slab of q, k, v, position, output and scratch tok.stride bytes apart (kernels/ops/token_axis.h).
  virtual void store(int layer, float* q, float* k, const float* v, const float* inv_freq, const int* d_pos0, int n,
                     cudaStream_t s, TokenAxis tok = {}) const = 0;
  virtual bool token_axis() const = 0;
  // Decode attention of q [q_dim] over positions 0 .. *d_pos of layer `layer` into out [q_dim]; scratch of
  // attention_decode_scratch_bytes (the activations' token slab, engine/cuda/activations.h).
  // defer (both decode calls): the split pass only, its partials described there for the next kernel to merge (the o
  // GEMV as it stages x, GemvEpilogue::merge); out is not written.
  virtual void attend_decode(int layer, const float* q, const int* d_pos, float* out, void* scratch, cudaStream_t s,
                             AttnSplitParts* defer = nullptr, TokenAxis tok = {}) const = 0;
  // The decode step's store() and attend_decode() in one launch (attention_decode_rope), where this form and shape
  // have it (BF16, the tensor-core decode kernel's head_dim and groups): q and k as the q|k|v GEMV wrote them
  // (unrotated; q is left so), the same cache row and output, bit for bit. Returns false and launches nothing where
  // not: the caller runs the two.
  virtual bool store_attend_decode(int layer, const float* q, const float* k, const float* v, const float* inv_freq,
                                   const int* d_pos, float* out, void* scratch, cudaStream_t s,
                                   AttnSplitParts* defer = nullptr) const = 0;
  // Causal prefill attention of q [n, q_dim] at positions pos0 .. pos0 + n - 1 into out [n, q_dim]; scratch as
  // attend_decode's (a short pass splits its keys across blocks there: attention_prefill).
  // d_pos0 (BF16 cache only; the FP8 one refuses it): the kernels read pos0 on the device (a captured pass).
  virtual void attend_prefill(int layer, const float* q, int pos0, int n, float* out, void* scratch, cudaStream_t s,
                              const int* d_pos0 = nullptr) const = 0;

  // The BF16 rows [ctx, kv_dim] of layer `layer`'s K and V, for the persistent kernel (which reads BF16 only); null
  // in the FP8 form (the persistent path refuses FP8 first).
  virtual uint16_t* k_bf16(int layer) const = 0;
  virtual uint16_t* v_bf16(int layer) const = 0;
  virtual bool fp8() const = 0;
};

}  // namespace llm
