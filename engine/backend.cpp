// make_backend: picks the CPU reference or the CUDA engine from BackendOptions::device.
#include "engine/backend.h"

#include "core/error.h"

namespace llm {

#ifndef LLM_HAVE_CUDA
bool cuda_device_available() { return false; }  // with CUDA it is defined in engine/cuda_backend.cu
#endif

std::unique_ptr<Backend> make_backend(const Model& model, const BackendOptions& opt) {
  std::string device = opt.device;
  if (device.empty() || device == "auto") device = cuda_device_available() ? "cuda" : "cpu";
  BackendOptions o = opt;
  o.device = device;
  if (device == "cpu") return make_cpu_backend(model, o);
  if (device == "cuda") {
#ifdef LLM_HAVE_CUDA
    return make_cuda_backend(model, o);
#else
    fail("this build has no CUDA engine (built without a CUDA toolkit)");
#endif
  }
  fail("unknown device '", opt.device, "' (expected cpu, cuda or auto)");
}

}  // namespace llm
