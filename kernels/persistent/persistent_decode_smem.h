// The persistent decode kernel's shared memory per block, from the model's shape alone. CUDA-free: the kernel's launch
// plan (kernels/persistent/persistent_decode.cu) and the engine's refusal before any GPU work (engine/gemv_choice.cpp) both use
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

// The cluster form's mirrors (PersistentDecodeArgs::cluster), after the layout above at a 16-byte boundary: every
// block's copy of x [dim], att [q_dim] and hb [hidden] (each rounded up to 4 floats), written by their producers into
// every block of the cluster (distributed shared memory), so a stage stages its input from its own shared memory
// instead of L2.
constexpr int persistent_round4(int n) { return (n + 3) & ~3; }
constexpr int64_t persistent_mirror_offset(int64_t bytes) { return (bytes + 15) & ~int64_t(15); }
constexpr int64_t persistent_mirror_bytes(int dim, int q_dim, int hidden) {
  return 4 * int64_t(persistent_round4(dim) + persistent_round4(q_dim) + persistent_round4(hidden));
}

}  // namespace llm
