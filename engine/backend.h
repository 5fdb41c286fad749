// Backend: the operations the decode loop needs, implemented by the CPU reference (engine/cpu_backend.cpp) and the
// CUDA engine (engine/cuda/cuda_engine.cu). Both keep their own KV cache and logits; the loop reads like the algorithm:
//   prefill(prompt) -> sample -> decode(tok) -> sample -> ...
#pragma once
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/kv_dtype.h"
#include "engine/sampler.h"
#include "models/model.h"

namespace llm {

// EngineTuning::batch_mma_from's "never": one past the tensor-core kernel's vectors per launch (kQuantBatchMmaMax, in
// kernels/quant/gemv_quant_plan.h; checked where the engine includes both).
constexpr int kBatchMmaNever = 65;

// EngineTuning::exact_verify: kAuto takes the decode step's activations where decode reads matrices kept quantized
// (there BF16-rounded int8 rows against decode's FP32 x changed 19 of 22 spec-bench outputs on SmolLM2, H100) and the
// prompt's rows for BF16 models (cuBLAS: a verify of 8 costs 1.24x a decode step on 8B BF16, the batched GEMV 1.82x).
enum class ExactVerify { kAuto, kOn, kOff };

// What a verify pass costs, in decode steps: `pass` for the pass and `per_token` more for each draft it verifies (the
// speculative loop's adaptive draft length weighs passes by it: engine/speculative.h DraftLength). The default sits
// between a small latency-bound model's loop on an H100 (SmolLM2: 1.46 + 0.24, fitted by spec-sim to a spec-bench
// run) and a large model's (verify reads each weight once: ~1.1 + 0.03); chosen by replaying recorded runs under both
// (docs/results/session-2026-12-07a.md), where it did better than either extreme assumed in the other. A backend
// whose verify costs otherwise says so (Backend::verify_costs).
struct DraftCosts {
  double pass = 1.25;
  double per_token = 0.1;
};

// EngineTuning::verify_order. kDecode: on the graph path with the BF16 cache and every decode matrix on a form with a
// token axis (the quantized warp forms, BF16's warp-r2), a speculative verify runs the decode step's kernels for its
// tokens side by side (each token in its own slab of activations, the weights shared through L2), so its every row is
// the decode step's logits bit for bit and greedy speculation is plain greedy. kPass: a prefill pass (each weight read
// once for all tokens: its rows equal decoding's up to summation order, and the K and V rows it leaves drift greedy
// output from plain decoding's at some tokens). kAuto: kDecode up to kDecodeOrderAutoBytes of weights per token where
// every matrix has a token axis, kPass otherwise. H100, verify of 8 tokens at depth 300 against a decode step:
// SmolLM2's shape Q4_1 (0.09 GB per token) 1.80x in decode order, 2.46x as a pass; TinyLlama's Q4_0 (0.6 GB) 4.20x
// against 3.96x (cheaper up to 4 tokens); 8B Q4_0 (4.3 GB) 3.87x against 1.68x (every token's blocks re-read the
// weights through L2 and redo the unpacking).
enum class VerifyOrder { kAuto, kDecode, kPass };
constexpr double kDecodeOrderAutoBytes = double(size_t(1) << 30);
// The rule, in one place (CudaEngine::decode_order_verify asks it with its state): whether a verify runs in decode
// order. `bytes_per_token`: the weights decode reads per token; `token_axis`: every decode matrix on a form with a token
// axis, the KV cache's store and attention with one too (the BF16 cache), on the graph path (not persistent).
constexpr bool verify_in_decode_order(VerifyOrder order, double bytes_per_token, bool token_axis) {
  return order != VerifyOrder::kPass && token_axis &&
         (order == VerifyOrder::kDecode || bytes_per_token <= kDecodeOrderAutoBytes);
}
// What a decode-order verify costs (the CUDA engine's Backend::verify_costs; a prefill pass keeps DraftCosts'
// default). Every token runs a decode step's kernels, side by side: a latency-bound step absorbs them, a step whose
// GEMVs stream costs ~0.4 of one per token. H100, depth 300, k = 1 .. 16 (session-2026-12-07f): SmolLM2's shape Q4_1
// (0.09 GB per token) 1.04 + 0.13 per token; TinyLlama's Q4_0 (0.6 GB) 1.02 + 0.46; 8B Q4_0 (4.3 GB) 1.01 + 0.42.
// Replayed by spec-sim over the 22 recorded SmolLM2 runs, TinyLlama's costs give 1.38x weighed as 1.0 + 0.42 per draft
// against 1.28x weighed by the default; 8B's 1.51x against 1.38x; SmolLM2's 2.33x against 2.35x, so a latency-bound
// step keeps the default (its spec-bench figure was measured with it). The line between the two is a guess between
// the measured points (0.4 GB).
constexpr double kDecodeOrderStreamingBytes = 0.4e9;
constexpr DraftCosts decode_order_draft_costs(double bytes_per_token) {
  return bytes_per_token <= kDecodeOrderStreamingBytes ? DraftCosts{} : DraftCosts{1.0, 0.42};
}

// The CUDA engine's tuning and test knobs, set by callers (tests, developer options); nothing in engine/ reads the
// environment, so a run is described by its options alone.
// EngineTuning::stage_glu applies up to this hidden size (down's K): SwiGLU staged in every block of the down GEMV
// pays at SmolLM2's 1,536 (+6.5%) and costs at 8B's 14,336 (H100, 2026-12-07).
constexpr int kStageGluMaxHidden = 4096;

struct EngineTuning {
  bool run_ahead = true;           // the decode loop queues step t + 1 before it waits for step t's id
                                   // (Backend::runs_ahead); off: one host round trip per token (for comparison)
  int persistent_max_blocks = 0;   // > 0: caps the persistent kernel's grid (tuning); read when that path is first used
  int persistent_cluster = 0;      // > 0: the persistent kernel as one thread-block cluster of 8 or 16 blocks whose
                                   // stages meet at the cluster barrier (PersistentDecodeArgs::cluster); 0: the grid
                                   // of resident blocks and counters in global memory. Read when that path is first
                                   // used
  int persistent_prefetch = 0;     // > 0: the persistent kernel asks L2 for the weights this many layers ahead
  bool cluster_split_head = true;  // the cluster form ends at the final norm and the head GEMV (the decode mapping's
                                   // kernel) runs over every SM, then the usual sample; off: the cluster's blocks run
                                   // the head and sample as the counter form does (bit for bit that form on its grid)
  int persistent_fault = 0;        // tests: 1 = one block of the persistent kernel never arrives (the step must fail)
  unsigned long long persistent_timeout_ms = 0;  // a persistent wait longer than this fails the step; 0: the
                                                 // kernel's default (kernels/persistent/persistent_decode.h)
  bool persistent_all_forms = false;  // tests: the quantized persistent kernel with code for every form
  bool fuse_norm = true;           // graph path: each RMSNorm folded into the GEMVs around it (the residual GEMV's
                                   // epilogue and the next GEMV's output scale: kernels/gemv/gemv_epilogue.h); off:
                                   // one norm kernel each (for comparison: what the fold is worth)
  bool fuse_swiglu_q8 = true;      // graph path, down on warp-dp4a: one kernel computes SwiGLU and its int8 form
                                   // (quant_batch_swiglu_x) and the down GEMV copies that form instead of quantizing
                                   // x in each of its blocks; off: the SwiGLU kernel, then the per-block x pass
  bool fuse_rope = true;           // graph path, BF16 cache, head_dim 64 / 128: RoPE and the KV store run inside the
                                   // decode attention's split pass (attention_decode_rope), one launch per layer less;
                                   // off: rope_kv_store, then the attention (what the fold is worth)
  bool stage_glu = true;           // graph path, down on the quantized "warp" form with a hidden size up to
                                   // kStageGluMaxHidden: the down GEMV computes SwiGLU of the [gate | up] row as it
                                   // stages x (GemvEpilogue::glu), one launch per layer less (every block computes all
                                   // of it: at 8B's 14,336 that costs more than the launch); off: the SwiGLU kernel
                                   // first. Bit for bit either way. H100, SmolLM2's shape Q4_1: 1,505 -> 1,604 t/s
  bool stage_merge = false;        // graph path, o on the quantized "warp" form: the o GEMV merges decode attention's
                                   // key splits as it stages x (GemvEpilogue::merge), one launch per layer less. Off by
                                   // default: slower where measured (H100, SmolLM2's shape Q4_1: 1,604 -> 1,588 t/s
                                   // with it; the merge kernel overlaps the o GEMV's weight loads under PDL, the
                                   // staged merge delays them). Bit for bit either way
  VerifyOrder verify_order = VerifyOrder::kAuto;  // a speculative verify's form (VerifyOrder above)
  bool norm_sums = true;           // graph path, the fold on, every GEMV reading a norm on a quantized warp form: each
                                   // of its warps adds the producer's block sums itself, so the producer (o, down) has
                                   // no last block (GemvEpilogue::scale_sums). H100, 8B Q4_0 warp-dp4a: 446.3 -> 460.4
                                   // t/s; off: the producer's last block folds the sums (for comparison)
  bool fork_pieces = false;        // graph path: a fused group kept in two types (Q4_K_M's q|k beside a Q6_K or Q5_K v)
                                   // runs its second piece on a side stream, concurrently with the first (a fork and
                                   // a join in the captured graph), so the small launch's latency hides under the large
                                   // one; off: one launch after the other. Kernel-timeline profiles overlap its parts
  int quant_batch_rows = 64;       // CUDA prefill / verify passes of at most this many tokens read matrices kept
                                   // quantized through the batch-k GEMV (kernels/quant/gemv_quant_batch.h: the weights
                                   // once per 16 tokens with dp4a, per 64 on tensor cores); longer passes dequantize
                                   // each matrix for a cuBLAS GEMM (up to kQuantBatchPassMax). 0: never. H100, 8B Q4_0,
                                   // a 26-token prompt: 9.95 ms at 32, 32.5 ms at 16 (dequantized). Under exact_verify
                                   // (auto: every model with matrices kept quantized) prompts take the decode form's
                                   // activations: int8 rows from FP32 for "warp-dp4a"; for "warp" FP32 rows up to 8
                                   // tokens, BF16 rows through cuBLAS beyond (int8 rows rounded from BF16, as prompts
                                   // read before, turned SmolLM2's 37-token chat prompt on "warp" into French verse)
  bool fuse_pass = true;           // prefill / verify passes through the batch-k GEMV: RMSNorm, the BF16 rounding and
                                   // the int8 form in one launch (quant_batch_rmsnorm_x, ..._bf16_rounded, the SwiGLU's
                                   // round_bf16), bit for bit the two launches they replace, q | k | v in one launch
                                   // (QuantBatchSplit), and the batch-k GEMVs launched with PDL (their weight loads
                                   // overlap the kernel before); off: separate launches without PDL (what it is worth)
  int batch_mma_from = 0;          // the batch-k GEMV on int8 tensor cores from this many vectors on, dp4a below
                                   // (kernels/quant/gemv_quant_batch.h, QuantBatchKernel); 0: the kernel's default
                                   // (kQuantBatchMmaMinVectors); kBatchMmaNever (kQuantBatchMmaMax + 1): never
  ExactVerify exact_verify = ExactVerify::kAuto;  // on: CUDA prompt and verify passes take the decode step's
                                   // activations: quantized matrices through the batch-k GEMV on FP32 rows where decode
                                   // runs "warp" (a prompt: up to 8 tokens, then cuBLAS on BF16 rows), int8 rows
                                   // quantized from FP32 for "warp-dp4a"; a verify's BF16
                                   // matrices through the batched GEMV on FP32 rows (kernels/gemv/gemv_batched.h), so
                                   // a prompt's logits and greedy output with speculation stay the decode steps' up to
                                   // summation order. Off: BF16-rounded rows (cuBLAS; int8 from them). Auto: on for
                                   // models with matrices kept quantized, off for BF16 ones (ExactVerify)
  int bf16_batch_rows = 16;        // with exact_verify: verify passes of at most this many tokens (<= 16) take the
                                   // batched BF16 GEMV; longer ones cuBLAS
  bool split_pass_attention = true;  // CUDA prompt and verify passes of at most 32 tokens (one 64-row block of
                                   // (token, head) rows): the keys split across blocks by decode's rule and merged
                                   // (attention_prefill with scratch); off: one block per KV head walks every key
  bool verify_graph = true;        // CUDA verify: each draft length's pass captured in a CUDA graph (at its second use)
                                   // and replayed, instead of ~16 launches per layer (H100, 8B: verify of 8 tokens
                                   // 1.87x a decode step instead of 2.11x on Q4_0); off: eager passes
};

struct BackendOptions {
  std::string device = "cpu";   // "cpu", "cuda" or "auto" (make_backend resolves it with resolve_device)
  int ctx_size = 0;             // KV cache length; 0 = default_ctx_size() (on cuda its own cap, then memory)
  int sample_vocab = 0;         // ids sample() may return: [0, sample_vocab); 0 = every row of the head. A tokenizer
                                // smaller than the (padded) embedding sets it to its own size (sampling_vocab())
  bool bf16_weights = false;    // CPU: round weights to BF16 first (to compare with the GPU on identical weights)
  KvDtype kv_dtype = KvDtype::Default;  // --kv-dtype: the KV cache's element type (core/kv_dtype.h); Default = F32
                                // on the CPU, BF16 on the CUDA engine (which refuses F32: kv_dtype_refusal)
  std::string gemv = "";        // CUDA: GEMV mapping name ("" = default_gemv_name(), engine/gemv_choice.h)
  bool dequantize = false;      // CUDA: run GGUF quantized weights as BF16 (today's comparison path) instead of
                                // keeping them quantized for the quantized GEMVs
  bool persistent = false;      // CUDA decode: one persistent kernel per token (--decode persistent) instead of the
                                // CUDA graph (engine/gemv_choice.h decode_path_refusal says what it runs)
  EngineTuning tuning;          // CUDA: run-ahead and the persistent path's knobs (above)
  int tp = 1;                   // --tp N: tensor-parallel ranks (engine/tp_plan.h); > 1 runs on the CPU reference
                                // as N simulated ranks (make_cpu_tp_backend), on CUDA as N rank engines
                                // (make_cuda_tp_backend)
};

// The context a backend gets when BackendOptions::ctx_size is 0: the model's maximum, at most `cap` positions
// (kDefaultCtxCap on the CPU, whose cache is FP32 in host memory; kDefaultCudaCtxCap on the GPU, which then also caps
// it to what fits beside the weights). A file may claim millions of positions; the KV cache is sized by the context, so
// the default must not come from the file alone. --ctx-size raises it up to the model's maximum. When the cap applies
// and `note` is given (stderr), one line says so: "context: 8192 positions (model maximum 16777216; raise with
// --ctx-size)".
constexpr int kDefaultCtxCap = 8192;
constexpr int kDefaultCudaCtxCap = 131072;  // Llama 3.1's whole context
int default_ctx_size(const ModelConfig& c, std::FILE* note = nullptr, int cap = kDefaultCtxCap);

// BackendOptions::sample_vocab for a model whose tokenizer has `tokenizer_vocab` pieces (0 or less: no tokenizer):
// the tokenizer's size where it is smaller than the model's vocabulary (padded embeddings), else 0 (all rows).
int sampling_vocab(const ModelConfig& c, int tokenizer_vocab);

// What a backend's sample() does with logits that hold NaN or Inf: throws this error naming the step.
// It is a NonFiniteLogits, so a chat (which reports other errors and goes on) can end the program with it.
struct NonFiniteLogits : Error {
  using Error::Error;
};
[[noreturn]] void fail_non_finite_logits(uint64_t step);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int ctx_size() const = 0;
  // Runs tokens[0..n) at positions pos .. pos+n-1, filling the KV cache; logits of the last token become current.
  virtual void prefill(const int* tokens, int n, int pos) = 0;
  // Runs one token at position pos; its logits become current.
  virtual void decode(int token, int pos) = 0;
  // Samples from the current logits (see engine/sampler.h for the rule) among ids [0, sample_vocab); `step` picks
  // the random number. Logits holding NaN or Inf (in that range) throw fail_non_finite_logits(step).
  virtual int sample(const SamplerParams& p, uint64_t step) = 0;
  // Copies the current logits to the host (tests, comparisons); not in the per-token path.
  virtual std::vector<float> logits() = 0;

  // The decode loop's form of sample + decode (engine/decode_loop.cpp). sample_async(p, step) starts sampling the
  // current logits; decode_sampled(pos) decodes the id of the sample started last, at pos, without the host seeing it;
  // wait_sampled() returns the ids in the order their samples started, with sample()'s checks (non-finite logits,
  // engine errors). A backend that runs_ahead() (the CUDA engine) queues all three on the device and returns at once,
  // so the loop can queue step t + 1 before it waits for step t's id: the device never waits for the host. The
  // default (the CPU reference) samples when sample_async is called. drop_sampled() waits for the samples still in
  // flight and drops their ids (the step a loop queued ahead of its stop); engine errors still throw, non-finite
  // logits of a dropped sample do not.
  virtual bool runs_ahead() const { return false; }
  virtual void sample_async(const SamplerParams& p, uint64_t step);
  virtual void decode_sampled(int pos);
  virtual int wait_sampled();
  virtual void drop_sampled();
  // Tokens the decode loop hands to one prefill() call, so Ctrl-C is seen between pieces of a long prompt
  // (the CUDA engine batches up to this many per pass; the CPU reference runs passes of 8 through verify's forward).
  virtual int prefill_piece() const { return 512; }

  // Speculative decoding (engine/speculative.h). verify() runs tokens[0..n) at positions pos .. pos+n-1 into the KV
  // cache, like prefill, and returns the logits of EVERY position, [n, vocab] row-major (row i: the distribution of
  // the token after tokens[i]); the last row also becomes the current logits. rewind(pos) says positions >= pos are no
  // longer valid: the next write starts at pos (at most the position after the last one written). The defaults throw
  // "NAME backend: speculative decoding needs verify(), not supported by this backend", so an engine without them
  // (today the CUDA engine) still builds; supports_verify() says which. sample_vocab() is the [0, n) range sample()
  // draws from (0: every row of the head).
  virtual bool supports_verify() const { return false; }
  virtual std::vector<float> verify(const int* tokens, int n, int pos);
  // verify() judged greedily where its rows are: per row, the argmax over ids [0, vocab_limit) (0: the whole row;
  // lowest index on ties, as argmax()), or -1 where that range holds NaN or Inf. The default takes verify()'s rows;
  // the CUDA engine argmaxes on the device and copies n ids back instead of n rows of the vocabulary.
  virtual std::vector<int> verify_argmax(const int* tokens, int n, int pos, int vocab_limit,
                                         std::vector<float>* margins = nullptr);
  virtual void rewind(int pos);
  // The first position a verify pass starting at pos must not write for a rewind back into [pos, that position) to
  // give the cache a fresh prefill would (INT_MAX: none). An FP8 cache keeps only its open block's rows as computed
  // (engine/kv_cache.h): a pass that crosses into the next block closes this one, and a rewind back across the boundary
  // re-encodes its rows from their FP8 codes, rounding them once more; the speculative loop drafts no further.
  virtual int exact_rewind_end(int pos) const;
  // Readies verify passes of 2 .. max_tokens tokens (a loop drafting up to k tokens verifies 1 + k) before the first
  // is timed: what a pass makes at its first use (kernel loads, buffers, the CUDA engine's graph of each length) is
  // made now, at load, as the decode step's is. It writes the KV cache at positions [0, max_tokens): call it before the
  // first prompt, whose prefill rewrites them. The default does nothing (the CPU reference makes nothing lazily).
  virtual void prepare_verify(int max_tokens);
  virtual int sample_vocab() const { return 0; }
  // What this backend's verify pass costs in decode steps (the loop's adaptive draft length, unless SpecOptions::costs
  // names costs). Default: DraftCosts' defaults.
  virtual DraftCosts verify_costs() const { return {}; }

 private:
  std::deque<int> started_;  // the default sample_async's ids, until wait_sampled
  int last_started_ = -1;    // the id of the sample started last (decode_sampled's token); -1: none since a decode
};

// The one place a device is decided (--device, BackendOptions::device). "cpu" and "cuda" stay as asked; "auto" (or
// "") becomes "cuda" when a CUDA device can be used, else "cpu", and then `why` says so: "--device auto chose the
// CPU: no CUDA device is available (REASON)" (empty otherwise). Any other name throws llm::Error "unknown device".
// run-llama, make_backend and anything else that picks a backend call this; nothing else tests for "auto".
struct ResolvedDevice {
  std::string device;  // "cpu" or "cuda"
  std::string why;     // why auto picked the CPU, or ""
};
ResolvedDevice resolve_device(const std::string& requested);

// check_gemv_mapping (core/gemv_table.h) for a run on `device`: an unknown name fails everywhere; on the CPU any
// mapping but the default fails too, and when auto chose the CPU the message ends with "; " + device.why.
void check_gemv_for_device(const std::string& what, const std::string& gemv, const ResolvedDevice& device);

// Why `kv` cannot run on `device` ("cpu" or "cuda"), or "" when it can: on "cuda", F32 (CPU only) is refused by name:
//   "--kv-dtype f32 is CPU-only: the CUDA engine stores the KV cache in BF16 (use --device cpu, or --kv-dtype bf16)"
// run-llama and llama-ab say it as bad usage (exit 2) before any GPU work; make_backend throws it. FP8 runs on both;
// the CUDA engine's FP8 attention takes head_dim 64 and 128 and refuses another model by name when it loads.
std::string kv_dtype_refusal(KvDtype kv, const ResolvedDevice& device);

// Why --tp `tp` cannot run on `device`, or "" when it can: tp > 1 on "cuda" is refused in one line by a build without
// the CUDA engine, and, while the CUDA tensor-parallel engine is experimental, unless LLM_TP_CUDA=1 is in the
// environment; run-llama says it as bad usage (exit 2), make_backend throws it.
std::string tp_device_refusal(int tp, const ResolvedDevice& device);

std::unique_ptr<Backend> make_cpu_backend(const Model& model, const BackendOptions& opt);
// The CPU reference as opt.tp simulated tensor-parallel ranks (engine/cpu_tp_backend.cpp): each holds only its
// shards, the ranks all-reduce after o and after down. Throws the plan's refusal (engine/tp_plan.h) by name.
std::unique_ptr<Backend> make_cpu_tp_backend(const Model& model, const BackendOptions& opt);
// Defined only when built with CUDA (LLM_HAVE_CUDA); make_backend() reports a clear error otherwise.
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& opt);
// The CUDA engine as opt.tp ranks (engine/cuda/cuda_tp_engine.cu): rank r on GPU r mod the device count, each holding
// only its shards, an all-reduce over peer memory after o and after down. Throws the plan's refusal by name, and
// refuses --decode persistent. CUDA builds only.
std::unique_ptr<Backend> make_cuda_tp_backend(const Model& model, const BackendOptions& opt);
// Resolves opt.device (resolve_device), checks opt.gemv for it (check_gemv_for_device) and, for "cuda", that a
// device is there (require_cuda_device), then builds the backend.
std::unique_ptr<Backend> make_backend(const Model& model, const BackendOptions& opt);
bool cuda_device_available();
// "" when a CUDA device can be used; otherwise why not, as the runtime names it ("cudaErrorInsufficientDriver: CUDA
// driver version is insufficient for CUDA runtime version"), or that this build has no CUDA engine.
std::string cuda_unavailable_reason();
// The one line every CUDA program prints (after "error: ") when there is no device to run on:
// "no CUDA device is available (REASON); the CUDA programs need an NVIDIA GPU".
std::string cuda_no_device_message();
// Throws llm::Error(cuda_no_device_message()) when no CUDA device can be used (in a build without CUDA: that this
// build has no CUDA engine). The CUDA programs call it before any other CUDA work.
void require_cuda_device();

}  // namespace llm
