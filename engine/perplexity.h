// Perplexity of a token sequence under the model: exp of the mean negative log-likelihood of ids[t] given ids[0..t),
// for t = 1 .. n-1 (the first token is the context, not scored), as llama.cpp's perplexity tool defines it.
#pragma once
#include <vector>

#include "engine/backend.h"

namespace llm {

struct PerplexityResult {
  int scored = 0;         // tokens scored (n - 1)
  double mean_nll = 0.0;  // nats per token
  double ppl = 0.0;       // exp(mean_nll)
};

// Feeds ids one by one from position 0 (the decode path, the one every mapping runs). Throws llm::Error when there are
// fewer than 2 ids or more than the context holds.
PerplexityResult perplexity(Backend& backend, const std::vector<int>& ids);

// -log softmax(logits)[target], computed in double with the max subtracted.
double token_nll(const float* logits, int vocab, int target);

}  // namespace llm
