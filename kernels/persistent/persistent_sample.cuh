// The persistent decode kernel's greedy sampling (PersistentDecodeArgs::sample_vocab > 0): the argmax of the logits
// without another kernel. Each thread keeps the best key over the head rows it finished (GreedyKey, the head stage's
// epilogue), each block folds its threads' keys into one atomicMax on the sync area's argmax line, and the last block
// out emits the id and resets the line. The rule is kernels/ops/sampling.cu's (lowest index on ties, kSampleNonFinite
// when any logit is NaN or Inf). Included by persistent_decode.cu only (one translation unit).
#pragma once
#include <cstdint>

#include "kernels/ops/ops.h"  // kSampleNonFinite
#include "kernels/persistent/persistent_sync.cuh"  // argmax_line, Shared, kWarps

namespace llm {
namespace {

// The greedy sample's order as one u64 (larger wins): the value's bits made monotonic (-0 as +0, so equal values tie
// as sampling.cu's comparison does), then the complemented index (lower index wins a tie). Every finite value's key is
// non-zero, so 0 means "none".
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
  const unsigned b = __float_as_uint(v == 0.0f ? 0.0f : v);
  const unsigned ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(ord) << 32) | (0xffffffffu - static_cast<unsigned>(i));
}

// A thread's share of the greedy sample: the best key over the head rows it finished.
struct GreedyKey {
  unsigned long long best = 0;  // this thread's greedy key over the head rows it finished
  int bad = 0;                  // ... and whether one of them was NaN or Inf
  __device__ __forceinline__ void consider(const PersistentDecodeArgs& a, int r, float v) {
    if (r >= a.sample_vocab) return;
    bad |= !isfinite(v);
    best = max(best, argmax_key(v, r));
  }
};

// The block's key and flag, then one atomic each into amax (the sync area's argmax_line), ordered before the exit's
// increment. Every thread calls it.
__device__ __forceinline__ void greedy_fold_block(unsigned* amax, GreedyKey& k, Shared& sh) {
  unsigned long long best = k.best;
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  const int bad = __syncthreads_or(k.bad);
  if ((threadIdx.x & 31) == 0) sh.best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) best = max(best, sh.best[w]);
    if (best != 0) atomicMax(reinterpret_cast<unsigned long long*>(amax), best);
    if (bad) atomicOr(amax + 2, 1u);
  }
}

// The last block out, thread 0 (every block's atomics came before its increment): the id to argmax_out and
// {pos + 1, id} to next_step, and the argmax line amax reset for the next step.
__device__ __forceinline__ void greedy_emit(const PersistentDecodeArgs& a, unsigned* amax, int pos) {
  __threadfence();
  const unsigned long long key = atomicExch(reinterpret_cast<unsigned long long*>(amax), 0ull);
  const bool nonfinite = atomicExch(amax + 2, 0u) != 0;
  const int id = nonfinite ? kSampleNonFinite : key != 0 ? int(0xffffffffu - unsigned(key & 0xffffffffu)) : 0;
  if (a.next_step) {
    a.next_step[0] = pos + 1;
    a.next_step[1] = id >= 0 ? id : 0;  // a valid row for a step queued behind this one (the host stops the run)
  }
  if (a.argmax_out) *reinterpret_cast<volatile int*>(a.argmax_out) = id;
}

}  // namespace
}  // namespace llm
