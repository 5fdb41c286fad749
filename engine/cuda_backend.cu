// CUDA engine: BF16 weights resident on the GPU, decode through the selected GEMV mapping replayed as a CUDA
// graph, prefill through cuBLAS GEMMs. Built only on kernels/gemv/gemv.h and kernels/ops/ops.h.
//
// Design
// - Weights. Every projection matrix (wq, wk, wv, wo, w_gate, w_up, w_down per layer, and the head) is built once as
//   a row-major BF16 [N, K] matrix on the device: real checkpoints are converted on the host (read_rows_bf16) in
//   32 MiB chunks through two pinned staging buffers (copy of one chunk overlaps the conversion of the next);
//   synthetic tensors are generated on the GPU by fill_synthetic_bf16 (no host data: an 8B model builds in seconds).
//   The row-major copy is KEPT: cuBLAS prefill GEMMs read it, and a later switch to another mapping prepacks from
//   it. Per layer, wq, wk, wv are written straight into ONE row-major [q_dim + 2 kv_dim, dim] buffer and w_gate,
//   w_up into ONE [2 hidden, dim] buffer; the per-matrix views (DevLayer::w) are row slices of those (a pointer
//   offset), so fusion costs no memory: prefill GEMMs read the slices, fused decode prepacks the whole buffers.
//   Each mapping's prepacked copy (GemvWeight) is a second copy even where its layout equals row-major: for the
//   Llama 3.1 8B shape that is 2 x 16 GB, which fits the H200's 141 GB with the KV cache; simplicity over memory.
//   Norm weights are FP32 on the device. The embedding table is BF16 [vocab, dim]; a tied head reads the embedding
//   as its row-major matrix and is prepacked like any other matrix.
// - GEMV mapping. Chosen in ONE place (gemv_find); prepacked copies and the decode graph are cached per mapping, so
//   an A/B run can switch mappings inside one process (set_gemv).
// - Memory. Before anything is allocated the bytes needed (row-major weights + one prepacked copy + KV cache +
//   activations + scratch + a reserve) are compared with cudaMemGetInfo's free bytes; too little -> llm::Error
//   "model needs X GiB of GPU memory ..., Y GiB free". ctx_size 0 -> default_ctx_size() (the model maximum, at most
//   kDefaultCtxCap), capped (and said on stderr) to what the KV cache can have.
// - Fused projections (BackendOptions::fuse_projections, default on). Decode runs one GEMV for q|k|v into one
//   contiguous activation buffer (q_, k_, v_ are its slices) and one for gate|up (gate_, up_ likewise), then
//   swiglu_fused reads the two halves: 4 GEMVs per layer instead of 7; small GEMVs lose most of their time to launch
//   and ramp-up, a fused [6144, 4096] or [28672, 4096] one runs much closer to the read roofline. RoPE and the
//   KV-cache store are one kernel (rope_kv_store; rope_kv_store_fp8 with --kv-dtype fp8); residual adds ride on the
//   GEMV's accumulate flag.
// - Decode. pos and token go to device memory with ONE cudaMemcpyAsync from pinned memory; every op reads them
//   from there, so one graph captured per mapping replays at every position. No allocation, no host sync. The first
//   decode with a mapping runs eagerly (it creates any lazy cuBLAS handle and loads the kernels) and then captures.
//   The "cublas" mapping is capture-safe because its handle (in the GemvContext) gets an explicit workspace
//   (kernels/gemv/gemv_cublas.cu); the prefill handle here gets one too (cublasSetWorkspace after cublasSetStream).
//   Every mapping switched to keeps its prepacked copy (one more model-sized copy each) until release_other_gemvs().
// - Sample. sample_device on the device logits (ids below sample_vocab_ only) writes the id into a slot of a mapped
//   pinned ring (no copy in the stream) and, as the next step's {pos, token}, into d_step_. The decode loop runs ahead
//   (Backend::runs_ahead): sample_async and decode_sampled queue step t + 1 before wait_sampled waits for step t's
//   event, so the device never waits for the host. NaN or Inf logits come back as kSampleNonFinite in those same 4
//   bytes and stop the run with an error naming the step. On the persistent path greedy sampling happens inside the
//   step's kernel (its last block writes the id into the ring slot the next sample_async takes, and into d_step_):
//   that sample_async then launches nothing.
// - Prefill. The prompt in batched passes of up to max_prefill_chunk() tokens (activations sized for that at
//   construction): cuBLAS GEMMs (BF16 A/B, FP32 C, FP32 compute) for the projections, residual adds through beta=1,
//   the batched attention op; only the last token's row goes through the final norm and the head (current mapping).
// - Profiling. Optional: un-graphed decode with one event at every region boundary, times summed per projection.
#include "engine/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/counter_rng.h"
#include "core/error.h"
#include "engine/cuda_quant.h"      // upload_quant_matrix: GGUF blocks -> the quantized GEMVs' planes
#include "engine/cuda_resources.h"  // DeviceArena, PinnedBuffer, StreamHolder, EventHolder, CublasHolder, ...
#include "kernels/cuda_check.h"
#include "engine/gemv_choice.h"     // resolve_gemv_choice, default_gemv_name, gemv_refusal
#include "engine/kernel_trace.h"     // KernelTrace: CUPTI's kernel timeline of a graph replay
#include "engine/timeline_budget.h"  // split_replays, attribute_timeline
#include "kernels/gemv/gemv.h"
#include "kernels/quant/gemv_quant.h"
#include "kernels/attention/kv_fp8.h"
#include "kernels/persistent/persistent_decode.h"
#include "models/quant.h"            // ggml_quant_name
#include "kernels/ops/ops.h"

namespace llm {

namespace {

constexpr size_t kStagingBytes = size_t(32) << 20;        // per pinned staging buffer (two of them)
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
constexpr size_t kReserveBytes = size_t(512) << 20;         // CUDA/cuBLAS internals, kernels, fragmentation
// Tokens per prefill pass: GEMMs of 2048 rows run near cuBLAS's peak (512 left ~40% on the table on the 8B shape);
// the pass's activations, ~0.5 GB for Llama 3.1 8B, are in the memory plan.
constexpr int kMaxPrefillChunk = 2048;

double gib(double bytes) { return bytes / double(size_t(1) << 30); }
std::string gib_str(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", gib(bytes));
  return buf;
}

void check_matrix(const HostTensor& t, int64_t rows, int64_t cols) {
  if (t.rows != rows || t.cols != cols)
    fail("cuda backend: tensor ", t.name, ": expected [", rows, ", ", cols, "], found [", t.rows, ", ", t.cols, "]");
}
void check_vector(const HostTensor& t, int64_t n) {
  if (t.numel() != n) fail("cuda backend: tensor ", t.name, ": expected ", n, " elements, found ", t.numel());
}

// One piece of a decode GEMV: output rows [row0, row0 + N) from the mapping's BF16 prepacked copy or, for weights
// kept quantized, from the planes its quantized form reads.
struct PieceWeight {
  int row0 = 0;
  bool quant = false;
  GemvWeight bf16;    // !quant
  QuantGemvWeight q;  // quant
};
// One decode matrix (fused or not): one piece; or, where a fused group's members differ in type, one per member
// (separate launches into slices of the same output).
using DecodeWeight = std::vector<PieceWeight>;

// One mapping's prepacked weights and its decode graph.
struct MappingState {
  std::string name;                    // as given to --gemv / set_gemv
  const GemvMapping* mapping = nullptr;  // its BF16 form (null: the name exists only for quantized weights)
  bool has_quant = false;              // its quantized form exists
  QuantGemvKind qkind = QuantGemvKind::Warp;
  // Per layer: unfused 7 (Proj order: wq, wk, wv, wo, gate, up, down), fused 4 (FusedProj order: qkv, wo, gate_up,
  // down); then the head.
  std::vector<DecodeWeight> weights;
  size_t bytes_read = 0;               // weight bytes one decode step reads (codes + scales for quantized pieces)
  GraphExecHolder graph;
  // The profiled graph (a second capture of the same step, made while the kernel timeline records) and the profile
  // part of each of its kernels in capture order.
  GraphExecHolder prof_graph;
  std::vector<int> prof_parts;
  uint32_t prof_graph_id = 0;
  PersistentLayer* persistent_layers = nullptr;  // device [n_layers]: this mapping's weights for the persistent path
  PersistentDecodeArgs persistent;               // its kernel arguments, built with persistent_layers
  ~MappingState() {
    graph.reset();  // before the weights it reads
    prof_graph.reset();
    if (persistent_layers) cudaFree(persistent_layers);
    for (auto& dw : weights)
      for (auto& p : dw) {
        try {
          gemv_free(&p.bf16);
          quant_gemv_free(&p.q);
        } catch (...) {
        }
      }
  }
};

// A row-major BF16 [N, K] matrix on the device (the source of every mapping's prepack and of the prefill GEMMs).
struct DevMatrix {
  const uint16_t* data = nullptr;  // [N, K] row-major BF16
  int N = 0, K = 0;
  size_t bytes() const { return size_t(N) * size_t(K) * 2; }
};

enum Proj { kWq, kWk, kWv, kWo, kGate, kUp, kDown, kProjPerLayer };

// Where one piece of a decode matrix comes from: the BF16 row-major matrix on the device, or (weights kept
// quantized) the GGUF tensors whose rows it concatenates, all of one quantized type.
struct SlotPiece {
  int row0 = 0;
  DevMatrix bf16;                  // used when quant is empty
  std::vector<HostTensor> quant;   // quantized members, rows concatenated (fused q|k|v or gate|up of one type)
};
using Slot = std::vector<SlotPiece>;
enum FusedProj { kFQkv, kFO, kFGateUp, kFDown, kFusedPerLayer };  // decode's matrices per layer when fused

struct DevLayer {
  const float* attn_norm = nullptr;  // [dim] FP32
  const float* ffn_norm = nullptr;   // [dim] FP32
  DevMatrix w[kProjPerLayer];        // wq [q_dim, dim], wk/wv [kv_dim, dim], wo [dim, q_dim],
                                     // gate/up [hidden, dim], down [dim, hidden]
  DevMatrix qkv;                     // [q_dim + 2 kv_dim, dim]: wq, wk, wv rows (w[kWq..kWv] are its slices)
  DevMatrix gate_up;                 // [2 hidden, dim]: w_gate, w_up rows (w[kGate], w[kUp] are its slices)
  uint16_t* k_cache = nullptr;       // [ctx, kv_dim] BF16 (--kv-dtype bf16, the default)
  uint16_t* v_cache = nullptr;       // [ctx, kv_dim] BF16
  Fp8KvLayer fp8;                    // --kv-dtype fp8: codes, scales and the open block's rows (kernels/attention/kv_fp8.h)
};

// Kernel nodes of the graph being captured on s so far.
size_t captured_kernels(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, &g));
  if (status != cudaStreamCaptureStatusActive || !g) fail("cuda backend: counting kernels of a stream not capturing");
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  size_t kernels = 0;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType t;
    CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &t));
    kernels += t == cudaGraphNodeTypeKernel;
  }
  return kernels;
}

// Region boundaries of one profiled decode step: events[i] .. events[i+1] is a region of class part[i]. Counting (a
// graph being captured): no events; kernels_at[i] = kernel nodes captured by the end of region i.
struct StepProbe {
  std::vector<cudaEvent_t> events;
  std::vector<int> part;
  size_t used = 0;
  bool counting = false;
  std::vector<size_t> kernels_at;
  void start(cudaStream_t s) {
    part.clear();
    kernels_at.clear();
    used = 0;
    if (!counting) CUDA_CHECK(cudaEventRecord(events[used++], s));
  }
  void end_region(int p, cudaStream_t s) {
    part.push_back(p);
    if (counting) {
      kernels_at.push_back(captured_kernels(s));
      return;
    }
    if (used >= events.size()) fail("cuda backend: profiling event pool too small (", events.size(), ")");
    CUDA_CHECK(cudaEventRecord(events[used++], s));
  }
  // Counting: the part of every captured kernel, in capture order.
  std::vector<int> kernel_parts() const {
    std::vector<int> parts;
    for (size_t i = 0; i < part.size(); ++i)
      parts.insert(parts.end(), kernels_at[i] - (i ? kernels_at[i - 1] : 0), part[i]);
    return parts;
  }
  ~StepProbe() {
    for (auto e : events) cudaEventDestroy(e);
  }
};

// What the device must hold, computed from the config alone (before anything is allocated).
struct MemoryPlan {
  double weights = 0, prepacked = 0, norms = 0, kv = 0, activations = 0, scratch = 0;
  double total() const { return weights + prepacked + norms + kv + activations + scratch + double(kReserveBytes); }
};

class CudaEngine final : public CudaBackend {
 public:
  CudaEngine(const Model& model, const BackendOptions& opt);
  ~CudaEngine() override;

  std::string name() const override { return "cuda"; }
  int ctx_size() const override { return ctx_; }
  void prefill(const int* tokens, int n, int pos) override;
  void decode(int token, int pos) override;
  int sample(const SamplerParams& p, uint64_t step) override;
  std::vector<float> logits() override;
  bool runs_ahead() const override { return run_ahead_; }
  void sample_async(const SamplerParams& p, uint64_t step) override;
  void decode_sampled(int pos) override;
  int wait_sampled() override;
  void drop_sampled() override;

  void set_gemv(const std::string& name) override;
  std::string gemv() const override { return cur_->name; }
  void release_other_gemvs() override;
  void set_persistent(bool on) override;
  bool persistent() const override { return persistent_; }
  int persistent_grid() const override { return pplan_.grid; }
  void set_use_graph(bool on) override { use_graph_ = on; }
  bool use_graph() const override { return use_graph_; }
  void set_profiling(bool on) override;
  DecodeProfile profile() const override { return profile_; }
  void reset_profile() override { profile_ = DecodeProfile{}; }
  bool fused_projections() const override { return fused_; }
  size_t gemv_bytes_per_token() const override;
  void set_prefill_chunk(int n) override;
  int max_prefill_chunk() const override { return max_chunk_; }
  size_t device_bytes() const override;

 private:
  MemoryPlan plan_memory(int ctx, int chunk) const;
  int choose_ctx(int requested, int want, int chunk, size_t free_bytes) const;
  uint16_t* upload_bf16(const HostTensor& t);
  void upload_bf16_into(const HostTensor& t, uint16_t* d);
  void build_slots(const Model& model);
  void launch_gemv(const MappingState& ms, const DecodeWeight& w, const float* x, float* y, bool acc);
  float* upload_f32(const HostTensor& t);
  void upload_weights(const Model& model);
  struct LoadProgress* progress_ = nullptr;  // set while upload_weights runs
  void allocate_state();
  MappingState& prepare_mapping(const std::string& name);
  void enqueue_decode_step(const MappingState& ms, StepProbe* probe);
  // The persistent path (kernels/persistent/persistent_decode.h): the model's shape as its arguments, mapping ms's arguments
  // (built once per mapping), one step, and the error check.
  std::string persistent_refusal(const MappingState& ms) const;
  PersistentDecodeArgs persistent_shape() const;
  const PersistentDecodeArgs& persistent_args(MappingState& ms);
  void decode_persistent(MappingState& ms);
  void enqueue_step(int pos);  // one decode step of the {pos, token} in d_step_
  void check_persistent_error();
  // Captures one decode step of ms into exec; counting: the probe records the part of every captured kernel.
  void capture_graph(const MappingState& ms, GraphExecHolder& exec, StepProbe* counting);
  void decode_timeline(MappingState& ms);  // a profiled step: the profiled graph replayed under the kernel timeline
  void prefill_chunk(int c, int pos0);
  // RoPE on q and k (n tokens at *d_pos0) and the rotated k, v into layer L's cache in its form.
  void store_kv(const DevLayer& L, float* q, float* k, const float* v, const int* d_pos0, int n, cudaStream_t s);
  double kv_bytes(int ctx) const;
  void gemm(const DevMatrix& w, const uint16_t* x, int n, float* y, float beta);
  void accumulate_profile();

  ModelConfig cfg_;
  std::string source_;  // the model, for messages
  int ctx_ = 0;
  int sample_vocab_ = 0;  // sample() picks ids in [0, sample_vocab_): the tokenizer's size when the head is padded
  int max_chunk_ = 0;
  int chunk_ = 0;
  bool use_graph_ = true;
  bool persistent_ = false;
  bool profiling_ = false;
  bool timeline_ = false;         // profiling the graph path by the kernel timeline (CUPTI) of graph replays
  std::string timeline_refusal_;  // why the timeline is unavailable here (once known)
  bool tied_ = false;
  bool fused_ = true;
  bool dequantize_ = false;
  KvDtype kv_dtype_ = KvDtype::BF16;  // BF16 or FP8
  bool any_quant_ = false;        // some decode matrix is kept quantized
  std::string default_gemv_;      // default_gemv_name(model): what "" selects
  std::vector<Slot> slots_;       // per layer (fused: qkv, o, gate_up, down; unfused: Proj order), then the head

  // Declared first so they are destroyed last (after everything that uses the stream).
  StreamHolder stream_;
  DeviceArena arena_;
  PinnedBuffer staging_[2];  // [kStagingBytes] each, real checkpoints only
  EventHolder staging_done_[2];
  PinnedBuffer host_io_;     // ints: [0] pos, [1] token (decode); [2] sampled id; [3] pos0, [4..] tokens (prefill)
  EventHolder step_copied_;     // the decode {pos, token} copy has read host_io_
  EventHolder prefill_copied_;  // the prefill token copy has read host_io_
  // Samples in flight (sample_async .. wait_sampled): each id comes back into its slot of a pinned ring, with an event.
  static constexpr int kSampleRing = 4;
  // Profiling: the spin queued before events that time one kernel (spin_device); longer than a launch under CUPTI.
  static constexpr unsigned long long kLaunchCoverNs = 300000;
  PinnedBuffer sampled_ring_;                // [kSampleRing] ids, mapped: the sample kernel writes its slot
  EventHolder sampled_ev_[kSampleRing];      // recorded behind the sample kernel
  uint64_t sampled_step_[kSampleRing] = {};  // each slot's sampler step (for the error message)
  // Profiling: the sample after a profiled decode step is timed (by the kernel timeline where the graph path uses it,
  // else by events around its kernel; inside the persistent kernel when it samples there), and its time joins the
  // step's (DecodeProfile kOther), so the budget holds everything the device runs per token.
  EventHolder sample_t0_[kSampleRing], sample_t1_[kSampleRing];
  bool sample_timed_[kSampleRing] = {};
  bool time_next_sample_ = false;  // the last decode step was profiled
  int ring_head_ = 0, ring_count_ = 0;       // the oldest slot in flight; how many are
  // The persistent step last queued also sampled greedily into this ring slot and d_step_ (-1: it did not); valid for
  // a greedy sample_async of its logits (fused_pos_ == logits_pos_) that takes that slot.
  int fused_slot_ = -1, fused_pos_ = -1;
  CublasHolder blas_;           // prefill GEMMs
  GemvContextHolder gctx_;
  std::unique_ptr<StepProbe> probe_;

  // Device buffers (FP32 activations unless noted).
  const uint16_t* embedding_ = nullptr;  // [vocab, dim] BF16
  const float* final_norm_ = nullptr;    // [dim]
  const float* inv_freq_ = nullptr;      // [head_dim / 2]
  DevMatrix head_;                       // [vocab, dim]; the embedding when tied
  std::vector<DevLayer> layers_;
  int* d_step_ = nullptr;     // [2]: pos, token of the decode step
  int logits_pos_ = -1;        // position of the token whose logits are current (-1: none yet)
  int sampled_pos_ = -1;       // where the id of the sample started last goes (its kernel wrote it to d_step_)
  bool step_sampled_ = false;  // a sample started since the last decode or prefill: decode_sampled may run
  bool run_ahead_ = true;      // BackendOptions::run_ahead (LLM_RUN_AHEAD=0 turns it off)
  int* d_prefill_ = nullptr;  // [1 + max_chunk]: pos0, then the chunk's tokens
  float *x_ = nullptr, *xb_ = nullptr, *att_ = nullptr, *hb_ = nullptr, *logits_ = nullptr;  // decode
  float* qkv_ = nullptr;  // [q_dim + 2 kv_dim]: q_, k_, v_ are its slices (the fused GEMV writes all three)
  float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
  float* gate_up_ = nullptr;  // [2 hidden]: gate_, up_ are its halves
  float *gate_ = nullptr, *up_ = nullptr;
  float *px_ = nullptr, *pq_ = nullptr, *pk_ = nullptr, *pv_ = nullptr, *patt_ = nullptr;  // prefill [chunk, *]
  float* pgate_up_ = nullptr;                                                              // prefill [chunk, 2 hidden]
  uint16_t* pbf_ = nullptr;  // [chunk, max(dim, q_dim, hidden)] BF16 GEMM input
  void* attn_scratch_ = nullptr;
  void* sample_scratch_ = nullptr;
  void* blas_workspace_ = nullptr;  // prefill handle

  // The persistent path: counters (zeroed once; the kernel leaves them zero), attention partials, per-block cycles.
  unsigned* d_sync_ = nullptr;
  float* d_attn_partial_ = nullptr;
  unsigned long long* d_pprof_ = nullptr;
  PersistentPlan pplan_;
  int persistent_max_blocks_ = 0;  // LLM_PERSISTENT_BLOCKS: caps the grid (tuning)
  int persistent_all_forms_ = 0;   // LLM_PERSISTENT_ALL_FORMS=1: the quantized kernel with every form (tests, tuning)
  // Test hooks, read when set_persistent(true) is called: LLM_PERSISTENT_FAULT (a block that never arrives) and
  // LLM_PERSISTENT_TIMEOUT_MS (0: the kernel's default).
  int persistent_fault_ = 0;
  unsigned long long persistent_timeout_ns_ = 0;
  PinnedBuffer persistent_err_;    // mapped: the error code a failed persistent step writes (0: none)
  bool persistent_pending_ = false;  // a persistent step has run (its error word is meaningful)

  std::map<std::string, std::unique_ptr<MappingState>> mappings_;  // declared after gctx_: destroyed before it
  MappingState* cur_ = nullptr;
  DecodeProfile profile_;
};

// ---------------------------------------------------------------------------------------------------------------

MemoryPlan CudaEngine::plan_memory(int ctx, int chunk) const {
  const auto& c = cfg_;
  const double dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), hid = c.hidden_dim, voc = c.vocab_size;
  const double layer_mats = qd * dim + 2 * kvd * dim + dim * qd + 3 * hid * dim;  // elements per layer
  MemoryPlan p;
  p.weights = 2.0 * (c.n_layers * layer_mats + voc * dim + (tied_ ? 0.0 : voc * dim));
  p.prepacked = 2.0 * (c.n_layers * layer_mats + voc * dim);  // padding of a mapping is not known in advance
  p.norms = 4.0 * ((2.0 * c.n_layers + 1) * dim + c.head_dim / 2);
  p.kv = kv_bytes(ctx);
  const double wide = std::max({dim, qd, hid});
  p.activations = 4.0 * (2 * dim + 3 * qd + 2 * kvd + 3 * hid + voc) +
                  4.0 * chunk * (dim + 2 * qd + 2 * kvd + 2 * hid) + 2.0 * chunk * wide + 4.0 * (4 + chunk);
  // The scratch query runs only for plausible contexts (an absurd ctx fails on the KV cache alone).
  const double attn = (p.kv < 1e12) ? double(attention_decode_scratch_bytes(c.n_heads, c.head_dim, ctx)) : 0.0;
  // The GEMV context (kernels/gemv/gemv.h) holds its own cuBLAS workspace and split-K partial sums; counted as ours.
  p.scratch = attn + double(sample_scratch_bytes(c.vocab_size)) + 2.0 * kCublasWorkspaceBytes +
              4.0 * kGemvPartialFloats + 2.0 * wide;
  return p;
}

int CudaEngine::choose_ctx(int requested, int want, int chunk, size_t free_bytes) const {
  if (requested < 0) fail("cuda backend: ctx_size must be >= 0, found ", requested);
  if (requested > 0) return requested;  // checked against the model maximum after the memory check
  // want: default_ctx_size(), the model maximum up to kDefaultCtxCap
  const MemoryPlan full = plan_memory(want, std::min(chunk, want));
  if (full.total() <= double(free_bytes)) return want;
  // Whatever is left after everything but the KV cache (scratch bounded by its size at the maximum context).
  const double kv_per_pos = kv_bytes(want) / double(want);
  const double left = double(free_bytes) - (full.total() - full.kv);
  int ctx = left > 0 ? int(std::min(double(want), std::floor(left / kv_per_pos))) : 0;
  if (ctx >= 256) ctx -= ctx % 256;
  if (ctx < 1) return want;  // nothing fits: the memory check reports it with the full numbers
  std::fprintf(stderr, "cuda: ctx_size capped to %d (the default %d needs %s GiB of KV cache; %s GiB free)\n",
               ctx, want, gib_str(full.kv).c_str(), gib_str(double(free_bytes)).c_str());
  return ctx;
}

CudaEngine::CudaEngine(const Model& model, const BackendOptions& opt) : cfg_(model.config), source_(model.source) {
  require_cuda_device();
  cfg_.validate(model.source);
  tied_ = cfg_.tied_embeddings || model.weights.head.empty();
  fused_ = opt.fuse_projections;
  dequantize_ = opt.dequantize;
  default_gemv_ = default_gemv_name(model, dequantize_);
  const std::string gemv_name = opt.gemv.empty() ? default_gemv_ : opt.gemv;
  // An unknown name, or one without a form for some weight type, fails before any allocation.
  resolve_gemv_choice(gemv_name);
  if (const std::string why = gemv_refusal(gemv_name, model, dequantize_); !why.empty()) fail(why);

  if (opt.kv_dtype == KvDtype::FP8) {
    if (!attention_fp8_supported(cfg_.head_dim, cfg_.n_heads, cfg_.n_kv_heads))
      fail("--kv-dtype fp8: the CUDA engine's FP8 attention needs head_dim 64 or 128 (", model.source, " has ",
           cfg_.head_dim, "); run it with --kv-dtype bf16, or on the CPU reference (--device cpu)");
    kv_dtype_ = KvDtype::FP8;
  }

  // Memory check, before anything is allocated.
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (opt.sample_vocab < 0 || opt.sample_vocab > cfg_.vocab_size)
    fail("cuda backend: sample_vocab ", opt.sample_vocab, " outside 0..", cfg_.vocab_size);
  sample_vocab_ = opt.sample_vocab > 0 ? opt.sample_vocab : cfg_.vocab_size;
  const int ctx_default = opt.ctx_size > 0 ? 0 : default_ctx_size(cfg_, stderr);
  const int ctx_guess = opt.ctx_size > 0 ? opt.ctx_size : ctx_default;
  ctx_ = choose_ctx(opt.ctx_size, ctx_default, std::min(kMaxPrefillChunk, ctx_guess), free_b);
  max_chunk_ = chunk_ = std::min(kMaxPrefillChunk, ctx_);
  const MemoryPlan plan = plan_memory(ctx_, max_chunk_);
  if (plan.total() > double(free_b))
    fail("model needs ", gib_str(plan.total()), " GiB of GPU memory, ", gib_str(double(free_b)), " GiB free (",
         model.source, ": weights ", gib_str(plan.weights), " GiB + prepacked for GEMV '", gemv_name, "' ",
         gib_str(plan.prepacked), " GiB + KV cache for ", ctx_, " positions ", gib_str(plan.kv),
         " GiB + activations, scratch and reserve ",
         gib_str(plan.activations + plan.scratch + plan.norms + double(kReserveBytes)), " GiB)",
         opt.ctx_size > 0 ? "; a smaller ctx_size needs less" : "");
  if (ctx_ > cfg_.max_seq_len)
    fail("cuda backend: ctx_size ", ctx_, " exceeds the model's maximum of ", cfg_.max_seq_len, " positions");

  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
  for (auto& e : staging_done_) e.create(cudaEventDisableTiming);
  step_copied_.create(cudaEventDisableTiming);
  prefill_copied_.create(cudaEventDisableTiming);
  host_io_.alloc(sizeof(int) * size_t(4 + max_chunk_));
  sampled_ring_.alloc_mapped(sizeof(int) * kSampleRing);
  for (auto& e : sampled_ev_) e.create(cudaEventDisableTiming);
  for (int i = 0; i < kSampleRing; ++i) {
    sample_t0_[i].create(cudaEventDefault);
    sample_t1_[i].create(cudaEventDefault);
  }
  run_ahead_ = opt.run_ahead;
  if (const char* e = std::getenv("LLM_RUN_AHEAD")) run_ahead_ = run_ahead_ && std::atoi(e) != 0;
  CUBLAS_CHECK(cublasCreate(&blas_.h));

  upload_weights(model);
  build_slots(model);
  allocate_state();
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  cur_ = &prepare_mapping(gemv_name);
  if (opt.persistent) set_persistent(true);
}

CudaEngine::~CudaEngine() {
  if (stream_.s) cudaStreamSynchronize(stream_.s);
}

// --- weights -----------------------------------------------------------------------------------------------------

// Progress of converting and uploading a real checkpoint's weights (multi-gigabyte loads take a while): a bar with
// bytes and rate when stderr is a terminal, a plain line at every quarter otherwise; silent for small models.
struct LoadProgress {
  uint64_t total = 0, done = 0;
  int quarter = 0;
  bool tty = isatty(2) != 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  void add(uint64_t bytes) {
    if (total < (uint64_t(1) << 28)) return;  // under 256 MiB: nothing worth watching
    done += bytes;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gb = double(done) / 1e9, rate = s > 0 ? gb / s : 0.0;
    if (tty) {
      const int width = 30, fill = int(double(width) * double(done) / double(total));
      std::fprintf(stderr, "\rloading weights [%.*s%*s] %.2f / %.2f GB  %.2f GB/s", fill,
                   "##############################", width - fill, "", gb, double(total) / 1e9, rate);
      if (done >= total) std::fputc('\n', stderr);
    } else {
      for (; quarter < 4 && done * 4 >= total * uint64_t(quarter + 1); ++quarter)
        std::fprintf(stderr, "loading weights: %d%% (%.2f / %.2f GB, %.2f GB/s)\n", 25 * (quarter + 1), gb,
                     double(total) / 1e9, rate);
    }
  }
};

uint16_t* CudaEngine::upload_bf16(const HostTensor& t) {
  uint16_t* d = arena_.alloc<uint16_t>(size_t(t.numel()));
  upload_bf16_into(t, d);
  return d;
}

// Writes t as row-major BF16 [rows, cols] at d (device; may be a row slice of a larger buffer).
void CudaEngine::upload_bf16_into(const HostTensor& t, uint16_t* d) {
  if (t.synthetic) {
    fill_synthetic_bf16(d, t.rows, t.cols, t.fill.seed, t.fill.tensor_id, t.fill.offset, t.fill.scale,
                        t.rope_head_dim, stream_.s);
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
    CUDA_CHECK(cudaMemcpyAsync(d + r0 * t.cols, host, size_t(n) * row_bytes, cudaMemcpyHostToDevice, stream_.s));
    CUDA_CHECK(cudaEventRecord(staging_done_[i].e, stream_.s));
    if (progress_) progress_->add(uint64_t(n) * row_bytes);
  }
}

float* CudaEngine::upload_f32(const HostTensor& t) {
  std::vector<float> host = t.to_f32();
  float* d = arena_.alloc<float>(host.size());
  CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

void CudaEngine::upload_weights(const Model& model) {
  const auto& c = cfg_;
  const auto& w = model.weights;
  LoadProgress progress;
  auto real_bytes = [](const HostTensor& t) { return t.synthetic ? uint64_t(0) : uint64_t(t.numel()) * 2; };
  progress.total = real_bytes(w.embedding) + (c.tied_embeddings ? 0 : real_bytes(w.head));
  for (const auto& lw : w.layers)
    for (const HostTensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
      progress.total += real_bytes(*t);
  progress_ = &progress;
  struct Reset {
    LoadProgress*& p;
    ~Reset() { p = nullptr; }
  } reset{progress_};
  if (int(w.layers.size()) != c.n_layers)
    fail("cuda backend: ", model.source, ": expected ", c.n_layers, " layers, found ", w.layers.size());
  check_matrix(w.embedding, c.vocab_size, c.dim);
  check_vector(w.final_norm, c.dim);
  embedding_ = upload_bf16(w.embedding);
  final_norm_ = upload_f32(w.final_norm);
  if (tied_) {
    head_ = DevMatrix{embedding_, c.vocab_size, c.dim};
  } else {
    check_matrix(w.head, c.vocab_size, c.dim);
    head_ = DevMatrix{upload_bf16(w.head), c.vocab_size, c.dim};
  }
  const int qd = c.q_dim(), kvd = c.kv_dim();
  const int shape[kProjPerLayer][2] = {{qd, c.dim},         {kvd, c.dim},         {kvd, c.dim},      {c.dim, qd},
                                       {c.hidden_dim, c.dim}, {c.hidden_dim, c.dim}, {c.dim, c.hidden_dim}};
  layers_.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    const HostTensor* src[kProjPerLayer] = {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down};
    DevLayer& dl = layers_[size_t(l)];
    check_vector(lw.attn_norm, c.dim);
    check_vector(lw.ffn_norm, c.dim);
    dl.attn_norm = upload_f32(lw.attn_norm);
    dl.ffn_norm = upload_f32(lw.ffn_norm);
    for (int p = 0; p < kProjPerLayer; ++p) check_matrix(*src[p], shape[p][0], shape[p][1]);
    // q|k|v and gate|up each in one buffer, rows concatenated; the per-matrix views are its row slices.
    uint16_t* qkv = arena_.alloc<uint16_t>(size_t(qd + 2 * kvd) * size_t(c.dim));
    uint16_t* gate_up = arena_.alloc<uint16_t>(2 * size_t(c.hidden_dim) * size_t(c.dim));
    dl.qkv = DevMatrix{qkv, qd + 2 * kvd, c.dim};
    dl.gate_up = DevMatrix{gate_up, 2 * c.hidden_dim, c.dim};
    uint16_t* base[kProjPerLayer] = {qkv,
                                     qkv + size_t(qd) * size_t(c.dim),
                                     qkv + size_t(qd + kvd) * size_t(c.dim),
                                     nullptr,
                                     gate_up,
                                     gate_up + size_t(c.hidden_dim) * size_t(c.dim),
                                     nullptr};
    for (int p = 0; p < kProjPerLayer; ++p) {
      uint16_t* d = base[p] ? base[p] : arena_.alloc<uint16_t>(size_t(shape[p][0]) * size_t(shape[p][1]));
      upload_bf16_into(*src[p], d);
      dl.w[p] = DevMatrix{d, shape[p][0], shape[p][1]};
    }
  }
  std::vector<float> inv = rope_inv_freq(c);
  float* d_inv = arena_.alloc<float>(inv.size());
  CUDA_CHECK(cudaMemcpy(d_inv, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
  inv_freq_ = d_inv;
}

void CudaEngine::allocate_state() {
  const auto& c = cfg_;
  const size_t dim = size_t(c.dim), qd = size_t(c.q_dim()), kvd = size_t(c.kv_dim()), hid = size_t(c.hidden_dim);
  const size_t ch = size_t(max_chunk_), wide = std::max({dim, qd, hid});

  if (kv_dtype_ == KvDtype::FP8) {
    const size_t per_layer = fp8_kv_layer_bytes(ctx_, c.n_kv_heads, c.head_dim, kKvFp8Block);
    uint8_t* kv = arena_.alloc<uint8_t>(size_t(c.n_layers) * per_layer);
    for (int l = 0; l < c.n_layers; ++l) {
      Fp8KvLayer& f = layers_[size_t(l)].fp8;
      f = fp8_kv_layer_carve(kv + size_t(l) * per_layer, ctx_, c.n_kv_heads, c.head_dim, kKvFp8Block);
      fp8_kv_layer_init(f, ctx_, c.n_kv_heads, c.head_dim, kKvFp8Block, stream_.s);
    }
  } else {
    const size_t per_layer = size_t(ctx_) * kvd;
    uint16_t* kv = arena_.alloc<uint16_t>(2 * size_t(c.n_layers) * per_layer);
    // Rows are always written before attention reads them; zeros keep a stray read from producing NaN.
    CUDA_CHECK(cudaMemsetAsync(kv, 0, 2 * size_t(c.n_layers) * per_layer * 2, stream_.s));
    for (int l = 0; l < c.n_layers; ++l) {
      layers_[size_t(l)].k_cache = kv + (2 * size_t(l)) * per_layer;
      layers_[size_t(l)].v_cache = kv + (2 * size_t(l) + 1) * per_layer;
    }
  }

  d_step_ = arena_.alloc<int>(2);
  d_prefill_ = arena_.alloc<int>(1 + ch);
  CUDA_CHECK(cudaMemsetAsync(d_step_, 0, 2 * sizeof(int), stream_.s));

  x_ = arena_.alloc<float>(dim);
  xb_ = arena_.alloc<float>(dim);
  qkv_ = arena_.alloc<float>(qd + 2 * kvd);
  q_ = qkv_;
  k_ = qkv_ + qd;
  v_ = qkv_ + qd + kvd;
  att_ = arena_.alloc<float>(qd);
  gate_up_ = arena_.alloc<float>(2 * hid);
  gate_ = gate_up_;
  up_ = gate_up_ + hid;
  hb_ = arena_.alloc<float>(hid);
  logits_ = arena_.alloc<float>(size_t(c.vocab_size));
  CUDA_CHECK(cudaMemsetAsync(logits_, 0, size_t(c.vocab_size) * sizeof(float), stream_.s));

  px_ = arena_.alloc<float>(ch * dim);
  pq_ = arena_.alloc<float>(ch * qd);
  pk_ = arena_.alloc<float>(ch * kvd);
  pv_ = arena_.alloc<float>(ch * kvd);
  patt_ = arena_.alloc<float>(ch * qd);
  pgate_up_ = arena_.alloc<float>(ch * 2 * hid);
  pbf_ = arena_.alloc<uint16_t>(ch * wide);

  attn_scratch_ = arena_.alloc<uint8_t>(attention_decode_scratch_bytes(c.n_heads, c.head_dim, ctx_));
  sample_scratch_ = arena_.alloc<uint8_t>(sample_scratch_bytes(c.vocab_size));
  blas_workspace_ = arena_.alloc<uint8_t>(kCublasWorkspaceBytes);

  // cublasSetStream resets the workspace to the default pool, so the workspace is set after it.
  CUBLAS_CHECK(cublasSetStream(blas_.h, stream_.s));
  CUBLAS_CHECK(cublasSetWorkspace(blas_.h, blas_workspace_, kCublasWorkspaceBytes));

  gemv_context_init(&gctx_.c, stream_.s, int(wide));
  gctx_.live = true;
}

// --- mappings ----------------------------------------------------------------------------------------------------

MappingState& CudaEngine::prepare_mapping(const std::string& name) {
  auto it = mappings_.find(name);
  if (it != mappings_.end()) return *it->second;
  const GemvChoice choice = resolve_gemv_choice(name);  // unknown names fail here
  const double need = double(gemv_bytes_per_token()) * 1.02 + double(kReserveBytes);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need > double(free_b))
    fail("GEMV mapping '", name, "' needs ", gib_str(need), " GiB of GPU memory for its prepacked weights, ",
         gib_str(double(free_b)), " GiB free (release_other_gemvs() frees the other mappings' copies)");
  auto st = std::make_unique<MappingState>();
  st->name = name;
  st->mapping = choice.bf16.empty() ? nullptr : &gemv_find(choice.bf16);
  st->has_quant = !choice.quant.empty();
  if (st->has_quant) st->qkind = quant_gemv_kind_from_name(choice.quant);
  st->weights.reserve(slots_.size());
  for (const Slot& slot : slots_) {
    DecodeWeight dw;
    for (const SlotPiece& src : slot) {
      PieceWeight pw;
      pw.row0 = src.row0;
      if (!src.quant.empty()) {
        if (!st->has_quant)
          fail("GEMV mapping '", name, "' has no form for ", ggml_quant_name(GgmlQuantType(src.quant[0].quant)),
               " weights (", printable(src.quant[0].name), ")");
        std::vector<const HostTensor*> parts;
        for (const HostTensor& t : src.quant) parts.push_back(&t);
        pw.quant = true;
        pw.q = upload_quant_matrix(parts, st->qkind, stream_.s);
        st->bytes_read += size_t(quant_gemv_bytes_read(st->qkind, pw.q));
      } else {
        if (!st->mapping) fail("GEMV mapping '", name, "' exists only for quantized weights; this model has BF16 ones");
        st->mapping->prepack(src.bf16.data, src.bf16.N, src.bf16.K, &pw.bf16, stream_.s);
        const GemvWeight& gw = pw.bf16;
        if (gw.N != src.bf16.N || gw.K != src.bf16.K || !gw.data)
          fail("GEMV mapping '", name, "': prepack of [", src.bf16.N, ", ", src.bf16.K, "] produced [", gw.N, ", ",
               gw.K, "]", gw.data ? "" : " with no data");
        st->bytes_read += gw.useful_bytes();
      }
      dw.push_back(std::move(pw));
    }
    st->weights.push_back(std::move(dw));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  MappingState& ref = *st;
  mappings_[name] = std::move(st);
  return ref;
}

// The sources of every decode matrix, once: a fused group whose members are all BF16 (or all quantized in one type)
// is one piece; otherwise each member is a piece of its own, writing its rows of the shared output.
void CudaEngine::build_slots(const Model& model) {
  const auto& w = model.weights;
  auto kept_quant = [&](const HostTensor& t) { return t.quant != 0 && !dequantize_; };
  auto make_slot = [&](std::vector<const HostTensor*> members, const DevMatrix& whole,
                       std::vector<DevMatrix> parts) {
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
      int row0 = 0;
      for (size_t i = 0; i < members.size(); ++i) {
        SlotPiece piece;
        piece.row0 = row0;
        if (kept_quant(*members[i]))
          piece.quant.push_back(*members[i]);
        else
          piece.bf16 = parts[i];
        slot.push_back(std::move(piece));
        row0 += int(members[i]->rows);
      }
      std::fprintf(stderr, "cuda: %s and the matrices fused with it differ in type: separate GEMV launches\n",
                   printable(members[0]->name).c_str());
    }
    for (const SlotPiece& piece : slot) any_quant_ = any_quant_ || !piece.quant.empty();
    return slot;
  };
  slots_.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const DevLayer& dl = layers_[l];
    if (fused_) {
      slots_.push_back(make_slot({&lw.wq, &lw.wk, &lw.wv}, dl.qkv, {dl.w[kWq], dl.w[kWk], dl.w[kWv]}));
      slots_.push_back(make_slot({&lw.wo}, dl.w[kWo], {dl.w[kWo]}));
      slots_.push_back(make_slot({&lw.w_gate, &lw.w_up}, dl.gate_up, {dl.w[kGate], dl.w[kUp]}));
      slots_.push_back(make_slot({&lw.w_down}, dl.w[kDown], {dl.w[kDown]}));
    } else {
      const HostTensor* src[kProjPerLayer] = {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down};
      for (int p = 0; p < kProjPerLayer; ++p) slots_.push_back(make_slot({src[p]}, dl.w[p], {dl.w[p]}));
    }
  }
  slots_.push_back(make_slot({tied_ ? &w.embedding : &w.head}, head_, {head_}));
}

void CudaEngine::launch_gemv(const MappingState& ms, const DecodeWeight& w, const float* x, float* y, bool acc) {
  for (const PieceWeight& p : w) {
    if (p.quant)
      quant_gemv_launch(ms.qkind, p.q, x, y + p.row0, acc, stream_.s);
    else
      ms.mapping->launch(p.bf16, x, y + p.row0, acc, &gctx_.c);
  }
}


void CudaEngine::set_gemv(const std::string& name) {
  MappingState& ms = prepare_mapping(name.empty() ? default_gemv_ : name);
  if (persistent_)
    if (const std::string why = persistent_refusal(ms); !why.empty()) fail(why);
  cur_ = &ms;
}

void CudaEngine::release_other_gemvs() {
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    if (it->second.get() == cur_)
      ++it;
    else
      it = mappings_.erase(it);
  }
}

size_t CudaEngine::gemv_bytes_per_token() const {
  if (cur_) return cur_->bytes_read;  // what the current mapping's pieces read (quantized: codes + scales)
  size_t b = head_.bytes();           // before any mapping: the BF16 matrices (an upper bound for quantized ones)
  for (const DevLayer& dl : layers_)
    for (int p = 0; p < kProjPerLayer; ++p) b += dl.w[p].bytes();
  return b;
}

size_t CudaEngine::device_bytes() const {
  size_t b = arena_.bytes;
  for (const auto& kv : mappings_)
    for (const auto& dw : kv.second->weights)
      for (const auto& piece : dw) b += piece.quant ? piece.q.allocated_bytes : piece.bf16.bytes;
  return b;
}

void CudaEngine::set_prefill_chunk(int n) {
  if (n < 1 || n > max_chunk_) fail("cuda backend: prefill chunk must be in [1, ", max_chunk_, "], found ", n);
  chunk_ = n;
}

// --- decode ------------------------------------------------------------------------------------------------------

void CudaEngine::enqueue_decode_step(const MappingState& ms, StepProbe* probe) {
  const auto& c = cfg_;
  cudaStream_t s = stream_.s;
  const int* d_pos = d_step_;
  const int* d_tok = d_step_ + 1;
  auto mark = [&](int part) {
    if (probe) probe->end_region(part, s);
  };
  auto proj = [&](const DecodeWeight& w, const float* x, float* y, bool acc, int part) {
    launch_gemv(ms, w, x, y, acc);
    mark(part);
  };
  if (probe) probe->start(s);

  embed_lookup(embedding_, d_tok, 1, c.dim, x_, s);
  const size_t per_layer = fused_ ? size_t(kFusedPerLayer) : size_t(kProjPerLayer);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DevLayer& L = layers_[l];
    const DecodeWeight* W = &ms.weights[l * per_layer];
    rmsnorm(x_, L.attn_norm, xb_, 1, c.dim, c.norm_eps, s);
    mark(DecodeProfile::kNorm);
    if (fused_) {
      proj(W[kFQkv], xb_, qkv_, false, DecodeProfile::kQKV);  // q_, k_, v_ in one GEMV
    } else {
      proj(W[kWq], xb_, q_, false, DecodeProfile::kQ);
      proj(W[kWk], xb_, k_, false, DecodeProfile::kK);
      proj(W[kWv], xb_, v_, false, DecodeProfile::kV);
    }
    store_kv(L, q_, k_, v_, d_pos, 1, s);
    mark(DecodeProfile::kOther);
    if (kv_dtype_ == KvDtype::FP8)
      attention_decode_fp8(q_, L.fp8.k, L.fp8.v, L.fp8.k_scale, L.fp8.v_scale, d_pos, c.n_heads, c.n_kv_heads,
                           c.head_dim, ctx_, att_, attn_scratch_, s);
    else
      attention_decode(q_, L.k_cache, L.v_cache, d_pos, c.n_heads, c.n_kv_heads, c.head_dim, ctx_, att_,
                       attn_scratch_, s);
    mark(DecodeProfile::kAttention);
    proj(W[fused_ ? int(kFO) : int(kWo)], att_, x_, true, DecodeProfile::kO);  // residual: x += Wo att
    rmsnorm(x_, L.ffn_norm, xb_, 1, c.dim, c.norm_eps, s);
    mark(DecodeProfile::kNorm);
    if (fused_) {
      proj(W[kFGateUp], xb_, gate_up_, false, DecodeProfile::kGateUp);  // gate_, up_ in one GEMV
    } else {
      proj(W[kGate], xb_, gate_, false, DecodeProfile::kGate);
      proj(W[kUp], xb_, up_, false, DecodeProfile::kUp);
    }
    swiglu_fused(gate_up_, hb_, size_t(c.hidden_dim), s);
    mark(DecodeProfile::kOther);
    proj(W[fused_ ? int(kFDown) : int(kDown)], hb_, x_, true, DecodeProfile::kDown);  // residual: x += Wdown hb
  }
  rmsnorm(x_, final_norm_, xb_, 1, c.dim, c.norm_eps, s);
  mark(DecodeProfile::kNorm);
  proj(ms.weights.back(), xb_, logits_, false, DecodeProfile::kHead);
  CUDA_CHECK_LAUNCH("the decode step");
}

void CudaEngine::capture_graph(const MappingState& ms, GraphExecHolder& exec, StepProbe* counting) {
  GraphHolder graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream_.s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_decode_step(ms, counting);
  } catch (...) {
    cudaStreamEndCapture(stream_.s, &graph.g);  // leave the stream usable
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_.s, &graph.g));
  cudaError_t err = cudaGraphInstantiate(&exec.g, graph.g, 0);
  if (err != cudaSuccess) {
    exec.g = nullptr;
    CUDA_CHECK(err);
  }
}

void CudaEngine::decode_timeline(MappingState& ms) {
  KernelTrace& trace = KernelTrace::instance();
  if (!ms.prof_graph.g) {  // captured while the timeline records (CUPTI traces graphs made after it started)
    StepProbe counter;
    counter.counting = true;
    capture_graph(ms, ms.prof_graph, &counter);
    ms.prof_parts = counter.kernel_parts();
    std::string why;
    if (!trace.graph_exec_id(ms.prof_graph.g, &ms.prof_graph_id, &why)) fail("cuda backend: kernel timeline: ", why);
  }
  cudaStream_t s = stream_.s;
  CUDA_CHECK(cudaStreamSynchronize(s));
  trace.take(nullptr);  // whatever ran before this step (sampling, other passes)
  CUDA_CHECK(cudaGraphLaunch(ms.prof_graph.g, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  uint64_t dropped = 0;
  const std::vector<TraceKernel> records = trace.take(&dropped);
  if (dropped) fail("cuda backend: the kernel timeline lost ", dropped, " records (CUPTI's buffers were full)");
  const std::vector<TraceReplay> replays = split_replays(records, ms.prof_graph_id);
  if (replays.size() != 1)
    fail("cuda backend: the kernel timeline of one decode step holds ", replays.size(), " replays of its graph, not 1");
  const TimelineBudget b =
      attribute_timeline(replays[0].kernels, ms.prof_parts, DecodeProfile::kParts, DecodeProfile::kWait);
  for (int p = 0; p < DecodeProfile::kParts; ++p) profile_.ms[p] += b.ms[size_t(p)];
  profile_.total_ms += b.span_ms;
  profile_.steps++;
  profile_.graph_timeline = true;
}

void CudaEngine::decode(int token, int pos) {
  if (token < 0 || token >= cfg_.vocab_size)
    fail("cuda backend: token ", token, " outside the vocabulary of ", cfg_.vocab_size);
  if (pos < 0 || pos >= ctx_) fail("cuda backend: position ", pos, " outside the context of ", ctx_);
  int* io = static_cast<int*>(host_io_.p);
  CUDA_CHECK(cudaEventSynchronize(step_copied_.e));  // the previous step's copy has read io[0..1]
  io[0] = pos;
  io[1] = token;
  CUDA_CHECK(cudaMemcpyAsync(d_step_, io, 2 * sizeof(int), cudaMemcpyHostToDevice, stream_.s));
  CUDA_CHECK(cudaEventRecord(step_copied_.e, stream_.s));
  enqueue_step(pos);
}

void CudaEngine::decode_sampled(int pos) {
  if (pos < 0 || pos >= ctx_) fail("cuda backend: position ", pos, " outside the context of ", ctx_);
  if (!step_sampled_) fail("cuda backend: decode_sampled at position ", pos, " with no sample started since the last step");
  if (pos != sampled_pos_)
    fail("cuda backend: decode_sampled at position ", pos, ", but the sample started last goes to ", sampled_pos_);
  enqueue_step(pos);  // {pos, token} are on the device already: the sample kernel wrote them
}

// The decode step that reads {pos, token} from d_step_.
void CudaEngine::enqueue_step(int pos) {
  logits_pos_ = pos;
  step_sampled_ = false;
  fused_slot_ = -1;
  time_next_sample_ = profiling_;
  MappingState& ms = *cur_;
  if (persistent_) {
    decode_persistent(ms);
    return;
  }
  if (profiling_ && timeline_) {
    decode_timeline(ms);
    return;
  }
  if (profiling_) {
    enqueue_decode_step(ms, probe_.get());
    accumulate_profile();
    return;
  }
  if (use_graph_ && ms.graph.g) {
    CUDA_CHECK(cudaGraphLaunch(ms.graph.g, stream_.s));
    return;
  }
  enqueue_decode_step(ms, nullptr);
  if (use_graph_) capture_graph(ms, ms.graph, nullptr);  // the eager step above was the warm-up
}

// --- the persistent path ------------------------------------------------------------------------------------------

std::string CudaEngine::persistent_refusal(const MappingState& ms) const {
  // The state the kernel reads: one piece per matrix (a fused group in one type), BF16 or kept quantized.
  std::string mixed;
  for (size_t i = 0; i < ms.weights.size() && mixed.empty(); ++i)
    if (ms.weights[i].size() != 1) mixed = "a fused group of layer " + std::to_string(i / kFusedPerLayer);
  return llm::persistent_refusal(cfg_, source_, ms.name, any_quant_ ? "quantized projections" : "", mixed,
                                 kv_dtype_ == KvDtype::FP8, fused_);
}

void CudaEngine::set_persistent(bool on) {
  if (!on) {
    persistent_ = false;
    return;
  }
  if (const std::string why = persistent_refusal(*cur_); !why.empty()) fail(why);
  const char* fault = std::getenv("LLM_PERSISTENT_FAULT");
  const char* timeout_ms = std::getenv("LLM_PERSISTENT_TIMEOUT_MS");
  persistent_fault_ = fault ? std::atoi(fault) : 0;
  const char* all_forms = std::getenv("LLM_PERSISTENT_ALL_FORMS");
  persistent_all_forms_ = all_forms ? std::atoi(all_forms) : 0;
  persistent_timeout_ns_ = timeout_ms ? 1000000ull * std::strtoull(timeout_ms, nullptr, 10) : 0;
  if (!d_sync_) {
    const auto& c = cfg_;
    const size_t words = persistent_decode_sync_words(c.n_layers, c.n_heads);
    d_sync_ = arena_.alloc<unsigned>(words);
    CUDA_CHECK(cudaMemsetAsync(d_sync_, 0, words * sizeof(unsigned), stream_.s));
    if (const char* e = std::getenv("LLM_PERSISTENT_BLOCKS")) persistent_max_blocks_ = std::atoi(e);
    // The grid depends on the shape only; the scratch is sized for it.
    pplan_ = persistent_decode_plan(persistent_shape(), persistent_max_blocks_);
    d_attn_partial_ = arena_.alloc<float>(persistent_decode_scratch_floats(c.n_heads, c.head_dim, pplan_.grid));
    d_pprof_ = arena_.alloc<unsigned long long>(size_t(pplan_.grid) * kPersistentParts);
    CUDA_CHECK(cudaMemsetAsync(d_pprof_, 0, size_t(pplan_.grid) * kPersistentParts * 8, stream_.s));
    persistent_err_.alloc_mapped(sizeof(unsigned));
    *static_cast<unsigned*>(persistent_err_.p) = 0;
  }
  persistent_ = true;
}

PersistentDecodeArgs CudaEngine::persistent_shape() const {
  const auto& c = cfg_;
  PersistentDecodeArgs a;
  a.n_layers = c.n_layers;
  a.dim = c.dim;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.hidden = c.hidden_dim;
  a.vocab = c.vocab_size;
  a.ctx = ctx_;
  a.norm_eps = c.norm_eps;
  return a;
}

const PersistentDecodeArgs& CudaEngine::persistent_args(MappingState& ms) {
  if (ms.persistent_layers) return ms.persistent;
  const size_t per_layer = size_t(kFusedPerLayer);
  std::vector<PersistentLayer> host(layers_.size());
  unsigned forms = 0;
  auto matrix = [&](const DecodeWeight& w) {  // one piece: persistent_refusal said so
    if (!w[0].quant) return persistent_matrix_bf16(w[0].bf16.data, w[0].bf16.ld);
    const PersistentMatrix m = persistent_matrix(w[0].q);
    forms |= 1u << m.form;
    return m;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DecodeWeight* w = &ms.weights[l * per_layer];
    PersistentLayer& p = host[l];
    p.attn_norm = layers_[l].attn_norm;
    p.ffn_norm = layers_[l].ffn_norm;
    p.wqkv = matrix(w[kFQkv]);
    p.wo = matrix(w[kFO]);
    p.wgu = matrix(w[kFGateUp]);
    p.wdown = matrix(w[kFDown]);
    p.k_cache = layers_[l].k_cache;
    p.v_cache = layers_[l].v_cache;
  }
  CUDA_CHECK(cudaMalloc(&ms.persistent_layers, host.size() * sizeof(PersistentLayer)));
  CUDA_CHECK(cudaMemcpy(ms.persistent_layers, host.data(), host.size() * sizeof(PersistentLayer),
                        cudaMemcpyHostToDevice));
  PersistentDecodeArgs& a = ms.persistent;
  a = persistent_shape();
  a.pair_rows = ms.mapping && persistent_pair_rows(ms.mapping->name) == 1;
  a.layers = ms.persistent_layers;
  a.embedding = embedding_;
  a.final_norm = final_norm_;
  a.head = matrix(ms.weights.back());
  a.quant_forms = forms;
  a.dp4a = ms.qkind == QuantGemvKind::WarpDp4a;
  a.inv_freq = inv_freq_;
  a.step = d_step_;
  a.x = x_;
  a.q = q_;
  a.att = att_;
  a.hb = hb_;
  a.logits = logits_;
  a.attn_partial = d_attn_partial_;
  a.sync = d_sync_;
  a.err_host = static_cast<unsigned*>(persistent_err_.dev);
  return a;
}

void CudaEngine::decode_persistent(MappingState& ms) {
  PersistentDecodeArgs a = persistent_args(ms);  // a copy: the per-step fields below
  a.fault = persistent_fault_;
  a.all_forms = persistent_all_forms_;
  if (persistent_timeout_ns_ > 0) a.timeout_ns = persistent_timeout_ns_;
  if (ring_count_ < kSampleRing) {  // a free slot: the greedy sample of these logits, in the kernel
    fused_slot_ = (ring_head_ + ring_count_) % kSampleRing;
    fused_pos_ = logits_pos_;
    a.sample_vocab = sample_vocab_;
    a.argmax_out = static_cast<int*>(sampled_ring_.dev) + fused_slot_;
    a.next_step = d_step_;
  }
  cudaStream_t s = stream_.s;
  if (profiling_) {
    spin_device(kLaunchCoverNs, s);  // the launch below falls inside it, not between the kernel's events
    probe_->start(s);
  }
  PersistentDecodeArgs timed = a;
  if (profiling_) timed.argmax_out = timed.next_step = nullptr;  // the step runs again below: its input stays
  persistent_decode_launch(timed, pplan_, s);
  persistent_pending_ = true;
  if (!profiling_) return;
  // Profiled: the step's time is the timed kernel's above; the split comes from the profiling build of the kernel
  // (its cycle accounting), run on the same step again right after. A step is idempotent (the same KV row, buffers,
  // logits and sampled id written again), and the profiling build runs a few percent slower on the small models, so
  // its own time would overstate the step.
  probe_->end_region(DecodeProfile::kOther, s);
  a.prof = d_pprof_;
  persistent_decode_launch(a, pplan_, s);
  StepProbe& p = *probe_;
  CUDA_CHECK(cudaStreamSynchronize(s));
  check_persistent_error();
  float kernel_ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&kernel_ms, p.events[0], p.events[1]));
  const size_t n = size_t(pplan_.grid) * kPersistentParts;
  std::vector<unsigned long long> cycles(n);
  CUDA_CHECK(cudaMemcpy(cycles.data(), d_pprof_, n * 8, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemset(d_pprof_, 0, n * 8));
  // The timed kernel's time split by the profiling kernel's cycles per part (every block counts from its start to its
  // end).
  static const int to_part[kPersistentParts] = {DecodeProfile::kWait, DecodeProfile::kNorm,  DecodeProfile::kQKV,
                                                DecodeProfile::kAttention, DecodeProfile::kO,
                                                DecodeProfile::kGateUp, DecodeProfile::kDown, DecodeProfile::kHead,
                                                DecodeProfile::kOther};
  double per_part[kPersistentParts] = {}, total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    per_part[i % kPersistentParts] += double(cycles[i]);
    total += double(cycles[i]);
  }
  for (int q = 0; q < kPersistentParts; ++q)
    profile_.ms[to_part[q]] += total > 0 ? double(kernel_ms) * per_part[q] / total : 0.0;
  profile_.total_ms += kernel_ms;
  profile_.steps++;
}

// Reads the error code a failed persistent step writes into mapped host memory (a step queued ahead may still be
// running; a failed step leaves the device word set, so the steps behind it leave at once without writing).
void CudaEngine::check_persistent_error() {
  if (!persistent_pending_) return;
  unsigned* err = static_cast<unsigned*>(persistent_err_.p);
  if (*err == 0) return;
  const std::string why = persistent_decode_error_text(*err);
  // Blocks that left early never reset the counters: zero them so the next step starts clean. Samples still in flight
  // belong to the failed run: dropped.
  CUDA_CHECK(cudaMemsetAsync(d_sync_, 0, persistent_decode_sync_words(cfg_.n_layers, cfg_.n_heads) * 4,
                             stream_.s));
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  *err = 0;  // after the sync: no copy is in flight to set it again
  ring_head_ = ring_count_ = 0;
  fused_slot_ = -1;
  fail(why);
}

void CudaEngine::set_profiling(bool on) {
  profiling_ = on;
  // Graph path: the kernel timeline of graph replays when CUPTI runs here; else un-graphed steps timed by events.
  if (!on) {
    if (timeline_) KernelTrace::instance().stop();
    timeline_ = false;
  } else if (use_graph_ && !timeline_ && timeline_refusal_.empty()) {
    std::string why;
    timeline_ = KernelTrace::instance().start(&why);
    if (!timeline_) {
      timeline_refusal_ = why;
      std::fprintf(stderr, "cuda: kernel timeline unavailable (%s): profiling un-graphed steps with CUDA events\n",
                   why.c_str());
    }
  }
  if (!on || probe_) return;
  auto probe = std::make_unique<StepProbe>();
  const size_t n = layers_.size() * 12 + 4;  // region boundaries of one step (see enqueue_decode_step)
  probe->events.assign(n, nullptr);
  for (auto& e : probe->events) CUDA_CHECK(cudaEventCreate(&e));
  probe_ = std::move(probe);
}

void CudaEngine::accumulate_profile() {
  StepProbe& p = *probe_;
  CUDA_CHECK(cudaEventSynchronize(p.events[p.used - 1]));
  for (size_t i = 0; i + 1 < p.used; ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, p.events[i], p.events[i + 1]));
    profile_.ms[p.part[i]] += ms;
  }
  float total = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&total, p.events[0], p.events[p.used - 1]));
  profile_.total_ms += total;
  profile_.steps++;
}

// --- the KV cache ---------------------------------------------------------------------------------------------------

double CudaEngine::kv_bytes(int ctx) const {
  const auto& c = cfg_;
  if (kv_dtype_ == KvDtype::FP8)
    return double(c.n_layers) * double(fp8_kv_layer_bytes(ctx, c.n_kv_heads, c.head_dim, kKvFp8Block));
  return 2.0 * c.n_layers * double(ctx) * double(c.kv_dim()) * 2.0;
}

void CudaEngine::store_kv(const DevLayer& L, float* q, float* k, const float* v, const int* d_pos0, int n,
                          cudaStream_t s) {
  const auto& c = cfg_;
  if (kv_dtype_ == KvDtype::FP8) {  // one launch: q rotated in place, k rotated into the FP8 cache (k left as it was)
    rope_kv_store_fp8(q, k, v, inv_freq_, d_pos0, n, c.n_heads, c.n_kv_heads, c.head_dim, kKvFp8Block, ctx_, L.fp8,
                      s);
  } else {
    rope_kv_store(q, k, v, inv_freq_, d_pos0, n, c.n_heads, c.n_kv_heads, c.head_dim, L.k_cache, L.v_cache, s);
  }
}

// --- prefill -----------------------------------------------------------------------------------------------------

// y[n, N] (FP32, row-major) = x[n, K] (BF16, row-major) W[N, K]^T + beta * y. In cuBLAS's column-major terms:
// y^T [N, n] = op_T(W viewed as [K, N]) * x^T [K, n].
void CudaEngine::gemm(const DevMatrix& w, const uint16_t* x, int n, float* y, float beta) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(blas_.h, CUBLAS_OP_T, CUBLAS_OP_N, w.N, n, w.K, &alpha, w.data, CUDA_R_16BF, w.K, x,
                            CUDA_R_16BF, w.K, &beta, y, CUDA_R_32F, w.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// One batched pass over c tokens already in d_prefill_[1..c] at positions pos0 .. pos0 + c - 1.
void CudaEngine::prefill_chunk(int c, int pos0) {
  const auto& m = cfg_;
  cudaStream_t s = stream_.s;
  const int* d_pos0 = d_prefill_;
  embed_lookup(embedding_, d_prefill_ + 1, c, m.dim, px_, s);
  for (const DevLayer& L : layers_) {
    rmsnorm_bf16(px_, L.attn_norm, pbf_, c, m.dim, m.norm_eps, s);
    gemm(L.w[kWq], pbf_, c, pq_, 0.0f);
    gemm(L.w[kWk], pbf_, c, pk_, 0.0f);
    gemm(L.w[kWv], pbf_, c, pv_, 0.0f);
    store_kv(L, pq_, pk_, pv_, d_pos0, c, s);
    if (kv_dtype_ == KvDtype::FP8)
      attention_prefill_fp8(pq_, L.fp8.k, L.fp8.v, L.fp8.k_scale, L.fp8.v_scale, pos0, c, m.n_heads, m.n_kv_heads,
                            m.head_dim, patt_, s);
    else
      attention_prefill(pq_, L.k_cache, L.v_cache, pos0, c, m.n_heads, m.n_kv_heads, m.head_dim, patt_, s);
    convert_f32_to_bf16(patt_, pbf_, size_t(c) * size_t(m.q_dim()), s);
    gemm(L.w[kWo], pbf_, c, px_, 1.0f);  // residual through beta = 1
    rmsnorm_bf16(px_, L.ffn_norm, pbf_, c, m.dim, m.norm_eps, s);
    gemm(L.gate_up, pbf_, c, pgate_up_, 0.0f);  // one GEMM for gate|up: rows [gate_t | up_t]
    swiglu_rows_bf16(pgate_up_, pbf_, c, m.hidden_dim, s);
    gemm(L.w[kDown], pbf_, c, px_, 1.0f);
  }
  CUDA_CHECK_LAUNCH("a prefill layer");
}

void CudaEngine::prefill(const int* tokens, int n, int pos) {
  if (n <= 0) fail("cuda backend: prefill needs at least one token, found ", n);
  if (pos < 0 || int64_t(pos) + n > ctx_)
    fail("cuda backend: prefill of ", n, " tokens at position ", pos, " exceeds the context of ", ctx_);
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocab_size)
      fail("cuda backend: prompt token ", i, " = ", tokens[i], " outside the vocabulary of ", cfg_.vocab_size);
  int* io = static_cast<int*>(host_io_.p) + 3;
  int last = 0;
  for (int t0 = 0; t0 < n; t0 += chunk_) {
    const int c = std::min(chunk_, n - t0);
    // The previous chunk's copy has read io (it ran after the chunk before it: one chunk stays queued ahead).
    CUDA_CHECK(cudaEventSynchronize(prefill_copied_.e));
    io[0] = pos + t0;
    std::copy(tokens + t0, tokens + t0 + c, io + 1);
    CUDA_CHECK(cudaMemcpyAsync(d_prefill_, io, size_t(1 + c) * sizeof(int), cudaMemcpyHostToDevice, stream_.s));
    CUDA_CHECK(cudaEventRecord(prefill_copied_.e, stream_.s));
    prefill_chunk(c, pos + t0);
    last = c - 1;
  }
  // Only the last token's logits are wanted: its row through the final norm and the head (current mapping).
  rmsnorm(px_ + size_t(last) * size_t(cfg_.dim), final_norm_, xb_, 1, cfg_.dim, cfg_.norm_eps, stream_.s);
  launch_gemv(*cur_, cur_->weights.back(), xb_, logits_, false);
  CUDA_CHECK_LAUNCH("the final norm and head of prefill");
  logits_pos_ = pos + n - 1;
  step_sampled_ = false;
  fused_slot_ = -1;
}

// --- sampling and logits -----------------------------------------------------------------------------------------

int CudaEngine::sample(const SamplerParams& p, uint64_t step) {
  drop_sampled();  // anything a stopped loop left in flight
  sample_async(p, step);
  return wait_sampled();
}

void CudaEngine::sample_async(const SamplerParams& p, uint64_t step) {
  if (ring_count_ == kSampleRing) fail("cuda backend: ", kSampleRing, " samples already in flight (wait_sampled first)");
  const float u = rng_unit(p.seed, kSamplerStream, step);
  // The id also goes to d_step_ with the position after the current logits' token: the next step's {pos, token}.
  sampled_pos_ = logits_pos_ + 1;
  const int slot = (ring_head_ + ring_count_) % kSampleRing;
  // Greedy by the sample kernel's rule (kernels/ops/sampling.cu: T not > 0, or top_k 1), of logits whose persistent step
  // sampled them into this slot: nothing to launch.
  const bool greedy = !(p.temperature > 0.0f) || p.top_k == 1;
  const bool in_kernel = greedy && fused_slot_ == slot && fused_pos_ == logits_pos_;
  fused_slot_ = -1;
  sample_timed_[slot] = time_next_sample_ && !in_kernel;  // in the kernel: timed with it
  time_next_sample_ = false;
  if (!in_kernel && sample_timed_[slot] && timeline_ && !persistent_) {
    // The graph path profiled by the kernel timeline: the sample kernel timed the same way (its GPU start to end),
    // not by events around it (which add their own microseconds: 2026-12-04, stories260K's budget read 120%).
    sample_timed_[slot] = false;
    KernelTrace& trace = KernelTrace::instance();
    CUDA_CHECK(cudaStreamSynchronize(stream_.s));
    trace.take(nullptr);  // the step before: its own pass took its records
    sample_device(logits_, sample_vocab_, p.temperature, p.top_k, p.top_p, u,
                  static_cast<int*>(sampled_ring_.dev) + slot, sample_scratch_, stream_.s, d_step_, sampled_pos_);
    CUDA_CHECK_LAUNCH("sample_device");
    CUDA_CHECK(cudaStreamSynchronize(stream_.s));
    uint64_t dropped = 0;
    const std::vector<TraceKernel> records = trace.take(&dropped);
    if (dropped || records.size() != 1 || records[0].end_ns <= records[0].start_ns)
      fail("cuda backend: the kernel timeline of one sample holds ", records.size(), " kernel records (", dropped,
           " dropped), not 1 timed");
    const double ms = double(records[0].end_ns - records[0].start_ns) * 1e-6;
    profile_.ms[DecodeProfile::kOther] += ms;
    profile_.total_ms += ms;
  } else if (!in_kernel) {
    if (sample_timed_[slot]) {
      spin_device(kLaunchCoverNs, stream_.s);  // the launch below falls inside it, not between the events
      CUDA_CHECK(cudaEventRecord(sample_t0_[slot].e, stream_.s));
    }
    sample_device(logits_, sample_vocab_, p.temperature, p.top_k, p.top_p, u,
                  static_cast<int*>(sampled_ring_.dev) + slot, sample_scratch_, stream_.s, d_step_, sampled_pos_);
    CUDA_CHECK_LAUNCH("sample_device");
    if (sample_timed_[slot]) CUDA_CHECK(cudaEventRecord(sample_t1_[slot].e, stream_.s));
  }
  step_sampled_ = true;
  CUDA_CHECK(cudaEventRecord(sampled_ev_[slot].e, stream_.s));
  sampled_step_[slot] = step;
  ++ring_count_;
}

int CudaEngine::wait_sampled() {
  if (ring_count_ == 0) fail("cuda backend: wait_sampled with no sample started");
  const int slot = ring_head_;
  CUDA_CHECK(cudaEventSynchronize(sampled_ev_[slot].e));
  ring_head_ = (ring_head_ + 1) % kSampleRing;
  --ring_count_;
  const int id = static_cast<int*>(sampled_ring_.p)[slot];
  const uint64_t step = sampled_step_[slot];
  if (sample_timed_[slot] && profiling_) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, sample_t0_[slot].e, sample_t1_[slot].e));
    profile_.ms[DecodeProfile::kOther] += ms;
    profile_.total_ms += ms;
  }
  check_persistent_error();  // a failed persistent step: its error, not a token from its logits
  // The same 4 bytes carry the non-finite flag: NaN or Inf logits stop the run (never a token from garbage). What is
  // still in flight came from them: dropped.
  if (id == kSampleNonFinite || id < 0 || id >= sample_vocab_) {
    drop_sampled();
    if (id == kSampleNonFinite) fail_non_finite_logits(step);
    fail("cuda backend: step ", step, ": sampling returned id ", id, " outside [0, ", sample_vocab_, ")");
  }
  return id;
}

void CudaEngine::drop_sampled() {
  if (ring_count_ == 0) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  ring_head_ = ring_count_ = 0;
  fused_slot_ = -1;
  check_persistent_error();
}

std::vector<float> CudaEngine::logits() {
  std::vector<float> out(size_t(cfg_.vocab_size));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_, out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.s));
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  check_persistent_error();
  return out;
}

}  // namespace

// --- public ------------------------------------------------------------------------------------------------------

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls do not report it
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return n > 0 ? "" : "cudaGetDeviceCount found no device";
}

bool cuda_device_available() { return cuda_unavailable_reason().empty(); }

std::unique_ptr<CudaBackend> make_cuda_engine(const Model& model, const BackendOptions& opt) {
  // The KV cache is BF16 or FP8 here: F32 is refused by name.
  if (const std::string why = kv_dtype_refusal(opt.kv_dtype, {"cuda", ""}); !why.empty()) fail(why);
  return std::make_unique<CudaEngine>(model, opt);
}

std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& opt) {
  return make_cuda_engine(model, opt);
}

CudaBackend& as_cuda_backend(Backend& backend) {
  auto* c = dynamic_cast<CudaBackend*>(&backend);
  if (!c) fail("backend '", backend.name(), "' is not the CUDA engine (no GEMV mapping or graph controls)");
  return *c;
}

}  // namespace llm
