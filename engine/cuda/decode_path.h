// The two ways the CUDA engine runs a decode step, behind one interface: the graph path (the forward pass as one
// kernel per op, captured once per mapping into a CUDA graph and replayed; engine/cuda/graph_path.h) and the
// persistent path (one kernel per token whose resident blocks walk the whole pass; engine/cuda/persistent_path.h).
// Both read the step's {pos, token} from the device step word and write the logits buffer, so the engine switches
// between them per step.
#pragma once
#include <string>

#include "engine/cuda/gemv_mappings.h"  // MappingState
#include "engine/cuda/step_profiler.h"

namespace llm {

class DecodePathImpl {
 public:
  virtual ~DecodePathImpl() = default;
  // "" when this path can run mapping ms on this engine, otherwise why not in one line.
  virtual std::string refusal(const MappingState& ms) const = 0;
  // Queues one decode step of ms whose logits are position pos's (no host sync).
  virtual void enqueue_step(MappingState& ms, int pos) = 0;
  // One profiled step: the same step, timed through the profiler hook, its parts added to *out (synchronous).
  virtual void profile_step(MappingState& ms, int pos, StepProfiler& prof, DecodeProfile* out) = 0;
  // Kernels one step of ms launches (its kernel boundaries per token); 0 before the path has run ms.
  virtual int kernels_per_step(const MappingState& ms) const = 0;
};

}  // namespace llm
