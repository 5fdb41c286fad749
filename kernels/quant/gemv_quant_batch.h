// The batch-k quantized GEMV (issues 35 and 36): Y[b] (+)= W X[b] for up to kQuantBatchMax activation vectors with
// each weight read ONCE, from the prepacked planes "warp" and "warp-dp4a" read. Prefill of a short prompt and the
// verification of k drafted tokens use it on matrices kept quantized, instead of dequantizing every matrix to BF16
// (write 2 bytes, read 2 bytes per weight) for a cuBLAS GEMM: at 8 vectors a Q4_0 matrix costs its 0.56 bytes per
// weight once.
//
// Two steps, so that one int8 form of X serves every matrix that reads the same X (q, k and v; gate and up):
//   quant_batch_quantize_x: X [nb, ldx] (FP32 or BF16) to int8 per block of 32, exactly as warp-dp4a quantizes its
//     one x (quant_x_q8_block: d = amax / 127, q = round(x / d), sums of q per 16) into a scratch of
//     quant_batch_x_bytes(nb, k) bytes;
//   quant_batch_gemv_launch: rows [row0, row0 + rows) of W against those nb vectors, dp4a integer dots per 4 codes
//     (quant_chunk_dp4a, the arithmetic warp-dp4a runs) and one FP32 FMA per group, row and vector.
// The kernel: a block of 128 threads takes kQuantBatchRows (4) rows and walks K with its threads, 16-byte code loads of
// its rows in flight together; each x chunk (16 or 32 int8 per vector, read through L1) serves all of them; the per
// thread sums of [nb][rows] are reduced across a warp by halving exchanges (about one shuffle per value, not five), then
// across the 4 warps in a fixed order (deterministic, no atomics).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/quant/gemv_quant_plan.h"

namespace llm {

// kQuantBatchMax, kQuantBatchRows, quant_batch_x_stride, quant_batch_x_bytes: kernels/quant/gemv_quant_plan.h.

// Whether w can run batched: the prepacked planes present and k a multiple of 32.
bool quant_batch_supported(const QuantGemvWeight& w);

// X [nb, ldx] (x_bf16: BF16 bits, else FP32; nb >= 1; k % 32 == 0) into xq (quant_batch_x_bytes(nb, k) bytes, 16-byte
// aligned; vector b's form at b * quant_batch_x_stride(k)). Asynchronous; no allocation.
void quant_batch_quantize_x(const void* x, bool x_bf16, int64_t ldx, int nb, int64_t k, void* xq, cudaStream_t stream);

// The SwiGLU of nb rows of [gate | up] (FP32, row pitch ldgu >= 2 k) in the same form: vector b is
// silu(gate) * up, the expression of ops' swiglu (bit for bit its output, and so bit for bit
// quant_batch_quantize_x of it), also written to h [nb, ldh] when h is not null. One pass instead of a SwiGLU kernel
// and the x pass; the decode step's down GEMV reads the form it leaves (GemvEpilogue::x_q8, warp-dp4a) instead of
// quantizing x in each of its blocks.
// round_bf16: each value rounded to BF16 first (and so written to h), bit for bit swiglu_rows_bf16 then the BF16 form
// of quant_batch_quantize_x: a prompt's pass in one launch instead of two.
// xq_pitch: bytes from one vector's int8 form to the next (0: quant_batch_x_stride(k), packed); a decode pass over a
// token axis gives its slab stride (each token's form in its own slab, kernels/ops/token_axis.h).
void quant_batch_swiglu_x(const float* gate_up, int64_t ldgu, int nb, int64_t k, float* h, int64_t ldh, void* xq,
                          cudaStream_t stream, bool round_bf16 = false, int64_t xq_pitch = 0);

// FP32 x [nb, ldx] rounded to BF16, then the BF16 form of quant_batch_quantize_x: bit for bit convert_f32_to_bf16 and
// that pass, in one launch.
void quant_batch_quantize_x_bf16_rounded(const float* x, int64_t ldx, int nb, int64_t k, void* xq, cudaStream_t stream);

// RMSNorm of the nb rows of x [nb, dim] (pitch dim) with weight w and eps, rounded to BF16, in the int8 form: bit for
// bit rmsnorm_bf16 (kernels/ops/ops.h) then the BF16 form of quant_batch_quantize_x, in one launch (one block per row).
// round_bf16 false: bit for bit rmsnorm (FP32) then the FP32 form of quant_batch_quantize_x (warp-dp4a's x).
void quant_batch_rmsnorm_x(const float* x, const float* w, int nb, int dim, float eps, void* xq, cudaStream_t stream,
                           bool round_bf16 = true);

// Which kernel runs the int8 batch (the choice is made here, in quant_batch_gemv_launch):
//   kDp4a: dp4a integer dots, a block of 128 threads per kQuantBatchRows rows (above);
//   kMma:  the same arithmetic with each group's dots of 16 rows x 8 vectors on int8 tensor cores (mma.sync; a block
//          of 8 warps per 16 rows, split-K; kernels/quant/gemv_quant_mma.cu), up to kQuantBatchMmaMax vectors per
//          launch: the dp4a kernel is bound by its integer pipe from a few vectors on, this one by the weight stream;
//   kAuto: kMma from mma_from vectors on (0: kQuantBatchMmaMinVectors), kDp4a below.
enum class QuantBatchKernel { kAuto, kDp4a, kMma };

// The vector count from which kAuto takes the tensor cores, for a launch's mma_from (0: the built-in default).
inline int quant_batch_mma_from(int mma_from) { return mma_from > 0 ? mma_from : kQuantBatchMmaMinVectors; }

// One launch into up to three outputs (q | k | v of a prefill or verify pass, each its own [nb, rows] buffer): the
// launch's rows [0, rows0) go to its y (pitch ldy), the next rows1 to y1 (pitch ldy1) from y1's row 0, the rest to y2
// (pitch ldy2). Each weight is still read once per launch; the split only changes where outputs are stored.
struct QuantBatchSplit {
  int64_t rows0 = 0, rows1 = 0;
  float* y1 = nullptr;
  float* y2 = nullptr;
  int64_t ldy1 = 0, ldy2 = 0;
};

// Y[b, i] (+= with accumulate) = sum_j W[row0 + i, j] X[b, j] for b < nb and i < rows, Y FP32 with row pitch ldy, from
// xq as quant_batch_quantize_x left it for the same nb and k = w.k: one launch per kQuantBatchMax vectors
// (kQuantBatchMmaMax on tensor cores), each reading the weights once. Fails naming the type when the planes are missing or the arguments are out of range.
// Asynchronous; no allocation; capturable. rows_per_block (kDp4a): 4 (kQuantBatchRows, the engine's: fewer registers,
// more blocks resident) or 8 (each x chunk serves more rows); bench probes measures both. pdl: the dp4a / FP32-x kernel
// launched with programmatic dependent launch (kernels/ops/pdl.cuh): its first weight loads overlap the kernel before,
// which must be the last writer of x (or y, accumulating) or have waited for it.
void quant_batch_gemv_launch(const QuantGemvWeight& w, int64_t row0, int64_t rows, const void* xq, int nb, float* y,
                             int64_t ldy, bool accumulate, cudaStream_t stream, int rows_per_block = kQuantBatchRows,
                             QuantBatchKernel kernel = QuantBatchKernel::kAuto, int mma_from = 0,
                             const QuantBatchSplit* split = nullptr, bool pdl = false);

// The same rows against nb FP32 vectors x [nb, ldx] (16-byte aligned rows, ldx >= k, ldx % 4 == 0), each chunk through
// the "warp" form's arithmetic (quant_chunk_fma: FP32 x times the exact codes, the scale and min per group): the
// batch-k form of a decode step on "warp" (or "thread"), where the int8 kernel above is that of "warp-dp4a". Each
// weight read once per kQuantBatchMax vectors; x read through L1 once per chunk, vector and block of rows.
void quant_batch_gemv_f32_launch(const QuantGemvWeight& w, int64_t row0, int64_t rows, const float* x, int64_t ldx,
                                 int nb, float* y, int64_t ldy, bool accumulate, cudaStream_t stream,
                                 int rows_per_block = kQuantBatchRows, const QuantBatchSplit* split = nullptr,
                                 bool pdl = false);

}  // namespace llm
