// The CUDA engine's per-mapping prepack cache: for each GEMV mapping a run switches to (--gemv, set_gemv), every
// decode matrix prepacked once in that mapping's layout, kept with the state the decode paths build for it (the
// graph, the persistent kernel's arguments), so an A/B run switches mappings inside one process without re-packing.
//
// Decode's matrices per layer are the fused q|k|v, o, the fused gate|up and down (FusedProj order), then the head:
// small GEMVs lose most of their time to launch and ramp-up, a fused [6144, 4096] or [28672, 4096] one runs much
// closer to the read roofline. A matrix whose sources differ in type (a GGUF with q kept Q4_K and v Q6_K) is one piece
// per member, launched separately into its rows of the shared output. Weights kept quantized go to the quantized
// GEMVs' planes (engine/cuda_quant.h); which mapping runs which weight type is engine/gemv_choice.h's decision.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/device_model.h"
#include "engine/cuda_quant.h"  // QuantUploadTimes
#include "engine/gemv_choice.h"  // GemvPlan
#include "kernels/gemv/gemv.h"
#include "kernels/quant/gemv_quant.h"
#include "models/model.h"

namespace llm {

// One piece of a decode GEMV: output rows [row0, row0 + N) from the mapping's BF16 prepacked copy or, for weights
// kept quantized, from the planes its quantized form reads.
struct PieceWeight {
  int row0 = 0;
  bool quant = false;
  GemvWeight bf16;    // !quant: [N, K] in the mapping's layout
  QuantGemvWeight q;  // quant: [N, K] as the quantized form's planes
};
// One decode matrix: one piece; or, where a fused group's members differ in type, one per member.
using DecodeWeight = std::vector<PieceWeight>;

enum FusedProj { kFQkv, kFO, kFGateUp, kFDown, kFusedPerLayer };  // decode's matrices per layer

// What a decode path keeps per mapping (its graph, its kernel arguments); each path downcasts its own.
struct PathCache {
  virtual ~PathCache() = default;
};

// One mapping's prepacked weights and what the decode paths built for them.
struct MappingState {
  GemvPlan plan;                         // resolved once (gemv_plan): its name, BF16 and quantized forms
  const GemvMapping* mapping = nullptr;  // gemv_mapping(plan.bf16) (null: the plan runs no BF16 weight)
  // [n_layers * kFusedPerLayer + 1]: per layer q|k|v [q_dim + 2 kv_dim, dim], o [dim, q_dim],
  // gate|up [2 hidden, dim], down [dim, hidden] (FusedProj order); then the head [vocab, dim].
  std::vector<DecodeWeight> weights;
  size_t bytes_read = 0;                 // weight bytes one decode step reads (codes + scales for quantized pieces)
  // Every piece's form runs the RMSNorm fold (kernels/gemv/gemv_epilogue.h; not cuBLAS) and the residual matrices
  // (o, down) are one piece each: the graph path may fold the norms into the GEMVs.
  bool fuses_norm = false;
  // One device allocation for every quantized piece's planes (QuantRegion, engine/cuda_quant.h): the pieces do not own
  // their memory. Freed after them.
  void* quant_region = nullptr;
  size_t quant_region_bytes = 0;
  std::unique_ptr<PathCache> graph_cache;       // engine/cuda/graph_path.h
  std::unique_ptr<PathCache> persistent_cache;  // engine/cuda/persistent_path.h

  const DecodeWeight& layer(size_t l, FusedProj p) const { return weights[l * kFusedPerLayer + size_t(p)]; }
  const DecodeWeight& head() const { return weights.back(); }
  ~MappingState();  // the paths' state first (a graph reads the weights), then the weights
};

class GemvMappings {
 public:
  // The sources of every decode matrix, once (no prepack yet). dequantize: GGUF quantized weights run as BF16.
  GemvMappings(const Model& model, const DeviceModel& dm, bool tied, bool dequantize, GemvContext* ctx,
               cudaStream_t s);
  ~GemvMappings();
  GemvMappings(const GemvMappings&) = delete;
  GemvMappings& operator=(const GemvMappings&) = delete;

  // The state of `plan` (kept by plan.name), prepacked on first use (synchronous). Fails for a weight type it has no
  // form for, or when its copy (about bytes_per_token) would not fit in free GPU memory.
  MappingState& prepare(const GemvPlan& plan, size_t bytes_per_token);
  // Frees every mapping but `keep` (waits for the stream first).
  void release_others(const MappingState* keep);
  size_t device_bytes() const;  // the prepacked copies of every mapping kept
  bool any_quant() const { return any_quant_; }  // some decode matrix is kept quantized

  // y = W x (acc: y += W x) on the engine's stream, each piece through ms's form; ep: the RMSNorm fold (a consumer's
  // scale applies to every piece; a producer needs w to be one piece and ms.fuses_norm).
  void launch(const MappingState& ms, const DecodeWeight& w, const float* x, float* y, bool acc,
              const GemvEpilogue& ep = GemvEpilogue{}) const;
  // Whether every piece of w runs on a form that reads x's int8 form when given one (GemvEpilogue::x_q8: warp-dp4a),
  // so the kernel before it may write that form (quant_batch_swiglu_x) instead of each block quantizing x.
  bool takes_x_q8(const MappingState& ms, const DecodeWeight& w) const;
  // Whether every piece of w runs on a form that makes x from an input form (GemvEpilogue::glu, ::merge: the quantized
  // warp form staging x in shared memory), so the kernel before it (SwiGLU, attention's split merge) need not run.
  bool takes_x_forms(const MappingState& ms, const DecodeWeight& w) const;
  // Whether every GEMV that reads a norm under the fold (each layer's q|k|v and gate|up, the head) runs a form that
  // adds the producer's block sums itself (GemvEpilogue::scale_sums: the quantized warp forms).
  bool reads_norm_sums(const MappingState& ms) const;
  // Whether every piece of every decode matrix runs on a form with a token axis (GemvEpilogue::tokens: the quantized
  // warp forms, BF16's warp-r2), so a verify may run the decode step's GEMVs over its tokens (CudaEngine::verify_steps).
  bool takes_tokens(const MappingState& ms) const;
  // Drops every mapping's captured graphs (a change of what the forward pass launches: EngineTuning::fuse_norm).
  void drop_graphs();
  // EngineTuning::fork_pieces: launch() runs a decode matrix's quantized pieces after the first on a side stream,
  // forked from and joined back into the engine's stream (captured graphs then hold the two branches).
  void set_fork_pieces(bool on);

 private:
  // Where one piece of a decode matrix comes from: the BF16 row-major matrix on the device, or (weights kept
  // quantized) the GGUF tensors whose rows it concatenates, all of one quantized type.
  struct SlotPiece {
    int row0 = 0;
    DevMatrix bf16;                 // used when quant is empty
    std::vector<HostTensor> quant;  // quantized members, rows concatenated (fused q|k|v or gate|up of one type)
  };
  using Slot = std::vector<SlotPiece>;
  Slot make_slot(const std::vector<const HostTensor*>& members, const DevMatrix& whole,
                 const std::vector<DevMatrix>& parts);
  PieceWeight prepack(const MappingState& st, const SlotPiece& src, size_t* bytes_read, QuantUploadTimes* times,
                      QuantRegion* region);

  bool dequantize_ = false;
  bool any_quant_ = false;
  GemvContext* ctx_ = nullptr;    // the engine's (its cuBLAS handle, split-K partials)
  cudaStream_t stream_ = nullptr;
  bool fork_pieces_ = false;
  cudaStream_t side_ = nullptr;            // set_fork_pieces(true): created once, destroyed with the mappings
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  std::vector<Slot> slots_;       // per layer (qkv, o, gate_up, down), then the head
  std::map<std::string, std::unique_ptr<MappingState>> mappings_;  // by plan.name
};

}  // namespace llm
