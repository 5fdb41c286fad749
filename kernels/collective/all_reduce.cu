// The one-shot all-reduce of kernels/collective/all_reduce.h.
//
// Ordering: each block owns a share of the elements. It copies its share of x into its rank's exchange slot, passes a
// barrier, and its thread 0 releases (fence + st.release.sys) the block's epoch into every peer's flag for (this
// rank, this block); it then spins (ld.acquire.sys) until every peer's flag for this block holds the epoch, and the
// block, after a barrier, sums the slots. The slot alternates with the epoch, and a rank writes a slot again only two
// launches later, after its block saw every peer's same block arrive at the launch in between: that peer's earlier
// launch (which read the slot) had finished as a whole, by stream order. So any share of elements may go to any block.
#include "kernels/collective/all_reduce.h"

#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/ops/ptx_sync.cuh"

namespace llm {
namespace {

constexpr int kThreads = 256;

template <bool kVec4>
__global__ void __launch_bounds__(kThreads) all_reduce_sum_kernel(AllReducePeers p, float* x, size_t n) {
  const int b = blockIdx.x;
  __shared__ unsigned epoch_sh;
  if (threadIdx.x == 0) epoch_sh = p.epoch[b] + 1u;
  __syncthreads();
  const unsigned e = epoch_sh;
  const size_t slot = size_t(e & 1u) * p.capacity;
  const size_t stride = size_t(kAllReduceBlocks) * kThreads;
  const size_t first = size_t(b) * kThreads + threadIdx.x;
  const size_t groups = kVec4 ? n / 4 : n;
  float* mine = p.exch[p.rank] + slot;
  for (size_t i = first; i < groups; i += stride) {
    if constexpr (kVec4)
      reinterpret_cast<float4*>(mine)[i] = reinterpret_cast<const float4*>(x)[i];
    else
      mine[i] = x[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int q = 0; q < p.n_ranks; ++q)
      if (q != p.rank) st_release_sys(p.flags[q] + p.rank * kAllReduceBlocks + b, e);
    const unsigned long long limit = p.timeout_ns ? p.timeout_ns : 20000000000ull;
    const unsigned long long t0 = global_ns();
    for (int q = 0; q < p.n_ranks; ++q) {
      if (q == p.rank) continue;
      const unsigned* f = p.flags[p.rank] + q * kAllReduceBlocks + b;
      while (int(ld_acquire_sys(f) - e) < 0)
        if (global_ns() - t0 > limit) __trap();
    }
    p.epoch[b] = e;
  }
  __syncthreads();
  for (size_t i = first; i < groups; i += stride) {
    if constexpr (kVec4) {
      float4 s = __ldcg(reinterpret_cast<const float4*>(p.exch[0] + slot) + i);
      for (int q = 1; q < p.n_ranks; ++q) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(p.exch[q] + slot) + i);
        s.x += v.x;
        s.y += v.y;
        s.z += v.z;
        s.w += v.w;
      }
      reinterpret_cast<float4*>(x)[i] = s;
    } else {
      float s = __ldcg(p.exch[0] + slot + i);
      for (int q = 1; q < p.n_ranks; ++q) s += __ldcg(p.exch[q] + slot + i);
      x[i] = s;
    }
  }
}

}  // namespace

void all_reduce_sum(const AllReducePeers& p, float* x, size_t n, cudaStream_t s) {
  if (n > p.capacity) fail("all_reduce_sum: ", n, " floats exceed the exchange capacity of ", p.capacity);
  if (p.n_ranks < 1 || p.n_ranks > kAllReduceMaxRanks || p.rank < 0 || p.rank >= p.n_ranks)
    fail("all_reduce_sum: rank ", p.rank, " of ", p.n_ranks, " (at most ", kAllReduceMaxRanks, " ranks)");
  // Float4 copies where every slot and x are 16-byte aligned (capacity a multiple of 4: both slots are).
  const bool vec = n % 4 == 0 && p.capacity % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec)
    all_reduce_sum_kernel<true><<<kAllReduceBlocks, kThreads, 0, s>>>(p, x, n);
  else
    all_reduce_sum_kernel<false><<<kAllReduceBlocks, kThreads, 0, s>>>(p, x, n);
  CUDA_CHECK_LAUNCH("all_reduce_sum");
}

}  // namespace llm
