// Where the time of one CUDA-graph replay of a decode step went, from its kernel timeline (measure/kernel_trace.h):
// each nanosecond between the replay's first kernel start and its last kernel end goes to exactly one part, so the
// parts sum to the replay's span. Pure code (no CUDA, no CUPTI): the CPU tests check it on hand-made timelines.
//
// The replay is one linear chain captured from one stream, so its kernels in start order are its capture order, and
// the caller knows the part of each (kernel i of the capture -> part_of_kernel[i]). Sweeping a cursor t from the first
// start, each kernel in turn owns [max(start, t), end]; a hole before a kernel (start > t: launch latency, dependency
// bubbles, no kernel of the replay running) goes to gap_part. With programmatic dependent launch a kernel starts
// while its predecessor still runs; it waits at griddepcontrol.wait until then, so the overlap stays with the
// predecessor.
#pragma once
#include <cstdint>
#include <vector>

#include "measure/trace_kernel.h"  // TraceKernel: one traced kernel

namespace llm {

struct TimelineBudget {
  std::vector<uint64_t> ns;  // [n_parts] exact nanoseconds per part, holes included in ns[gap_part]
  std::vector<double> ms;    // [n_parts] the same in milliseconds
  uint64_t span_ns = 0;      // last end - first start; == sum of ns
  double span_ms = 0.0;
  uint64_t gap_ns = 0;       // the holes alone (also inside ns[gap_part])
  double gap_ms = 0.0;
};

// Attributes one replay's kernels (any order: sorted here by start, ties by end) to parts: part_of_kernel[i] is the
// part of the i-th kernel in that order, in [0, n_parts); holes go to gap_part. Throws llm::Error when the counts
// differ, a part is out of range, or a kernel ends before it starts or has no timestamps (start = end = 0). No
// kernels: every part zero.
TimelineBudget attribute_timeline(const std::vector<TraceKernel>& kernels, const std::vector<int>& part_of_kernel,
                                  int n_parts, int gap_part);

// The kernels of one graph launch (one cudaGraphLaunch gives all its kernels one correlation id).
struct TraceReplay {
  uint32_t correlation_id = 0;
  uint32_t graph_id = 0;
  std::vector<TraceKernel> kernels;  // sorted by start, ties by end
};

// Splits a flat record list (KernelTrace::take) into graph replays: records grouped by correlation id, keeping only
// those of graph `graph_id` (0: of any graph; records with no graph are always dropped). Replays in order of their
// first start.
std::vector<TraceReplay> split_replays(const std::vector<TraceKernel>& records, uint32_t graph_id);

}  // namespace llm
