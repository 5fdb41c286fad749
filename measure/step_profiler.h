// The CUDA engine's profiler hook made real (engine/cuda/step_profiler.h): the graph path timed by CUPTI's kernel
// timeline of graph replays (measure/kernel_trace.h, attributed by measure/timeline_budget.h), the persistent
// kernel and the samples after it by CUDA events behind a spin. Plain C++ here (no CUDA headers), so the chat and the
// apps call it; defined in measure/step_profiler.cu (CUDA builds only).
#pragma once

namespace llm {

class CudaBackend;

// Gives `backend` the profiler CudaBackend::set_profiling uses. Where CUPTI is unavailable (no CUPTI in this build,
// or CUPTI refused: another tool holds it) a profiled graph step fails with one line saying why; the persistent path
// is profiled either way.
void install_step_profiler(CudaBackend& backend);

}  // namespace llm
