// The CUDA engine's per-mapping prepack cache (engine/cuda/gemv_mappings.h): the sources of every decode matrix,
// each mapping's prepacked copy made from them once, and the launch of one decode matrix through a mapping.
#include "engine/cuda/gemv_mappings.h"

#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "core/error.h"
#include "engine/load_progress.h"
#include "engine/memory_plan.h"  // gib_str, kReserveBytes, kept_quantized
#include "engine/cuda_quant.h"        // upload_quant_matrix: GGUF blocks -> the quantized GEMVs' planes
#include "kernels/cuda_check.h"
#include "models/quant.h"             // ggml_quant_name

namespace llm {

MappingState::~MappingState() {
  graph_cache.reset();  // before the weights it reads
  persistent_cache.reset();
  for (auto& dw : weights)
    for (auto& p : dw) {
      try {
        gemv_free(&p.bf16);
        quant_gemv_free(&p.q);
      } catch (...) {
      }
    }
  if (quant_region) cudaFree(quant_region);
}

namespace {

// Whether piece p runs on a form with a token axis (GemvEpilogue::tokens): the quantized warp forms; warp-r2 for a
// BF16 piece.
bool piece_token_axis(const MappingState& ms, const PieceWeight& p) {
  return p.quant ? ms.plan.has_quant && quant_kind_token_axis(ms.plan.quant) : bf16_form_token_axis(ms.plan.bf16);
}

}  // namespace

// A fused group whose members are all BF16 (or all quantized in one type) is one piece; otherwise each member is a
// piece of its own, writing its rows of the shared output.
GemvMappings::Slot GemvMappings::make_slot(const std::vector<const HostTensor*>& members, const DevMatrix& whole,
                                           const std::vector<DevMatrix>& parts) {
  auto kept_quant = [&](const HostTensor& t) { return kept_quantized(t, dequantize_); };
  bool all_bf16 = true, one_type = true;
  for (const HostTensor* t : members) {
    all_bf16 = all_bf16 && !kept_quant(*t);
    one_type = one_type && kept_quant(*t) && t->quant == members[0]->quant;
  }
  Slot slot;
  if (all_bf16) {
    slot.push_back(SlotPiece{0, whole, {}});
  } else if (one_type) {
    SlotPiece piece;
    for (const HostTensor* t : members) piece.quant.push_back(*t);
    slot.push_back(std::move(piece));
  } else {
    // Runs of consecutive members kept quantized in one type share a piece (Q4_K_M's q|k in Q4_K beside a Q6_K v:
    // two launches, not three); a BF16 member is a piece of its own.
    int row0 = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      const bool q = kept_quant(*members[i]);
      if (q && i > 0 && kept_quant(*members[i - 1]) && members[i - 1]->quant == members[i]->quant) {
        slot.back().quant.push_back(*members[i]);
      } else {
        SlotPiece piece;
        piece.row0 = row0;
        if (q)
          piece.quant.push_back(*members[i]);
        else
          piece.bf16 = parts[i];
        slot.push_back(std::move(piece));
      }
      row0 += int(members[i]->rows);
    }
  }
  for (const SlotPiece& piece : slot) any_quant_ = any_quant_ || !piece.quant.empty();
  return slot;
}

GemvMappings::GemvMappings(const Model& model, const DeviceModel& dm, bool tied, bool dequantize, GemvContext* ctx,
                           cudaStream_t s)
    : dequantize_(dequantize), ctx_(ctx), stream_(s) {
  const auto& w = model.weights;
  // Fused groups whose members differ in type, said once per group and launch count (a 70B Q4_K_M has 80 such q|k|v).
  std::map<std::pair<std::string, size_t>, std::pair<int, std::string>> split;  // (group, launches) -> (layers, first)
  auto note = [&](const char* group, const Slot& slot, const HostTensor& first) {
    if (slot.size() < 2) return;
    auto& e = split[{group, slot.size()}];
    if (e.first++ == 0) e.second = first.name;
  };
  for (size_t l = 0; l < dm.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const DevLayer& dl = dm.layers[l];
    slots_.push_back(make_slot({&lw.wq, &lw.wk, &lw.wv}, dl.qkv, {dl.w[kWq], dl.w[kWk], dl.w[kWv]}));
    note("q|k|v", slots_.back(), lw.wq);
    slots_.push_back(make_slot({&lw.wo}, dl.w[kWo], {dl.w[kWo]}));
    slots_.push_back(make_slot({&lw.w_gate, &lw.w_up}, dl.gate_up, {dl.w[kGate], dl.w[kUp]}));
    note("gate|up", slots_.back(), lw.w_gate);
    slots_.push_back(make_slot({&lw.w_down}, dl.w[kDown], {dl.w[kDown]}));
  }
  slots_.push_back(make_slot({tied ? &w.embedding : &w.head}, dm.head, {dm.head}));
  for (const auto& [key, e] : split)
    std::fprintf(stderr, "cuda: %s members differ in type on %d of %zu layers (first %s): %zu GEMV launches each\n",
                 key.first.c_str(), e.first, dm.layers.size(), printable(e.second).c_str(), key.second);
}

PieceWeight GemvMappings::prepack(const MappingState& st, const SlotPiece& src, size_t* bytes_read,
                                  QuantUploadTimes* times, QuantRegion* region) {
  const std::string& name = st.plan.name;
  PieceWeight pw;
  pw.row0 = src.row0;
  if (!src.quant.empty()) {
    if (!st.plan.has_quant)
      fail("GEMV mapping '", name, "' has no form for ", ggml_quant_name(GgmlQuantType(src.quant[0].quant)),
           " weights (", printable(src.quant[0].name), ")");
    std::vector<const HostTensor*> parts;
    for (const HostTensor& t : src.quant) parts.push_back(&t);
    pw.quant = true;
    pw.q = upload_quant_matrix(parts, st.plan.quant, stream_, times, region);
    *bytes_read += size_t(quant_gemv_bytes_read(st.plan.quant, pw.q));
  } else {
    if (!st.mapping) fail("GEMV mapping '", name, "' exists only for quantized weights; this model has BF16 ones");
    // A row-major layout reads the BF16 copy itself (no second copy: 8B BF16 holds 15 GiB, not 30); else prepack.
    if (st.mapping->views_rowmajor(src.bf16.K) && (reinterpret_cast<uintptr_t>(src.bf16.data) & 15) == 0)
      pw.bf16 = gemv_view_rowmajor(src.bf16.data, src.bf16.N, src.bf16.K);
    else
      st.mapping->prepack(src.bf16.data, src.bf16.N, src.bf16.K, &pw.bf16, stream_);
    const GemvWeight& gw = pw.bf16;
    if (gw.N != src.bf16.N || gw.K != src.bf16.K || !gw.data)
      fail("GEMV mapping '", name, "': prepack of [", src.bf16.N, ", ", src.bf16.K, "] produced [", gw.N, ", ", gw.K,
           "]", gw.data ? "" : " with no data");
    *bytes_read += gw.useful_bytes();
  }
  return pw;
}

MappingState& GemvMappings::prepare(const GemvPlan& plan, size_t bytes_per_token) {
  const std::string& name = plan.name;
  auto it = mappings_.find(name);
  if (it != mappings_.end()) return *it->second;
  const double need = double(bytes_per_token) * 1.02 + double(kReserveBytes);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need > double(free_b))
    fail("GEMV mapping '", name, "' needs ", gib_str(need), " GiB of GPU memory for its prepacked weights, ",
         gib_str(double(free_b)), " GiB free (release_other_gemvs() frees the other mappings' copies)");
  auto st = std::make_unique<MappingState>();
  st->plan = plan;
  st->mapping = plan.bf16 == GemvBf16Form::None ? nullptr : &gemv_mapping(plan.bf16);
  st->weights.reserve(slots_.size());
  uint64_t quant_bytes = 0;  // the GGUF blocks packed on the host and uploaded: the slow part of a large load
  size_t region_bytes = 0;   // every quantized piece's planes, one allocation (no 2 MiB rounding per matrix)
  for (const Slot& slot : slots_)
    for (const SlotPiece& src : slot) {
      if (src.quant.empty() || !plan.has_quant) continue;
      int64_t rows = 0;
      for (const HostTensor& t : src.quant) {
        quant_bytes += uint64_t(t.nbytes());
        rows += t.rows;
      }
      const HostTensor& t0 = src.quant[0];
      region_bytes += size_t(quant_matrix_device_bytes(GgmlQuantType(t0.quant), rows, t0.cols, plan.quant));
    }
  QuantRegion region;
  if (region_bytes > 0) {
    CUDA_CHECK(cudaMalloc(&st->quant_region, region_bytes));
    st->quant_region_bytes = region_bytes;
    region = QuantRegion{static_cast<uint8_t*>(st->quant_region), region_bytes, 0};
  }
  LoadProgress progress("prepacking '" + name + "'", quant_bytes);
  QuantUploadTimes times;
  for (const Slot& slot : slots_) {
    DecodeWeight dw;
    for (const SlotPiece& src : slot) {
      dw.push_back(prepack(*st, src, &st->bytes_read, &times, &region));
      for (const HostTensor& t : src.quant) progress.add(uint64_t(t.nbytes()));
    }
    st->weights.push_back(std::move(dw));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Where a large prepack's time went (the host's steps, summed over the matrices): what a faster load must cut.
  if (quant_bytes >= LoadProgress::kQuietBelow) {
    char gather[64] = "";  // the as-stored form's copies of fused parts; the packed forms read them in place
    if (times.gather > 0) std::snprintf(gather, sizeof gather, "gathering the parts %.2f s, ", times.gather);
    std::fprintf(stderr, "prepacked '%s': %.2f GB of blocks; %spacking %.2f s, uploading %.2f s\n", name.c_str(),
                 double(quant_bytes) / 1e9, gather, times.pack, times.upload);
  }
  bool fuses = true;
  for (size_t i = 0; i < st->weights.size(); ++i) {
    const DecodeWeight& dw = st->weights[i];
    const bool residual = i + 1 < st->weights.size() && (i % kFusedPerLayer == kFO || i % kFusedPerLayer == kFDown);
    if (residual && dw.size() != 1) fuses = false;
    for (const PieceWeight& p : dw)
      if (!p.quant && !gemv_row(st->mapping->form)->bf16_fuses_norm) fuses = false;
  }
  st->fuses_norm = fuses;
  MappingState& ref = *st;
  mappings_[name] = std::move(st);
  return ref;
}

void GemvMappings::release_others(const MappingState* keep) {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    if (it->second.get() == keep)
      ++it;
    else
      it = mappings_.erase(it);
  }
}

size_t GemvMappings::device_bytes() const {
  size_t b = 0;
  for (const auto& kv : mappings_) {
    b += kv.second->quant_region_bytes;  // the quantized pieces' planes (they own none: allocated_bytes 0)
    for (const auto& dw : kv.second->weights)
      for (const auto& piece : dw) b += piece.quant ? piece.q.allocated_bytes : piece.bf16.bytes;
  }
  return b;
}

void GemvMappings::launch(const MappingState& ms, const DecodeWeight& w, const float* x, float* y, bool acc,
                          const GemvEpilogue& ep) const {
  if (ep.any() && !ms.fuses_norm) fail("GEMV mapping '", ms.plan.name, "': the RMSNorm fold on a plan that cannot run it");
  if (ep.producer() && w.size() != 1) fail("GEMV mapping '", ms.plan.name, "': an RMSNorm-fold producer in ", w.size(),
                                           " pieces");
  if (ep.tokens.many())
    for (const PieceWeight& p : w)
      if (!piece_token_axis(ms, p))
        fail("GEMV mapping '", ms.plan.name, "': a token axis on a piece whose form has none (the quantized warp "
             "forms and warp-r2 have it)");
  if (ep.x_form() && !takes_x_forms(ms, w))
    fail("GEMV mapping '", ms.plan.name, "': an input form (SwiGLU or split merge made as x is staged) on a matrix "
         "whose form cannot make it");
  // Fork: the quantized pieces after the first on the side stream (they write other rows of y and read x and the
  // epilogue's inputs only), the first on the engine's stream, then the join.
  bool fork = fork_pieces_ && w.size() > 1;
  for (size_t i = 1; i < w.size(); ++i) fork = fork && w[i].quant;
  if (fork) {
    CUDA_CHECK(cudaEventRecord(fork_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
    for (size_t i = 1; i < w.size(); ++i) quant_gemv_launch(ms.plan.quant, w[i].q, x, y + w[i].row0, acc, side_, ep);
  }
  for (size_t i = 0; i < (fork ? 1 : w.size()); ++i) {
    const PieceWeight& p = w[i];
    if (p.quant)
      quant_gemv_launch(ms.plan.quant, p.q, x, y + p.row0, acc, stream_, ep);
    else
      ms.mapping->launch(p.bf16, x, y + p.row0, acc, ep, ctx_);
  }
  if (fork) {
    CUDA_CHECK(cudaEventRecord(join_, side_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, join_, 0));
  }
}

void GemvMappings::set_fork_pieces(bool on) {
  if (on && !side_) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  }
  if (on != fork_pieces_) drop_graphs();  // the captured steps launch otherwise
  fork_pieces_ = on;
}

GemvMappings::~GemvMappings() {
  mappings_.clear();  // their graphs and weights first
  if (side_) {
    cudaStreamSynchronize(side_);
    cudaStreamDestroy(side_);
  }
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
}

bool GemvMappings::takes_x_q8(const MappingState& ms, const DecodeWeight& w) const {
  if (!ms.plan.has_quant || !quant_kind_reads_x_q8(ms.plan.quant) || w.empty()) return false;
  for (const PieceWeight& p : w)
    if (!p.quant || p.q.k % 32 != 0) return false;
  return true;
}

bool GemvMappings::takes_x_forms(const MappingState& ms, const DecodeWeight& w) const {
  if (!ms.plan.has_quant || w.empty()) return false;
  for (const PieceWeight& p : w)
    if (!p.quant || !quant_stages_x_forms(ms.plan.quant, p.q.k)) return false;
  return true;
}

bool GemvMappings::reads_norm_sums(const MappingState& ms) const {
  if (!ms.plan.has_quant || !quant_kind_reads_norm_sums(ms.plan.quant)) return false;
  auto quantized = [](const DecodeWeight& w) {
    for (const PieceWeight& p : w)
      if (!p.quant) return false;
    return !w.empty();
  };
  const size_t layers = (ms.weights.size() - 1) / kFusedPerLayer;
  for (size_t l = 0; l < layers; ++l)
    if (!quantized(ms.layer(l, kFQkv)) || !quantized(ms.layer(l, kFGateUp))) return false;
  return quantized(ms.head());
}

bool GemvMappings::takes_tokens(const MappingState& ms) const {
  for (const DecodeWeight& w : ms.weights)
    for (const PieceWeight& p : w)
      if (!piece_token_axis(ms, p)) return false;
  return true;
}

void GemvMappings::drop_graphs() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& kv : mappings_) kv.second->graph_cache.reset();
}

}  // namespace llm
