// What one dependency between the resident blocks of a persistent kernel costs (issue 15's "floor of a dependency").
//
// A probe kernel runs `stages` stages back to back. In each stage every block waits for all blocks' arrivals of the
// previous stage, optionally stages a vector the other blocks wrote (the norm's or a GEMV input's read of x from L2,
// with its block-wide sum of squares), optionally streams a share of weights from HBM (rotated far beyond L2) and
// dots them with the vector, writes its rows of the next vector, then arrives. Two ways to synchronise:
//   - counter: a grid of resident blocks; thread 0 releases an increment of the stage's counter after a block barrier
//     and spins with acquire loads until all blocks have arrived (the persistent decode kernel's block_arrive and
//     block_wait, without the timeout);
//   - cluster: the grid is one thread-block cluster; the hardware cluster barrier (arrive.release / wait.acquire).
// The vector checks the barrier as well as timing it: element i of stage s's vector must read s, and each block
// writes s + 1 to its rows for the next stage; every other value read counts as a stale read (DepProbeResult).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace llm {

enum class DepSync { kCounter, kCluster };

struct DepProbeConfig {
  DepSync sync = DepSync::kCounter;
  int blocks = 128;              // the grid (kCluster: the cluster size as well, at most 16)
  int stages = 1000;
  int vector_floats = 576;       // 0: no vector (a bare barrier)
  int weight_kb = 0;             // KiB of weights each block reads per stage (up to 64, or a multiple of 64)
  bool weights_before_wait = false;  // the stage's first 8 loads per thread issued before its wait
};

constexpr int kDepProbeThreads = 512;  // one block per SM, as the persistent kernel
constexpr int kDepProbeMaxVector = 8192;

// Device buffers one probe run needs. counters: dep_probe_counter_words(stages) words, zeroed by the launch; vec:
// 2 * kDepProbeMaxVector floats; errors: one word (stale reads are added to it); weights: weight_bytes (>= 2 *
// blocks * weight_kb KiB; 16-byte aligned); sink: blocks floats.
struct DepProbeBuffers {
  unsigned* counters = nullptr;
  float* vec = nullptr;
  unsigned* errors = nullptr;
  const void* weights = nullptr;
  size_t weight_bytes = 0;
  float* sink = nullptr;
};
size_t dep_probe_counter_words(int stages);

// Resets the counters and the vector, then launches one probe run on `stream` (asynchronous). Throws llm::Error when
// the configuration cannot run (a cluster larger than the device allows, more blocks than can be resident).
void dep_probe_launch(const DepProbeConfig& c, const DepProbeBuffers& b, cudaStream_t stream);

// The most blocks of kDepProbeThreads threads that can be resident at once (one per SM), and the largest cluster
// the device can schedule for the probe kernel (0 when clusters are not supported).
int dep_probe_max_blocks();
int dep_probe_max_cluster();

}  // namespace llm
