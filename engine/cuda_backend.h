// CudaBackend: the CUDA engine's controls beyond the Backend interface — the runtime GEMV-mapping switch, the
// CUDA-graph switch and the per-projection timing used by the attribution work. Plain C++ (no CUDA headers), so
// apps and tools compiled by the host compiler can use it. Defined in engine/cuda_backend.cu (CUDA builds only).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "measure/profile_parts.h"  // ProfileParts: the parts a decode step is timed in

namespace llm {

// Device time of decode steps split into the parts of measure/profile_parts.h (the one list the A/B report uses too),
// summed over the steps run while profiling was on. Graph path: the kernel timeline (CUPTI) of a replay of the step's
// graph, each kernel's time from the end of the one before (PDL overlap stays with the earlier kernel), the holes
// between kernels in kWait, so the parts sum to the replay's first-start-to-last-end span (graph_timeline); where
// CUPTI is unavailable, CUDA events around each region of an un-graphed step (launch gaps count where they fall).
// Persistent path: the kernel's event time split by its blocks' clock cycles per part. On every path the sample that
// follows a step (its kernel, timed by events) joins kOther and total_ms. With fused projections
// (BackendOptions::fuse_projections) q, k, v, gate and up stay zero and kQKV / kGateUp carry their time; unfused, kQKV
// and kGateUp stay zero.
struct DecodeProfile : ProfileParts {  // DecodeProfile::kQ ... kParts, part_name(): ProfileParts'
  double ms[kParts] = {};   // per part, all layers, all steps
  double total_ms = 0.0;    // every step's device time (above), its sample's included
  int64_t steps = 0;
  bool graph_timeline = false;  // some graph steps were timed by the kernel timeline (the others by events)

  double gemv_ms() const {  // sum of the projection parts (everything but kOther)
    double s = 0.0;
    for (int p = 0; p < kParts; ++p)
      if (is_gemv(p)) s += ms[p];
    return s;
  }
};

class CudaBackend : public Backend {
 public:
  // Selects the GEMV mapping decode uses (gemv_find(name); "" = the registry's default). The first switch to a
  // mapping prepacks every matrix for it (kept, with its CUDA graph, for later switches); prefill is unaffected.
  // Throws llm::Error for an unknown name or when its prepacked copy would not fit in GPU memory.
  virtual void set_gemv(const std::string& name) = 0;
  virtual std::string gemv() const = 0;  // the current mapping's name
  // Frees the prepacked weights and graphs of every mapping other than the current one.
  virtual void release_other_gemvs() = 0;

  // Decode replays one CUDA graph per mapping (captured on that mapping's first decode). Off: kernels are launched
  // one by one every step (same results; for attribution and debugging).
  virtual void set_use_graph(bool on) = 0;
  virtual bool use_graph() const = 0;

  // Persistent decode on: every decode step is ONE kernel whose resident blocks walk the whole forward pass
  // (kernels/persistent/persistent_decode.h); off: the CUDA graph above. Throws llm::Error naming what it cannot run (the
  // current mapping, quantized weights, FP8 KV, unfused projections: engine/gemv_choice.h decode_path_refusal).
  // Profiling a persistent step splits the kernel's measured time by each block's clock cycles per part, waits
  // included (DecodeProfile::kWait). Each call with on = true reads the test and tuning hooks LLM_PERSISTENT_FAULT,
  // LLM_PERSISTENT_TIMEOUT_MS and LLM_PERSISTENT_ALL_FORMS; the first also LLM_PERSISTENT_BLOCKS (caps the
  // grid) and sizes the path's scratch.
  virtual void set_persistent(bool on) = 0;
  virtual bool persistent() const = 0;
  virtual int persistent_grid() const = 0;  // blocks of the persistent kernel (0 before its first step)

  // Profiling on: every decode runs un-graphed with events around each region and waits for them (one extra host
  // sync per token); profile() accumulates until reset_profile().
  virtual void set_profiling(bool on) = 0;
  virtual DecodeProfile profile() const = 0;
  virtual void reset_profile() = 0;

  // Whether decode runs one GEMV for q|k|v and one for gate|up per layer (BackendOptions::fuse_projections).
  virtual bool fused_projections() const = 0;

  // Bytes of weights one decode step must read through the GEMV mappings: sum of useful_bytes() of the q, k, v, o,
  // gate, up, down matrices of every layer and of the head (mapping padding excluded).
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
