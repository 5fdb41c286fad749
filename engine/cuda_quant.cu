// Quantized decode matrices for the CUDA engine (see engine/cuda_quant.h).
#include "engine/cuda_quant.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "models/quant.h"

namespace llm {

QuantGemvWeight quant_host_view(const PackedQuant& p, const uint8_t* blocks) {
  QuantGemvWeight w = quant_gemv_describe(int(p.type), p.n, p.k);
  w.planes() = p.planes();  // the one description of the planes (core/quant_planes.h)
  w.blocks = blocks;
  return w;
}

QuantGemvWeight upload_quant_matrix(const std::vector<const HostTensor*>& parts, QuantGemvKind kind,
                                    cudaStream_t stream, QuantUploadTimes* times, QuantRegion* into) {
  QuantUploadTimes local;
  if (!times) times = &local;
  auto t = std::chrono::steady_clock::now();
  auto lap = [&t](double* into) {  // seconds since the last lap, added into *into
    const auto now = std::chrono::steady_clock::now();
    *into += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  if (parts.empty()) fail("quantized upload: no tensor given");
  const HostTensor& first = *parts[0];
  const uint32_t type = first.quant;
  const int64_t cols = first.cols;
  int64_t rows = 0;
  for (const HostTensor* t : parts) {
    if (t->quant != type || t->cols != cols || t->synthetic || !t->data)
      fail("quantized upload: ", printable(t->name), " does not match ", printable(first.name),
           " (fused matrices must share the quantized type and row length)");
    if (t->rope_head_dim) fail("quantized upload: ", printable(t->name), " has permuted rows (not a GGUF tensor)");
    rows += t->rows;
  }
  // [rows, cols] blocks, the parts' rows one after the other (rows are independent, so concatenating the stored rows
  // of q, k and v gives the fused matrix in the same type). The packing reads each part where it is (pack_quant_parts);
  // only the as-stored form, which uploads the blocks themselves, gathers a fused matrix into one copy.
  const GgmlQuantType qt = GgmlQuantType(type);
  auto upload = [stream, into](const QuantGemvWeight& host) {
    if (!into) return quant_gemv_upload(host, stream);
    // used never passes capacity: an upload that does not fit what is left fails before it is counted
    QuantGemvWeight dev = quant_gemv_upload_into(host, into->base + into->used, into->capacity - into->used, stream);
    into->used += quant_gemv_device_span(host);
    return dev;
  };
  if (kind == QuantGemvKind::AsStored) {
    std::vector<uint8_t> gathered;
    const uint8_t* blocks = static_cast<const uint8_t*>(first.data);
    if (parts.size() > 1) {
      gathered.resize(size_t(rows) * first.row_bytes());
      size_t at = 0;
      for (const HostTensor* t : parts) {
        std::memcpy(gathered.data() + at, t->data, t->nbytes());
        at += t->nbytes();
      }
      blocks = gathered.data();
    }
    lap(&times->gather);
    QuantGemvWeight host = quant_gemv_describe(int(type), rows, cols);
    host.blocks = blocks;
    QuantGemvWeight dev = upload(host);
    lap(&times->upload);
    return dev;
  }
  // Shape comments: models/quant.h (PackedQuant) and kernels/quant/gemv_quant_plan.h (QuantGemvWeight) describe the same
  // planes; the upload checks the layout.
  std::vector<QuantRowsPart> rows_of;
  for (const HostTensor* t : parts) rows_of.push_back({static_cast<const uint8_t*>(t->data), t->rows});
  const PackedQuant p = pack_quant_parts(rows_of, qt, cols, first.name);
  lap(&times->pack);
  const QuantGemvWeight host = quant_host_view(p);
  QuantGemvWeight dev = upload(host);
  lap(&times->upload);
  return dev;
}

double quant_matrix_device_bytes(GgmlQuantType t, int64_t n, int64_t k, QuantGemvKind kind) {
  auto plane = [](int64_t b) { return int64_t(quant_plane_span(size_t(b))); };
  int64_t total = 0;
  if (kind == QuantGemvKind::AsStored) {
    total = plane(n * int64_t(ggml_quant_row_bytes(t, k)));
  } else {
    const PackedQuantBytes b = packed_quant_bytes(t, n, k);
    total = plane(b.codes) + plane(b.code_hi) + plane(b.scales) + plane(b.mins) + plane(b.k_heads) + plane(b.sub_scales) +
            plane(b.super_d);
  }
  return double(total);
}

}  // namespace llm
