// The graph path (engine/cuda/graph_path.h): capture once per mapping, replay per step.
#include "engine/cuda/graph_path.h"

#include "kernels/cuda_check.h"

namespace llm {

namespace {

// What the graph path keeps per mapping: its graph and, once profiled, the profiled graph.
struct GraphCache : PathCache {
  GraphExecHolder graph;
  ProfiledGraph profiled;
};

GraphCache& cache_of(MappingState& ms) {
  if (!ms.graph_cache) ms.graph_cache = std::make_unique<GraphCache>();
  return static_cast<GraphCache&>(*ms.graph_cache);
}

}  // namespace

void GraphPath::capture(const MappingState& ms, GraphExecHolder& exec, ProfileMarks* marks) {
  GraphHolder graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    forward_(ms, marks);
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph.g);  // leave the stream usable
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph.g));
  cudaError_t err = cudaGraphInstantiate(&exec.g, graph.g, 0);
  if (err != cudaSuccess) {
    exec.g = nullptr;
    CUDA_CHECK(err);
  }
}

void GraphPath::enqueue_step(MappingState& ms, int) {
  GraphCache& c = cache_of(ms);
  if (c.graph.g) {
    CUDA_CHECK(cudaGraphLaunch(c.graph.g, stream_));
    return;
  }
  forward_(ms, nullptr);
  capture(ms, c.graph, nullptr);  // the eager step above was the warm-up
}

void GraphPath::profile_step(MappingState& ms, int, StepProfiler& prof, DecodeProfile* out) {
  GraphCache& c = cache_of(ms);
  prof.graph_step(
      c.profiled, [&](ProfileMarks* marks, GraphExecHolder& exec) { capture(ms, exec, marks); }, stream_, out);
}

}  // namespace llm
