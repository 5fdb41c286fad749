// Quantized decode matrices for the CUDA engine (see engine/cuda_quant.h).
#include "engine/cuda_quant.h"

#include <cstring>

#include "core/error.h"
#include "models/quant.h"

namespace llm {

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
  QuantGemvWeight host = quant_gemv_describe(int(type), rows, cols);
  if (kind == QuantGemvKind::AsStored) {
    host.blocks = blocks.data();
    return quant_gemv_upload(host, stream);
  }
  // Shape comments: models/quant.h (PackedQuant) and kernels/gemv_quant_plan.h (QuantGemvWeight) describe the same
  // planes; quant_gemv_describe gives pack_quant's strides, checked here.
  const PackedQuant p = pack_quant(blocks.data(), qt, rows, cols, first.name);
  const bool strides_agree = p.ld_codes == host.ld_codes &&
                             (p.two_level ? p.ld_sub == host.ld_sub && p.ld_super == host.ld_super
                                          : p.ld_groups == host.ld_groups);
  if (!strides_agree)
    fail("quantized upload: ", printable(first.name), ": packed strides disagree with the kernels' description");
  host.codes = p.codes.data();
  if (!p.scales.empty()) host.scales = p.scales.data();
  if (!p.mins.empty()) host.mins = p.mins.data();
  if (!p.sub_scales.empty()) host.sub_scales = p.sub_scales.data();
  if (!p.sub_mins.empty()) host.sub_mins = p.sub_mins.data();
  if (!p.super_d.empty()) host.super_d = p.super_d.data();
  if (!p.super_dmin.empty()) host.super_dmin = p.super_dmin.data();
  return quant_gemv_upload(host, stream);
}

}  // namespace llm
