// The batch-k quantized GEMV (kernels/quant/gemv_quant_batch.h): x's int8 pass and the dp4a kernel over nb vectors.
#include <algorithm>

#include "core/dtype.h"
#include "kernels/cuda_check.h"
#include "kernels/quant/gemv_quant.h"
#include "kernels/quant/gemv_quant_batch.h"
#include "kernels/quant/gemv_quant_device.cuh"
#include "kernels/quant/gemv_quant_internal.h"
#include "kernels/ops/block_reduce.cuh"
#include "kernels/ops/norm_shape.h"
#include "kernels/ops/pdl.cuh"
#include "kernels/ops/swiglu.cuh"

namespace llm {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// The int8 form of the nb vectors: 8 lanes per block of 32 values (4 values each: a float4 or four BF16 in one 8-byte
// load), amax and the sums of 16 by shuffles among the 8 (quant_x_q8_lanes, bit for bit quant_x_q8_block). Every lane
// of a warp reaches the shuffles; lanes past the last block only skip the stores. kIn: XForm::F32 or Bf16 (x [nb, ldx]),
// or Glu: x is FP32 [gate | up] rows of pitch ldx and the vector is silu(gate) * up (swiglu_value, ops' swiglu's
// expression, so the form is bit for bit that of swiglu's output), also written to h [nb, ldh] when h is not null.
// F32Bf16 and GluBf16: the same FP32 values rounded to BF16 first (f32_to_bf16, as convert_f32_to_bf16 and
// swiglu_rows_bf16 round them): one launch where a prompt's pass ran the BF16 kernel then the Bf16 form. Calls
// pdl_launch_dependents first: the decode step's down GEMV (PDL) streams its weights while this runs.
enum class XForm { F32, Bf16, Glu, F32Bf16, GluBf16 };

__device__ __forceinline__ float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }
template <XForm kIn>
__global__ void quant_batch_quantize_x_kernel(const void* __restrict__ x, int64_t ldx, int nb, int64_t k,
                                              unsigned char* __restrict__ xq, int64_t stride, int64_t off_d,
                                              int64_t off_s16, float* __restrict__ h, int64_t ldh) {
  pdl_launch_dependents();
  const int64_t per = k / 32;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t gb = t >> 3;  // the block of 32 this lane's group of 8 takes
  const int sub = int(t & 7);
  const bool in = gb < per * nb;
  const int64_t b = in ? gb / per : 0, blk = in ? gb % per : 0;
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (in) {
    if constexpr (kIn == XForm::Bf16) {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(x) + b * ldx + 32 * blk) + sub);
      v = make_float4(bf16_to_f32(uint16_t(u.x & 0xffffu)), bf16_to_f32(uint16_t(u.x >> 16)),
                      bf16_to_f32(uint16_t(u.y & 0xffffu)), bf16_to_f32(uint16_t(u.y >> 16)));
    } else if constexpr (kIn == XForm::F32 || kIn == XForm::F32Bf16) {
      const float* p = static_cast<const float*>(x) + b * ldx + 32 * blk + 4 * sub;
      v = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
      if constexpr (kIn == XForm::F32Bf16)
        v = make_float4(round_bf16(v.x), round_bf16(v.y), round_bf16(v.z), round_bf16(v.w));
    } else {
      const float* g = static_cast<const float*>(x) + b * ldx + 32 * blk + 4 * sub;
      const float* u = g + k;
      float r[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        r[i] = swiglu_value(__ldg(g + i), __ldg(u + i));
        if constexpr (kIn == XForm::GluBf16) r[i] = round_bf16(r[i]);
      }
      v = make_float4(r[0], r[1], r[2], r[3]);
      if (h) {
        float* o = h + b * ldh + 32 * blk + 4 * sub;
#pragma unroll
        for (int i = 0; i < 4; ++i) o[i] = r[i];
      }
    }
  }
  unsigned char* base = xq + b * stride;
  quant_x_q8_lanes(v, int(blk), in, sub, reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + off_d),
                   reinterpret_cast<int*>(base + off_s16));
}

// RMSNorm of row blockIdx.x of x [nb, dim] with weight w, each value rounded to BF16 (kRound), in the int8 form: bit
// for bit rmsnorm_bf16 (kernels/ops/norm.cu: the same threads, loop and block_sum, so the same sum of squares; the same
// expression x * inv * w) then the Bf16 form above, in one launch; without kRound, bit for bit rmsnorm then the FP32
// form. blockDim.x = rmsnorm_threads(dim); 8 lanes per block of 32 values, every lane of a warp through the same
// iterations (quant_x_q8_lanes shuffles).
template <bool kRound>
__global__ void quant_batch_rmsnorm_x_kernel(const float* __restrict__ x, const float* __restrict__ w, int dim,
                                             float eps, unsigned char* __restrict__ xq, int64_t stride, int64_t off_d,
                                             int64_t off_s16) {
  pdl_launch_dependents();
  __shared__ float red[32];
  const float* row = x + int64_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = row[i];
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  unsigned char* base = xq + int64_t(blockIdx.x) * stride;
  const int per = dim / 32, lanes_per_pass = int(blockDim.x) / 8;
  for (int b0 = 0; b0 < per; b0 += lanes_per_pass) {
    const int blk = b0 + int(threadIdx.x) / 8, sub = int(threadIdx.x) & 7;
    const bool in = blk < per;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in) {
      const int i = 32 * blk + 4 * sub;
      v = make_float4(row[i] * inv * w[i], row[i + 1] * inv * w[i + 1], row[i + 2] * inv * w[i + 2],
                      row[i + 3] * inv * w[i + 3]);
      if constexpr (kRound) v = make_float4(round_bf16(v.x), round_bf16(v.y), round_bf16(v.z), round_bf16(v.w));
    }
    quant_x_q8_lanes(v, in ? blk : 0, in, sub, reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + off_d),
                     reinterpret_cast<int*>(base + off_s16));
  }
}

// Halving exchanges over the warp's offsets 16, 8, 4, 2, 1: while a lane holds M > 1 values it keeps one half (the
// upper one where lane & O) and adds its partner's copy of that half; once M == 1 the pair just adds. At the end lane l
// holds max(1, V / 32) sums; quant_batch_index says which.
template <int M, int O>
__device__ __forceinline__ void reduce_step(float* v, int lane) {
  if constexpr (M > 1) {
    constexpr int H = M / 2;
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float send = upper ? v[i] : v[i + H];
      const float keep = upper ? v[i + H] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
  } else {
    v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
  }
  if constexpr (O > 1) reduce_step<(M > 1 ? M / 2 : 1), O / 2>(v, lane);
}
// The original index of sum t (t < max(1, V / 32)) on lane l after reduce_step<V, 16>, and whether l is the one
// lane (of the lanes holding the same sum) that writes it.
template <int V>
__device__ __forceinline__ int quant_batch_index(int t, int lane, bool* writer) {
  int idx = t, m = V;
  bool w = true;
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) {
    if (m > 1) {
      m /= 2;
      if (lane & o) idx += m;
    } else if (lane & o) {
      w = false;
    }
  }
  *writer = w;
  return idx;
}

// One 16-byte chunk c of R rows against the nb vectors: each row's scale (and min) decoded once, then per vector its x
// chunk (int8 q, d, sums) loaded once and the dp4a dots of all R rows on it; the arithmetic of quant_chunk_dp4a:
// acc += (s * d_x) * float(dot + code_offset * sum q) (+ (m * d_x) * float(sum q)).
template <bool kInt4, bool kTwoLevel, bool kHasMin, int R, int B>
__device__ __forceinline__ void batch_chunk_int8(const uint4 (&w)[R], const uint2 (&raw)[R], const QuantBatchArgs& a,
                                                 int c, float (&acc)[B][R]) {
  float s[R], m[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    s[i] = quant_scale<kTwoLevel>(raw[i]);
    m[i] = kHasMin ? quant_min<kTwoLevel>(raw[i]) : 0.0f;
  }
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (b >= a.nb) break;
    const unsigned char* base = a.xq + b * a.x_stride;
    const uint4* xq16 = reinterpret_cast<const uint4*>(base);
    const float* xd = reinterpret_cast<const float*>(base + a.off_d);
    const int* xs = reinterpret_cast<const int*>(base + a.off_s16);
    if constexpr (kInt4) {
      const uint4 xlo = xq16[2 * c], xhi = xq16[2 * c + 1];
      const float dx = xd[c];
      const int qsum = xs[2 * c] + xs[2 * c + 1];
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int dot = quant_dot_int4(w[i], xlo, xhi);
        acc[b][i] = fmaf(s[i] * dx, float(dot + a.p.code_offset * qsum), acc[b][i]);
        if (kHasMin) acc[b][i] = fmaf(m[i] * dx, float(qsum), acc[b][i]);
      }
    } else {
      constexpr bool kOffset = quant_split_hi_bits(kInt4, kTwoLevel, kHasMin) == 2;  // Q6_K: code_offset -32
      const uint4 xv = xq16[c];
      const float dx = xd[c >> 1];
      const int qsum = kHasMin || kOffset ? xs[c] : 0;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int dot = quant_dot_int8(w[i], xv) + (kOffset ? a.p.code_offset * qsum : 0);
        acc[b][i] = fmaf(s[i] * dx, float(dot), acc[b][i]);
        if (kHasMin) acc[b][i] = fmaf(m[i] * dx, float(qsum), acc[b][i]);
      }
    }
  }
}

// kFma: x in FP32 (a.xf), each vector's chunk through quant_chunk_fma, the arithmetic of the "warp" form (FP32 x,
// the codes as exact floats): a verify then takes the decode step's activations on that form too. Otherwise the int8
// forms (batch_chunk_int8).
template <bool kInt4, bool kTwoLevel, bool kHasMin, int R, int B, bool kFma>
__device__ __forceinline__ void batch_chunk(const uint4 (&w)[R], const uint2 (&raw)[R], const QuantBatchArgs& a,
                                            int c, float (&acc)[B][R]) {
  if constexpr (kFma) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b >= a.nb) break;
      quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(w, raw, QuantXGlobal<true, kInt4 ? 32 : 16>{a.xf + b * a.ldxf}, c,
                                                    a.p.bias, acc[b]);
    }
  } else {
    batch_chunk_int8<kInt4, kTwoLevel, kHasMin, R, B>(w, raw, a, c, acc);
  }
}

// Block = kQuantBatchRows rows; its 128 threads take chunks tid, tid + 128, ... (U chunks' loads of all rows in
// flight before the first dot). Each thread keeps acc[B][R]; vectors b >= nb are skipped (no x reads, zero sums).
// Launched with PDL where the launcher is asked to (the engine's passes): each thread's first weight loads are issued
// before pdl_wait, so they overlap the kernel before (which writes x); x and y only after it.
template <bool kInt4, bool kTwoLevel, bool kHasMin, int B, int R, bool kFma>
__global__ void __launch_bounds__(kThreads) quant_batch_gemv_kernel(QuantBatchArgs a) {
  constexpr int U = B >= 16 ? 1 : 2;
  constexpr int V = B * R;
  constexpr int M = V >= 32 ? V / 32 : 1;
  __shared__ float red[kWarps][V];
  pdl_launch_dependents();  // a PDL launch after this one (the next piece's rows) streams its weights meanwhile
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t local0 = int64_t(blockIdx.x) * R;
  const int chunks = a.p.chunks;

  float acc[B][R];
#pragma unroll
  for (int b = 0; b < B; ++b)
#pragma unroll
    for (int i = 0; i < R; ++i) acc[b][i] = 0.0f;

  for (int c0 = tid; c0 < chunks; c0 += kThreads * U) {
    QuantCodes<kInt4, kTwoLevel, kHasMin> wv[U][R];
    uint2 raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + kThreads * u;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int64_t row = a.row0 + local0 + i;
        if (c < chunks && local0 + i < a.rows) {
          wv[u][i].load(a.p, row, c);
          raw[u][i] = quant_load_scale_raw<kTwoLevel, kHasMin>(a.p, row, c);
        } else {
          wv[u][i].zero();
          raw[u][i] = make_uint2(0u, 0u);
        }
      }
    }
    pdl_wait();  // PDL launch: the weights above are constant; x (and y) belong to the kernels before
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + kThreads * u;
      if (c >= chunks) break;
      uint4 w[R];
#pragma unroll
      for (int i = 0; i < R; ++i) w[i] = wv[u][i].codes();
      batch_chunk<kInt4, kTwoLevel, kHasMin, R, B, kFma>(w, raw[u], a, c, acc);
    }
  }
  pdl_wait();  // a thread without chunks still writes y below

  float* v = &acc[0][0];
  reduce_step<V, 16>(v, lane);
#pragma unroll
  for (int t = 0; t < M; ++t) {
    bool writer;
    const int idx = quant_batch_index<V>(t, lane, &writer);
    if (writer) red[warp][idx] = v[t];
  }
  __syncthreads();
  for (int idx = tid; idx < V; idx += kThreads) {
    const int b = idx / R, i = idx % R;
    if (b >= a.nb || local0 + i >= a.rows) continue;
    float s = red[0][idx];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += red[w][idx];
    float* yp = quant_batch_out(a, b, local0 + i);
    *yp = a.accumulate ? *yp + s : s;
  }
}

using Kernel = void (*)(QuantBatchArgs);
template <int B, int R, bool kFma>
struct Pick {
  template <int kType>
  static Kernel get() {
    using F = QuantPackedForm<kType>;
    return quant_batch_gemv_kernel<F::kInt4, F::kTwoLevel, F::kHasMin, B, R, kFma>;
  }
};
template <int R, bool kFma>
Kernel pick(int type_id, int nb) {
  if (nb <= 2) return quant_kernel_for<Pick<2, R, kFma>>(type_id, "batched");
  if (nb <= 4) return quant_kernel_for<Pick<4, R, kFma>>(type_id, "batched");
  if (nb <= 8) return quant_kernel_for<Pick<8, R, kFma>>(type_id, "batched");
  return quant_kernel_for<Pick<16, R, kFma>>(type_id, "batched");
}

}  // namespace

bool quant_batch_supported(const QuantGemvWeight& w) {
  return w.k % 32 == 0 && quant_gemv_has_planes(QuantGemvKind::Warp, w);
}

namespace {

template <XForm kIn>
void quantize_x_launch(const void* x, int64_t ldx, int nb, int64_t k, void* xq, float* h, int64_t ldh,
                       cudaStream_t stream, int64_t xq_pitch = 0) {
  const int64_t threads = int64_t(nb) * (k / 32) * 8;
  const int block = 256;
  const unsigned grid = unsigned((threads + block - 1) / block);
  const int64_t pitch = xq_pitch > 0 ? xq_pitch : quant_batch_x_stride(k);
  quant_batch_quantize_x_kernel<kIn><<<grid, block, 0, stream>>>(x, ldx, nb, k, static_cast<unsigned char*>(xq), pitch,
                                                                 quant_x_smem_offset_d(k), quant_x_smem_offset_s16(k),
                                                                 h, ldh);
  CUDA_CHECK_LAUNCH("quant_batch_quantize_x_kernel");
}

void check_x_args(const char* what, const void* x, int64_t ldx, int nb, int64_t k, const void* xq) {
  if (nb < 1 || k <= 0 || k % 32 != 0 || ldx < k)
    fail(what, ": ", nb, " vectors of ", k, " (row pitch ", ldx, "): need at least one vector, k a positive multiple "
         "of 32, pitch >= k");
  if (!x || !xq || (reinterpret_cast<uintptr_t>(xq) & 15) != 0)
    fail(what, ": null x or an int8 scratch not 16-byte aligned");
}

}  // namespace

void quant_batch_quantize_x(const void* x, bool x_bf16, int64_t ldx, int nb, int64_t k, void* xq,
                            cudaStream_t stream) {
  check_x_args("quant_batch_quantize_x", x, ldx, nb, k, xq);
  if (x_bf16 && ((reinterpret_cast<uintptr_t>(x) & 15) != 0 || ldx % 8 != 0))
    fail("quant_batch_quantize_x: BF16 x needs 16-byte aligned rows (pitch ", ldx, ")");
  if (x_bf16)
    quantize_x_launch<XForm::Bf16>(x, ldx, nb, k, xq, nullptr, 0, stream);
  else
    quantize_x_launch<XForm::F32>(x, ldx, nb, k, xq, nullptr, 0, stream);
}

void quant_batch_swiglu_x(const float* gate_up, int64_t ldgu, int nb, int64_t k, float* h, int64_t ldh, void* xq,
                          cudaStream_t stream, bool round_bf16, int64_t xq_pitch) {
  if (xq_pitch != 0 && (xq_pitch < quant_batch_x_stride(k) || xq_pitch % 16 != 0))
    fail("quant_batch_swiglu_x: int8 row pitch ", xq_pitch, " (need 0 or a multiple of 16 of at least ",
         quant_batch_x_stride(k), ")");
  check_x_args("quant_batch_swiglu_x", gate_up, ldgu, nb, k, xq);
  if (ldgu < 2 * k) fail("quant_batch_swiglu_x: row pitch ", ldgu, " shorter than gate and up (", 2 * k, ")");
  if (h && ldh < k) fail("quant_batch_swiglu_x: output pitch ", ldh, " shorter than ", k);
  if (round_bf16)
    quantize_x_launch<XForm::GluBf16>(gate_up, ldgu, nb, k, xq, h, ldh, stream, xq_pitch);
  else
    quantize_x_launch<XForm::Glu>(gate_up, ldgu, nb, k, xq, h, ldh, stream, xq_pitch);
}

void quant_batch_quantize_x_bf16_rounded(const float* x, int64_t ldx, int nb, int64_t k, void* xq,
                                         cudaStream_t stream) {
  check_x_args("quant_batch_quantize_x_bf16_rounded", x, ldx, nb, k, xq);
  quantize_x_launch<XForm::F32Bf16>(x, ldx, nb, k, xq, nullptr, 0, stream);
}

void quant_batch_rmsnorm_x(const float* x, const float* w, int nb, int dim, float eps, void* xq, cudaStream_t stream,
                           bool round_bf16) {
  check_x_args("quant_batch_rmsnorm_x", x, dim, nb, dim, xq);
  if (!w) fail("quant_batch_rmsnorm_x: null norm weight");
  const auto kernel = round_bf16 ? quant_batch_rmsnorm_x_kernel<true> : quant_batch_rmsnorm_x_kernel<false>;
  kernel<<<unsigned(nb), rmsnorm_threads(dim), 0, stream>>>(
      x, w, dim, eps, static_cast<unsigned char*>(xq), quant_batch_x_stride(dim), quant_x_smem_offset_d(dim),
      quant_x_smem_offset_s16(dim));
  CUDA_CHECK_LAUNCH("quant_batch_rmsnorm_x_kernel");
}

namespace {

// Either x form: xq (the int8 forms, quant_batch_x_stride apart) or xf (FP32 [nb, ldxf]); the checks both share.
void batch_launch(const char* name_of_call, const QuantGemvWeight& w, int64_t row0, int64_t rows, const void* xq,
                  const float* xf, int64_t ldxf, int nb, float* y, int64_t ldy, bool accumulate, cudaStream_t stream,
                  int rows_per_block, QuantBatchKernel which, int mma_from, const QuantBatchSplit* split, bool pdl) {
  const char* name = quant_type_traits(w.type_id).name;
  quant_gemv_check_layout(w, name_of_call);
  if (!quant_batch_supported(w))
    fail(name_of_call, ": ", name, " [", w.n, ", ", w.k, "] has no prepacked planes (or k % 32 != 0)");
  if (nb < 1) fail(name_of_call, ": ", nb, " vectors (need at least one)");
  if (row0 < 0 || rows < 0 || row0 + rows > w.n)
    fail(name_of_call, ": rows [", row0, ", ", row0 + rows, ") of a ", name, " matrix of ", w.n, " rows");
  if (rows == 0) return;
  const bool x_ok = xq ? (reinterpret_cast<uintptr_t>(xq) & 15) == 0
                       : xf && (reinterpret_cast<uintptr_t>(xf) & 15) == 0 && ldxf % 4 == 0 && ldxf >= w.k;
  // The outputs: [0, rows0) to y, then rows1 to y1, the rest to y2 (no split: everything to y).
  const int64_t rows0 = split ? split->rows0 : rows, rows1 = split ? split->rows1 : 0, rows2 = rows - rows0 - rows1;
  float* const y1 = split ? split->y1 : y;
  float* const y2 = split ? split->y2 : y;
  const int64_t ldy1 = split ? split->ldy1 : ldy, ldy2 = split ? split->ldy2 : ldy;
  if (rows0 < 0 || rows1 < 0 || rows2 < 0)
    fail(name_of_call, ": a split of ", rows, " rows into ", rows0, " + ", rows1, " + ", rows2);
  auto y_ok = [nb](const float* p, int64_t ld, int64_t n) {
    return n == 0 || (p && (reinterpret_cast<uintptr_t>(p) & 3) == 0 && (nb == 1 || ld >= n));
  };
  if (!x_ok || !y || !y_ok(y, ldy, rows0) || !y_ok(y1, ldy1, rows1) || !y_ok(y2, ldy2, rows2))
    fail(name_of_call, ": null or misaligned x/y (FP32 x: 16-byte aligned rows of pitch >= k), or a y pitch of ", ldy,
         " for ", rows0, " rows (split: ", ldy1, " for ", rows1, ", ", ldy2, " for ", rows2, ")");
  if (rows_per_block != 4 && rows_per_block != 8)
    fail(name_of_call, ": ", rows_per_block, " rows per block (4 or 8)");
  QuantBatchArgs a;
  a.p = quant_packed_args(w, QuantGemvPlan{}, nullptr, nullptr, false);
  a.row0 = row0;
  a.rows = rows;
  a.x_stride = quant_batch_x_stride(w.k);
  a.off_d = quant_x_smem_offset_d(w.k);
  a.off_s16 = quant_x_smem_offset_s16(w.k);
  a.ldxf = ldxf;
  a.ldy = ldy;
  a.split0 = rows0;
  a.split1 = rows1;
  a.ldy1 = ldy1;
  a.ldy2 = ldy2;
  a.accumulate = accumulate ? 1 : 0;
  a.slice = 0;  // the tensor-core launcher's
  const unsigned grid = unsigned((rows + rows_per_block - 1) / rows_per_block);
  // Vector b's x at b * x_stride (int8) or b * ldxf (FP32), its output row at b * ldy.
  // The tensor-core kernel takes up to kQuantBatchMmaMax vectors per launch, the others kQuantBatchMax.
  const bool mma = xq && (which == QuantBatchKernel::kMma ||
                          (which == QuantBatchKernel::kAuto && nb >= quant_batch_mma_from(mma_from)));
  const int per_launch = mma ? kQuantBatchMmaMax : kQuantBatchMax;
  for (int b0 = 0; b0 < nb; b0 += per_launch) {
    a.nb = std::min(per_launch, nb - b0);
    a.xq = xq ? static_cast<const unsigned char*>(xq) + int64_t(b0) * a.x_stride : nullptr;
    a.xf = xq ? nullptr : xf + int64_t(b0) * ldxf;
    a.y = y + int64_t(b0) * ldy;
    a.y1 = y1 + int64_t(b0) * ldy1;
    a.y2 = y2 + int64_t(b0) * ldy2;
    if (mma) {
      quant_batch_mma_launch(w.type_id, a, stream);
      continue;
    }
    const Kernel kernel = xq ? (rows_per_block == 8 ? pick<8, false>(w.type_id, a.nb) : pick<4, false>(w.type_id, a.nb))
                             : (rows_per_block == 8 ? pick<8, true>(w.type_id, a.nb) : pick<4, true>(w.type_id, a.nb));
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = pdl_launch_config(grid, kThreads, stream, pdl, &attr);
    CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
    CUDA_CHECK_LAUNCH("quant_batch_gemv_kernel");
  }
}

}  // namespace

void quant_batch_gemv_launch(const QuantGemvWeight& w, int64_t row0, int64_t rows, const void* xq, int nb, float* y,
                             int64_t ldy, bool accumulate, cudaStream_t stream, int rows_per_block,
                             QuantBatchKernel kernel, int mma_from, const QuantBatchSplit* split, bool pdl) {
  if (!xq) fail("batched quantized gemv: null int8 x");
  batch_launch("batched quantized gemv", w, row0, rows, xq, nullptr, 0, nb, y, ldy, accumulate, stream,
               rows_per_block, kernel, mma_from, split, pdl);
}

void quant_batch_gemv_f32_launch(const QuantGemvWeight& w, int64_t row0, int64_t rows, const float* x, int64_t ldx,
                                 int nb, float* y, int64_t ldy, bool accumulate, cudaStream_t stream,
                                 int rows_per_block, const QuantBatchSplit* split, bool pdl) {
  if (!x) fail("batched quantized gemv (FP32 x): null x");
  batch_launch("batched quantized gemv (FP32 x)", w, row0, rows, nullptr, x, ldx, nb, y, ldy, accumulate, stream,
               rows_per_block, QuantBatchKernel::kDp4a, 0, split, pdl);
}

}  // namespace llm
