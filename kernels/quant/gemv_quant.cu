// Quantized GEMV: upload and free of the device planes, the checks every launch makes, dispatch to the mappings
// (kernels/gemv_quant_{warp,thread,as_stored}.cu), launch shapes.
#include "kernels/quant/gemv_quant.h"

#include <cstdint>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"  // gemv_sm_count
#include "kernels/quant/gemv_quant_internal.h"

namespace llm {

namespace {

// The planes of a description in upload order (one list for the span and the copy), with their bytes.
template <typename W, typename F>
void for_each_plane(W& w, const QuantGemvPlaneBytes& sizes, F&& f) {
  f(w.codes, sizes.codes);
  f(w.code_hi, sizes.code_hi);
  f(w.scales, sizes.scales);
  f(w.mins, sizes.mins);
  f(w.sub_scales, sizes.sub_scales);
  f(w.super_d, sizes.super_d);
  f(w.k_heads, sizes.k_heads);
  f(w.blocks, sizes.blocks);
}

}  // namespace

size_t quant_gemv_device_span(const QuantGemvWeight& host) {
  quant_gemv_check_layout(host, "quant_gemv_upload");
  size_t total = 0;
  for_each_plane(host, quant_gemv_plane_bytes(host), [&](const void* src, size_t bytes) {
    if (src && bytes > 0) total += quant_plane_span(bytes);
  });
  return total;
}

QuantGemvWeight quant_gemv_upload_into(const QuantGemvWeight& host, void* dst, size_t capacity, cudaStream_t stream) {
  const size_t total = quant_gemv_device_span(host);
  QuantGemvWeight out = host;
  out.allocation = nullptr;
  out.allocated_bytes = 0;
  if (total == 0) {  // n == 0, or nothing given: a description without planes (a launch then does nothing / refuses)
    out.clear_pointers();
    out.blocks = nullptr;
    return out;
  }
  if (!dst || total > capacity || reinterpret_cast<uintptr_t>(dst) % kQuantPlaneAlign != 0)
    fail("quant_gemv_upload: ", quant_type_traits(host.type_id).name, " [", host.n, ", ", host.k, "] needs ", total,
         " aligned device bytes, given ", dst ? capacity : 0);
  uint8_t* base = static_cast<uint8_t*>(dst);
  CUDA_CHECK(cudaMemsetAsync(base, 0, total, stream));  // the planes' padding reads as zero codes
  size_t at = 0;
  // The device copy of each host plane (null when absent), each starting kQuantPlaneAlign-aligned.
  for_each_plane(out, quant_gemv_plane_bytes(host), [&](auto& ptr, size_t bytes) {
    if (!ptr || bytes == 0) {
      ptr = nullptr;
      return;
    }
    CUDA_CHECK(cudaMemcpyAsync(base + at, ptr, bytes, cudaMemcpyHostToDevice, stream));
    ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(base + at);
    at += quant_plane_span(bytes);
  });
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

QuantGemvWeight quant_gemv_upload(const QuantGemvWeight& host, cudaStream_t stream) {
  const size_t total = quant_gemv_device_span(host);
  if (total == 0) return quant_gemv_upload_into(host, nullptr, 0, stream);
  void* base = nullptr;
  CUDA_CHECK(cudaMalloc(&base, total));
  QuantGemvWeight out;
  try {
    out = quant_gemv_upload_into(host, base, total, stream);
  } catch (...) {
    cudaFree(base);
    throw;
  }
  out.allocation = base;
  out.allocated_bytes = total;
  return out;
}

void quant_gemv_free(QuantGemvWeight* w) {
  if (w->allocation) cudaFree(w->allocation);
  w->allocation = nullptr;
  w->allocated_bytes = 0;
  w->clear_pointers();
  w->blocks = nullptr;
}

bool quant_gemv_has_planes(QuantGemvKind kind, const QuantGemvWeight& w) {
  if (kind == QuantGemvKind::AsStored) return w.blocks != nullptr;
  if (!w.codes || (quant_gemv_hi_bits(w) > 0 && !w.code_hi)) return false;
  if (w.two_level) return w.has_min ? w.k_heads != nullptr : (w.sub_scales && w.super_d);
  return w.scales && (!w.has_min || w.mins);
}

void quant_gemv_launch(QuantGemvKind kind, const QuantGemvWeight& w, const float* x, float* y, bool accumulate,
                       cudaStream_t stream, const GemvEpilogue& ep) {
  const char* name = quant_gemv_kind_name(kind);
  quant_gemv_check_layout(w, "quantized gemv");
  if (w.n == 0) return;
  if (!quant_gemv_has_planes(kind, w))
    fail("quantized gemv '", name, "': ", quant_type_traits(w.type_id).name, " [", w.n, ", ", w.k,
         "]: the planes this mapping reads were not uploaded (",
         kind == QuantGemvKind::AsStored ? "blocks as stored" : "prepacked codes and scales", ")");
  if (!x || !y) fail("quantized gemv '", name, "': null x or y");
  if ((reinterpret_cast<uintptr_t>(x) & 3) != 0 || (reinterpret_cast<uintptr_t>(y) & 3) != 0)
    fail("quantized gemv '", name, "': x and y must be 4-byte aligned");
  const QuantGemvPlan plan = quant_gemv_plan(kind, w, gemv_sm_count());
  switch (kind) {
    case QuantGemvKind::Warp: return quant_gemv_warp_launch(w, plan, x, y, accumulate, ep, stream);
    case QuantGemvKind::Thread: return quant_gemv_thread_launch(w, plan, x, y, accumulate, ep, stream);
    case QuantGemvKind::AsStored: return quant_gemv_as_stored_launch(w, plan, x, y, accumulate, ep, stream);
    case QuantGemvKind::WarpDp4a: return quant_gemv_warp_dp4a_launch(w, plan, x, y, accumulate, ep, stream);
  }
  fail("quantized gemv: unknown mapping id ", int(kind));
}

GemvLaunchShape quant_gemv_shape(QuantGemvKind kind, const QuantGemvWeight& w) {
  const QuantGemvPlan plan = quant_gemv_plan(kind, w, gemv_sm_count());
  GemvLaunchShape s;
  s.grid = plan.grid;
  s.block = plan.block;
  s.bytes_in_flight_per_thread =
      kind == QuantGemvKind::AsStored ? w.block_bytes : plan.loads_in_flight * plan.bytes_per_load;
  return s;
}

}  // namespace llm
