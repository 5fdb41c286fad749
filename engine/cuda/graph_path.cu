// The graph path (engine/cuda/graph_path.h): capture once per mapping, replay per step.
#include "engine/cuda/graph_path.h"

#include <vector>

#include "kernels/cuda_check.h"

namespace llm {

namespace {

// What the graph path keeps per mapping: its graph and, once profiled, the profiled graph.
struct GraphCache : PathCache {
  GraphExecHolder graph;
  ProfiledGraph profiled;
  int kernels = 0;  // kernel nodes of `graph`
};

GraphCache& cache_of(MappingState& ms) {
  if (!ms.graph_cache) ms.graph_cache = std::make_unique<GraphCache>();
  return static_cast<GraphCache&>(*ms.graph_cache);
}

}  // namespace

void GraphPath::capture(const MappingState& ms, GraphExecHolder& exec, ProfileMarks* marks) {
  GraphHolder graph;
  capture_stream(stream_, graph, [&] { forward_(ms, marks); });
  if (!marks) {  // the plain graph: count its kernels (a profiled one adds event nodes, not kernels)
    size_t n = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph.g, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0) CUDA_CHECK(cudaGraphGetNodes(graph.g, nodes.data(), &n));
    int kernels = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
    }
    kernels_ = kernels;
  }
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
  c.kernels = kernels_;
}

int GraphPath::kernels_per_step(const MappingState& ms) const {
  return ms.graph_cache ? static_cast<const GraphCache&>(*ms.graph_cache).kernels : 0;
}

void GraphPath::profile_step(MappingState& ms, int, StepProfiler& prof, DecodeProfile* out) {
  GraphCache& c = cache_of(ms);
  prof.graph_step(
      c.profiled, [&](ProfileMarks* marks, GraphExecHolder& exec) { capture(ms, exec, marks); }, stream_, out);
}

}  // namespace llm
