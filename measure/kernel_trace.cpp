// The CUPTI Activity API behind KernelTrace (measure/kernel_trace.h). Host code; CUPTI only where CMake found it
// (LLM_HAVE_CUPTI), else stubs that say so, so this file compiles in the CPU-only tree without CUDA headers.
#include "measure/kernel_trace.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "core/error.h"  // fail

#if LLM_HAVE_CUPTI
#include <cupti.h>  // the Activity API; CUpti_ActivityKernel10 is CUDA 13's kernel record
#endif

namespace llm {

KernelTrace& KernelTrace::instance() {
  static KernelTrace* const trace = new KernelTrace;  // leaked on purpose: see the header
  return *trace;
}

void KernelTrace::add(std::vector<TraceKernel>&& kernels, uint64_t dropped) {
  std::lock_guard<std::mutex> lock(mutex_);
  kernels_.insert(kernels_.end(), std::make_move_iterator(kernels.begin()), std::make_move_iterator(kernels.end()));
  dropped_ += dropped;
}

#if LLM_HAVE_CUPTI

namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;  // ~40k kernel records; a decode step has hundreds
constexpr size_t kBufferAlign = 8;                 // CUPTI wants 8-byte aligned activity buffers

// "CUPTI_ERROR_NOT_INITIALIZED: <CUPTI's description>".
std::string result_text(CUptiResult r) {
  const char* name = nullptr;
  const char* message = nullptr;
  std::string text = "CUptiResult " + std::to_string(int(r));
  if (cuptiGetResultString(r, &name) == CUPTI_SUCCESS && name) text = name;
  if (cuptiGetErrorMessage(r, &message) == CUPTI_SUCCESS && message && *message && text != message)
    text += std::string(": ") + message;
  return printable_message(text);
}

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));  // null: CUPTI drops and counts
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// CUPTI's thread, or the caller of cuptiActivityFlushAll: keep the kernel records, free the buffer. Nothing may throw
// out of a C callback, so a failure here is counted as a lost record rather than raised.
void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  std::vector<TraceKernel> kernels;
  uint64_t lost = 0;
  try {
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the buffer
      if (r != CUPTI_SUCCESS) {                        // an incomplete or invalid record: the rest is unreadable
        lost += 1;
        break;
      }
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      TraceKernel t;
      t.start_ns = k->start;
      t.end_ns = k->end;
      t.graph_id = k->graphId;
      t.correlation_id = k->correlationId;
      t.graph_node_id = k->graphNodeId;
      if (k->name) t.name = k->name;  // CUPTI owns the string and shares it between records: copy it
      kernels.push_back(std::move(t));
    }
  } catch (...) {  // out of memory while copying: those records are lost
    lost += 1;
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  try {
    KernelTrace::instance().add(std::move(kernels), lost + dropped);
  } catch (...) {
  }
}

}  // namespace

bool KernelTrace::built_with_cupti() { return true; }

bool KernelTrace::start(std::string* why) {
  if (started_) return true;
  if (!registered_) {
    const CUptiResult r = cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
    if (r != CUPTI_SUCCESS) {
      if (why) *why = "kernel timeline: cuptiActivityRegisterCallbacks failed: " + result_text(r);
      return false;
    }
    registered_ = true;
  }
  const CUptiResult r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    if (why) *why = "kernel timeline: cuptiActivityEnable(CONCURRENT_KERNEL) failed: " + result_text(r);
    return false;
  }
  started_ = collected_ = true;
  return true;
}

void KernelTrace::stop() {
  if (!started_) return;
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);  // failing to stop leaves records coming: harmless
  started_ = false;
}

void KernelTrace::flush() {
  if (!collected_) return;
  // Hands every buffer to on_buffer_completed, partly filled ones too; may call it on this thread, so no lock here.
  const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (r != CUPTI_SUCCESS) fail("kernel timeline: cuptiActivityFlushAll failed: ", result_text(r));
  size_t lost = 0;  // the global queue's count, for records no completed buffer reported
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &lost) == CUPTI_SUCCESS && lost > 0) add({}, lost);
}

bool KernelTrace::graph_exec_id(CUgraphExec_st* exec, uint32_t* id, std::string* why) {
  const CUptiResult r = cuptiGetGraphExecId(exec, id);
  if (r == CUPTI_SUCCESS) return true;
  if (why) *why = "kernel timeline: cuptiGetGraphExecId failed: " + result_text(r);
  return false;
}

#else  // no CUPTI in this build

namespace {
const char* const kNoCupti = "this build has no CUPTI (kernel timeline unavailable)";
}

bool KernelTrace::built_with_cupti() { return false; }

bool KernelTrace::start(std::string* why) {
  if (why) *why = kNoCupti;
  return false;
}

// Nothing to stop or flush; the state fields are touched so that clang (the CPU-only fuzz tree) sees them used.
void KernelTrace::stop() { started_ = false; }

void KernelTrace::flush() { registered_ = collected_ = false; }

bool KernelTrace::graph_exec_id(CUgraphExec_st*, uint32_t* id, std::string* why) {
  if (id) *id = 0;
  if (why) *why = kNoCupti;
  return false;
}

#endif

std::vector<TraceKernel> KernelTrace::take(uint64_t* dropped) {
  flush();
  std::vector<TraceKernel> out;
  uint64_t lost = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(kernels_);
    lost = dropped_;
    dropped_ = 0;
  }
  std::stable_sort(out.begin(), out.end(), [](const TraceKernel& a, const TraceKernel& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  if (dropped) *dropped = lost;
  return out;
}

}  // namespace llm
