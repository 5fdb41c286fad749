// The all-reduce (sum) between the ranks of a tensor-parallel run, as one kernel per rank over memory every rank can
// address: NVLink peer-to-peer memory between GPUs, or plain device memory when ranks share one GPU. For batch-1
// decode's small messages (a residual row of a few tens of KB, two per layer), where a ring's latency per step is the
// cost: each rank copies its vector into its exchange slot, raises a flag in every peer's memory, waits for the peers'
// flags, then sums every rank's slot in rank order, so every rank ends with the same bits (the CPU form:
// engine/tp_plan.h host_all_reduce_sum). The epochs the flags carry live in device memory, so the launch can be
// captured in a CUDA graph and replayed. Knows nothing of allocation: engine/cuda/tp_all_reduce.h owns the buffers.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace llm {

constexpr int kAllReduceMaxRanks = 8;
constexpr int kAllReduceBlocks = 16;  // every launch runs this many blocks (each keeps its own epoch)

// One rank's view of the group. Every pointer is addressable from this rank's device.
struct AllReducePeers {
  float* exch[kAllReduceMaxRanks] = {};       // rank q's exchange buffer: two slots of `capacity` floats
  unsigned* flags[kAllReduceMaxRanks] = {};   // rank q's flags: [kAllReduceMaxRanks senders][kAllReduceBlocks]
  unsigned* epoch = nullptr;                  // this rank's epochs, [kAllReduceBlocks], zero at the start
  int rank = 0, n_ranks = 1;
  size_t capacity = 0;                        // the largest n a launch may reduce
  unsigned long long timeout_ns = 0;          // a wait longer than this traps (a peer that never comes): 0 = 20 s
};

// Sizes of one rank's buffers: the exchange buffer (floats) and the flags (words); both start zeroed.
inline size_t all_reduce_exchange_floats(size_t capacity) { return 2 * capacity; }
constexpr size_t kAllReduceFlagWords = size_t(kAllReduceMaxRanks) * kAllReduceBlocks;

// x[0..n) = the sum over the ranks of each rank's x[0..n), in rank order, on every rank. Every rank launches it with
// the same n, in the same order of calls. n <= capacity. A peer that never arrives makes the kernel trap after
// timeout_ns (the stream's next synchronising call reports it) rather than hang.
void all_reduce_sum(const AllReducePeers& p, float* x, size_t n, cudaStream_t s);

}  // namespace llm
