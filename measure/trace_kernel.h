// One kernel execution as a tracer saw it: the record measure/kernel_trace.h collects from CUPTI and
// measure/timeline_budget.h attributes. Standard library only, so pure code and the CPU tests use it without CUDA.
#pragma once
#include <cstdint>
#include <string>

namespace llm {

struct TraceKernel {
  uint64_t start_ns = 0;         // GPU timestamps; start_ns == end_ns == 0: the tracer could not time it
  uint64_t end_ns = 0;
  uint32_t graph_id = 0;         // the graph that launched it (KernelTrace::graph_exec_id); 0: not a graph launch
  uint32_t correlation_id = 0;   // the API call that launched it: one id for every kernel of one cudaGraphLaunch
  uint64_t graph_node_id = 0;    // the graph node that launched it; 0: not a graph launch
  std::string name;              // as the driver reports it (mangled)
};

}  // namespace llm
