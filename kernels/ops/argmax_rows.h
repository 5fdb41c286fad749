// Greedy ids of many rows of logits at once, on the device: a speculative verify's n rows judged where they are,
// so n ids cross to the host instead of n rows of the vocabulary (kernels/ops/sampling.cu).
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace llm {

// d_out[r] = argmax of logits[r * ld + 0 .. vocab) for r < rows (lowest index on ties, sample_device's greedy rule),
// or kSampleNonFinite (kernels/ops/ops.h) when that range holds NaN or Inf. One block per row; asynchronous;
// capturable. Fails on rows < 1, vocab outside 1..ld or a null pointer. d_margin (optional): d_margin[r] = the row's
// largest value minus its second (the largest at another index), +inf for vocab 1 or a non-finite row.
void argmax_rows_device(const float* logits, int rows, size_t ld, int vocab, int* d_out, cudaStream_t s,
                        float* d_margin = nullptr);

}  // namespace llm
