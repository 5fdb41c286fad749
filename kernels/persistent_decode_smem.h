// The persistent decode kernel's shared memory per block, from the model's shape alone. CUDA-free: the kernel's launch
// plan (kernels/persistent_decode.cu) and the engine's refusal before any GPU work (engine/gemv_choice.cpp) both use
// it, so the two cannot disagree.
#pragma once
#include <cstdint>

namespace llm {

constexpr int kPersistentThreads = 512;       // one block per SM: 512 threads x 128 registers
constexpr int kPersistentMaxTasks = 1024;     // GEMV partial sums kept in shared memory per round (float2 each)
constexpr int kPersistentHeadsPerPass = 2;    // query heads of a GQA group per pass over the keys
// The most dynamic shared memory one block may have: sm_90's 227 KB less what the kernel declares statically (its
// block-wide scratch, the rows of x it owns, the cycle counters: under 3 KB).
constexpr int64_t kPersistentMaxSmemBytes = 227 * 1024 - 4096;
// The most the BF16 kernels add for a layer's weights (PersistentWeights): the rest of the SM's 256 KB stays L1, which
// the stages streaming their weights need for the loads in flight (a 227 KB carve-out ran the 8B shape 6% slower and
// TinyLlama's 16%, H200, 2026-12-02).
constexpr int64_t kPersistentWeightBudget = 96 * 1024;

// Layout: part [kPersistentMaxTasks] float2, xs [xs_floats], gs [gs_floats], then x's int8 form (the dp4a lane
// code's; reserved whatever the weights): q [x8_k] bytes, d [x8_k / 32] floats, s16 [x8_k / 16] ints.
struct PersistentSmem {
  int xs_floats = 0;  // the GEMV input (the widest K rounded up to a 16-byte chunk) or the attention scratch
  int gs_floats = 0;  // a norm's weights: dim rounded up to 4
  int x8_k = 0;       // the widest K rounded up to 32
  int64_t bytes = 0;  // all of it
};
constexpr PersistentSmem persistent_smem(int dim, int q_dim, int hidden, int head_dim) {
  const int widest = dim > q_dim ? (dim > hidden ? dim : hidden) : (q_dim > hidden ? q_dim : hidden);
  const int gemv = (widest + 7) & ~7;
  constexpr int warps = kPersistentThreads / 32;
  const int attn = 2 * warps * kPersistentHeadsPerPass + warps * kPersistentHeadsPerPass * head_dim;
  PersistentSmem s;
  s.xs_floats = ((gemv > attn ? gemv : attn) + 3) & ~3;
  s.gs_floats = (dim + 3) & ~3;
  s.x8_k = (widest + 31) & ~31;
  s.bytes = int64_t(kPersistentMaxTasks) * 8 + int64_t(s.xs_floats) * 4 + int64_t(s.gs_floats) * 4 + s.x8_k +
            s.x8_k / 32 * 4 + s.x8_k / 16 * 4;
  return s;
}

// The BF16 kernels' layer-ahead weights: when a block's share of every GEMV stage of a layer (q|k|v, o, gate|up,
// down: both rows of its units, 16-byte chunks of BF16) and the two norms' weights fit in kPersistentWeightBudget,
// each has its own region after PersistentSmem's bytes, and a block loads its share of layer l + 1's stage while
// layer l runs on (kernels/persistent_decode.h, "GEMV"). bytes = 0: off (the stages stream from global memory).
struct PersistentWeights {
  int64_t stage[4] = {0, 0, 0, 0};  // byte offsets from the region's start: q|k|v, o, gate|up, down
  int64_t attn_norm = 0, ffn_norm = 0;
  int64_t bytes = 0;
};
// A stage's share: 2 rows x ceil(units / grid) units x ceil(K / 8) chunks of 16 bytes.
constexpr int64_t persistent_share_bytes(int units, int K, int grid) {
  return int64_t(2) * ((units + grid - 1) / grid) * ((K + 7) / 8) * 16;
}
constexpr PersistentWeights persistent_weights(int dim, int q_dim, int kv_dim, int hidden, int grid) {
  PersistentWeights w;
  if (grid <= 0) return w;
  const int64_t share[4] = {persistent_share_bytes((q_dim + 2 * kv_dim) / 2, dim, grid),
                            persistent_share_bytes((dim + 1) / 2, q_dim, grid),
                            persistent_share_bytes(hidden, dim, grid),
                            persistent_share_bytes((dim + 1) / 2, hidden, grid)};
  int64_t at = 0;
  for (int s = 0; s < 4; ++s) {
    w.stage[s] = at;
    at += share[s];
  }
  const int64_t norm = ((int64_t(dim) * 4 + 15) / 16) * 16;
  w.attn_norm = at;
  w.ffn_norm = at + norm;
  at += 2 * norm;
  w.bytes = at <= kPersistentWeightBudget ? at : 0;
  return w;
}

}  // namespace llm
