// The persistent path's host side: everything the one-kernel-per-token decode (kernels/persistent/persistent_decode.h)
// needs from the engine. Its plan (the grid, from the shape alone) and scratch (counters, attention partials, the
// per-block cycle counters, the mapped error word) are made on first use; its arguments are built once per mapping
// (the weights' persistent forms as a device array of layers); per step it claims the sample ring's free slot so
// greedy sampling happens inside the kernel, and reads the error word a failed step leaves (a wait that timed out is
// an error, never a hang). A profiled step's kernel time is split by its blocks' clock cycles per part.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "engine/backend.h"  // EngineTuning
#include "engine/cuda/activations.h"
#include "engine/cuda/decode_path.h"
#include "engine/cuda/device_model.h"
#include "engine/cuda/kv_cache.h"
#include "engine/cuda/resources.h"
#include "engine/cuda/sample_ring.h"
#include "kernels/persistent/persistent_decode.h"

namespace llm {

class PersistentPath final : public DecodePathImpl {
 public:
  // What the path reads and writes: all owned by the engine, which outlives the path.
  struct Engine {
    ModelConfig cfg;
    std::string source;  // the model, for messages
    int ctx = 0;
    int sample_vocab = 0;
    const DeviceModel* model = nullptr;
    const DeviceKvCache* kv = nullptr;
    const Activations* act = nullptr;
    const GemvMappings* mappings = nullptr;
    SampleRing* ring = nullptr;
    DeviceArena* arena = nullptr;
    cudaStream_t stream = nullptr;
  };
  explicit PersistentPath(const Engine& e) : e_(e) {}

  std::string refusal(const MappingState& ms) const override;
  void enqueue_step(MappingState& ms, int pos) override;
  // The step timed by events, then run again by the kernel's profiling build for the cycle split (a step is
  // idempotent).
  void profile_step(MappingState& ms, int pos, StepProfiler& prof, DecodeProfile* out) override;
  // The one kernel (and the head GEMV's launch when split).
  int kernels_per_step(const MappingState&) const override { return plan_.grid > 0 ? (split_head_ ? 2 : 1) : 0; }

  // Before the first step: the plan (grid capped by t.persistent_max_blocks) and the scratch, once.
  void prepare(const EngineTuning& t);
  // The test and tuning knobs read per step (fault, timeout, all forms).
  void set_tuning(const EngineTuning& t);
  int grid() const { return plan_.grid; }  // 0 before prepare
  // A failed step's error (read from mapped host memory; a step queued ahead may still run): the counters zeroed for
  // the next step, the samples in flight dropped, then llm::Error with the kernel's one line. Nothing when none.
  void check_error();

 private:
  PersistentDecodeArgs shape() const;  // the model's shape as the kernel's arguments
  const PersistentDecodeArgs& args_of(MappingState& ms);  // built once per mapping
  PersistentDecodeArgs step_args(MappingState& ms, int pos);  // this step's, the sample slot claimed

  Engine e_;
  PersistentPlan plan_;
  unsigned* sync_ = nullptr;                 // [persistent_decode_sync_words] counters, zeroed once (kept zero)
  float* attn_partial_ = nullptr;            // [persistent_decode_scratch_floats] attention partials
  unsigned long long* cycles_ = nullptr;     // [grid, kPersistentParts] cycles of a profiled step
  PinnedBuffer err_;                         // mapped: the error code a failed step writes (0: none)
  bool pending_ = false;                     // a step has run (the error word is meaningful)
  int fault_ = 0;                            // EngineTuning::persistent_fault
  int all_forms_ = 0;                        // EngineTuning::persistent_all_forms
  int prefetch_ = 0;                         // EngineTuning::persistent_prefetch
  bool split_head_ = false;                  // the cluster form with EngineTuning::cluster_split_head: the kernel ends
                                             // at the final norm (into xb), the head GEMV is the mapping's launch
  unsigned long long timeout_ns_ = 0;        // EngineTuning::persistent_timeout_ms in ns; 0: the kernel's default
};

}  // namespace llm
