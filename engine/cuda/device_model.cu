// The CUDA engine's device weights (engine/cuda/device_model.h): shape checks, the pinned-staging upload with its
// progress bar, and the norms and RoPE frequencies.
#include "engine/cuda/device_model.h"


#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "engine/load_progress.h"
#include "engine/memory_plan.h"  // needs_bf16_copy: which matrices get a BF16 copy
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"  // fill_synthetic_bf16

namespace llm {

namespace {

constexpr size_t kStagingBytes = size_t(32) << 20;  // per pinned staging buffer (two of them)

void check_matrix(const HostTensor& t, int64_t rows, int64_t cols) {
  if (t.rows != rows || t.cols != cols)
    fail("cuda backend: tensor ", t.name, ": expected [", rows, ", ", cols, "], found [", t.rows, ", ", t.cols, "]");
}
void check_vector(const HostTensor& t, int64_t n) {
  if (t.numel() != n) fail("cuda backend: tensor ", t.name, ": expected ", n, " elements, found ", t.numel());
}

}  // namespace

uint16_t* DeviceModel::upload_bf16(const HostTensor& t) {
  uint16_t* d = arena_->alloc<uint16_t>(size_t(t.numel()));
  upload_bf16_into(t, d);
  return d;
}

// Writes t as row-major BF16 [rows, cols] at d (device; may be a row slice of a larger buffer).
void DeviceModel::upload_bf16_into(const HostTensor& t, uint16_t* d) {
  if (t.synthetic) {
    fill_synthetic_bf16(d, t.rows, t.cols, t.fill.seed, t.fill.tensor_id, t.fill.offset, t.fill.scale,
                        t.rope_head_dim, stream_);
    CUDA_CHECK_LAUNCH("fill_synthetic_bf16");
    return;
  }
  if (!t.data) fail("cuda backend: tensor ", t.name, " has no data (neither mapped nor synthetic)");
  const size_t row_bytes = size_t(t.cols) * 2;
  if (!staging_[0].p) {
    const size_t bytes = std::max(kStagingBytes, row_bytes);
    for (auto& s : staging_) s.alloc(bytes);
  }
  if (row_bytes > staging_[0].bytes)
    fail("cuda backend: tensor ", t.name, ": a row of ", row_bytes, " bytes exceeds the staging buffer");
  const int64_t rows_per_chunk = int64_t(staging_[0].bytes / row_bytes);
  int i = 0;
  for (int64_t r0 = 0; r0 < t.rows; r0 += rows_per_chunk, i ^= 1) {
    const int64_t n = std::min(rows_per_chunk, t.rows - r0);
    CUDA_CHECK(cudaEventSynchronize(staging_done_[i].e));  // its previous copy has finished reading it
    uint16_t* host = static_cast<uint16_t*>(staging_[i].p);
    t.read_rows_bf16(r0, n, host);
    CUDA_CHECK(cudaMemcpyAsync(d + r0 * t.cols, host, size_t(n) * row_bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(staging_done_[i].e, stream_));
    if (progress_) progress_->add(uint64_t(n) * row_bytes);
  }
}

float* DeviceModel::upload_f32(const HostTensor& t) {
  std::vector<float> host = t.to_f32();
  float* d = arena_->alloc<float>(host.size());
  CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

void DeviceModel::upload(const Model& model, const ModelConfig& c, bool tied, bool dequantize, DeviceArena& arena,
                         cudaStream_t s) {
  const auto& w = model.weights;
  if (!staging_done_[0].e)
    for (auto& e : staging_done_) e.create(cudaEventDisableTiming);
  auto real_bytes = [](const HostTensor& t) { return t.synthetic ? uint64_t(0) : uint64_t(t.numel()) * 2; };
  auto copied = [&](const std::vector<const HostTensor*>& group) { return needs_bf16_copy(group, dequantize); };
  auto group_bytes = [&](const std::vector<const HostTensor*>& group) {
    uint64_t b = 0;
    for (const HostTensor* t : group) b += copied(group) ? real_bytes(*t) : 0;
    return b;
  };
  uint64_t total = real_bytes(w.embedding) + (tied ? 0 : group_bytes({&w.head}));
  for (const auto& lw : w.layers)
    total += group_bytes({&lw.wq, &lw.wk, &lw.wv}) + group_bytes({&lw.wo}) + group_bytes({&lw.w_gate, &lw.w_up}) +
             group_bytes({&lw.w_down});
  LoadProgress progress("loading weights", total);
  prefill_scratch = nullptr;
  prefill_scratch_elems = 0;
  auto needs_scratch = [&](size_t elems) { prefill_scratch_elems = std::max(prefill_scratch_elems, elems); };
  arena_ = &arena;
  stream_ = s;
  progress_ = &progress;
  struct Reset {
    DeviceModel& m;
    ~Reset() {
      m.progress_ = nullptr;
      m.arena_ = nullptr;
    }
  } reset{*this};
  if (int(w.layers.size()) != c.n_layers)
    fail("cuda backend: ", model.source, ": expected ", c.n_layers, " layers, found ", w.layers.size());
  check_matrix(w.embedding, c.vocab_size, c.dim);
  check_vector(w.final_norm, c.dim);
  embedding = upload_bf16(w.embedding);
  final_norm = upload_f32(w.final_norm);
  if (tied) {
    head = DevMatrix{embedding, c.vocab_size, c.dim};
  } else {
    check_matrix(w.head, c.vocab_size, c.dim);
    const bool copy = copied({&w.head});
    // Kept quantized: no copy and no scratch (prefill and verify run the head through the decode GEMV, row by row).
    head = DevMatrix{copy ? upload_bf16(w.head) : nullptr, c.vocab_size, c.dim};
  }
  const int qd = c.q_dim(), kvd = c.kv_dim();
  const int shape[kProjPerLayer][2] = {{qd, c.dim},         {kvd, c.dim},         {kvd, c.dim},      {c.dim, qd},
                                       {c.hidden_dim, c.dim}, {c.hidden_dim, c.dim}, {c.dim, c.hidden_dim}};
  layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    const HostTensor* src[kProjPerLayer] = {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down};
    DevLayer& dl = layers[size_t(l)];
    check_vector(lw.attn_norm, c.dim);
    check_vector(lw.ffn_norm, c.dim);
    dl.attn_norm = upload_f32(lw.attn_norm);
    dl.ffn_norm = upload_f32(lw.ffn_norm);
    for (int p = 0; p < kProjPerLayer; ++p) check_matrix(*src[p], shape[p][0], shape[p][1]);
    // q|k|v and gate|up each in one buffer, rows concatenated; the per-matrix views are its row slices. A group kept
    // quantized has no buffer (null views of the right shapes; prefill's scratch holds its largest).
    const bool copy_qkv = copied({&lw.wq, &lw.wk, &lw.wv}), copy_gate_up = copied({&lw.w_gate, &lw.w_up});
    const size_t qkv_elems = size_t(qd + 2 * kvd) * size_t(c.dim), gate_up_elems = 2 * size_t(c.hidden_dim) * size_t(c.dim);
    uint16_t* qkv = copy_qkv ? arena.alloc<uint16_t>(qkv_elems) : nullptr;
    uint16_t* gate_up = copy_gate_up ? arena.alloc<uint16_t>(gate_up_elems) : nullptr;
    if (!copy_qkv) needs_scratch(qkv_elems);
    if (!copy_gate_up) needs_scratch(gate_up_elems);
    dl.qkv = DevMatrix{qkv, qd + 2 * kvd, c.dim};
    dl.gate_up = DevMatrix{gate_up, 2 * c.hidden_dim, c.dim};
    const size_t at[kProjPerLayer] = {0, size_t(qd) * size_t(c.dim), size_t(qd + kvd) * size_t(c.dim), 0, 0,
                                      size_t(c.hidden_dim) * size_t(c.dim), 0};
    uint16_t* const group_base[kProjPerLayer] = {qkv, qkv, qkv, nullptr, gate_up, gate_up, nullptr};
    const bool in_group[kProjPerLayer] = {true, true, true, false, true, true, false};
    for (int p = 0; p < kProjPerLayer; ++p) {
      const size_t elems = size_t(shape[p][0]) * size_t(shape[p][1]);
      uint16_t* d = nullptr;
      if (in_group[p]) {
        d = group_base[p] ? group_base[p] + at[p] : nullptr;
      } else if (copied({src[p]})) {
        d = arena.alloc<uint16_t>(elems);
      } else {
        needs_scratch(elems);
      }
      if (d) upload_bf16_into(*src[p], d);
      dl.w[p] = DevMatrix{d, shape[p][0], shape[p][1]};
    }
  }
  if (prefill_scratch_elems > 0) prefill_scratch = arena.alloc<uint16_t>(prefill_scratch_elems);
  std::vector<float> inv = rope_inv_freq(c);
  float* d_inv = arena.alloc<float>(inv.size());
  CUDA_CHECK(cudaMemcpy(d_inv, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
  inv_freq = d_inv;
}

size_t DeviceModel::matrix_bytes() const {
  size_t b = head.bytes();
  for (const DevLayer& dl : layers)
    for (int p = 0; p < kProjPerLayer; ++p) b += dl.w[p].bytes();
  return b;
}

}  // namespace llm
