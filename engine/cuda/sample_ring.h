// The sampled-id ring: samples in flight between sample_async and wait_sampled (Backend's run-ahead decode loop).
// The sample kernel writes each id into a slot of a mapped pinned ring (no copy in the stream) and, as the next
// step's {pos, token}, into the device step word; an event behind it says when the host may read the slot. So the
// loop queues step t + 1 before it waits for step t's id and the device never waits for the host. NaN or Inf logits
// come back as kSampleNonFinite in those same 4 bytes and stop the run with an error naming the step.
//
// On the persistent path greedy sampling happens inside the step's kernel (its last block writes the id into the
// slot the next sample takes, and into the step word): the ring is told (expect_in_kernel) and that sample then
// launches nothing.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "engine/cuda/resources.h"  // PinnedBuffer, EventHolder
#include "engine/cuda/step_profiler.h"
#include "engine/sampler.h"

namespace llm {

class SampleRing {
 public:
  static constexpr int kSlots = 4;

  // What the sample kernel reads and writes: logits [vocab rows], ids below sample_vocab, its scratch, the step word
  // [2] (pos, token) it fills for the next step.
  struct Target {
    const float* logits = nullptr;
    int sample_vocab = 0;
    void* scratch = nullptr;
    int* step = nullptr;
  };
  void init(const Target& t, cudaStream_t s);

  // How a sample after a profiled step is timed: not at all, by the kernel timeline (the graph path's, synchronous)
  // or by events read at wait (after the persistent kernel, whose own time the timeline does not split).
  enum class Timing { None, Timeline, Events };

  // Starts a sample of the logits of position logits_pos: its id goes to the next free slot and, with position
  // logits_pos + 1, to the step word. A timeline-timed sample's milliseconds join out's kOther and total_ms at once.
  void start(const SamplerParams& p, uint64_t step, int logits_pos, Timing timing, StepProfiler* prof,
             DecodeProfile* out);
  // The oldest sample's id (waits for it). prof non-null (profiling on): an event-timed sample's time joins *out.
  // check_engine_error runs before the id is judged (a failed persistent step: its error, not an id from its
  // logits). A non-finite or out-of-range id drops everything in flight and fails.
  int wait(StepProfiler* prof, DecodeProfile* out, const std::function<void()>& check_engine_error);
  // Waits for every sample in flight and forgets them; then check_engine_error.
  void drop(const std::function<void()>& check_engine_error);
  // Forgets every sample in flight without waiting (after an engine error, the stream already drained).
  void clear();

  bool empty() const { return count_ == 0; }
  int free_slot() const { return count_ < kSlots ? (head_ + count_) % kSlots : -1; }  // -1: full
  int* slot_device(int slot) const { return static_cast<int*>(ring_.dev) + slot; }
  // The persistent step just queued samples greedily into `slot` for the logits of logits_pos; forget_in_kernel:
  // a step or prefill that did not.
  void expect_in_kernel(int slot, int logits_pos) {
    fused_slot_ = slot;
    fused_pos_ = logits_pos;
  }
  void forget_in_kernel() { fused_slot_ = -1; }

 private:
  void launch(const SamplerParams& p, float u, int slot, int next_pos);

  Target t_;
  cudaStream_t stream_ = nullptr;
  PinnedBuffer ring_;                  // [kSlots] ids, mapped: the sample kernel writes its slot
  EventHolder done_[kSlots];           // recorded behind the sample kernel
  uint64_t step_[kSlots] = {};         // each slot's sampler step (for the error message)
  bool timed_[kSlots] = {};            // event-timed: span `slot` of the profiler holds its time
  int head_ = 0, count_ = 0;           // the oldest slot in flight; how many are
  int fused_slot_ = -1, fused_pos_ = -1;  // expect_in_kernel's slot and logits position (-1: none)
};

}  // namespace llm
