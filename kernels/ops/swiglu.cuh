// SwiGLU's one expression, silu(gate) * up = gate / (1 + e^-gate) * up, for every kernel that computes it (ops'
// swiglu kernels, the batch x pass's SwiGLU form, the persistent kernel): one place, so their outputs agree bit for
// bit (quant_batch_swiglu_x's int8 form is tested bit for bit against swiglu's output).
#pragma once

namespace llm {

#if defined(__CUDACC__)
__device__ __forceinline__ float swiglu_value(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }
#endif

}  // namespace llm
