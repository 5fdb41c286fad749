// A kernel timeline from CUPTI's Activity API: the GPU start and end of every kernel, graph replays included, which
// CUDA events around single launches cannot give (they time an un-graphed step and so overstate it). One process-wide
// tracer, because CUPTI's buffer callbacks are process-global. No CUDA or CUPTI type appears here, so the header
// compiles in every build; in a build without CUPTI (CMake did not find it, or no CUDA at all) start() says so.
//
// Use: start(); replay; cudaStreamSynchronize; take() -> the kernels that ran since the last take; stop().
// measure/timeline_budget.h splits take()'s records into replays and attributes each replay's time to parts.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "measure/trace_kernel.h"  // TraceKernel: one traced kernel

struct CUgraphExec_st;  // cudaGraphExec_t == CUgraphExec == CUgraphExec_st*, declared without the CUDA headers

namespace llm {

class KernelTrace {
 public:
  // The one tracer (never destroyed: CUPTI may deliver its last buffer from an at-exit handler).
  static KernelTrace& instance();

  // Whether this build links CUPTI; false: start() always fails.
  static bool built_with_cupti();

  // Starts collecting kernel records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: unlike CUPTI_ACTIVITY_KIND_KERNEL it
  // does not serialize kernels). The first call registers the buffer callbacks. false, with a one-line reason in
  // *why, when CUPTI refuses (no device, no driver support, another tool holds CUPTI) or the build has no CUPTI.
  // Calling it while started is harmless. start, stop, take: from one thread.
  bool start(std::string* why);

  // Stops collecting. Records already made stay for take().
  void stop();

  // Flushes CUPTI's buffers and returns every kernel record made since the last take, sorted by start (ties: end),
  // then forgets them. Synchronize the streams first: a kernel still running has no record yet. *dropped (may be
  // null) = records lost in that time (CUPTI had no buffer space, or a buffer held an unreadable record); non-zero
  // means the timeline has holes, so a caller must refuse it rather than attribute it. Records CUPTI could not time
  // (start_ns == end_ns == 0, device buffer full) are returned as they are; attribute_timeline refuses them. Throws
  // llm::Error when CUPTI cannot flush.
  std::vector<TraceKernel> take(uint64_t* dropped);

  // CUPTI's id of an executable graph (cuptiGetGraphExecId), to compare with TraceKernel::graph_id (not yet checked
  // on a GPU that the two agree: check before filtering on it). false, with the reason in *why, without CUPTI or when
  // CUPTI fails.
  bool graph_exec_id(CUgraphExec_st* exec, uint32_t* id, std::string* why);

  // Called from CUPTI's completed-buffer callback (any thread): keeps the buffer's kernel records.
  void add(std::vector<TraceKernel>&& kernels, uint64_t dropped);

 private:
  KernelTrace() = default;
  void flush();  // CUPTI's buffers -> kernels_ (nothing without CUPTI)

  std::mutex mutex_;               // guards kernels_ and dropped_: CUPTI hands buffers over on its own thread too
  std::vector<TraceKernel> kernels_;
  uint64_t dropped_ = 0;
  bool registered_ = false;        // buffer callbacks registered (once per process)
  bool collected_ = false;         // a start() succeeded: CUPTI may hold buffers to flush
  bool started_ = false;
};

}  // namespace llm
