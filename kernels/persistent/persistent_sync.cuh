// The persistent decode kernel's synchronisation: the block shape, the counters in args.sync and their addresses, the
// producer's arrive and the consumer's wait with its timeout and error codes, the exit of the last block out, and the
// cycle accounting (Clock). Everything the stages share to meet each other without a kernel boundary, in one place so
// that the safety argument below is read beside the code it is about. Included by persistent_decode.cu only (one
// translation unit: the kernel inlines all of it).
//
// Synchronisation. Counters live in args.sync, one per 128-byte line: word 0 is the error code; then per layer
// kCounters counters (q|k|v done, attention done, o done, gate|up done, down done); then one per (kv head, pass of
// query heads) (the attention ranges finished so far; n_heads lines are reserved); then the exit counter; then the
// in-kernel greedy sample's line (its best key and non-finite flag, reset by the last block out after it emits). A
// producer block arrives with "__syncthreads; thread 0: red.release.gpu" (the barrier orders the block's writes before
// thread 0's release); a consumer's thread 0 spins with ld.acquire.gpu and the block passes a barrier. Data written
// inside the kernel is read with ld.global.cg (L2), never through the non-coherent paths. The last block to leave
// resets every counter, so each step starts from zero; the targets are fixed per step (grid blocks, or the attention
// groups).
//
// Why each wait is safe (no block overwrites what another may still read):
// - x: read whole by every block's norms (q|k|v of layer l, gate|up of layer l), written row by row (each row by the
//   one block that owns it in the o/down partition; the embedding row by the same partition at the start) in o(l) and
//   down(l). o(l) waits for attention(l), which waited for
//   every block's q|k|v(l) arrival, so every norm of q|k|v(l) is done; down(l) waits for every gate|up(l) arrival.
// - q, the KV row at pos, att, hb, the attention partials: each written by one stage and read by the next, and the
//   next writer of each comes at least one full wait later (q|k|v(l+1) waits for down(l), which came after every
//   read of layer l).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/persistent/persistent_decode.h"
#include "kernels/persistent/persistent_decode_smem.h"
#include "kernels/ops/ptx_sync.cuh"  // ld_acquire_gpu, global_ns

namespace llm {
namespace {

constexpr int kThreads = kPersistentThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kLine = 32;             // words per counter (one 128-byte line each)

enum Counter { kCQkv, kCAtt, kCO, kCGu, kCDown, kCounters };

// Error codes: kErrTimeout | layer << 8 | counter (the wait that timed out; layer kHeadWait: the head's wait).
constexpr unsigned kErrTimeout = 0x01000000u;
constexpr unsigned kHeadWait = 0xffffu;
__host__ __device__ constexpr unsigned err_code(unsigned layer, unsigned c) {
  return kErrTimeout | (layer & 0xffffu) << 8 | c;
}

__device__ __forceinline__ unsigned* counter(unsigned* sync, int layer, int c) {
  return sync + size_t(kLine) * size_t(1 + layer * kCounters + c);
}
__device__ __forceinline__ unsigned* group_counter(unsigned* sync, int n_layers, int g) {
  return sync + size_t(kLine) * size_t(1 + n_layers * kCounters + g);
}
__device__ __forceinline__ unsigned* exit_counter(unsigned* sync, int n_layers, int n_heads) {
  return sync + size_t(kLine) * size_t(1 + n_layers * kCounters + n_heads);  // after the n_heads group counters
}
// The in-kernel greedy sample's line (after the exit counter): words 0-1 the best key (u64), word 2 the non-finite flag.
__device__ __forceinline__ unsigned* argmax_line(unsigned* sync, int n_layers, int n_heads) {
  return sync + size_t(kLine) * size_t(2 + n_layers * kCounters + n_heads);
}

// Thread 0 of each block keeps the cycle accounting (PersistentPart): the running sums in shared memory. Only the
// profiling kernels (kProf) carry it: in the others it is empty and every mark compiles to nothing, so the timed
// kernel holds no registers for it (warp-r2's kernel then spills nothing at its 128-register limit).
template <bool kProf>
struct Clock {
  __device__ __forceinline__ void start(bool, unsigned long long*) {}
  __device__ __forceinline__ bool on() const { return false; }
  __device__ __forceinline__ void mark(int) {}
};
template <>
struct Clock<true> {
  bool on_ = false;
  long long t = 0;
  unsigned long long* acc = nullptr;  // [kPersistentParts], shared
  __device__ __forceinline__ void start(bool on, unsigned long long* shared_acc) {
    on_ = on;
    acc = shared_acc;
    if (!on_) return;
    for (int p = 0; p < kPersistentParts; ++p) acc[p] = 0;
    t = clock64();
  }
  __device__ __forceinline__ bool on() const { return on_; }
  __device__ __forceinline__ void mark(int part) {
    if (!on_) return;
    const long long now = clock64();
    acc[part] += static_cast<unsigned long long>(now - t);
    t = now;
  }
};

struct Shared {
  unsigned long long best[kWarps];  // the in-kernel greedy sample's block reduction
  float red[32];
  int ok;
  int flag;
};

// The cluster form (PersistentDecodeArgs::cluster): every thread of every block arrives after a stage and waits
// before the next, alternately (a thread may not arrive twice without a wait between). The release orders each
// thread's writes (global memory included) before the arrival; the acquire makes every thread's released writes
// visible after the wait, at cluster scope: the blocks read them through L2 (ld.global.cg) as in the counter form.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The cluster form's mirrors of x, att and hb in this block's shared memory (persistent_mirror_offset: after the
// kernel's own layout). Each producer writes its values into every block's mirror (mirror_put); a consumer stages from
// its own after the wait (the barrier's release / acquire order distributed shared memory as they order global).
struct Mirrors {
  float* x;
  float* att;
  float* hb;
};
__device__ __forceinline__ Mirrors mirrors(const PersistentDecodeArgs& a) {
  extern __shared__ __align__(16) float dyn[];
  const PersistentSmem m = persistent_smem(a.dim, a.n_heads * a.head_dim, a.hidden, a.head_dim);
  float* base = reinterpret_cast<float*>(reinterpret_cast<char*>(dyn) + persistent_mirror_offset(m.bytes));
  const int x4 = persistent_round4(a.dim), att4 = persistent_round4(a.n_heads * a.head_dim);
  return {base, base + x4, base + x4 + att4};
}
// mirror[i] = v in every block of the cluster (a.cluster > 0). Only after the step's first wait (every block has
// started: distributed shared memory of a block not yet running may not be written) and before its last arrival (no
// block leaves while another may still write to it).
__device__ __forceinline__ void mirror_put(const PersistentDecodeArgs& a, float* mirror, int64_t i, float v) {
  unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(mirror + i));
  for (int r = 0; r < a.cluster; ++r) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(r));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
  }
}

// Thread 0 spins until *c >= target (or the timeout / another block's error); the whole block then passes a barrier.
// Returns false when the step failed (every thread of the block then leaves the kernel). The cluster form: the
// cluster barrier's wait (every thread; never fails).
template <class Clk>
__device__ bool block_wait(const PersistentDecodeArgs& a, unsigned* c, unsigned target, unsigned code, Shared& sh,
                           Clk& clk) {
  if (a.cluster > 0) {
    if (threadIdx.x == 0) clk.mark(kPOther);
    cluster_wait();
    if (threadIdx.x == 0) clk.mark(kPWait);
    return true;
  }
  __syncthreads();  // nobody still reads sh.ok from the previous wait
  if (threadIdx.x == 0) {
    clk.mark(kPOther);
    int good = 1;
    if (ld_acquire_gpu(c) < target) {
      const unsigned long long t0 = global_ns();
      for (unsigned spins = 1;; ++spins) {
        if (ld_acquire_gpu(c) >= target) break;
        if ((spins & 31) == 0) {
          if (*reinterpret_cast<volatile unsigned*>(a.sync) != 0) {
            good = 0;
            break;
          }
          if (global_ns() - t0 > a.timeout_ns) {
            if (atomicCAS(a.sync, 0u, code) == 0u && a.err_host) *reinterpret_cast<volatile unsigned*>(a.err_host) = code;
            good = 0;
            break;
          }
        }
      }
    }
    sh.ok = good;  // ld.acquire above: what the producers released is visible to the block after the barrier
    clk.mark(kPWait);
  }
  __syncthreads();
  return sh.ok != 0;
}

// The block's writes (ordered before thread 0's by the barrier) are released with the increment. The cluster form:
// every thread arrives on the cluster barrier (block_wait waits on it).
__device__ __forceinline__ void block_arrive(const PersistentDecodeArgs& a, unsigned* c) {
  if (a.cluster > 0) {
    cluster_arrive();
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}

// The block's exit: true for the last block out of the step (every block's writes and atomics came before its
// increment), which then resets the counters (reset_counters).
__device__ __forceinline__ bool last_block_out(const PersistentDecodeArgs& a, Shared& sh) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned out = atomicAdd(exit_counter(a.sync, a.n_layers, a.n_heads), 1u) + 1;
    sh.flag = out == gridDim.x;
  }
  __syncthreads();
  return sh.flag != 0;
}
// Every counter back to zero for the next step (the last block out; after an error the caller zeroes them).
__device__ __forceinline__ void reset_counters(const PersistentDecodeArgs& a) {
  const int n = a.n_layers * kCounters + a.n_heads + 1;
  for (int i = threadIdx.x; i < n; i += kThreads) a.sync[size_t(kLine) * size_t(1 + i)] = 0u;
}

}  // namespace
}  // namespace llm
