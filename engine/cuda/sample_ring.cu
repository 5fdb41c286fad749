// The sampled-id ring (engine/cuda/sample_ring.h).
#include "engine/cuda/sample_ring.h"

#include "core/counter_rng.h"  // rng_unit, kSamplerStream
#include "core/error.h"
#include "engine/backend.h"    // fail_non_finite_logits
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"   // sample_device, kSampleNonFinite

namespace llm {

void SampleRing::init(const Target& t, cudaStream_t s) {
  t_ = t;
  stream_ = s;
  ring_.alloc_mapped(sizeof(int) * kSlots);
  for (auto& e : done_) e.create(cudaEventDisableTiming);
}

void SampleRing::launch(const SamplerParams& p, float u, int slot, int next_pos) {
  sample_device(t_.logits, t_.sample_vocab, p.temperature, p.top_k, p.top_p, u, slot_device(slot), t_.scratch,
                stream_, t_.step, next_pos);
  CUDA_CHECK_LAUNCH("sample_device");
}

void SampleRing::start(const SamplerParams& p, uint64_t step, int logits_pos, Timing timing, StepProfiler* prof,
                       DecodeProfile* out) {
  if (count_ == kSlots) fail("cuda backend: ", kSlots, " samples already in flight (wait_sampled first)");
  const float u = rng_unit(p.seed, kSamplerStream, step);
  // The id also goes to the step word with the position after the current logits' token: the next step's input.
  const int next_pos = logits_pos + 1;
  const int slot = (head_ + count_) % kSlots;
  // Greedy by the sample kernel's rule (kernels/ops/sampling.cu: T not > 0, or top_k 1), of logits whose persistent
  // step sampled them into this slot: nothing to launch.
  const bool greedy = !(p.temperature > 0.0f) || p.top_k == 1;
  const bool in_kernel = greedy && fused_slot_ == slot && fused_pos_ == logits_pos;
  fused_slot_ = -1;
  timed_[slot] = false;
  if (!in_kernel && timing == Timing::Timeline) {
    // The graph path profiled by the kernel timeline: the sample kernel timed the same way (its GPU start to end),
    // not by events around it (which add their own microseconds: 2026-12-04, stories260K's budget read 120%).
    const double ms = prof->time_sample([&] { launch(p, u, slot, next_pos); }, stream_);
    out->ms[DecodeProfile::kOther] += ms;
    out->total_ms += ms;
  } else if (!in_kernel) {
    timed_[slot] = timing == Timing::Events;  // in the kernel: timed with it
    if (timed_[slot]) prof->span_begin(slot, stream_);
    launch(p, u, slot, next_pos);
    if (timed_[slot]) prof->span_end(slot, stream_);
  }
  CUDA_CHECK(cudaEventRecord(done_[slot].e, stream_));
  step_[slot] = step;
  ++count_;
}

int SampleRing::wait(StepProfiler* prof, DecodeProfile* out, const std::function<void()>& check_engine_error) {
  if (count_ == 0) fail("cuda backend: wait_sampled with no sample started");
  const int slot = head_;
  CUDA_CHECK(cudaEventSynchronize(done_[slot].e));
  head_ = (head_ + 1) % kSlots;
  --count_;
  const int id = static_cast<int*>(ring_.p)[slot];
  const uint64_t step = step_[slot];
  if (timed_[slot] && prof) {
    const double ms = prof->span_ms(slot);
    out->ms[DecodeProfile::kOther] += ms;
    out->total_ms += ms;
  }
  check_engine_error();
  // The same 4 bytes carry the non-finite flag: NaN or Inf logits stop the run (never a token from garbage). What is
  // still in flight came from them: dropped.
  if (id == kSampleNonFinite || id < 0 || id >= t_.sample_vocab) {
    drop(check_engine_error);
    if (id == kSampleNonFinite) fail_non_finite_logits(step);
    fail("cuda backend: step ", step, ": sampling returned id ", id, " outside [0, ", t_.sample_vocab, ")");
  }
  return id;
}

void SampleRing::drop(const std::function<void()>& check_engine_error) {
  if (count_ == 0) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  clear();
  check_engine_error();
}

void SampleRing::clear() {
  head_ = count_ = 0;
  fused_slot_ = -1;
}

}  // namespace llm
