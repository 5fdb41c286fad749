// The CUDA engine's device weights: what a model is once it sits in GPU memory, and how it gets there.
//
// Every projection matrix (wq, wk, wv, wo, w_gate, w_up, w_down per layer, and the head) is built once as a row-major
// BF16 [N, K] matrix on the device: real checkpoints are converted on the host (read_rows_bf16) in 32 MiB chunks
// through two pinned staging buffers (the copy of one chunk overlaps the conversion of the next); synthetic tensors
// are generated on the GPU by fill_synthetic_bf16 (no host data: an 8B model builds in seconds). The row-major copy is
// KEPT: cuBLAS prefill GEMMs read it, and every GEMV mapping prepacks from it (engine/cuda/gemv_mappings.h). A matrix
// whose members are all kept quantized (engine/memory_plan.h needs_bf16_copy) has no copy: its DevMatrix has the shape
// and null data; decode reads its quantized planes and prefill dequantizes it into `prefill_scratch` first. Per
// layer, wq, wk, wv are written straight into ONE row-major [q_dim + 2 kv_dim, dim] buffer and w_gate, w_up into ONE
// [2 hidden, dim] buffer; the per-matrix views (DevLayer::w) are row slices of those (a pointer offset), so the fused
// decode GEMVs cost no memory: prefill GEMMs read the slices, decode prepacks the whole buffers. Norm weights are FP32.
// The embedding table is BF16 [vocab, dim]; a tied head reads the embedding as its row-major matrix.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/cuda/resources.h"  // DeviceArena, PinnedBuffer, EventHolder
#include "models/model.h"

namespace llm {

// A row-major BF16 [N, K] matrix on the device (the source of every mapping's prepack and of the prefill GEMMs).
struct DevMatrix {
  const uint16_t* data = nullptr;  // [N, K] row-major BF16; null: kept quantized, no BF16 copy
  int N = 0, K = 0;
  size_t bytes() const { return data ? size_t(N) * size_t(K) * 2 : 0; }
};

enum Proj { kWq, kWk, kWv, kWo, kGate, kUp, kDown, kProjPerLayer };

struct DevLayer {
  const float* attn_norm = nullptr;  // [dim] FP32
  const float* ffn_norm = nullptr;   // [dim] FP32
  DevMatrix w[kProjPerLayer];        // wq [q_dim, dim], wk/wv [kv_dim, dim], wo [dim, q_dim],
                                     // gate/up [hidden, dim], down [dim, hidden]; all row-major BF16
  DevMatrix qkv;                     // [q_dim + 2 kv_dim, dim] row-major BF16: wq, wk, wv rows (w[kWq..kWv] its slices)
  DevMatrix gate_up;                 // [2 hidden, dim] row-major BF16: w_gate, w_up rows (w[kGate], w[kUp] its slices)
};

class DeviceModel {
 public:
  // Checks every tensor's shape against c and writes the weights into `arena` on stream s (asynchronous; the
  // staging buffers are reused chunk by chunk behind events). tied: the head is the embedding. A real checkpoint of
  // 256 MiB or more shows a progress bar (a terminal) or a line per quarter (stderr).
  // dequantize: every quantized weight also gets its BF16 copy (--dequantize); otherwise those kept quantized do not.
  // embed_rows: the embedding's rows when they differ from the head's c.vocab_size (a tensor-parallel rank holds the
  // whole embedding and only its vocabulary rows of the head, engine/tp_plan.h); 0 = c.vocab_size.
  void upload(const Model& model, const ModelConfig& c, bool tied, bool dequantize, DeviceArena& arena,
              cudaStream_t s, int embed_rows = 0);

  const uint16_t* embedding = nullptr;  // [vocab, dim] row-major BF16: device memory, or pinned host memory mapped
                                        // into the device where embedding_on_host (engine/memory_plan.h)
  bool embedding_host = false;          // which of the two
  const float* final_norm = nullptr;    // [dim] FP32
  const float* inv_freq = nullptr;      // [head_dim / 2] FP32: RoPE's frequencies (rope_inv_freq, scaling applied)
  DevMatrix head;                       // [vocab, dim]; the embedding when tied
  std::vector<DevLayer> layers;         // [n_layers]
  // Prefill's BF16 copy of one matrix kept quantized (the largest such matrix's elements; null when none is).
  uint16_t* prefill_scratch = nullptr;
  size_t prefill_scratch_elems = 0;

  // Bytes of the row-major BF16 projection matrices and the head held on the device (matrices kept quantized count 0).
  size_t matrix_bytes() const;

 private:
  uint16_t* upload_bf16(const HostTensor& t);
  uint16_t* upload_bf16_host(const HostTensor& t);
  void upload_bf16_into(const HostTensor& t, uint16_t* d);
  float* upload_f32(const HostTensor& t);

  DeviceArena* arena_ = nullptr;  // set while upload runs
  cudaStream_t stream_ = nullptr;
  PinnedBuffer staging_[2];       // [kStagingBytes] each, real checkpoints only
  PinnedBuffer embedding_host_;   // the embedding, where embedding_on_host
  EventHolder staging_done_[2];   // each buffer's last copy has read it
  class LoadProgress* progress_ = nullptr;  // set while upload runs (engine/load_progress.h)
};

}  // namespace llm
