// CudaBackend: the CUDA engine's controls beyond the Backend interface — the runtime GEMV-mapping switch, the decode
// path switch, the tuning knobs and the per-part profile used by the attribution work. Plain C++ (no CUDA headers),
// so apps and tools compiled by the host compiler can use it. Implemented by engine/cuda/cuda_engine.cu (CUDA builds
// only); how a profiled step is timed is the profiler hook's (engine/cuda/step_profiler.h), which measure/ implements.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/decode_profile.h"  // DecodeProfile: the parts a decode step is timed in

namespace llm {

class StepProfiler;  // engine/cuda/step_profiler.h; measure/step_profiler.h makes one (install_step_profiler)

class CudaBackend : public Backend {
 public:
  // Selects the GEMV mapping decode uses: the name ("" = the model's default: default_gemv_name) is resolved once into
  // a GemvPlan (engine/gemv_choice.h gemv_plan), which the engine carries from then on. The first switch to a
  // mapping prepacks every matrix for it (kept, with its CUDA graph, for later switches); prefill is unaffected.
  // Throws llm::Error for an unknown name, a weight type it has no form for, or when its prepacked copy would not fit
  // in GPU memory.
  virtual void set_gemv(const std::string& name) = 0;
  virtual std::string gemv() const = 0;  // the current plan's name (a report label)
  // Frees the prepacked weights and graphs of every mapping other than the current one.
  virtual void release_other_gemvs() = 0;

  // Persistent decode on: every decode step is ONE kernel whose resident blocks walk the whole forward pass
  // (kernels/persistent/persistent_decode.h); off: the CUDA graph of one kernel per op, captured once per mapping
  // (its first decode runs eagerly as the warm-up, then captures). Throws llm::Error naming what it cannot run (the
  // current mapping, quantized weights, FP8 KV: engine/gemv_choice.h decode_path_refusal). Profiling a persistent
  // step splits the kernel's measured time by each block's clock cycles per part, waits included
  // (DecodeProfile::kWait). The first call with on = true sizes the path's scratch and its grid
  // (EngineTuning::persistent_max_blocks caps it).
  virtual void set_persistent(bool on) = 0;
  virtual bool persistent() const = 0;
  virtual int persistent_grid() const = 0;  // blocks of the persistent kernel (0 before its first step)
  // Kernels one decode step of the current mapping and path launches: its kernel boundaries per token (the graph's
  // kernel nodes; 1 on the persistent path); 0 before the first step with them.
  virtual int kernels_per_step() const = 0;
  // How many verify lengths have a captured graph now (EngineTuning::verify_graph; 0 over an FP8 cache, whose verify
  // passes run eagerly): what prepare_verify left, for its test.
  virtual int captured_verify_lengths() const = 0;
  // Whether a verify now runs the decode step's kernels over its tokens (EngineTuning::verify_order where the path,
  // cache and mapping have it), so its rows are the decode steps' logits bit for bit; else a prefill pass.
  virtual bool verify_in_decode_order() const = 0;

  // The knobs of BackendOptions::tuning, changed after construction (tests: a fault on, then off). The persistent
  // grid cap applies only before the persistent path's first use (its scratch is sized for the grid).
  virtual void set_tuning(const EngineTuning& t) = 0;

  // The profiler hook profiling uses (measure/step_profiler.h install_step_profiler makes one): CUPTI's kernel
  // timeline and CUDA events live with measurement, not in the engine.
  virtual void set_profiler(std::shared_ptr<StepProfiler> profiler) = 0;
  // Profiling on: every decode step is timed (one host sync per token) through the profiler hook; profile()
  // accumulates until reset_profile(). Throws llm::Error when no profiler was set. The graph path is timed by CUPTI's
  // kernel timeline of graph replays; where that is unavailable a profiled graph step fails with one line saying why.
  virtual void set_profiling(bool on) = 0;
  virtual DecodeProfile profile() const = 0;
  virtual void reset_profile() = 0;

  // Bytes of weights one decode step must read through the GEMV mappings: sum of useful_bytes() of the q|k|v, o,
  // gate|up, down matrices of every layer and of the head (mapping padding excluded).
  virtual size_t gemv_bytes_per_token() const = 0;

  // Tokens per batched prefill pass (long prompts are split). 1 <= n <= max_prefill_chunk(); for tests and tuning.
  virtual void set_prefill_chunk(int n) = 0;
  virtual int max_prefill_chunk() const = 0;

  // Device memory this backend allocated itself (weights, prepacked copies, KV cache, activations, scratch).
  virtual size_t device_bytes() const = 0;
};

// As make_cuda_backend, with the CUDA controls visible. Throws llm::Error "no CUDA device found" without a device.
std::unique_ptr<CudaBackend> make_cuda_engine(const Model& model, const BackendOptions& opt);
// The CUDA controls of a backend made by make_cuda_backend / make_backend; throws llm::Error for another backend.
CudaBackend& as_cuda_backend(Backend& backend);

}  // namespace llm
