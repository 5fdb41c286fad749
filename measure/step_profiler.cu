// The CUDA engine's profiler hook (measure/step_profiler.h): CUPTI's kernel timeline for graph replays and for the
// sample after a graph step, CUDA events for the spans the timeline does not split (the persistent kernel).
#include "measure/step_profiler.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/cuda/step_profiler.h"
#include "engine/cuda_backend.h"
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"  // spin_device
#include "measure/kernel_trace.h"
#include "measure/timeline_budget.h"

namespace llm {

namespace {

// The spin queued before an event that starts a span (spin_device): longer than a launch under CUPTI, so the launch
// that follows falls inside it, not inside the span.
constexpr unsigned long long kLaunchCoverNs = 300000;

// Kernel nodes of the graph being captured on s so far.
size_t captured_kernels(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, &g));
  if (status != cudaStreamCaptureStatusActive || !g) fail("cuda backend: counting kernels of a stream not capturing");
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  size_t kernels = 0;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType t;
    CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &t));
    kernels += t == cudaGraphNodeTypeKernel;
  }
  return kernels;
}

// The marks of a step being captured: at every region end, how many kernels the capture holds, so each captured
// kernel gets its region's part.
class KernelCounter final : public ProfileMarks {
 public:
  explicit KernelCounter(cudaStream_t s) : s_(s) {}
  void mark(int part) override {
    part_.push_back(part);
    kernels_at_.push_back(captured_kernels(s_));
  }
  // The part of every captured kernel, in capture order.
  std::vector<int> kernel_parts() const {
    std::vector<int> parts;
    for (size_t i = 0; i < part_.size(); ++i)
      parts.insert(parts.end(), kernels_at_[i] - (i ? kernels_at_[i - 1] : 0), part_[i]);
    return parts;
  }

 private:
  cudaStream_t s_;
  std::vector<int> part_;           // each region's part
  std::vector<size_t> kernels_at_;  // kernel nodes captured by the end of each region
};

class CuptiStepProfiler final : public StepProfiler {
 public:
  ~CuptiStepProfiler() override {
    if (timeline_) KernelTrace::instance().stop();
  }

  void start() override {
    if (timeline_ || !refusal_.empty()) return;  // CUPTI is asked once
    std::string why;
    timeline_ = KernelTrace::instance().start(&why);
    if (!timeline_) refusal_ = why.empty() ? "unknown reason" : why;
  }
  void stop() override {
    if (timeline_) KernelTrace::instance().stop();
    timeline_ = false;
  }

  void graph_step(ProfiledGraph& g, const Capture& capture, cudaStream_t s, DecodeProfile* out) override {
    require_timeline();
    KernelTrace& trace = KernelTrace::instance();
    if (!g.exec.g) {  // captured while the timeline records (CUPTI traces graphs made after it started)
      KernelCounter counter(s);
      capture(&counter, g.exec);
      g.kernel_parts = counter.kernel_parts();
      std::string why;
      if (!trace.graph_exec_id(g.exec.g, &g.trace_id, &why)) fail("cuda backend: kernel timeline: ", why);
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    trace.take(nullptr);  // whatever ran before this step (sampling, other passes)
    CUDA_CHECK(cudaGraphLaunch(g.exec.g, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    uint64_t dropped = 0;
    const std::vector<TraceKernel> records = trace.take(&dropped);
    if (dropped) fail("cuda backend: the kernel timeline lost ", dropped, " records (CUPTI's buffers were full)");
    const std::vector<TraceReplay> replays = split_replays(records, g.trace_id);
    if (replays.size() != 1)
      fail("cuda backend: the kernel timeline of one decode step holds ", replays.size(),
           " replays of its graph, not 1");
    const TimelineBudget b =
        attribute_timeline(replays[0].kernels, g.kernel_parts, DecodeProfile::kParts, DecodeProfile::kWait);
    for (int p = 0; p < DecodeProfile::kParts; ++p) out->ms[p] += b.ms[size_t(p)];
    out->total_ms += b.span_ms;
    out->steps++;
    out->graph_timeline = true;
  }

  double time_sample(const std::function<void()>& launch, cudaStream_t s) override {
    require_timeline();
    KernelTrace& trace = KernelTrace::instance();
    CUDA_CHECK(cudaStreamSynchronize(s));
    trace.take(nullptr);  // the step before: its own pass took its records
    launch();
    CUDA_CHECK(cudaStreamSynchronize(s));
    uint64_t dropped = 0;
    const std::vector<TraceKernel> records = trace.take(&dropped);
    if (dropped || records.size() != 1 || records[0].end_ns <= records[0].start_ns)
      fail("cuda backend: the kernel timeline of one sample holds ", records.size(), " kernel records (", dropped,
           " dropped), not 1 timed");
    return double(records[0].end_ns - records[0].start_ns) * 1e-6;
  }

  void span_begin(int span, cudaStream_t s) override {
    Span& sp = span_at(span);
    spin_device(kLaunchCoverNs, s);  // the launch that follows falls inside it, not between the events
    CUDA_CHECK(cudaEventRecord(sp.t0.e, s));
  }
  void span_end(int span, cudaStream_t s) override { CUDA_CHECK(cudaEventRecord(span_at(span).t1.e, s)); }
  double span_ms(int span) override {
    Span& sp = span_at(span);
    CUDA_CHECK(cudaEventSynchronize(sp.t1.e));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, sp.t0.e, sp.t1.e));
    return double(ms);
  }

 private:
  struct Span {
    EventHolder t0, t1;
  };
  Span& span_at(int span) {
    if (span < 0 || span >= kSpans) fail("cuda backend: profiling span ", span, " outside [0, ", kSpans, ")");
    if (!spans_[span].t0.e) {
      spans_[span].t0.create(cudaEventDefault);
      spans_[span].t1.create(cudaEventDefault);
    }
    return spans_[span];
  }
  // The graph path is timed by the kernel timeline only: events around an un-graphed step would time a different
  // (slower) step, so without CUPTI a profiled graph step fails here with one line.
  void require_timeline() const {
    if (!timeline_)
      fail("cuda backend: profiling the graph path needs CUPTI's kernel timeline, unavailable here (",
           refusal_.empty() ? std::string("profiling is off") : refusal_, ")");
  }

  bool timeline_ = false;  // the kernel timeline records
  std::string refusal_;    // why CUPTI refused (once known; not asked again)
  Span spans_[kSpans];
};

}  // namespace

void install_step_profiler(CudaBackend& backend) { backend.set_profiler(std::make_shared<CuptiStepProfiler>()); }

}  // namespace llm
