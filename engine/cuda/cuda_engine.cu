// CudaEngine: the CUDA engine, composed of rooms of one concern each (engine/cuda/):
//   device_model   the weights on the device (BF16 row-major, norms, RoPE frequencies) and their upload
//   memory_plan    what must fit before anything is allocated; the context cap
//   gemv_mappings  each GEMV mapping's prepacked copy of the decode matrices, and one matrix's launch
//   kv_cache       the KV cache, BF16 or FP8 behind one interface (store with RoPE, decode and prefill attention)
//   activations    every buffer a forward pass writes, allocated once
//   graph_path / persistent_path   the two ways a decode step runs (decode_path.h)
//   sample_ring    sampled ids in flight for the run-ahead decode loop
//   step_profiler  the hook profiled steps call; measure/step_profiler.cu implements it (CUPTI, events)
// What stays here: the forward pass of one token (forward_token, read top to bottom like llama2.c's forward()), the
// batched prefill pass (cuBLAS GEMMs), and the Backend / CudaBackend operations that sequence them.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "engine/cuda_quant.h"  // quant_matrix_device_bytes: the memory plan's count of the planes
#include "engine/cuda/activations.h"
#include "engine/cuda/device_model.h"
#include "engine/cuda/gemv_mappings.h"
#include "engine/cuda/graph_path.h"
#include "engine/cuda/kv_cache.h"
#include "engine/kv_cache.h"  // kv_exact_rewind_end: the FP8 block rule the CPU caches follow
#include "engine/cuda/persistent_path.h"
#include "engine/cuda/resources.h"
#include "engine/cuda/sample_ring.h"
#include "engine/cuda/step_profiler.h"
#include "engine/cuda/tp_rank.h"
#include "engine/cuda_backend.h"
#include "engine/gemv_choice.h"  // gemv_plan, default_gemv_name
#include "engine/memory_plan.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_batched.h"  // gemv_batched_launch, kGemvMaxBatch
#include "kernels/ops/argmax_rows.h"
#include "kernels/ops/ops.h"
#include "kernels/quant/gemv_quant_batch.h"

namespace llm {

namespace {

class CudaEngine final : public CudaRankEngine {
 public:
  // role: a tensor-parallel rank's (engine/cuda/tp_rank.h); the default is the whole model on one GPU.
  CudaEngine(const Model& model, const BackendOptions& opt, CudaRankRole role = {});
  ~CudaEngine() override;

  std::string name() const override { return "cuda"; }
  int ctx_size() const override { return ctx_; }
  void prefill(const int* tokens, int n, int pos) override;
  // Speculative decoding's verify pass (engine/backend.h): a prefill pass over the n tokens, then every row through
  // the final norm and the decode head GEMV. BF16 KV only (the FP8 cache's open block would need re-encoding on
  // rewind); rewind is then nothing to undo (attention reads positions up to its own; the next write overwrites).
  bool supports_verify() const override { return !tp(); }
  int exact_rewind_end(int pos) const override {  // FP8: the end of pos's block, as the CPU reference's cache
    return kv_exact_rewind_end(kv_->fp8() ? KvDtype::FP8 : KvDtype::BF16, pos);
  }
  int sample_vocab() const override { return sample_vocab_; }
  std::vector<float> verify(const int* tokens, int n, int pos) override;
  std::vector<int> verify_argmax(const int* tokens, int n, int pos, int vocab_limit,
                                 std::vector<float>* margins = nullptr) override;
  void rewind(int pos) override;
  void prepare_verify(int max_tokens) override;
  int captured_verify_lengths() const override { return int(verify_graphs_.size()); }
  bool verify_in_decode_order() const override { return decode_order_verify(); }
  DraftCosts verify_costs() const override {
    return decode_order_verify() ? decode_order_draft_costs(double(cur_->bytes_read)) : DraftCosts{};
  }
  void decode(int token, int pos) override;
  int sample(const SamplerParams& p, uint64_t step) override;
  std::vector<float> logits() override;
  bool runs_ahead() const override { return tuning_.run_ahead; }
  void sample_async(const SamplerParams& p, uint64_t step) override;
  void decode_sampled(int pos) override;
  int wait_sampled() override;
  void drop_sampled() override;

  void set_gemv(const std::string& name) override;
  std::string gemv() const override { return cur_->plan.name; }
  void release_other_gemvs() override {
    drop_verify_graphs();  // a captured verify may read another mapping's planes (planes_state)
    mappings_->release_others(cur_);
  }
  void set_persistent(bool on) override;
  bool persistent() const override { return persistent_; }
  int persistent_grid() const override { return persistent_path_->grid(); }
  int kernels_per_step() const override;
  void warm_up();
  std::vector<std::function<void()>> warm_up_plan() override;
  RankPick greedy_pick(int limit) override;
  void prime_prefill(int c) override;
  void set_tuning(const EngineTuning& t) override;
  void set_profiler(std::shared_ptr<StepProfiler> profiler) override {
    if (profiling_ && !profiler) set_profiling(false);  // a profiled step never runs without its hook
    profiler_ = std::move(profiler);
  }
  void set_profiling(bool on) override;
  DecodeProfile profile() const override { return profile_; }
  void reset_profile() override { profile_ = DecodeProfile{}; }
  size_t gemv_bytes_per_token() const override { return cur_ ? cur_->bytes_read : model_.matrix_bytes(); }
  void set_prefill_chunk(int n) override;
  int max_prefill_chunk() const override { return max_chunk_; }
  size_t device_bytes() const override { return arena_.bytes + mappings_->device_bytes(); }

 private:
  bool tp() const { return role_.n_ranks > 1; }
  // After o and down on a tensor-parallel rank: rank 0's GEMV adds its partial to the residual, the others' write
  // theirs, and the all-reduce leaves x + every partial on every rank (engine/cuda/tp_rank.h).
  bool adds_residual() const { return role_.rank == 0; }
  void reduce(float* x, size_t n) {
    if (tp()) role_.all_reduce(x, n, stream_.s);
  }
  // The decode step's forward pass; tok: the same kernels for tok.n tokens side by side in the activations' token
  // slabs (a decode-order verify: verify_steps).
  void forward_token(const MappingState& ms, ProfileMarks* marks, TokenAxis tok = {});
  // A verify of n tokens already in prefill_ids as the decode step's kernels over a token axis, kTokenSlabs tokens
  // per pass: every row is the decode step's logits bit for bit (so greedy speculation is plain greedy). Logits into
  // verify_logits_.
  void verify_steps(int n);
  // Where verify_steps runs (EngineTuning::verify_order, VerifyOrder): the graph path (decode's arithmetic is its kernels), the
  // BF16 cache, and every decode matrix on a form with a token axis (the quantized warp forms, warp-r2). Else the
  // verify is a prefill pass (its rows match decoding up to summation order).
  bool decode_order_verify() const;
  // Which rows a pass's matrices read (pass_form): BF16-rounded rows (kBf16: a prompt or a verify without
  // EngineTuning::exact_verify), the decode step's activations for every matrix (kDecode: a verify under exact_verify),
  // or for the matrices kept quantized only, BF16 copies keeping cuBLAS (kDecodeQuant: a prompt under exact_verify).
  enum class PassRows { kBf16, kDecode, kDecodeQuant };
  // kDecodeQuant on an FP32-x form: prompts of at most this many tokens take the batch-k GEMV's FP32 form (pass_form).
  static constexpr int kPromptF32Max = 8;
  void prefill_chunk(int c, int pos0, bool device_pos = false, PassRows rows = PassRows::kBf16);
  void verify_pass(int n, int pos, bool device_pos);
  // EngineTuning::exact_verify resolved: kAuto is on where matrices are kept quantized (a prefill scratch exists).
  bool exact_verify() const {
    return tuning_.exact_verify == ExactVerify::kOn ||
           (tuning_.exact_verify == ExactVerify::kAuto && model_.prefill_scratch != nullptr);
  }
  void verify_queue(const int* tokens, int n, int pos);
  void verify_finish(int n, int pos);
  std::unique_ptr<GraphExecHolder> capture_verify(int n);
  void drop_verify_graphs();
  void gemm(const DevMatrix& w, const uint16_t* x, int n, float* y, float beta);
  DevMatrix prefill_source(size_t l, FusedProj p, const DevMatrix& whole);
  // Row slice [row0, row0 + rows) of a matrix, written to y with row pitch `rows` (as gemm writes it).
  struct RowSlice {
    int row0, rows;
    float* y;
  };
  // How a matrix reads the c rows of a pass (pass_form). PassRows::kBf16: the batch-k quantized GEMV on int8 rows
  // rounded from the BF16 rows (QuantInt8Bf16), or cuBLAS on BF16 rows (a matrix kept quantized dequantized first).
  // kDecode / kDecodeQuant take the decode form's activations: int8 rows quantized from FP32 as warp-dp4a quantizes
  // its x (QuantInt8), the FP32 rows as "warp" reads them (QuantF32), the batched BF16 GEMV on FP32 rows (Bf16Batch,
  // kDecode only): the decode step's arithmetic up to summation order.
  enum class PassForm { QuantInt8Bf16, QuantInt8, QuantF32, Bf16Batch, Gemm };
  PassForm pass_form(const DevMatrix& whole, const DecodeWeight* planes, int c, PassRows rows) const;
  PassForm pass_form(size_t l, FusedProj p, const DevMatrix& whole, int c, PassRows rows);
  void pass_input(PassForm f, const float* x, int c, int k);
  void prefill_matmul(size_t l, FusedProj p, const DevMatrix& whole, int c, PassForm f, const float* x32,
                      std::initializer_list<RowSlice> slices, float beta);
  void norm_input(PassForm f, const float* x, const float* w, int c);
  bool batchable(const DecodeWeight& w, int c) const;
  void batch_rows(const DecodeWeight& w, const RowSlice& slice, const float* x32, int c, bool accumulate);
  void batch_rows(const DecodeWeight& w, std::initializer_list<RowSlice> slices, const float* x32, int c,
                  bool accumulate);
  void batch_launch(const PieceWeight& piece, int64_t lo, int64_t rows, float* y, int64_t ldy, const float* x32, int c,
                    bool accumulate, const QuantBatchSplit* split);
  void bf16_batch_rows(const DevMatrix& whole, const RowSlice& slice, const float* x32, int c, bool accumulate);
  void check_tokens(const char* what, const int* tokens, int n, int pos) const;
  void upload_tokens(const int* tokens, int n, int pos);
  const MappingState& planes_state();
  void enqueue_step(int pos);  // one decode step of the {pos, token} in the device step word
  void check_persistent_error() { persistent_path_->check_error(); }
  DecodePathImpl& path() { return persistent_ ? static_cast<DecodePathImpl&>(*persistent_path_) : *graph_; }

  ModelConfig cfg_;
  std::string source_;    // the model, for messages
  CudaRankRole role_;     // one rank of a tensor-parallel run, or the whole model (n_ranks 1)
  int embed_rows_ = 0;    // token ids the embedding holds: cfg_.vocab_size, or the whole vocabulary on a rank
  int* pick_ = nullptr;   // [1]: greedy_pick's id
  int ctx_ = 0;
  int sample_vocab_ = 0;  // sample() picks ids in [0, sample_vocab_): the tokenizer's size when the head is padded
  int max_chunk_ = 0, chunk_ = 0;
  bool tied_ = false, dequantize_ = false;
  std::string default_gemv_;  // default_gemv_name(model): what "" selects
  EngineTuning tuning_;
  bool persistent_ = false, profiling_ = false;
  bool time_next_sample_ = false;  // the last decode step was profiled: so is the sample of its logits
  int logits_pos_ = -1;            // position of the token whose logits are current (-1: none yet)
  int sampled_pos_ = -1;           // where the id of the sample started last goes (its kernel wrote the step word)
  bool step_sampled_ = false;      // a sample started since the last decode or prefill: decode_sampled may run

  // Declared first so they are destroyed last (after everything that uses the stream).
  StreamHolder stream_;
  DeviceArena arena_;
  DeviceModel model_;
  PinnedBuffer host_io_;        // ints: [0] pos, [1] token (decode); [3] pos0, [4..] tokens (prefill)
  EventHolder step_copied_;     // the decode {pos, token} copy has read host_io_
  EventHolder prefill_copied_;  // the prefill token copy has read host_io_
  SampleRing ring_;
  CublasHolder blas_;           // prefill GEMMs
  GemvContextHolder gctx_;
  std::unique_ptr<DeviceKvCache> kv_;
  Activations act_;
  std::shared_ptr<StepProfiler> profiler_;
  std::unique_ptr<GemvMappings> mappings_;  // declared after gctx_: destroyed before it
  std::unique_ptr<GraphPath> graph_;
  std::unique_ptr<PersistentPath> persistent_path_;
  MappingState* cur_ = nullptr;
  float* verify_logits_ = nullptr;  // [verify_rows_, vocab]: verify's logits of every row (allocated on first use)
  int* verify_ids_ = nullptr;        // [verify_rows_]: verify_argmax's ids
  float* verify_margins_ = nullptr;  // [verify_rows_]: their top-2 margins (when asked)
  int verify_rows_ = 0;
  // EngineTuning::verify_graph: one captured verify pass per n, for the mapping and batch threshold they were
  // captured with; verify_eager_: the n that ran once eagerly.
  std::map<int, std::unique_ptr<GraphExecHolder>> verify_graphs_;
  std::set<int> verify_eager_;
  const MappingState* verify_graph_ms_ = nullptr;
  // quant_batch_rows, bf16_batch_rows, exact_verify, fuse_pass, batch_mma_from, decode_order_verify: what a captured
  // verify depends on.
  std::tuple<int, int, bool, bool, int, bool> verify_graph_batch_rows_{-1, -1, false, false, -1, false};
  DecodeProfile profile_;
};

// ---------------------------------------------------------------------------------------------------------------

CudaEngine::CudaEngine(const Model& model, const BackendOptions& opt, CudaRankRole role)
    : cfg_(model.config), source_(model.source), role_(std::move(role)) {
  require_cuda_device();
  cfg_.validate(model.source);
  embed_rows_ = role_.embed_rows > 0 ? role_.embed_rows : cfg_.vocab_size;
  if (tp() && opt.persistent)
    fail("--tp ", role_.n_ranks, ": the tensor-parallel ranks run the CUDA graph path; --decode persistent is not "
         "supported with --tp");
  if (tp() && !role_.all_reduce) fail("cuda backend: rank ", role_.rank, " of ", role_.n_ranks, " has no all-reduce");
  tied_ = cfg_.tied_embeddings || model.weights.head.empty();
  dequantize_ = opt.dequantize;
  tuning_ = opt.tuning;
  default_gemv_ = default_gemv_name(model, dequantize_);
  // --gemv resolved once ("" = the model's default): an unknown name, or one without a form for some weight type,
  // fails here, before any allocation. Everything after carries the plan.
  const GemvPlan plan = gemv_plan(opt.gemv, model, dequantize_);
  const KvDtype kv = opt.kv_dtype == KvDtype::FP8 ? KvDtype::FP8 : KvDtype::BF16;
  DeviceKvCache::check(cfg_, kv, model.source);

  // Memory check, before anything is allocated.
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (opt.sample_vocab < 0 || opt.sample_vocab > cfg_.vocab_size)
    fail("cuda backend: sample_vocab ", opt.sample_vocab, " outside 0..", cfg_.vocab_size);
  sample_vocab_ = opt.sample_vocab > 0 ? opt.sample_vocab : cfg_.vocab_size;
  DeviceSizes sizes;
  sizes.kv_bytes = [this, kv](int ctx) { return DeviceKvCache::bytes(cfg_, kv, ctx); };
  sizes.attention_scratch = [this](int ctx) {
    return double(attention_scratch_bytes(cfg_, ctx));
  };
  sizes.decode_slab = [this](int ctx) { return double(decode_slab_bytes(cfg_, ctx)); };
  sizes.sample_scratch = double(sample_scratch_bytes(cfg_.vocab_size));
  sizes.gemv_context = double(kCublasWorkspaceBytes) + 4.0 * double(kGemvPartialFloats);
  sizes.bf16_rowmajor_align = plan.bf16 == GemvBf16Form::None ? 0 : gemv_mapping(plan.bf16).rowmajor_align;
  sizes.quant_batch_rows = tuning_.quant_batch_rows;
  if (plan.has_quant)
    sizes.quant_matrix_bytes = [kind = plan.quant](GgmlQuantType t, int64_t n, int64_t k) {
      return quant_matrix_device_bytes(t, n, k, kind);
    };
  const MemoryPlanner planner(model, tied_, !dequantize_, kv, sizes);
  // No --ctx-size: the model's maximum up to kDefaultCudaCtxCap, then capped to what fits beside everything else
  // (choose_ctx says so on stderr).
  const int ctx_default = opt.ctx_size > 0 ? 0 : default_ctx_size(cfg_, stderr, kDefaultCudaCtxCap);
  const int ctx_guess = opt.ctx_size > 0 ? opt.ctx_size : ctx_default;
  ctx_ = planner.choose_ctx(opt.ctx_size, ctx_default, std::min(kMaxPrefillChunk, ctx_guess), free_b);
  max_chunk_ = chunk_ = std::min(kMaxPrefillChunk, ctx_);
  const MemoryPlan mem = planner.plan(ctx_, max_chunk_);
  planner.require_fit(mem, free_b, plan.name, ctx_, opt.ctx_size > 0);
  if (mem.weights + mem.prepacked >= double(size_t(1) << 30))  // a model worth a line (small test models stay quiet)
    std::fprintf(stderr, "%s\n", planner.describe(mem, plan.name, ctx_, free_b).c_str());
  if (ctx_ > cfg_.max_seq_len)
    fail("cuda backend: ctx_size ", ctx_, " exceeds the model's maximum of ", cfg_.max_seq_len, " positions");

  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
  s = stream_.s;
  step_copied_.create(cudaEventDisableTiming);
  prefill_copied_.create(cudaEventDisableTiming);
  host_io_.alloc(sizeof(int) * size_t(4 + max_chunk_));
  CUBLAS_CHECK(cublasCreate(&blas_.h));

  model_.upload(model, cfg_, tied_, dequantize_, arena_, s, embed_rows_);
  pick_ = arena_.alloc<int>(1);
  mappings_ = std::make_unique<GemvMappings>(model, model_, tied_, dequantize_, &gctx_.c, s);
  mappings_->set_fork_pieces(tuning_.fork_pieces);
  kv_ = DeviceKvCache::make(cfg_, kv, ctx_);
  kv_->allocate(arena_, s);
  act_.allocate(cfg_, ctx_, max_chunk_, tuning_.quant_batch_rows, kTokenSlabs, arena_, s);
  // cublasSetStream resets the workspace to the default pool, so the workspace is set after it.
  CUBLAS_CHECK(cublasSetStream(blas_.h, s));
  CUBLAS_CHECK(cublasSetWorkspace(blas_.h, act_.blas_workspace, kCublasWorkspaceBytes));
  gemv_context_init(&gctx_.c, s, std::max({cfg_.dim, cfg_.q_dim(), cfg_.hidden_dim}));
  gctx_.live = true;
  ring_.init({act_.logits, sample_vocab_, act_.sample_scratch, act_.step}, s);

  graph_ = std::make_unique<GraphPath>([this](const MappingState& ms, ProfileMarks* m) { forward_token(ms, m); }, s);
  persistent_path_ = std::make_unique<PersistentPath>(PersistentPath::Engine{
      cfg_, source_, ctx_, sample_vocab_, &model_, kv_.get(), &act_, mappings_.get(), &ring_, &arena_, s});
  persistent_path_->set_tuning(tuning_);
  CUDA_CHECK(cudaStreamSynchronize(s));
  cur_ = &mappings_->prepare(plan, gemv_bytes_per_token());
  if (!tp()) warm_up();  // a rank's waits for the other ranks: the driver runs the ranks' plans side by side
  if (opt.persistent) set_persistent(true);
  if (mem.weights + mem.prepacked >= double(size_t(1) << 30)) {  // what the plan said, against what the GPU now holds
    size_t free_now = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_now, &total_b));
    std::fprintf(stderr, "memory in use: %s GiB on the GPU after load (plan %s GiB without its reserve)\n",
                 gib_str(double(free_b) - double(free_now)).c_str(),
                 gib_str(mem.total() - double(kReserveBytes)).c_str());
  }
}

// Work that happens once belongs to load time, not to the first prompt: one prefill pass, two decode steps (the
// first runs eagerly and captures the current mapping's graph, the second replays it) and a greedy and a sampled
// draw load every kernel module they use (CUDA loads modules lazily), run cuBLAS's first GEMM and instantiate the
// graph. Then the cache and the logits are cleared and the engine is as construction left it.
void CudaEngine::warm_up() {
  for (const auto& call : warm_up_plan()) call();
}

std::vector<std::function<void()>> CudaEngine::warm_up_plan() {
  std::vector<std::function<void()>> plan;
  if (ctx_ < 2) return plan;
  const int tok = cfg_.bos_id >= 0 && cfg_.bos_id < embed_rows_ ? cfg_.bos_id : 0;
  // A broken model's non-finite logits stop its first real step with the step named (sample's error), not the load:
  // the warm-up's draws only load the sampling kernels, so their refusal is dropped here.
  auto draw = [this](const SamplerParams& p, uint64_t step) {
    try {
      sample(p, step);
    } catch (const Error&) {
    }
  };
  // On a tensor-parallel rank each prefill comes after its own priming call (prime_prefill: the driver runs call i on
  // every rank before call i + 1, so no rank has a pass queued while another primes); the whole model needs none.
  auto prime = [this, &plan](int n, int batch_rows) {
    if (tp())
      plan.push_back([this, n, batch_rows] {
        const int saved = tuning_.quant_batch_rows;
        tuning_.quant_batch_rows = batch_rows;
        prime_prefill(n);
        tuning_.quant_batch_rows = saved;
      });
  };
  prime(1, tuning_.quant_batch_rows);
  plan.push_back([this, tok] { prefill(&tok, 1, 0); });
  if (model_.prefill_scratch) {
    // Matrices kept quantized: the batch-k GEMV has a kernel per vector count class (dp4a: 2, 4, 8, 16; tensor cores:
    // 8, 16, 32, 64); passes of 3, 5 and 9 tokens load the others (CUDA loads each kernel at its first launch), and
    // 17 and 33 the tensor cores' two larger classes where kAuto picks them. Then the long pass's path once. (The
    // exact verify's kernels, EngineTuning::exact_verify, load at a verify's first, eager, pass of each length.)
    static_assert(kBatchMmaNever == kQuantBatchMmaMax + 1, "EngineTuning::batch_mma_from's never");
    const bool mma_classes = quant_batch_mma_from(tuning_.batch_mma_from) <= kQuantBatchMmaMax;
    for (int n : {3, 5, 9, 17, 33})
      if ((n <= kQuantBatchMax || mma_classes) &&
          n <= std::min({ctx_, chunk_, tuning_.quant_batch_rows, act_.batch_rows})) {
        prime(n, tuning_.quant_batch_rows);
        plan.push_back([this, tok, n] {
          const std::vector<int> toks(size_t(n), tok);
          prefill(toks.data(), n, 0);
        });
      }
    prime(2, 0);
    plan.push_back([this, tok] {
      const int saved = tuning_.quant_batch_rows;
      tuning_.quant_batch_rows = 0;
      const int two[2] = {tok, tok};
      prefill(two, 2, 0);
      tuning_.quant_batch_rows = saved;
    });
  }
  plan.push_back([draw] {
    SamplerParams greedy;
    greedy.temperature = 0.0f;
    draw(greedy, 0);
  });
  plan.push_back([this, tok] { decode(tok, 1); });
  plan.push_back([this, tok] { decode(tok, 1); });
  plan.push_back([draw] { draw(SamplerParams{}, 1); });
  plan.push_back([this] {
    kv_->clear(stream_.s);
    CUDA_CHECK(cudaMemsetAsync(act_.logits, 0, size_t(cfg_.vocab_size) * sizeof(float), stream_.s));
    CUDA_CHECK(cudaStreamSynchronize(stream_.s));
    logits_pos_ = -1;
    sampled_pos_ = -1;
    step_sampled_ = false;
  });
  return plan;
}

CudaEngine::~CudaEngine() {
  if (stream_.s) cudaStreamSynchronize(stream_.s);
}

// --- the forward pass of one token ---------------------------------------------------------------------------------

// Embed, then per layer: norm, q|k|v, RoPE + KV store + attention, o + residual, norm, gate|up, SwiGLU, down +
// residual; then the final norm and the head. Reads {pos, token} from the device step word, so the graph path
// captures it once and replays it at every position. marks (profiling) ends each region with its DecodeProfile part.
// With the RMSNorm fold (EngineTuning::fuse_norm, where the mapping's forms run it) no norm kernel runs: the residual
// GEMVs (o, down; the embedding for the first layer) also write g * x into xb and 1 / rms(x) into norm_inv, and the
// GEMVs reading xb (q|k|v, gate|up, the head) scale their rows by it (kernels/gemv/gemv_epilogue.h).
void CudaEngine::forward_token(const MappingState& ms, ProfileMarks* marks, TokenAxis tok) {
  const ModelConfig& c = cfg_;
  const Activations& a = act_;
  cudaStream_t s = stream_.s;
  const int* d_pos = a.step;
  const int* d_tok = a.step + 1;
  auto mark = [&](int part) {
    if (marks) marks->mark(part);
  };
  const bool fold = tuning_.fuse_norm && ms.fuses_norm && !tp();  // a rank's norms read x after the all-reduce
  // The consumers add the producers' block sums themselves (no last block on the producers' tails) where every GEMV
  // that reads a norm runs a form that can (EngineTuning::norm_sums).
  const bool sums = fold && tuning_.norm_sums && mappings_->reads_norm_sums(ms);
  // ep of a GEMV: `reads` scales its rows by norm_inv[reads] (-1: none); `writes` >= 0 makes it the producer of the
  // norm with weights norm_w into xb and norm_inv[writes].
  auto epilogue = [&](int reads, int writes, const float* norm_w) {
    GemvEpilogue ep;
    ep.tokens = tok;
    if (!fold) return ep;
    ep.eps = c.norm_eps;
    if (reads >= 0 && !sums) ep.scale = a.norm_inv + reads;
    if (reads >= 0 && sums) {
      ep.scale_sums = a.norm_partials + size_t(reads) * kGemvEpiloguePartials;
      ep.scale_count = a.norm_count + reads;
      ep.norm_n = c.dim;
    }
    if (writes >= 0) {
      ep.norm_w = norm_w;
      ep.xg = a.xb;
      ep.partials = a.norm_partials + (sums ? size_t(writes) * kGemvEpiloguePartials : 0);
      if (sums) {
        ep.count = a.norm_count + writes;
      } else {
        ep.inv = a.norm_inv + writes;
        ep.arrivals = a.norm_arrivals;
      }
    }
    return ep;
  };
  auto gemv = [&](const DecodeWeight& w, const float* x, float* y, bool acc, int part, const GemvEpilogue& ep) {
    mappings_->launch(ms, w, x, y, acc, ep);  // acc: y += W x (the residual rides on the GEMV)
    mark(part);
  };
  auto norm = [&](const float* w) {  // the unfolded RMSNorm: xb = RMSNorm(x) * w
    if (fold) return;
    rmsnorm(a.x, w, a.xb, 1, c.dim, c.norm_eps, s, tok);
    mark(DecodeProfile::kNorm);
  };
  constexpr int kAttnNorm = 0, kFfnNorm = 1;  // norm_inv slots

  const size_t n_layers = model_.layers.size();
  if (fold)
    embed_rmsnorm_fold(model_.embedding, d_tok, c.dim, model_.layers[0].attn_norm, c.norm_eps, a.x, a.xb,
                       a.norm_inv + kAttnNorm, s, sums ? a.norm_partials : nullptr, sums ? a.norm_count : nullptr,
                       tok);
  else
    embed_lookup(model_.embedding, d_tok, 1, c.dim, a.x, s, tok);
  for (size_t l = 0; l < n_layers; ++l) {
    const DevLayer& L = model_.layers[l];
    const float* next_norm = l + 1 < n_layers ? model_.layers[l + 1].attn_norm : model_.final_norm;
    norm(L.attn_norm);
    gemv(ms.layer(l, kFQkv), a.xb, a.qkv, false, DecodeProfile::kQKV, epilogue(kAttnNorm, -1, nullptr));  // q|k|v
    // RoPE on q and k, k and v into the cache, attention: one launch where the cache has it (EngineTuning::fuse_rope)
    // The split merge inside the o GEMV's x staging where its form can (EngineTuning::stage_merge): the split pass
    // leaves its partials (merge) and no merge kernel runs.
    GemvEpilogue o_ep = epilogue(-1, kFfnNorm, L.ffn_norm);
    AttnSplitParts* merge =
        tuning_.stage_merge && mappings_->takes_x_forms(ms, ms.layer(l, kFO)) ? &o_ep.merge : nullptr;
    // (Over a token axis the two launches: token t's attention reads the rows tokens before it store; the fused
    // launch is bit for bit the two.)
    if (!tuning_.fuse_rope || tok.many() ||
        !kv_->store_attend_decode(int(l), a.q, a.k, a.v, model_.inv_freq, d_pos, a.att, a.attn_scratch, s, merge)) {
      kv_->store(int(l), a.q, a.k, a.v, model_.inv_freq, d_pos, 1, s, tok);
      mark(DecodeProfile::kOther);
      kv_->attend_decode(int(l), a.q, d_pos, a.att, a.attn_scratch, s, merge, tok);
    }
    mark(DecodeProfile::kAttention);
    gemv(ms.layer(l, kFO), a.att, a.x, adds_residual(), DecodeProfile::kO, o_ep);  // x += Wo att
    reduce(a.x, size_t(c.dim));  // a tensor-parallel rank: x + every rank's partial, on every rank
    norm(L.ffn_norm);
    gemv(ms.layer(l, kFGateUp), a.xb, a.gate_up, false, DecodeProfile::kGateUp, epilogue(kFfnNorm, -1, nullptr));
    GemvEpilogue down_ep = epilogue(-1, kAttnNorm, next_norm);
    const DecodeWeight& down = ms.layer(l, kFDown);
    if (tuning_.stage_glu && c.hidden_dim <= kStageGluMaxHidden && mappings_->takes_x_forms(ms, down)) {
      down_ep.glu = a.gate_up;  // SwiGLU as the down GEMV stages x: no SwiGLU kernel, hb not written
    } else if (tuning_.fuse_swiglu_q8 && mappings_->takes_x_q8(ms, down)) {
      // Over a token axis one launch of tok.n rows, each in its slab (rows are independent: each is the decode step's).
      const int64_t pitch = tok.many() ? tok.stride / int64_t(sizeof(float)) : 0;
      quant_batch_swiglu_x(a.gate_up, tok.many() ? pitch : 2 * int64_t(c.hidden_dim), tok.n, c.hidden_dim, a.hb,
                           tok.many() ? pitch : c.hidden_dim, a.hb_q8, s, false, tok.many() ? tok.stride : 0);
      down_ep.x_q8 = a.hb_q8;  // the down GEMV copies hb's int8 form instead of quantizing hb in each block
      mark(DecodeProfile::kOther);
    } else {
      swiglu_fused(a.gate_up, a.hb, size_t(c.hidden_dim), s, tok);
      mark(DecodeProfile::kOther);
    }
    gemv(down, a.hb, a.x, adds_residual(), DecodeProfile::kDown, down_ep);  // x += Wd hb
    reduce(a.x, size_t(c.dim));
  }
  norm(model_.final_norm);
  gemv(ms.head(), a.xb, a.logits, false, DecodeProfile::kHead, epilogue(kAttnNorm, -1, nullptr));
  CUDA_CHECK_LAUNCH("the decode step");
}

// --- decode --------------------------------------------------------------------------------------------------------

void CudaEngine::decode(int token, int pos) {
  if (token < 0 || token >= embed_rows_)
    fail("cuda backend: token ", token, " outside the vocabulary of ", embed_rows_);
  if (pos < 0 || pos >= ctx_) fail("cuda backend: position ", pos, " outside the context of ", ctx_);
  int* io = static_cast<int*>(host_io_.p);
  CUDA_CHECK(cudaEventSynchronize(step_copied_.e));  // the previous step's copy has read io[0..1]
  io[0] = pos;
  io[1] = token;
  CUDA_CHECK(cudaMemcpyAsync(act_.step, io, 2 * sizeof(int), cudaMemcpyHostToDevice, stream_.s));
  CUDA_CHECK(cudaEventRecord(step_copied_.e, stream_.s));
  enqueue_step(pos);
}

void CudaEngine::decode_sampled(int pos) {
  if (pos < 0 || pos >= ctx_) fail("cuda backend: position ", pos, " outside the context of ", ctx_);
  if (!step_sampled_)
    fail("cuda backend: decode_sampled at position ", pos, " with no sample started since the last step");
  if (pos != sampled_pos_)
    fail("cuda backend: decode_sampled at position ", pos, ", but the sample started last goes to ", sampled_pos_);
  enqueue_step(pos);  // {pos, token} are on the device already: the sample kernel wrote them
}

void CudaEngine::enqueue_step(int pos) {
  logits_pos_ = pos;
  step_sampled_ = false;
  ring_.forget_in_kernel();
  time_next_sample_ = profiling_;
  if (profiling_)
    path().profile_step(*cur_, pos, *profiler_, &profile_);
  else
    path().enqueue_step(*cur_, pos);
}

void CudaEngine::set_gemv(const std::string& name) {
  // Resolved once here ("" = the model's default; an unknown name fails); the cache and the paths take the plan.
  MappingState& ms = mappings_->prepare(gemv_plan(name.empty() ? default_gemv_ : name), gemv_bytes_per_token());
  if (persistent_)
    if (const std::string why = persistent_path_->refusal(ms); !why.empty()) fail(why);
  cur_ = &ms;
}

void CudaEngine::set_persistent(bool on) {
  if (!on) {
    persistent_ = false;
    return;
  }
  if (tp())
    fail("--tp ", role_.n_ranks, ": the tensor-parallel ranks run the CUDA graph path; --decode persistent is not "
         "supported with --tp");
  if (const std::string why = persistent_path_->refusal(*cur_); !why.empty()) fail(why);
  persistent_path_->prepare(tuning_);
  persistent_ = true;
}

int CudaEngine::kernels_per_step() const {
  if (!cur_) return 0;
  return persistent_ ? persistent_path_->kernels_per_step(*cur_) : graph_->kernels_per_step(*cur_);
}

void CudaEngine::set_tuning(const EngineTuning& t) {
  if (t.fuse_norm != tuning_.fuse_norm || t.fuse_swiglu_q8 != tuning_.fuse_swiglu_q8 ||
      t.norm_sums != tuning_.norm_sums || t.fuse_rope != tuning_.fuse_rope || t.stage_glu != tuning_.stage_glu ||
      t.stage_merge != tuning_.stage_merge) {
    mappings_->drop_graphs();  // the forward pass launches other kernels
    drop_verify_graphs();      // a decode-order verify's too
  }
  mappings_->set_fork_pieces(t.fork_pieces);
  if (t.split_pass_attention != tuning_.split_pass_attention) drop_verify_graphs();  // they launch other kernels
  tuning_ = t;
  persistent_path_->set_tuning(t);
}

void CudaEngine::set_profiling(bool on) {
  if (on && !profiler_)
    fail("cuda backend: profiling needs a profiler hook (measure/step_profiler.h: install_step_profiler)");
  profiling_ = on;
  if (!profiler_) return;
  if (on)
    profiler_->start();
  else
    profiler_->stop();
}

// --- prefill -------------------------------------------------------------------------------------------------------

// y[n, N] (FP32, row-major) = x[n, K] (BF16, row-major) W[N, K]^T + beta * y. In cuBLAS's column-major terms:
// y^T [N, n] = op_T(W viewed as [K, N]) * x^T [K, n].
void CudaEngine::gemm(const DevMatrix& w, const uint16_t* x, int n, float* y, float beta) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(blas_.h, CUBLAS_OP_T, CUBLAS_OP_N, w.N, n, w.K, &alpha, w.data, CUDA_R_16BF, w.K, x,
                            CUDA_R_16BF, w.K, &beta, y, CUDA_R_32F, w.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The quantized planes prefill dequantizes from: the current mapping's, unless its form reads GGUF's blocks as stored
// ("as-stored", a measurement control), then those of "warp" (prepared once, kept by the mapping cache).
const MappingState& CudaEngine::planes_state() {
  if (cur_->plan.has_quant && cur_->plan.quant != QuantGemvKind::AsStored) return *cur_;
  return mappings_->prepare(gemv_plan("warp"), gemv_bytes_per_token());
}

// Prefill's BF16 source of decode matrix p of layer l: its row-major copy when it has one; otherwise (every member
// kept quantized: engine/memory_plan.h) its quantized pieces dequantized into the prefill scratch, each at its rows.
// One scratch for every matrix: the stream runs each GEMM before the next matrix overwrites it.
DevMatrix CudaEngine::prefill_source(size_t l, FusedProj p, const DevMatrix& whole) {
  if (whole.data) return whole;
  if (size_t(whole.N) * size_t(whole.K) > model_.prefill_scratch_elems)
    fail("cuda backend: prefill scratch of ", model_.prefill_scratch_elems, " elements for a [", whole.N, ", ",
         whole.K, "] matrix kept quantized");
  for (const PieceWeight& piece : planes_state().layer(l, p)) {
    if (!piece.quant) fail("cuda backend: layer ", l, ": a matrix without a BF16 copy has a BF16 piece");
    quant_dequantize_bf16(piece.q, model_.prefill_scratch + size_t(piece.row0) * size_t(whole.K), whole.K,
                          stream_.s);
  }
  return DevMatrix{model_.prefill_scratch, whole.N, whole.K};
}

// y_i (+)= X W_i^T for the row slices W_i of decode matrix p of layer l (beta 0 or 1), X the pass's c rows in the form
// f reads them (pass_input left them): int8 in batch_xq, FP32 at x32 (row pitch K), or BF16 in pbf.
void CudaEngine::prefill_matmul(size_t l, FusedProj p, const DevMatrix& whole, int c, PassForm f, const float* x32,
                                std::initializer_list<RowSlice> slices, float beta) {
  if (f == PassForm::QuantInt8Bf16 || f == PassForm::QuantInt8 || f == PassForm::QuantF32) {
    const DecodeWeight& w = planes_state().layer(l, p);
    batch_rows(w, slices, f == PassForm::QuantF32 ? x32 : nullptr, c, beta != 0.0f);
    return;
  }
  if (f == PassForm::Bf16Batch) {
    for (const RowSlice& r : slices) bf16_batch_rows(whole, r, x32, c, beta != 0.0f);
    return;
  }
  const DevMatrix src = prefill_source(l, p, whole);
  for (const RowSlice& r : slices)
    gemm(DevMatrix{src.data + size_t(r.row0) * size_t(src.K), r.rows, src.K}, act_.pbf, c, r.y, beta);
}

CudaEngine::PassForm CudaEngine::pass_form(const DevMatrix& whole, const DecodeWeight* planes, int c,
                                           PassRows rows) const {
  if (!whole.data) {
    if (!planes || !batchable(*planes, c)) return PassForm::Gemm;
    if (rows == PassRows::kBf16) return PassForm::QuantInt8Bf16;
    if (c > act_.exact_rows) return PassForm::Gemm;
    if (quant_kind_int8_x(cur_->plan.quant)) return PassForm::QuantInt8;
    // FP32 x ("warp"): the batch-k GEMV's FMA form costs about a decode step per token (H100, 8B Q4_0: a 26-token
    // prompt in 50.4 ms; dequantized + cuBLAS 32.5 ms), so a prompt takes it for a few tokens only, BF16 rows through
    // cuBLAS beyond (never int8 rows: they turned SmolLM2's chat answer on "warp" into French verse).
    return rows == PassRows::kDecode || c <= kPromptF32Max ? PassForm::QuantF32 : PassForm::Gemm;
  }
  // BF16 copies: the batched GEMV in an exact verify only; a prompt's pass keeps cuBLAS, measured faster there (H100,
  // 8B BF16, 16 tokens: 7.7 vs 29.6 ms).
  const bool bf16_ok = rows == PassRows::kDecode && c >= 1 &&
                       c <= std::min({tuning_.bf16_batch_rows, act_.exact_rows, kGemvMaxBatch});
  return bf16_ok ? PassForm::Bf16Batch : PassForm::Gemm;
}

CudaEngine::PassForm CudaEngine::pass_form(size_t l, FusedProj p, const DevMatrix& whole, int c, PassRows rows) {
  return pass_form(whole, whole.data ? nullptr : &planes_state().layer(l, p), c, rows);
}

// The c FP32 rows x [c, k] as form f reads them: int8 in batch_xq (from x, or from its BF16 rounding), BF16 in pbf;
// the FP32 forms read x itself.
// (QuantInt8Bf16: the BF16 rounding and the int8 pass in one launch, bit for bit the two.)
void CudaEngine::pass_input(PassForm f, const float* x, int c, int k) {
  if (f == PassForm::QuantInt8) quant_batch_quantize_x(x, false, k, c, k, act_.batch_xq, stream_.s);
  if (f == PassForm::QuantInt8Bf16 && tuning_.fuse_pass) {
    quant_batch_quantize_x_bf16_rounded(x, k, c, k, act_.batch_xq, stream_.s);
    return;
  }
  if (f == PassForm::Gemm || f == PassForm::QuantInt8Bf16)
    convert_f32_to_bf16(x, act_.pbf, size_t(c) * size_t(k), stream_.s);
  if (f == PassForm::QuantInt8Bf16) quant_batch_quantize_x(act_.pbf, true, k, c, k, act_.batch_xq, stream_.s);
}

// RMSNorm of the c rows of x [c, dim] with weight w, as form f reads it: BF16 straight into pbf for cuBLAS, else FP32
// into pf32 (then int8 for the quantized form).
// (QuantInt8Bf16, QuantInt8: one launch, bit for bit rmsnorm(_bf16) then the int8 pass.)
void CudaEngine::norm_input(PassForm f, const float* x, const float* w, int c) {
  if ((f == PassForm::QuantInt8Bf16 || f == PassForm::QuantInt8) && tuning_.fuse_pass) {
    quant_batch_rmsnorm_x(x, w, c, cfg_.dim, cfg_.norm_eps, act_.batch_xq, stream_.s, f == PassForm::QuantInt8Bf16);
    return;
  }
  if (f == PassForm::Gemm || f == PassForm::QuantInt8Bf16) {
    rmsnorm_bf16(x, w, act_.pbf, c, cfg_.dim, cfg_.norm_eps, stream_.s);
    if (f == PassForm::QuantInt8Bf16)
      quant_batch_quantize_x(act_.pbf, true, cfg_.dim, c, cfg_.dim, act_.batch_xq, stream_.s);
    return;
  }
  rmsnorm(x, w, act_.pf32, c, cfg_.dim, cfg_.norm_eps, stream_.s);
  pass_input(f, act_.pf32, c, cfg_.dim);
}

// Whether a pass of c tokens reads w through the batch-k quantized GEMV: every piece quantized with its planes, and c
// within EngineTuning::quant_batch_rows and the activations' int8 rows.
bool CudaEngine::batchable(const DecodeWeight& w, int c) const {
  if (c < 1 || c > std::min(tuning_.quant_batch_rows, act_.batch_rows) || w.empty()) return false;
  for (const PieceWeight& piece : w)
    if (!piece.quant || !quant_batch_supported(piece.q)) return false;
  return true;
}

// Rows [r.row0, r.row0 + r.rows) of w (its pieces, each at its rows) against the c rows: FP32 at x32 (row pitch w's
// k), or (x32 null) the int8 forms pass_input left; into r.y (row pitch r.rows): one call per piece.
void CudaEngine::batch_rows(const DecodeWeight& w, const RowSlice& r, const float* x32, int c, bool accumulate) {
  for (const PieceWeight& piece : w) {
    const int64_t lo = std::max<int64_t>(r.row0, piece.row0);
    const int64_t hi = std::min<int64_t>(int64_t(r.row0) + r.rows, int64_t(piece.row0) + piece.q.n);
    if (lo >= hi) continue;
    batch_launch(piece, lo - piece.row0, hi - lo, r.y + size_t(lo - r.row0), r.rows, x32, c, accumulate, nullptr);
  }
}

// Up to three slices of consecutive rows of one piece (q | k | v) in one launch (QuantBatchSplit: each weight read
// once, the outputs stored into each slice's buffer); otherwise one call per slice.
void CudaEngine::batch_rows(const DecodeWeight& w, std::initializer_list<RowSlice> slices, const float* x32, int c,
                            bool accumulate) {
  const RowSlice* s = slices.begin();
  const size_t n = slices.size();
  bool one = tuning_.fuse_pass && w.size() == 1 && n >= 2 && n <= 3;
  int64_t total = 0;
  for (size_t i = 0; one && i < n; ++i) {
    one = s[i].rows > 0 && (i == 0 || s[i].row0 == s[i - 1].row0 + s[i - 1].rows);
    total += s[i].rows;
  }
  one = one && s[0].row0 >= w.front().row0 && s[0].row0 + total <= int64_t(w.front().row0) + w.front().q.n;
  if (!one) {
    for (const RowSlice& r : slices) batch_rows(w, r, x32, c, accumulate);
    return;
  }
  QuantBatchSplit split;
  split.rows0 = s[0].rows;
  split.rows1 = s[1].rows;
  split.y1 = s[1].y;
  split.ldy1 = s[1].rows;
  split.y2 = n == 3 ? s[2].y : s[1].y;
  split.ldy2 = n == 3 ? s[2].rows : s[1].rows;
  batch_launch(w.front(), s[0].row0 - w.front().row0, total, s[0].y, s[0].rows, x32, c, accumulate, &split);
}

// One batch-k launch over rows [lo, lo + rows) of piece into y (pitch ldy; split: the rest into other buffers): FP32
// rows at x32 (the FMA kernel) or the int8 forms in batch_xq; PDL with the fused passes.
void CudaEngine::batch_launch(const PieceWeight& piece, int64_t lo, int64_t rows, float* y, int64_t ldy,
                              const float* x32, int c, bool accumulate, const QuantBatchSplit* split) {
  if (x32)
    quant_batch_gemv_f32_launch(piece.q, lo, rows, x32, piece.q.k, c, y, ldy, accumulate, stream_.s, kQuantBatchRows,
                                split, tuning_.fuse_pass);
  else
    quant_batch_gemv_launch(piece.q, lo, rows, act_.batch_xq, c, y, ldy, accumulate, stream_.s, kQuantBatchRows,
                            QuantBatchKernel::kAuto, tuning_.batch_mma_from, split, tuning_.fuse_pass);
}

// Rows [r.row0, r.row0 + r.rows) of the BF16 copy against the c FP32 rows x32 [c, K], into r.y (row pitch r.rows).
void CudaEngine::bf16_batch_rows(const DevMatrix& whole, const RowSlice& r, const float* x32, int c,
                                 bool accumulate) {
  GemvWeight v;
  v.N = r.rows;
  v.K = whole.K;
  v.ld = whole.K;
  v.data = const_cast<uint16_t*>(whole.data) + size_t(r.row0) * size_t(whole.K);
  v.bytes = 0;
  v.owned = false;
  gemv_batched_launch(v, c, x32, whole.K, r.y, r.rows, stream_.s, accumulate);
}

// One batched pass over c tokens already in prefill_ids[1..c] at positions pos0 .. pos0 + c - 1: the forward pass
// of forward_token with GEMMs or batched GEMVs (residuals through beta = 1), every token's K and V into the cache.
// Matrices kept quantized run the batch-k GEMV (short passes) or are dequantized one at a time just before their GEMM
// (prefill_source). rows: what each matrix reads (PassRows, pass_form).
void CudaEngine::prefill_chunk(int c, int pos0, bool device_pos, PassRows rows) {
  const ModelConfig& m = cfg_;
  const Activations& a = act_;
  cudaStream_t s = stream_.s;
  const int* d_pos0 = a.prefill_ids;
  const int qd = m.q_dim(), kvd = m.kv_dim();
  embed_lookup(model_.embedding, a.prefill_ids + 1, c, m.dim, a.px, s);
  for (size_t l = 0; l < model_.layers.size(); ++l) {
    const DevLayer& L = model_.layers[l];
    const PassForm fqkv = pass_form(l, kFQkv, L.qkv, c, rows), fo = pass_form(l, kFO, L.w[kWo], c, rows),
                   fgu = pass_form(l, kFGateUp, L.gate_up, c, rows),
                   fdown = pass_form(l, kFDown, L.w[kDown], c, rows);
    norm_input(fqkv, a.px, L.attn_norm, c);
    prefill_matmul(l, kFQkv, L.qkv, c, fqkv, a.pf32, {{0, qd, a.pq}, {qd, kvd, a.pk}, {qd + kvd, kvd, a.pv}}, 0.0f);
    kv_->store(int(l), a.pq, a.pk, a.pv, model_.inv_freq, d_pos0, c, s);
    kv_->attend_prefill(int(l), a.pq, pos0, c, a.patt, tuning_.split_pass_attention ? a.pass_scratch : nullptr, s,
                        device_pos ? d_pos0 : nullptr);
    pass_input(fo, a.patt, c, qd);
    const float residual = adds_residual() ? 1.0f : 0.0f;  // a tensor-parallel rank > 0 writes its partial
    prefill_matmul(l, kFO, L.w[kWo], c, fo, a.patt, {{0, m.dim, a.px}}, residual);  // residual through beta = 1
    reduce(a.px, size_t(c) * size_t(m.dim));
    norm_input(fgu, a.px, L.ffn_norm, c);
    prefill_matmul(l, kFGateUp, L.gate_up, c, fgu, a.pf32, {{0, 2 * m.hidden_dim, a.pgate_up}}, 0.0f);
    // SwiGLU of rows [gate_t | up_t], in the form down reads.
    const bool glu_bf16 = fdown == PassForm::QuantInt8Bf16 && tuning_.fuse_pass;  // rounded to BF16 in the pass
    if (fdown == PassForm::QuantInt8 || glu_bf16)
      quant_batch_swiglu_x(a.pgate_up, 2 * int64_t(m.hidden_dim), c, m.hidden_dim, nullptr, 0, a.batch_xq, s,
                           glu_bf16);
    else if (fdown == PassForm::Gemm || fdown == PassForm::QuantInt8Bf16)
      swiglu_rows_bf16(a.pgate_up, a.pbf, c, m.hidden_dim, s);
    else
      swiglu_rows(a.pgate_up, a.pf32, c, m.hidden_dim, s);
    if (fdown == PassForm::QuantInt8Bf16 && !glu_bf16)
      quant_batch_quantize_x(a.pbf, true, m.hidden_dim, c, m.hidden_dim, a.batch_xq, s);
    prefill_matmul(l, kFDown, L.w[kDown], c, fdown, a.pf32, {{0, m.dim, a.px}}, residual);
    reduce(a.px, size_t(c) * size_t(m.dim));
  }
  CUDA_CHECK_LAUNCH("a prefill layer");
}

void CudaEngine::prime_prefill(int c) {
  if (c < 1 || c > chunk_) fail("cuda backend: prime_prefill of ", c, " tokens (a pass holds 1 to ", chunk_, ")");
  const ModelConfig& m = cfg_;
  const Activations& a = act_;
  const PassRows rows = exact_verify() ? PassRows::kDecodeQuant : PassRows::kBf16;
  const DevLayer& L = model_.layers[0];
  const int qd = m.q_dim(), kvd = m.kv_dim();
  auto prime = [&](FusedProj p, const DevMatrix& whole, std::initializer_list<RowSlice> slices, float beta) {
    if (pass_form(0, p, whole, c, rows) == PassForm::Gemm)
      prefill_matmul(0, p, whole, c, PassForm::Gemm, nullptr, slices, beta);
  };
  // Outputs into the pass's buffers, which the next pass rewrites (it starts by embedding into px); the betas the
  // pass uses (cuBLAS may pick another kernel for a GEMM that reads its output).
  const float residual = adds_residual() ? 1.0f : 0.0f;
  prime(kFQkv, L.qkv, {{0, qd, a.pq}, {qd, kvd, a.pk}, {qd + kvd, kvd, a.pv}}, 0.0f);
  prime(kFO, L.w[kWo], {{0, m.dim, a.px}}, residual);
  prime(kFGateUp, L.gate_up, {{0, 2 * m.hidden_dim, a.pgate_up}}, 0.0f);
  prime(kFDown, L.w[kDown], {{0, m.dim, a.px}}, residual);
  CUDA_CHECK_LAUNCH("prime_prefill");
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
}

void CudaEngine::check_tokens(const char* what, const int* tokens, int n, int pos) const {
  if (n <= 0) fail("cuda backend: ", what, " needs at least one token, found ", n);
  if (pos < 0 || int64_t(pos) + n > ctx_)
    fail("cuda backend: ", what, " of ", n, " tokens at position ", pos, " exceeds the context of ", ctx_);
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= embed_rows_)
      fail("cuda backend: ", what, " token ", i, " = ", tokens[i], " outside the vocabulary of ", embed_rows_);
}

// {pos, tokens[0..n)} into prefill_ids (n <= chunk_), once the previous pass's copy has read the staging ints (one
// pass stays queued ahead).
void CudaEngine::upload_tokens(const int* tokens, int n, int pos) {
  int* io = static_cast<int*>(host_io_.p) + 3;
  CUDA_CHECK(cudaEventSynchronize(prefill_copied_.e));
  io[0] = pos;
  std::copy(tokens, tokens + n, io + 1);
  CUDA_CHECK(cudaMemcpyAsync(act_.prefill_ids, io, size_t(1 + n) * sizeof(int), cudaMemcpyHostToDevice, stream_.s));
  CUDA_CHECK(cudaEventRecord(prefill_copied_.e, stream_.s));
}

void CudaEngine::prefill(const int* tokens, int n, int pos) {
  check_tokens("prefill", tokens, n, pos);
  int last = 0;
  for (int t0 = 0; t0 < n; t0 += chunk_) {
    const int c = std::min(chunk_, n - t0);
    upload_tokens(tokens + t0, c, pos + t0);
    prefill_chunk(c, pos + t0, false, exact_verify() ? PassRows::kDecodeQuant : PassRows::kBf16);
    last = c - 1;
  }
  // Only the last token's logits are wanted: its row through the final norm and the head (current mapping).
  rmsnorm(act_.px + size_t(last) * size_t(cfg_.dim), model_.final_norm, act_.xb, 1, cfg_.dim, cfg_.norm_eps,
          stream_.s);
  mappings_->launch(*cur_, cur_->head(), act_.xb, act_.logits, false);
  CUDA_CHECK_LAUNCH("the final norm and head of prefill");
  logits_pos_ = pos + n - 1;
  step_sampled_ = false;
  ring_.forget_in_kernel();
}

// The device work of a verify of n tokens already in prefill_ids: a prefill pass (device_pos: attention reads the
// position from prefill_ids[0], so a captured pass replays at any position), then every row through the final norm
// and the head: cuBLAS on its BF16 copy, the batch-k GEMV on its quantized planes, or (a pass too long for those) the
// decode head GEMV row by row. Logits into verify_logits_ [n, vocab].
void CudaEngine::verify_pass(int n, int pos, bool device_pos) {
  if (decode_order_verify()) {
    verify_steps(n);
    return;
  }
  const size_t vocab = size_t(cfg_.vocab_size);
  const PassRows rows = exact_verify() ? PassRows::kDecode : PassRows::kBf16;
  prefill_chunk(n, pos, device_pos, rows);
  // The head's planes where it has no BF16 copy; and under the exact verify wherever decode's head GEMV reads it
  // quantized, BF16 copy or not: a tied head's copy is the embedding table, dequantized and rounded to BF16, which put
  // every verify row ~1e-3 (relative L2) from the decode step's logits (H100, 2026-12-06: SmolLM2's Q8_0 head 7e-4,
  // stories260K in Q4_1 1.3e-3).
  const bool decode_head_quant = !cur_->head().empty() && cur_->head().front().quant;
  const bool planes = !model_.head.data || (rows == PassRows::kDecode && decode_head_quant);
  const DecodeWeight* head = planes ? &planes_state().head() : nullptr;
  const DevMatrix whole_head = planes ? DevMatrix{nullptr, cfg_.vocab_size, cfg_.dim} : model_.head;
  const PassForm f = pass_form(whole_head, head, n, rows);
  if (f == PassForm::Gemm && head) {  // kept quantized, a pass too long for the batch-k GEMV: the decode head per row
    for (int i = 0; i < n; ++i) {
      rmsnorm(act_.px + size_t(i) * size_t(cfg_.dim), model_.final_norm, act_.xb, 1, cfg_.dim, cfg_.norm_eps,
              stream_.s);
      mappings_->launch(*cur_, cur_->head(), act_.xb, verify_logits_ + size_t(i) * vocab, false);
    }
  } else {
    norm_input(f, act_.px, model_.final_norm, n);
    const RowSlice all{0, cfg_.vocab_size, verify_logits_};
    if (f == PassForm::QuantInt8Bf16 || f == PassForm::QuantInt8 || f == PassForm::QuantF32)
      batch_rows(*head, all, f == PassForm::QuantF32 ? act_.pf32 : nullptr, n, false);
    else if (f == PassForm::Bf16Batch)
      bf16_batch_rows(model_.head, all, act_.pf32, n, false);
    else
      gemm(model_.head, act_.pbf, n, verify_logits_, 0.0f);
  }
  CUDA_CHECK_LAUNCH("a verify pass");
}

bool CudaEngine::decode_order_verify() const {
  if (tuning_.verify_order == VerifyOrder::kPass || !cur_) return false;
  return llm::verify_in_decode_order(tuning_.verify_order, double(cur_->bytes_read),
                                     !persistent_ && kv_->token_axis() && mappings_->takes_tokens(*cur_));
}

// Passes of up to kTokenSlabs tokens (the slabs the activations hold): token t of a pass in slab t, its step word
// written from prefill_ids on the device (so a captured pass replays at any position), then forward_token over the
// token axis, then the pass's logits rows out of the slabs into verify_logits_.
void CudaEngine::verify_steps(int n) {
  const size_t vocab = size_t(cfg_.vocab_size);
  cudaStream_t s = stream_.s;
  for (int t0 = 0; t0 < n; t0 += act_.token_slabs) {
    const TokenAxis tok{std::min(act_.token_slabs, n - t0), act_.token_stride};
    spread_token_steps(act_.prefill_ids, t0, tok.n, act_.step, tok.stride, s);
    forward_token(*cur_, nullptr, tok);
    CUDA_CHECK(cudaMemcpy2DAsync(verify_logits_ + size_t(t0) * vocab, vocab * sizeof(float), act_.logits,
                                 size_t(tok.stride), vocab * sizeof(float), size_t(tok.n), cudaMemcpyDeviceToDevice,
                                 s));
  }
  CUDA_CHECK_LAUNCH("a decode-order verify");
}

std::unique_ptr<GraphExecHolder> CudaEngine::capture_verify(int n) {
  auto exec = std::make_unique<GraphExecHolder>();
  GraphHolder graph;
  capture_stream(stream_.s, graph, [&] { verify_pass(n, 0, true); });
  CUDA_CHECK(cudaGraphInstantiate(&exec->g, graph.g, 0));
  return exec;
}

void CudaEngine::drop_verify_graphs() {
  verify_graphs_.clear();
  verify_eager_.clear();
}

// Queues a verify of n tokens at pos on the stream (verify and verify_argmax): logits of every row into
// verify_logits_, the last row into act_.logits.
void CudaEngine::verify_queue(const int* tokens, int n, int pos) {
  check_tokens("verify", tokens, n, pos);
  if (n > chunk_) fail("cuda backend: verify of ", n, " tokens exceeds one prefill pass of ", chunk_);
  drop_sampled();
  const size_t vocab = size_t(cfg_.vocab_size);
  if (n > verify_rows_) {  // kept for the engine's life (a draft length rarely grows past its first maximum)
    verify_rows_ = std::max(n, 17);
    verify_logits_ = arena_.alloc<float>(size_t(verify_rows_) * vocab);
    verify_ids_ = arena_.alloc<int>(size_t(verify_rows_));
    verify_margins_ = arena_.alloc<float>(size_t(verify_rows_));
    drop_verify_graphs();  // they write the old buffer
  }
  upload_tokens(tokens, n, pos);
  // The FP8 cache's prefill attention reads pos0 on the host (no captured pass over it): its verify runs eagerly.
  if (!tuning_.verify_graph || kv_->fp8()) {
    verify_pass(n, pos, false);
  } else {
    // One graph per n, captured at the second verify of that n (the first runs eagerly: whatever is made lazily, a
    // mapping's planes or a kernel's first-use state, exists before capture); dropped when what it captured changes.
    const std::tuple<int, int, bool, bool, int, bool> batch_rows{tuning_.quant_batch_rows, tuning_.bf16_batch_rows,
                                                                 exact_verify(), tuning_.fuse_pass,
                                                                 tuning_.batch_mma_from, decode_order_verify()};
    if (verify_graph_ms_ != cur_ || verify_graph_batch_rows_ != batch_rows) drop_verify_graphs();
    verify_graph_ms_ = cur_;
    verify_graph_batch_rows_ = batch_rows;
    auto it = verify_graphs_.find(n);
    if (it == verify_graphs_.end() && verify_eager_.insert(n).second) {
      verify_pass(n, pos, false);
    } else {
      if (it == verify_graphs_.end()) it = verify_graphs_.emplace(n, capture_verify(n)).first;
      CUDA_CHECK(cudaGraphLaunch(it->second->g, stream_.s));
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(act_.logits, verify_logits_ + size_t(n - 1) * vocab, vocab * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream_.s));
}

// After the copies a verify queued behind verify_queue: waits for them, then the last row is the current logits.
void CudaEngine::verify_finish(int n, int pos) {
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  logits_pos_ = pos + n - 1;
  step_sampled_ = false;
  ring_.forget_in_kernel();
}

std::vector<float> CudaEngine::verify(const int* tokens, int n, int pos) {
  verify_queue(tokens, n, pos);
  std::vector<float> out(size_t(n) * size_t(cfg_.vocab_size));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), verify_logits_, out.size() * sizeof(float), cudaMemcpyDeviceToHost,
                             stream_.s));
  verify_finish(n, pos);
  return out;
}

// The rows judged on the device (argmax_rows_device): n ids cross to the host, not n rows of the vocabulary.
std::vector<int> CudaEngine::verify_argmax(const int* tokens, int n, int pos, int vocab_limit,
                                           std::vector<float>* margins) {
  verify_queue(tokens, n, pos);
  const int lim = vocab_limit > 0 ? std::min(vocab_limit, cfg_.vocab_size) : cfg_.vocab_size;
  argmax_rows_device(verify_logits_, n, size_t(cfg_.vocab_size), lim, verify_ids_, stream_.s,
                     margins ? verify_margins_ : nullptr);
  std::vector<int> ids(static_cast<size_t>(n));
  CUDA_CHECK(cudaMemcpyAsync(ids.data(), verify_ids_, ids.size() * sizeof(int), cudaMemcpyDeviceToHost, stream_.s));
  if (margins) {
    margins->resize(size_t(n));
    CUDA_CHECK(cudaMemcpyAsync(margins->data(), verify_margins_, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost,
                               stream_.s));
  }
  verify_finish(n, pos);
  for (int& id : ids)
    if (id == kSampleNonFinite) id = -1;
  return ids;
}

// Each length's first verify runs eagerly (lazy loads) and its second is captured (verify_queue): two rounds over
// max_tokens .. 2 at position 0 (the graphs read the position from the device), greedy as the loop's are; the longest
// first, so the rows buffer is sized once (growing it drops every graph and eager mark). Over an FP8 cache one round
// (its passes stay eager). Bounded by the pass size and the context.
void CudaEngine::prepare_verify(int max_tokens) {
  const int top = std::min({max_tokens, chunk_, ctx_});
  if (top < 2) return;
  const int tok = cfg_.bos_id >= 0 && cfg_.bos_id < cfg_.vocab_size ? cfg_.bos_id : 0;
  const std::vector<int> toks(size_t(top), tok);
  const int rounds = tuning_.verify_graph && !kv_->fp8() ? 2 : 1;
  for (int r = 0; r < rounds; ++r)
    for (int n = top; n >= 2; --n) verify_argmax(toks.data(), n, 0, sample_vocab_);
}

void CudaEngine::rewind(int pos) {
  if (pos < 0 || pos > ctx_)
    fail("cuda backend: rewind to position ", pos, " outside the context of ", ctx_, " positions");
  // Nothing to undo, as on the CPU reference: the next write at pos re-encodes its block (the FP8 store's rule); the
  // loop keeps every rewind inside the open block (exact_rewind_end).
  drop_sampled();
}

void CudaEngine::set_prefill_chunk(int n) {
  if (n < 1 || n > max_chunk_) fail("cuda backend: prefill chunk must be in [1, ", max_chunk_, "], found ", n);
  chunk_ = n;
}

// --- sampling and logits -------------------------------------------------------------------------------------------

int CudaEngine::sample(const SamplerParams& p, uint64_t step) {
  drop_sampled();  // anything a stopped loop left in flight
  sample_async(p, step);
  return wait_sampled();
}

void CudaEngine::sample_async(const SamplerParams& p, uint64_t step) {
  // The sample after a profiled step is timed too, so the budget holds everything the device runs per token: by the
  // kernel timeline after a graph step, by events after a persistent one (inside its kernel when it sampled there).
  // Profiling turned off since that step: not timed (nothing would read the time).
  using Timing = SampleRing::Timing;
  const Timing timing =
      !(time_next_sample_ && profiling_) ? Timing::None : persistent_ ? Timing::Events : Timing::Timeline;
  ring_.start(p, step, logits_pos_, timing, profiler_.get(), &profile_);
  time_next_sample_ = false;
  sampled_pos_ = logits_pos_ + 1;
  step_sampled_ = true;
}

int CudaEngine::wait_sampled() {
  return ring_.wait(profiling_ ? profiler_.get() : nullptr, &profile_, [this] { check_persistent_error(); });
}

void CudaEngine::drop_sampled() {
  ring_.drop([this] { check_persistent_error(); });
}

RankPick CudaEngine::greedy_pick(int limit) {
  if (limit < 1 || limit > cfg_.vocab_size)
    fail("cuda backend: greedy_pick over ", limit, " of ", cfg_.vocab_size, " rows");
  drop_sampled();
  argmax_rows_device(act_.logits, 1, size_t(cfg_.vocab_size), limit, pick_, stream_.s);
  int id = 0;
  CUDA_CHECK(cudaMemcpyAsync(&id, pick_, sizeof(int), cudaMemcpyDeviceToHost, stream_.s));
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  if (id == kSampleNonFinite) return {-1, 0.0f};
  if (id < 0 || id >= limit) fail("cuda backend: greedy_pick returned id ", id, " outside [0, ", limit, ")");
  RankPick pick{id, 0.0f};
  CUDA_CHECK(cudaMemcpyAsync(&pick.value, act_.logits + id, sizeof(float), cudaMemcpyDeviceToHost, stream_.s));
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  return pick;
}

std::vector<float> CudaEngine::logits() {
  std::vector<float> out(size_t(cfg_.vocab_size));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), act_.logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_.s));
  CUDA_CHECK(cudaStreamSynchronize(stream_.s));
  check_persistent_error();
  return out;
}

}  // namespace

// --- public --------------------------------------------------------------------------------------------------------

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

std::unique_ptr<CudaRankEngine> make_cuda_rank_engine(const Model& shard, const BackendOptions& opt,
                                                      const CudaRankRole& role) {
  if (const std::string why = kv_dtype_refusal(opt.kv_dtype, {"cuda", ""}); !why.empty()) fail(why);
  return std::make_unique<CudaEngine>(shard, opt, role);
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
