// HostTensor: a named weight as the engine sees it, row-major [rows, cols] (rows = outputs of a projection),
// already in the engine's RoPE convention. Its bytes are either a memory-mapped view into a checkpoint or a
// counter-based synthetic fill (core/counter_rng.h) that any backend can generate where it needs the data.
//
// RoPE convention of the engine: INTERLEAVED pairs (element 2i rotates with 2i+1, as llama2.c, Meta and GGUF).
// Hugging Face checkpoints store q/k rows in rotate-half order (i with i + head_dim/2); for those tensors
// rope_head_dim is set and engine row h*hd + 2j + s reads file row h*hd + s*hd/2 + j (j < hd/2, s in {0,1}).
// Wv and every other tensor are never permuted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace llm {

struct SyntheticFill {
  uint64_t seed = 0;
  uint64_t tensor_id = 0;
  float offset = 0.0f;
  float scale = 0.0f;
};

struct HostTensor {
  std::string name;                 // name in the checkpoint (for messages)
  DType dtype = DType::F32;         // element type of the stored bytes (synthetic: BF16)
  int64_t rows = 0, cols = 0;       // 1-D tensors (norm weights) have rows = 1
  const void* data = nullptr;       // stored bytes, file row order; null for a synthetic fill
  bool synthetic = false;
  SyntheticFill fill;               // used when synthetic: element (file_row, c) = fill at index file_row*cols + c
  int rope_head_dim = 0;            // non-zero: rows are in rotate-half order per head of this size (see above)
  // Non-zero: `data` holds GGML quantized blocks of this type id (models/quant.h GgmlQuantType: Q8_0, Q4_0, Q4_1,
  // Q5_0, Q5_1, Q4_K, Q6_K), each row of `cols` weights ggml_quant_row_bytes long, rows contiguous; `dtype` is then
  // F32, the type reads return exactly (read_rows_f32 dequantizes as ggml does).
  uint32_t quant = 0;
  std::shared_ptr<const void> owner;  // keeps data alive (mapping or buffer)

  bool empty() const { return rows == 0 && cols == 0; }
  int64_t numel() const { return rows * cols; }
  size_t nbytes() const;  // stored bytes (quantized: the blocks)
  size_t row_bytes() const;  // stored bytes of one row

  // The file row that engine row r reads (identity unless rope_head_dim is set).
  int64_t file_row(int64_t r) const {
    if (!rope_head_dim) return r;
    int64_t hd = rope_head_dim, h = r / hd, i = r % hd;
    return h * hd + (i & 1) * (hd / 2) + (i >> 1);
  }

  // Engine rows [r0, r0 + n) as FP32 (exact for F32/F16/BF16), in engine order.
  void read_rows_f32(int64_t r0, int64_t n, float* out) const;
  void read_f32(float* out) const { read_rows_f32(0, rows, out); }
  std::vector<float> to_f32() const;
  // Engine rows as BF16 bits (F32/F16 rounded to nearest even).
  void read_rows_bf16(int64_t r0, int64_t n, uint16_t* out) const;
};

}  // namespace llm
