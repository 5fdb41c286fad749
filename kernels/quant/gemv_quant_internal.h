// Shared by the quantized GEMV implementation files (kernels/gemv_quant*.cu only; the engine uses kernels/quant/gemv_quant.h).
#pragma once
#include <cuda_runtime.h>

#include "kernels/quant/gemv_quant_device.cuh"  // QuantPackedArgs
#include "kernels/quant/gemv_quant_plan.h"

namespace llm {

// The "warp" / "warp-dp4a" plan is one the kernel can run (splits divide the block's warps, the grid holds every warp
// lane, every lane owns a row group, the slices cover K); fails naming the mapping otherwise.
inline void quant_gemv_check_warp_plan(const char* mapping, const QuantGemvPlan& plan) {
  constexpr int kWarps = kQuantWarpsPerBlock;
  if (plan.grid <= 0 || plan.splits < 1 || plan.splits > kWarps || kWarps % plan.splits != 0 ||
      int64_t(plan.grid) * (kWarps / plan.splits) < plan.lanes || plan.lanes > plan.row_groups ||
      int64_t(plan.slice_units) * plan.splits < plan.units)
    fail("quantized gemv '", mapping, "': bad plan (grid ", plan.grid, ", splits ", plan.splits, ", row groups ",
         plan.row_groups, ")");
}

// Per-mapping launchers, called by quant_gemv_launch (kernels/quant/gemv_quant.cu) after the layout and plane checks.
void quant_gemv_warp_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                            bool accumulate, const GemvEpilogue& ep, cudaStream_t stream);
void quant_gemv_thread_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                              bool accumulate, const GemvEpilogue& ep, cudaStream_t stream);
void quant_gemv_warp_dp4a_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, const GemvEpilogue& ep, cudaStream_t stream);
void quant_gemv_as_stored_launch(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                 bool accumulate, const GemvEpilogue& ep, cudaStream_t stream);

// One launch of the batch-k GEMV (kernels/quant/gemv_quant_batch.h), as the batch launcher (gemv_quant_batch.cu)
// builds it for every kernel: rows [row0, row0 + rows) of the planes against nb vectors, y[b * ldy + i].
struct QuantBatchArgs {
  QuantPackedArgs p;        // planes, chunks, group/super shifts, code_offset (x, y, plan fields unused)
  int64_t row0, rows;       // rows [row0, row0 + rows) of the planes
  const unsigned char* xq;  // the int8 forms (dp4a and tensor-core kernels)
  const float* xf;          // FP32 x [nb, ldxf] (FMA kernel)
  int64_t ldxf;
  int64_t x_stride;         // quant_batch_x_stride(k)
  int64_t off_d, off_s16;   // within one vector's form
  int nb;
  float* y;
  int64_t ldy;
  // QuantBatchSplit: local rows [split0, split0 + split1) go to y1 (pitch ldy1) from its row 0, rows past them to y2
  // (pitch ldy2); split0 = rows: everything to y.
  int64_t split0, split1;
  float* y1;
  float* y2;
  int64_t ldy1, ldy2;
  int accumulate;
  int slice;                // tensor-core kernel: chunks per warp's K slice (its launcher sets it)
};

#ifdef __CUDACC__
// Where vector b's output of local row r goes (QuantBatchArgs' split).
__device__ __forceinline__ float* quant_batch_out(const QuantBatchArgs& a, int b, int64_t r) {
  if (r < a.split0) return a.y + int64_t(b) * a.ldy + r;
  r -= a.split0;
  if (r < a.split1) return a.y1 + int64_t(b) * a.ldy1 + r;
  return a.y2 + int64_t(b) * a.ldy2 + (r - a.split1);
}
#endif

// The tensor-core batch-k kernel (gemv_quant_mma.cu), called by the batch launcher after its checks, for at most
// kQuantBatchMmaMax vectors (a.xq the int8 forms).
void quant_batch_mma_launch(int type_id, QuantBatchArgs a, cudaStream_t stream);

}  // namespace llm
