// --quantize (see models/quantize_model.h).
#include "models/quantize_model.h"

#include <algorithm>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"

namespace llm {

GgmlQuantType parse_quantize_type(const std::string& name) {
  if (name == "q8_0") return GgmlQuantType::Q8_0;
  if (name == "q4_0") return GgmlQuantType::Q4_0;
  if (name == "q4_k") return GgmlQuantType::Q4_K;
  fail("--quantize: invalid value '", printable(name), "' (allowed: q8_0, q4_0, q4_k)");
}

namespace {

// One tensor's rows -> blocks of `type`, rows split over threads; the tensor then owns its blocks.
void quantize_tensor(HostTensor& t, GgmlQuantType type, int threads) {
  check_quant_row_length(type, t.cols, t.name);
  const size_t row_bytes = ggml_quant_row_bytes(type, t.cols);
  auto buf = std::make_shared<std::vector<uint8_t>>(row_bytes * size_t(t.rows));
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(t.cols));
    for (int64_t r = r0; r < r1; ++r) {
      t.read_rows_f32(r, 1, row.data());  // engine row order (RoPE permutation already applied)
      const std::vector<uint8_t> q = quantize_matrix(type, row.data(), 1, t.cols);
      std::copy(q.begin(), q.end(), buf->begin() + long(size_t(r) * row_bytes));
    }
  };
  const int n = std::max(1, std::min<int>(threads, int((t.rows + 63) / 64)));
  std::vector<std::thread> pool;
  for (int i = 0; i < n; ++i) pool.emplace_back(work, t.rows * i / n, t.rows * (i + 1) / n);
  for (auto& th : pool) th.join();
  HostTensor q;
  q.name = t.name;
  q.rows = t.rows;
  q.cols = t.cols;
  q.dtype = DType::F32;
  q.quant = uint32_t(type);
  q.data = buf->data();
  q.owner = std::shared_ptr<const void>(buf, buf->data());
  t = q;  // rows are stored in engine order: no rope_head_dim, no synthetic fill
}

}  // namespace

void quantize_model(Model& model, GgmlQuantType type, int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  ModelWeights& w = model.weights;
  std::vector<HostTensor*> targets;
  for (LayerWeights& l : w.layers)
    for (HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) targets.push_back(t);
  const bool tied = model.config.tied_embeddings || w.head.empty();
  targets.push_back(tied ? &w.embedding : &w.head);
  std::map<std::string, int> already;
  for (const HostTensor* t : targets)
    if (t->quant) already[ggml_quant_name(GgmlQuantType(t->quant))]++;
  if (!already.empty()) {
    std::string types;
    for (const auto& kv : already) types += (types.empty() ? "" : ", ") + kv.first + " x " + std::to_string(kv.second);
    fail(model.source, ": --quantize: the weights are already quantized (", types,
         "); --quantize takes a float checkpoint (F32, F16, BF16) or a synthetic model");
  }
  for (HostTensor* t : targets) quantize_tensor(*t, type, threads);
  if (tied) w.head = w.embedding;
}

}  // namespace llm
