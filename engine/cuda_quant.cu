// Quantized decode matrices for the CUDA engine (see engine/cuda_quant.h).
#include "engine/cuda_quant.h"

#include <cstring>

#include "core/error.h"
#include "models/quant.h"

namespace llm {

QuantGemvWeight quant_host_view(const PackedQuant& p, const uint8_t* blocks) {
  QuantGemvWeight w = quant_gemv_describe(int(p.type), p.n, p.k);
  auto ptr = [](const auto& v) { return v.empty() ? nullptr : v.data(); };
  w.ld_codes = p.ld_codes;
  w.codes = ptr(p.codes);
  w.ld_groups = p.ld_groups;
  w.scales = ptr(p.scales);
  w.mins = ptr(p.mins);
  w.ld_sub = p.ld_sub;
  w.ld_super = p.ld_super;
  w.ld_heads = p.ld_heads;
  w.sub_scales = ptr(p.sub_scales);
  w.super_d = ptr(p.super_d);
  w.k_heads = ptr(p.k_heads);
  w.blocks = blocks;
  return w;
}

QuantGemvWeight upload_quant_matrix(const std::vector<const HostTensor*>& parts, QuantGemvKind kind,
                                    cudaStream_t stream) {
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
  // of q, k and v gives the fused matrix in the same type).
  const size_t row_bytes = first.row_bytes();
  std::vector<uint8_t> blocks(size_t(rows) * row_bytes);
  size_t at = 0;
  for (const HostTensor* t : parts) {
    std::memcpy(blocks.data() + at, t->data, t->nbytes());
    at += t->nbytes();
  }
  const GgmlQuantType qt = GgmlQuantType(type);
  if (kind == QuantGemvKind::AsStored) {
    QuantGemvWeight host = quant_gemv_describe(int(type), rows, cols);
    host.blocks = blocks.data();
    return quant_gemv_upload(host, stream);
  }
  // Shape comments: models/quant.h (PackedQuant) and kernels/quant/gemv_quant_plan.h (QuantGemvWeight) describe the same
  // planes; the upload checks the layout.
  const PackedQuant p = pack_quant(blocks.data(), qt, rows, cols, first.name);
  const QuantGemvWeight host = quant_host_view(p);
  return quant_gemv_upload(host, stream);
}

}  // namespace llm
