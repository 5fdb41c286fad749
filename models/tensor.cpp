#include "models/tensor.h"

#include <cstring>

#include "core/counter_rng.h"
#include "core/error.h"
#include "models/quant.h"

namespace llm {

namespace {
template <typename Emit>
void for_rows(const HostTensor& t, int64_t r0, int64_t n, Emit emit) {
  if (r0 < 0 || n < 0 || r0 + n > t.rows) fail(t.name, ": rows [", r0, ", ", r0 + n, ") out of range (", t.rows, ")");
  for (int64_t r = r0; r < r0 + n; ++r) {
    int64_t fr = t.file_row(r);
    emit(r - r0, fr);
  }
}
}  // namespace

size_t HostTensor::row_bytes() const {
  return quant ? ggml_quant_row_bytes(GgmlQuantType(quant), cols) : size_t(cols) * dtype_size(dtype);
}

size_t HostTensor::nbytes() const { return size_t(rows) * row_bytes(); }

void HostTensor::read_rows_f32(int64_t r0, int64_t n, float* out) const {
  for_rows(*this, r0, n, [&](int64_t i, int64_t fr) {
    float* dst = out + i * cols;
    if (quant) {
      const GgmlQuantType t = GgmlQuantType(quant);
      dequantize_blocks(t, static_cast<const uint8_t*>(data) + size_t(fr) * row_bytes(),
                        cols / ggml_quant_block_weights(t), dst);
      return;
    }
    if (synthetic) {
      for (int64_t c = 0; c < cols; ++c)
        dst[c] = round_bf16(rng_value(fill.seed, fill.tensor_id, uint64_t(fr * cols + c), fill.offset, fill.scale));
      return;
    }
    const uint8_t* src = static_cast<const uint8_t*>(data) + size_t(fr * cols) * dtype_size(dtype);
    switch (dtype) {
      case DType::F32: std::memcpy(dst, src, size_t(cols) * 4); break;
      case DType::F16:
        for (int64_t c = 0; c < cols; ++c) {
          uint16_t h;
          std::memcpy(&h, src + 2 * c, 2);
          dst[c] = f16_to_f32(h);
        }
        break;
      case DType::BF16:
        for (int64_t c = 0; c < cols; ++c) {
          uint16_t h;
          std::memcpy(&h, src + 2 * c, 2);
          dst[c] = bf16_to_f32(h);
        }
        break;
    }
  });
}

std::vector<float> HostTensor::to_f32() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  read_f32(v.data());
  return v;
}

void HostTensor::read_rows_bf16(int64_t r0, int64_t n, uint16_t* out) const {
  if (!synthetic && !quant && dtype == DType::BF16) {
    for_rows(*this, r0, n, [&](int64_t i, int64_t fr) {
      std::memcpy(out + i * cols, static_cast<const uint8_t*>(data) + size_t(fr * cols) * 2, size_t(cols) * 2);
    });
    return;
  }
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t i = 0; i < n; ++i) {
    read_rows_f32(r0 + i, 1, row.data());
    for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = f32_to_bf16(row[size_t(c)]);
  }
}

}  // namespace llm
