// Perplexity by teacher forcing through Backend::decode.
#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace llm {

double token_nll(const float* logits, int vocab, int target) {
  const float mx = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return std::log(sum) - (double(logits[target]) - mx);
}

PerplexityResult perplexity(Backend& backend, const std::vector<int>& ids) {
  if (ids.size() < 2) fail("perplexity needs at least 2 tokens, got ", ids.size());
  if (int(ids.size()) > backend.ctx_size())
    fail("the text has ", ids.size(), " tokens but the context holds ", backend.ctx_size());
  PerplexityResult r;
  double total = 0.0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    backend.decode(ids[t], int(t));
    const std::vector<float> l = backend.logits();
    if (ids[t + 1] < 0 || size_t(ids[t + 1]) >= l.size()) fail("token id ", ids[t + 1], " is outside the vocabulary");
    total += token_nll(l.data(), int(l.size()), ids[t + 1]);
  }
  r.scored = int(ids.size()) - 1;
  r.mean_nll = total / r.scored;
  r.ppl = std::exp(r.mean_nll);
  return r;
}

}  // namespace llm
