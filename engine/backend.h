// Backend: the operations the decode loop needs, implemented by the CPU reference (engine/cpu_backend.cpp) and the
// CUDA engine (engine/cuda_backend.cu). Both keep their own KV cache and logits; the loop reads like the algorithm:
//   prefill(prompt) -> sample -> decode(tok) -> sample -> ...
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "models/model.h"

namespace llm {

struct BackendOptions {
  std::string device = "cpu";   // "cpu" or "cuda"
  int ctx_size = 0;             // KV cache length; 0 = model maximum, capped to memory
  bool bf16_weights = false;    // CPU: round weights to BF16 first (to compare with the GPU on identical weights)
  std::string gemv = "";        // CUDA: GEMV mapping name ("" = default)
  bool fuse_projections = true; // CUDA decode: one GEMV for q|k|v and one for gate|up per layer (fewer, larger
                                // launches); off: one GEMV per matrix (for A/B and tests)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int ctx_size() const = 0;
  // Runs tokens[0..n) at positions pos .. pos+n-1, filling the KV cache; logits of the last token become current.
  virtual void prefill(const int* tokens, int n, int pos) = 0;
  // Runs one token at position pos; its logits become current.
  virtual void decode(int token, int pos) = 0;
  // Samples from the current logits (see engine/sampler.h for the rule); `step` picks the random number.
  virtual int sample(const SamplerParams& p, uint64_t step) = 0;
  // Copies the current logits to the host (tests, comparisons); not in the per-token path.
  virtual std::vector<float> logits() = 0;
  // Tokens the decode loop hands to one prefill() call, so Ctrl-C is seen between pieces of a long prompt
  // (the CUDA engine batches up to this many per pass; the CPU reference runs token by token).
  virtual int prefill_piece() const { return 512; }
};

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& opt);
// Defined only when built with CUDA (LLM_HAVE_CUDA); make_backend() reports a clear error otherwise.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& opt);
std::unique_ptr<Backend> make_backend(const Model& model, const BackendOptions& opt);
bool cuda_device_available();

}  // namespace llm
