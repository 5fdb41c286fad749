// Quantized GEMV for batch-1 decode: y[n] (FP32) (+)= W[n, k] x[k] with W kept quantized on the device (GGML Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K), FP32 accumulation. Device code and host launchers only: kernels know nothing of
// files or models/; the engine fills a QuantGemvWeight from models/quant.h's PackedQuant (host arrays) and uploads it.
//
// Mappings (kernels/gemv_quant_<name>.cu):
//   warp      lanes along K over the prepacked planes: one lane's 16-byte load = the 32 INT4 codes of one group (or 16
//             INT8 codes), 4 rows per warp sharing each x load, 8 loads in flight per lane, split-K for small n, PDL
//   thread    one thread per output row walking its own row with 16-byte loads (lanes ld_codes bytes apart): the
//             uncoalesced case with 4-bit codes
//   warp-dp4a "warp"'s loads, ring and plan; each block quantizes x to int8 per block of 32 into shared memory (as
//             llama.cpp's q8_1: d = amax / 127, q = round(x / d)), then dp4a integer dots per 4 codes and one FP32
//             FMA per group and row: fewer instructions per weight, activations rounded
//   as-stored lanes along K over GGUF's blocks unchanged (lane j takes block j of the row), 2- or 4-byte loads as the
//             18/20/22/24/34/144/210-byte blocks allow: what prepacking is worth
//
// The description, the per-type traits, plane sizes, bytes read and the launch plans are CUDA-free
// (kernels/quant/gemv_quant_plan.h, testable on any machine).
#pragma once
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "kernels/gemv/gemv.h"  // GemvLaunchShape
#include "kernels/quant/gemv_quant_plan.h"

namespace llm {

// Each plane's start in the one device allocation quant_gemv_upload makes is aligned to this many bytes: a plane of
// `bytes` takes quant_plane_span(bytes) of the allocation (0 for an absent plane).
constexpr size_t kQuantPlaneAlign = 256;
constexpr size_t quant_plane_span(size_t bytes) { return (bytes + kQuantPlaneAlign - 1) / kQuantPlaneAlign * kQuantPlaneAlign; }

// Copies the planes of `host` (a QuantGemvWeight whose pointers are HOST arrays laid out as its fields say; null
// planes are skipped) into ONE device allocation, each plane kQuantPlaneAlign-byte aligned, and returns the same description with
// device pointers; the result owns the allocation (quant_gemv_free). At least the planes of one mapping must be
// present: codes + scales (+ mins) or codes + k_heads (Q4_K, Q5_K) or sub_scales + super_d (Q6_K) for warp/thread, blocks
// for as-stored. Synchronises `stream` before returning (load time only), so the host arrays may be freed at once.
QuantGemvWeight quant_gemv_upload(const QuantGemvWeight& host, cudaStream_t stream);
// The device bytes the planes of `host` take in an upload: the sum of their quant_plane_span (0 without planes).
size_t quant_gemv_device_span(const QuantGemvWeight& host);
// As quant_gemv_upload, into [dst, dst + capacity) of an allocation the caller owns (one arena for every matrix of a
// model: no per-matrix rounding to cudaMalloc's granularity); dst kQuantPlaneAlign-aligned. The result does not own
// the memory (quant_gemv_free only clears its pointers). Fails when the planes need more than capacity.
QuantGemvWeight quant_gemv_upload_into(const QuantGemvWeight& host, void* dst, size_t capacity, cudaStream_t stream);
// Frees what quant_gemv_upload allocated and clears the pointers. No-op on an empty or non-owning description.
void quant_gemv_free(QuantGemvWeight* w);

// Whether the planes `kind` reads are present (device pointers non-null).
bool quant_gemv_has_planes(QuantGemvKind kind, const QuantGemvWeight& w);

// y = W x (accumulate: y += W x, for residual folding). x [k] and y [n] device FP32, any 4-byte alignment (16-byte
// aligned x takes the vector path). No allocation, no sync; capturable in a CUDA graph. "warp" launches with
// programmatic dependent launch (kernels/ops/pdl.cuh): it streams its first weights before griddepcontrol.wait.
// Fails (llm::Error) naming the mapping and the type when the planes it needs are missing or the layout is bad.
void quant_gemv_launch(QuantGemvKind kind, const QuantGemvWeight& w, const float* x, float* y, bool accumulate,
                       cudaStream_t stream, const GemvEpilogue& ep = GemvEpilogue{});

// How `kind` launches on w (for the A/B report): grid and block, and the weight bytes each thread has requested
// before first use (16-byte loads in flight for warp/thread; one block for as-stored).
GemvLaunchShape quant_gemv_shape(QuantGemvKind kind, const QuantGemvWeight& w);

// Bytes read per call: quant_gemv_bytes_read(kind, w) in kernels/quant/gemv_quant_plan.h.

// out [n, ld_out] row-major BF16 (ld_out >= k, a multiple of 8; columns past k untouched) = the weights of w from its
// prepacked planes (the layout "warp", "thread" and "warp-dp4a" read; fails naming the type when they are absent),
// bit for bit models/quant.h's packed_weight rounded to BF16 (kernels/quant/quant_dequant.h). Prefill's source for a
// matrix kept quantized. Asynchronous on `stream`; no allocation.
void quant_dequantize_bf16(const QuantGemvWeight& w, uint16_t* out, int64_t ld_out, cudaStream_t stream);

}  // namespace llm
