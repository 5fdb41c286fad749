// Shared by the quantized GEMV implementation files (kernels/gemv_quant*.cu only; the engine uses kernels/gemv_quant.h).
#pragma once
#include <cuda_runtime.h>

#include "kernels/gemv_quant_plan.h"

namespace llm {

// Per-mapping launchers, called by quant_gemv_launch (kernels/gemv_quant.cu) after the layout and plane checks.
void quant_gemv_warp_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                            bool accumulate, cudaStream_t stream);
void quant_gemv_thread_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                              bool accumulate, cudaStream_t stream);
void quant_gemv_warp_dp4a_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, cudaStream_t stream);
void quant_gemv_as_stored_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, cudaStream_t stream);

}  // namespace llm
