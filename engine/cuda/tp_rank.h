// The CUDA engine as one rank of a tensor-parallel run (engine/cuda/cuda_tp_engine.cu drives the ranks). A rank is
// the ordinary engine over its shard of the model (engine/tp_plan.h shard_weights: its heads, FFN rows and head rows,
// the whole embedding and norms), with three differences, all in the forward passes:
//   * the residual stream is summed across the ranks after o and after down: rank 0's GEMV adds its partial to x as
//     usual, the others' GEMVs write theirs into x, and all_reduce(x) leaves the sum (x + every partial) on every rank;
//   * the RMSNorm fold is off (the norm reads x after the all-reduce, not a producer's epilogue);
//   * nothing runs at construction that would wait for the other ranks (the warm-up is the driver's, warm_up()).
// The persistent path and speculative verify are refused on a rank.
//
// The ranks wait for each other inside their kernels (the all-reduce spins on its peers' flags). CUDA's lazy module
// loading may synchronise the context when a kernel runs for the first time, which, mid-step, waits for a spinning
// all-reduce whose peer has not been queued yet: a deadlock (the CUDA programming guide's lazy-loading hazards). So a
// tensor-parallel run needs every module loaded when CUDA starts: CUDA_MODULE_LOADING=EAGER in the environment before
// the first CUDA call (run-llama, its chat and serve-llama set it for --tp > 1; make_cuda_tp_backend refuses without).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "engine/cuda_backend.h"
#include "engine/tp_plan.h"  // RankPick
#include "models/model.h"

namespace llm {

struct CudaRankRole {
  int rank = 0, n_ranks = 1;
  int embed_rows = 0;  // token ids: the whole vocabulary (the shard's config counts only its head rows)
  // Sums x[0..n) over the ranks in place, queued on s (capturable: it is part of the decode step's graph).
  std::function<void(float* x, size_t n, cudaStream_t s)> all_reduce;
};

class CudaRankEngine : public CudaBackend {
 public:
  // The load-time warm-up as a list of calls (prefill passes, decode steps, draws, the final clear). A rank's calls
  // queue work that waits for the other ranks (the all-reduces), so the driver runs call i on every rank, then call
  // i + 1: each call returns once its work is queued, and every rank's plan has the same calls.
  virtual std::vector<std::function<void()>> warm_up_plan() = 0;
  // Runs, once, the cuBLAS GEMMs a prefill pass of c tokens will run (layer 0's, into pass scratch), then waits for
  // them. cuBLAS loads a GEMM kernel at its first use for a shape and may synchronise the context to do it: mid-pass
  // that waits for a spinning all-reduce whose peer is not queued yet. So the driver primes every rank for a pass
  // before any rank queues it (the CUDA programming guide's lazy-loading hazard, in a library's own loading).
  virtual void prime_prefill(int c) = 0;
  // The greedy candidate of the current logits among this rank's rows [0, limit), limit >= 1: (local id, value), the
  // lowest id on ties; id -1 when a row in range is NaN or Inf. Synchronises with the rank's stream.
  virtual RankPick greedy_pick(int limit) = 0;
};

// The rank engine over `shard` (its config: the shard's heads, FFN rows and head rows as vocab_size) on the current
// device. opt as the whole model's, with tp = 1.
std::unique_ptr<CudaRankEngine> make_cuda_rank_engine(const Model& shard, const BackendOptions& opt,
                                                      const CudaRankRole& role);

}  // namespace llm
