// The CPU reference's KV cache (--kv-dtype, BackendOptions::kv_dtype). Per layer, K and V rows [ctx, kv_dim] (row =
// position, KV heads side by side, head_dim each) in one of three forms:
//   F32   the values as computed (the reference's own precision and its default);
//   BF16  rounded to nearest even, as the CUDA engine stores them;
//   FP8   E4M3 codes (core/fp8.h), one byte per element, and one FP32 scale per (layer, K or V, KV head, block of
//         kKvFp8Block positions): scales [n_blocks, n_kv_heads] per layer, codes = e4m3(x / scale),
//         scale = amax / 448 over the block's rows written so far (core/fp8.h: the rule and its error bound).
//
// FP8 blocks fill one position at a time during decode, so the amax a block's scale needs is not known when its
// first row arrives. Rounded codes cannot be re-quantized exactly to a later, larger scale, so the rows of the block
// being filled (the "open" block, one per layer) are also kept as computed, in FP32 ([block, kv_dim] for K and for V
// per layer: 8 MiB for Llama 3.1 8B), and every write re-encodes the open block's rows from them at the scale of
// their amax. Hence the cache bytes are a function of the rows' values alone, not of how they arrived: prefill of
// N tokens, N decode steps, or any chunking give the same bytes (each row is rounded once, at its block's scale
// over the rows written so far). Attention reads only codes and scales. When a block is full its kept rows are
// dropped (the next block reuses the space).
//
// A write at a position inside a block that is not the open one (a rewind, e.g. a chat turn dropped after an
// interrupted prompt that crossed into the next block, or a jump forward) takes that block's earlier rows back from
// their FP8 values: those rows are rounded a second time at the new scale (at most once more the bound of
// core/fp8.h), and the bytes are then not those a fresh prefill of the same tokens would give. Positions from the
// block's start, and rewinds within the open block, are exact.
#pragma once
#include <climits>
#include <cstdint>
#include <vector>

#include "core/kv_dtype.h"

namespace llm {

// Backend::exact_rewind_end for a CpuKvCache of `dtype`: FP8, the end of pos's block (rows past it close the block, and
// a rewind back across that boundary rounds them once more); else INT_MAX (rows are overwritten as they come).
inline int kv_exact_rewind_end(KvDtype dtype, int pos) {
  return dtype == KvDtype::FP8 ? (pos / kKvFp8Block + 1) * kKvFp8Block : INT_MAX;
}

class CpuKvCache {
 public:
  // dtype Default means F32 (the CPU reference's default). block: positions per FP8 scale (tests vary it).
  CpuKvCache(KvDtype dtype, int n_layers, int ctx, int n_kv_heads, int head_dim, int block = kKvFp8Block);

  KvDtype dtype() const { return dtype_; }
  int block() const { return block_; }

  // Writes rows pos0 .. pos0 + n - 1 of `layer`'s K and V from k, v [n, kv_dim].
  void store(int layer, int pos0, int n, const float* k, const float* v);

  // Row `pos` of `layer`'s K (or V) for KV head `head`, as FP32 [head_dim]: the cache itself for F32, else decoded
  // into `scratch` [head_dim].
  const float* key(int layer, int pos, int head, float* scratch) const { return row(k_, layer, pos, head, scratch); }
  const float* value(int layer, int pos, int head, float* scratch) const { return row(v_, layer, pos, head, scratch); }

  // Bytes of a cache of `ctx` positions in this form: K and V of every layer, FP8 scales included (the kept rows of
  // the open FP8 block, 8 * n_layers * block * kv_dim bytes, are not counted: scratch, not cache).
  static uint64_t bytes(KvDtype dtype, int n_layers, int kv_dim, int n_kv_heads, int ctx, int block = kKvFp8Block);

  // The stored form, for tests: one layer's K or V elements as bytes ([ctx, kv_dim] of 4, 2 or 1 bytes each) and,
  // for FP8, its scales [n_blocks, n_kv_heads].
  std::vector<uint8_t> stored_bytes(int layer, bool value) const;
  std::vector<float> scales(int layer, bool value) const;

 private:
  struct Plane {                  // K or V
    std::vector<float> f32;       // F32: [n_layers, ctx, kv_dim]
    std::vector<uint16_t> bf16;   // BF16: [n_layers, ctx, kv_dim]
    std::vector<uint8_t> fp8;     // FP8: codes [n_layers, ctx, kv_dim]
    std::vector<float> scale;     // FP8: [n_layers, n_blocks, n_kv_heads]
    std::vector<float> open;      // FP8: the open block's rows as computed [n_layers, block, kv_dim]
  };

  const float* row(const Plane& p, int layer, int pos, int head, float* scratch) const;
  // FP8: writes rows [pos0, pos0 + n) of one block (all inside it) of `layer` and re-encodes the block's rows so far.
  void store_fp8_block(Plane& p, int layer, int pos0, int n, const float* x);
  size_t at(int layer, int pos) const { return (size_t(layer) * size_t(ctx_) + size_t(pos)) * size_t(kv_dim_); }

  KvDtype dtype_;
  int n_layers_, ctx_, n_kv_heads_, head_dim_, kv_dim_, block_, n_blocks_;
  Plane k_, v_;
  std::vector<int> open_block_;  // FP8: per layer, the block whose rows `open` holds (-1: none yet)
};

}  // namespace llm
