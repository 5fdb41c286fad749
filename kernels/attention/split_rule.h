// Decode attention's key splits, as their consumers see them: the split rule (host and device) and where a split
// pass leaves its partials. Plain C++: included by the attention kernels and by the GEMV that merges the splits as it
// stages its x (GemvEpilogue::merge, the o projection's launch), so both apply one rule.
#pragma once
#include <cstdint>

#include "core/dtype.h"  // LLM_HD

namespace llm {

// The decode split rule, on the host and in the kernels (which apply it to the length they read on the device, so a
// captured graph stays right at every position): rows per split = the smallest 64 * 2^j that leaves at most
// 2 * sms split blocks (n_kv_heads of them per split) over `len` rows. Long contexts get long splits that stream, short
// ones many small splits that fill the GPU.
constexpr int kAttnMinSplitRows = 64;
constexpr int kAttnSplitsPerSm = 2;
LLM_HD int attention_split_rows(int n_kv_heads, int len, int sms) {
  int64_t rows = kAttnMinSplitRows;
  while (rows < len && int64_t(n_kv_heads) * ((len + rows - 1) / rows) > int64_t(kAttnSplitsPerSm) * sms) rows *= 2;
  return int(rows);
}
// The splits that hold rows of a length of len keys (0 for none).
LLM_HD int attention_len_splits(int n_kv_heads, int len, int sms) {
  if (len <= 0) return 0;
  const int chunk = attention_split_rows(n_kv_heads, len, sms);
  return (len + chunk - 1) / chunk;
}
// The splits that hold rows for a decode at position pos (clamped to the cache, as the kernels clamp it).
LLM_HD int attention_decode_splits(int pos, int max_ctx, int n_kv_heads, int sms) {
  return attention_len_splits(n_kv_heads, pos + 1 < max_ctx ? pos + 1 : max_ctx, sms);
}

// A decode split pass's partials, left for a consumer to merge (the o GEMV's x: GemvEpilogue::merge) instead of the
// merge kernel: part_o [splits, n_heads, head_dim] unnormalised outputs and part_ml [splits, n_heads] (max in the
// log2 domain, weight sum) as float pairs; the step's position on the device. Null part_o: none.
struct AttnSplitParts {
  const float* part_o = nullptr;
  const float* part_ml = nullptr;  // float2 pairs
  const int* d_pos = nullptr;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, max_ctx = 0, sms = 0;
  bool any() const { return part_o != nullptr; }
};

}  // namespace llm
