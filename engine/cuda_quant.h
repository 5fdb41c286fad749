// Quantized decode matrices for the CUDA engine: GGUF blocks (HostTensor::quant) -> the prepacked planes of
// models/quant.h (and, for the "as-stored" mapping, the blocks unchanged) -> one device allocation the quantized
// GEMVs (kernels/quant/gemv_quant.h) read. Which mapping runs which weight type is decided in engine/gemv_choice.h.
#pragma once
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/quant/gemv_quant.h"
#include "models/model.h"
#include "models/quant.h"  // GgmlQuantType, PackedQuant

namespace llm {

// The host description of a prepacked matrix: pointers into p's vectors, p's strides, and GGUF's `blocks` as stored
// when given (for "as-stored"). What quant_gemv_upload copies (and checks: quant_gemv_check_layout).
QuantGemvWeight quant_host_view(const PackedQuant& p, const uint8_t* blocks = nullptr);

// Uploads the row-concatenation of `parts` (same quantized type, same row length: e.g. wq, wk, wv of one layer for the
// fused q|k|v GEMV) as one [sum of rows, cols] matrix in the layout `kind` reads: the prepacked planes for warp,
// thread and warp-dp4a, GGUF's blocks as stored for as-stored. Synchronous (load time only).
// times (optional): the host seconds of each step added in (the load line's breakdown, GemvMappings::prepare).
struct QuantUploadTimes {
  double gather = 0;  // as-stored: the parts' blocks copied into one [rows, cols] array (the packed forms read them
                      // in place: 0)
  double pack = 0;    // pack_quant_parts (models/quant.h), reading the mapped file's pages
  double upload = 0;  // quant_gemv_upload: allocation, zero fill, the copy to the GPU and its wait
};
// into (optional): the device region to upload into, at into->used, which advances by the matrix's bytes (one
// allocation for every matrix of a mapping: GemvMappings::prepare); without it the matrix gets its own cudaMalloc.
struct QuantRegion {
  uint8_t* base = nullptr;  // kQuantPlaneAlign-aligned
  size_t capacity = 0;
  size_t used = 0;
};
QuantGemvWeight upload_quant_matrix(const std::vector<const HostTensor*>& parts, QuantGemvKind kind,
                                    cudaStream_t stream, QuantUploadTimes* times = nullptr, QuantRegion* into = nullptr);

// The device bytes upload_quant_matrix takes for an [n, k] matrix of type t in form `kind`: the prepacked planes
// (models/quant.h packed_quant_bytes; as-stored: the blocks), each kQuantPlaneAlign-aligned. A mapping's matrices
// share one allocation (QuantRegion), so there is no per-matrix rounding to cudaMalloc's granularity. The memory plan
// counts this, not the stored size.
double quant_matrix_device_bytes(GgmlQuantType t, int64_t n, int64_t k, QuantGemvKind kind);

}  // namespace llm
