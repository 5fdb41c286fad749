// The profiler hook: what the CUDA engine's decode paths call when a step is profiled. The engine knows WHEN a step,
// a region of the forward pass or a sample is timed; HOW (CUPTI's kernel timeline of graph replays, CUDA events behind
// a spin) is measurement's concern, implemented in measure/step_profiler.cu, so engine/ links no CUPTI and keeps no
// event pools. A caller installs one with CudaBackend::set_profiler (measure/step_profiler.h install_step_profiler).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/cuda/resources.h"  // GraphExecHolder
#include "engine/decode_profile.h"  // DecodeProfile

namespace llm {

// Region ends inside one forward pass: forward_token calls mark(part) after the launches of each region, so the
// launches queued since the previous mark belong to DecodeProfile part `part`.
class ProfileMarks {
 public:
  virtual void mark(int part) = 0;

 protected:
  ~ProfileMarks() = default;
};

// A mapping's profiled graph: the decode step captured a second time, while the kernel timeline records, with the
// part of every captured kernel. Owned by that mapping's graph-path state: it replays the mapping's weights, so it
// goes with them.
struct ProfiledGraph {
  GraphExecHolder exec;
  std::vector<int> kernel_parts;  // [kernels of the step] the part of each captured kernel, in capture order
  uint32_t trace_id = 0;          // the tracer's id of exec (CUPTI's graph id)
};

class StepProfiler {
 public:
  virtual ~StepProfiler() = default;

  // Profiling on / off (CudaBackend::set_profiling). start() starts the kernel timeline where it can; where it
  // cannot, the refusal is kept and graph_step / time_sample fail with it (the persistent path needs no timeline).
  virtual void start() = 0;
  virtual void stop() = 0;

  // The graph path's profiled step. The first call for a mapping fills `g`: capture(marks, exec) captures the
  // step into exec while the hook's marks note each region's kernels. Then g.exec is replayed alone under the kernel
  // timeline and its parts are added to *out (steps, total_ms, graph_timeline too). Synchronous. Without the kernel
  // timeline it fails with one line (the graph path is never profiled by events around an un-graphed step).
  using Capture = std::function<void(ProfileMarks* marks, GraphExecHolder& exec)>;
  virtual void graph_step(ProfiledGraph& g, const Capture& capture, cudaStream_t s, DecodeProfile* out) = 0;

  // The one kernel launch() queues on s (a sample after a graph step), timed alone by the kernel timeline; its
  // milliseconds. Synchronous.
  virtual double time_sample(const std::function<void()>& launch, cudaStream_t s) = 0;

  // Event spans, for work the kernel timeline does not time (the persistent kernel, a sample after it): span_begin
  // queues a spin longer than a launch (the launch that follows falls inside it, not inside the span) and an event,
  // span_end an event; span_ms waits for the end event and returns the time between them.
  static constexpr int kSpans = 8;  // span ids 0 .. kSpans - 1
  virtual void span_begin(int span, cudaStream_t s) = 0;
  virtual void span_end(int span, cudaStream_t s) = 0;
  virtual double span_ms(int span) = 0;
};

}  // namespace llm
