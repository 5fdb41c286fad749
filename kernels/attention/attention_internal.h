// Between kernels/attention/attention.cu (the public attention ops, their checks and the split merge) and
// kernels/attention/attention_tc.cu (the tensor-core kernels it chooses where they apply). Host code only.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"  // LLM_HD
#include "kernels/attention/split_rule.h"  // attention_split_rows
#include "kernels/ops/token_axis.h"        // TokenAxis

namespace llm {

// The most splits any length up to max_ctx gets: the decode grid's x.
LLM_HD int attention_max_splits(int n_kv_heads, int max_ctx, int sms) {
  const int64_t by_rows = (int64_t(max_ctx) + kAttnMinSplitRows - 1) / kAttnMinSplitRows;
  int64_t by_sms = int64_t(kAttnSplitsPerSm) * sms / n_kv_heads;
  if (by_sms < 1) by_sms = 1;
  return int(by_rows < by_sms ? by_rows : by_sms);
}

// The key-split form of a short prefill pass (a verify pass of drafted tokens): one token block per KV head would
// leave most SMs idle and walk every key in one block, so the keys are split across blocks by the decode rule above
// and merged. It applies to passes of at most kAttnSplitPassTokens tokens that fit one 64-row block
// (n_tokens * group <= 64).
constexpr int kAttnSplitPassTokens = 32;
LLM_HD bool attention_prefill_split_applies(int n_tokens, int n_heads, int n_kv_heads) {
  return n_tokens >= 1 && n_tokens <= kAttnSplitPassTokens && int64_t(n_tokens) * (n_heads / n_kv_heads) <= 64;
}
// Where the split form keeps its partials: part_ml [splits, tokens * n_heads] (float2, padded to 256 bytes), then
// part_o [splits, tokens * n_heads, head_dim], for up to kAttnSplitPassTokens tokens and any length up to max_ctx.
inline size_t prefill_part_ml_bytes(int n_heads, int n_kv_heads, int max_ctx, int sms) {
  return (size_t(attention_max_splits(n_kv_heads, max_ctx, sms)) * kAttnSplitPassTokens * size_t(n_heads) * 8 + 255) /
         256 * 256;
}
inline size_t prefill_split_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int max_ctx, int sms) {
  return prefill_part_ml_bytes(n_heads, n_kv_heads, max_ctx, sms) +
         size_t(attention_max_splits(n_kv_heads, max_ctx, sms)) * kAttnSplitPassTokens * size_t(n_heads) *
             size_t(head_dim) * sizeof(float);
}
// The split form's scratch and the cache length its grid covers (max_ctx 0: no split, the plain prefill kernel).
struct PrefillScratch {
  void* scratch = nullptr;
  int max_ctx = 0;
  int sms = 0;
};

// head_dim 64 or 128, grouped-query ratio 1..8, q/out 8-byte and K/V caches 16-byte aligned.
bool attention_tc_supported(int head_dim, int group, const void* q, const void* k_cache, const void* v_cache,
                            const void* out);

// Same contract as attention_prefill, with the query scale (log2(e) / sqrt(head_dim)) given.
void attention_prefill_tc(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int pos0, int n_tokens,
                          int n_heads, int n_kv_heads, int head_dim, float qscale, float* out, cudaStream_t s,
                          const int* d_pos0 = nullptr, const PrefillScratch& split = PrefillScratch{});

// The decode step's RoPE and KV store, folded into the decode split pass (attention_decode_rope): the step's
// unrotated k and v [kv_dim] (FP32), the rotary frequencies [head_dim / 2], and the caches the split that holds the
// step's row writes them into (the same BF16 caches the pass reads). k_new null: q is already rotated and the row
// stored (attention_decode).
struct DecodeRope {
  const float* k_new = nullptr;
  const float* v_new = nullptr;
  const float* inv_freq = nullptr;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
};

// Split pass of decode attention: grid (attention_max_splits(), n_kv_heads), split rows attention_split_rows() of the
// length on the device. Writes part_o [splits, n_heads, head_dim] and part_ml [splits, n_heads] (max in the log2
// domain, weight sum).
void attention_decode_tc(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, const int* d_pos,
                         int n_heads, int n_kv_heads, int head_dim, int max_ctx, int sms, float qscale,
                         float* part_o, float2* part_ml, cudaStream_t s, const DecodeRope& rope = DecodeRope{},
                         TokenAxis tok = {});

// The same passes over the FP8 cache (E4M3 codes, one FP32 scale per kKvFp8Block positions and KV head: scales
// [n_blocks, n_kv_heads]).
void attention_prefill_tc_fp8(const float* q, const uint8_t* k_codes, const uint8_t* v_codes, const float* k_scale,
                              const float* v_scale, int pos0, int n_tokens, int n_heads, int n_kv_heads,
                              int head_dim, float qscale, float* out, cudaStream_t s,
                              const PrefillScratch& split = PrefillScratch{});
void attention_decode_tc_fp8(const float* q, const uint8_t* k_codes, const uint8_t* v_codes, const float* k_scale,
                             const float* v_scale, const int* d_pos, int n_heads, int n_kv_heads, int head_dim,
                             int max_ctx, int sms, float qscale, float* part_o, float2* part_ml, cudaStream_t s);

}  // namespace llm
