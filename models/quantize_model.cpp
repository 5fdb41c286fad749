// --quantize (see models/quantize_model.h).
#include "models/quantize_model.h"

#include <algorithm>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "models/dequant.h"  // kQuantSuperBlock
#include "models/gguf.h"     // GgmlType::F16, ggml_type_name

namespace llm {

QuantizeScheme parse_quantize_type(const std::string& name) {
  QuantizeScheme s;
  s.name = name;
  if (name == "q8_0") s.type = GgmlQuantType::Q8_0;
  else if (name == "q4_0") s.type = GgmlQuantType::Q4_0;
  else if (name == "q4_1") s.type = GgmlQuantType::Q4_1;
  else if (name == "q5_0") s.type = GgmlQuantType::Q5_0;
  else if (name == "q5_1") s.type = GgmlQuantType::Q5_1;
  else if (name == "q4_k") s.type = GgmlQuantType::Q4_K;
  else if (name == "q5_k") s.type = GgmlQuantType::Q5_K;
  else if (name == "q6_k") s.type = GgmlQuantType::Q6_K;
  else if (name == "q4_k_m") s.type = GgmlQuantType::Q4_K, s.q4_k_m = true;
  else fail("--quantize: invalid value '", printable(name), "' (allowed: q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, "
                                   "q4_k_m)");
  return s;
}

GgmlQuantType q4_k_m_type(WeightRole role, int layer, int n_layers, int64_t cols, bool tied, bool llama_70b) {
  // llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between them.
  const auto use_more_bits = [](int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; };
  if (role == WeightRole::Output || (tied && role == WeightRole::TokenEmbd))
    return cols % kQuantSuperBlock != 0 ? GgmlQuantType::Q8_0 : GgmlQuantType::Q6_K;
  if ((role == WeightRole::AttnV || role == WeightRole::FfnDown) && use_more_bits(layer, n_layers))
    return GgmlQuantType::Q6_K;
  // "In the 70B model we have 8 heads sharing the same attn_v weights": the attn_v that would be Q4_K takes Q5_K.
  if (role == WeightRole::AttnV && llama_70b) return GgmlQuantType::Q5_K;
  return GgmlQuantType::Q4_K;
}

uint32_t fallback_quant_type(GgmlQuantType wanted, int64_t cols) {
  const auto holds = [&](GgmlQuantType t) { return cols > 0 && cols % ggml_quant_block_weights(t) == 0; };
  if (holds(wanted)) return uint32_t(wanted);
  GgmlQuantType stand_in = wanted;
  if (wanted == GgmlQuantType::Q4_K) stand_in = GgmlQuantType::Q5_0;
  if (wanted == GgmlQuantType::Q5_K) stand_in = GgmlQuantType::Q5_1;
  if (wanted == GgmlQuantType::Q6_K) stand_in = GgmlQuantType::Q8_0;
  return holds(stand_in) ? uint32_t(stand_in) : uint32_t(GgmlType::F16);
}

namespace {

std::string type_name(uint32_t type) {
  return is_ggml_quant_type(type) ? ggml_quant_name(GgmlQuantType(type)) : ggml_type_name(type);
}

}  // namespace

std::vector<QuantizeTarget> quantize_plan(const Model& model, const QuantizeScheme& scheme) {
  const ModelWeights& w = model.weights;
  const bool tied = model.config.tied_embeddings || w.head.empty();
  const int n_layers = int(w.layers.size());
  // llama.cpp's LLM_TYPE_70B for the llama architecture: 80 layers with grouped-query attention.
  const bool llama_70b = n_layers == 80 && model.config.n_kv_heads != model.config.n_heads;
  std::vector<QuantizeTarget> plan;
  auto add = [&](const HostTensor& t, WeightRole role, int layer) {
    QuantizeTarget q;
    q.tensor = &t;
    q.role = role;
    q.layer = layer;
    q.wanted = scheme.q4_k_m ? q4_k_m_type(role, layer, n_layers, t.cols, tied, llama_70b) : scheme.type;
    q.type = fallback_quant_type(q.wanted, t.cols);
    plan.push_back(q);
  };
  // token_embd: as the tied head; and in the mix, as llama.cpp quantizes it, on its own too.
  if (tied || scheme.q4_k_m) add(w.embedding, WeightRole::TokenEmbd, -1);
  for (int l = 0; l < n_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    add(lw.wq, WeightRole::AttnQ, l);
    add(lw.wk, WeightRole::AttnK, l);
    add(lw.wv, WeightRole::AttnV, l);
    add(lw.wo, WeightRole::AttnOutput, l);
    add(lw.w_gate, WeightRole::FfnGate, l);
    add(lw.w_up, WeightRole::FfnUp, l);
    add(lw.w_down, WeightRole::FfnDown, l);
  }
  if (!tied) add(w.head, WeightRole::Output, -1);

  std::map<std::string, int> already;
  for (const QuantizeTarget& q : plan)
    if (q.tensor->quant) already[ggml_quant_name(GgmlQuantType(q.tensor->quant))]++;
  if (!already.empty()) {
    std::string types;
    for (const auto& kv : already) types += (types.empty() ? "" : ", ") + kv.first + " x " + std::to_string(kv.second);
    fail(model.source, ": --quantize: the weights are already quantized (", types,
         "); --quantize takes a float checkpoint (F32, F16, BF16) or a synthetic model");
  }
  return plan;
}

HostTensor quantize_tensor(const HostTensor& t, uint32_t type, int threads, QuantSearch search) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const bool to_f16 = type == uint32_t(GgmlType::F16);
  if (!to_f16) check_quant_row_length(GgmlQuantType(type), t.cols, t.name);
  const size_t row_bytes = to_f16 ? size_t(t.cols) * 2 : ggml_quant_row_bytes(GgmlQuantType(type), t.cols);
  auto buf = std::make_shared<std::vector<uint8_t>>(row_bytes * size_t(t.rows));
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(t.cols));
    for (int64_t r = r0; r < r1; ++r) {
      t.read_rows_f32(r, 1, row.data());  // engine row order (RoPE permutation already applied)
      uint8_t* dst = buf->data() + size_t(r) * row_bytes;
      if (to_f16) {
        for (int64_t c = 0; c < t.cols; ++c) {
          const uint16_t h = f32_to_f16(row[size_t(c)]);
          dst[2 * c] = uint8_t(h & 0xff);
          dst[2 * c + 1] = uint8_t(h >> 8);
        }
      } else {
        const std::vector<uint8_t> q = quantize_matrix(GgmlQuantType(type), row.data(), 1, t.cols, search);
        std::copy(q.begin(), q.end(), dst);
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, int((t.rows + 63) / 64)));
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work, t.rows * i / n, t.rows * (i + 1) / n);
  work(0, t.rows / n);
  for (auto& th : pool) th.join();
  HostTensor q;
  q.name = t.name;
  q.rows = t.rows;
  q.cols = t.cols;
  q.dtype = to_f16 ? DType::F16 : DType::F32;
  q.quant = to_f16 ? 0 : type;
  q.data = buf->data();
  q.owner = std::shared_ptr<const void>(buf, buf->data());
  return q;  // rows are stored in engine order: no rope_head_dim, no synthetic fill
}

std::vector<std::string> quantize_fallbacks(const std::vector<QuantizeTarget>& plan) {
  std::vector<std::string> out;
  for (const QuantizeTarget& q : plan)
    if (q.type != uint32_t(q.wanted))
      out.push_back(q.tensor->name + " (" + std::to_string(q.tensor->cols) + " wide): " +
                    ggml_quant_name(q.wanted) + " -> " + type_name(q.type));
  return out;
}

std::vector<QuantizeTarget> quantize_model(Model& model, const QuantizeScheme& scheme, int threads) {
  std::vector<QuantizeTarget> plan = quantize_plan(model, scheme);
  ModelWeights& w = model.weights;
  for (const QuantizeTarget& q : plan) {
    // The plan points into this (non-const) model: write each result back into its slot.
    HostTensor& slot = const_cast<HostTensor&>(*q.tensor);
    slot = quantize_tensor(slot, q.type, threads, scheme.search);
  }
  if (model.config.tied_embeddings || w.head.empty()) w.head = w.embedding;
  return plan;
}

}  // namespace llm
