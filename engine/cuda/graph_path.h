// The graph path: the forward pass of one token (one kernel per op) captured into a CUDA graph once per mapping and
// replayed for every step: no launch overhead per op, no allocation, no host sync. The step reads {pos, token} from
// device memory, so one graph replays at every position. The first decode with a mapping runs eagerly (it creates
// any lazy cuBLAS handle and loads the kernels: capture must not do either) and then captures. The "cublas" mapping
// is capture-safe because its handle (in the GemvContext) has an explicit workspace (kernels/gemv/gemv_cublas.cu).
#pragma once
#include <cuda_runtime.h>

#include <functional>

#include "engine/cuda/decode_path.h"

namespace llm {

class GraphPath final : public DecodePathImpl {
 public:
  // forward(ms, marks) queues the forward pass of one token on s (marks: null, or the profiler's region marks).
  using Forward = std::function<void(const MappingState& ms, ProfileMarks* marks)>;
  GraphPath(Forward forward, cudaStream_t s) : forward_(std::move(forward)), stream_(s) {}

  std::string refusal(const MappingState&) const override { return ""; }  // runs every mapping
  void enqueue_step(MappingState& ms, int pos) override;
  // A replay of a second graph of the step, captured with the profiler's marks, under the kernel timeline.
  void profile_step(MappingState& ms, int pos, StepProfiler& prof, DecodeProfile* out) override;
  int kernels_per_step(const MappingState& ms) const override;  // the kernel nodes of ms's captured graph

 private:
  // Captures one forward pass of ms into exec (marks as forward's).
  void capture(const MappingState& ms, GraphExecHolder& exec, ProfileMarks* marks);

  Forward forward_;
  cudaStream_t stream_;
  int kernels_ = 0;  // kernel nodes of the last plain graph captured
};

}  // namespace llm
