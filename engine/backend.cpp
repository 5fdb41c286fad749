// make_backend: picks the CPU reference or the CUDA engine from BackendOptions::device.
#include "engine/backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/gemv_table.h"

namespace llm {

#ifndef LLM_HAVE_CUDA
namespace {
const char* kNoCudaBuild = "this build has no CUDA engine (built without a CUDA toolkit)";
}  // namespace

// With CUDA these are defined in engine/cuda/cuda_engine.cu.
bool cuda_device_available() { return false; }
std::string cuda_unavailable_reason() { return kNoCudaBuild; }
#endif

std::string cuda_no_device_message() {
  return "no CUDA device is available (" + cuda_unavailable_reason() + "); the CUDA programs need an NVIDIA GPU";
}

void require_cuda_device() {
#ifdef LLM_HAVE_CUDA
  if (!cuda_device_available()) fail(cuda_no_device_message());
#else
  fail(kNoCudaBuild);
#endif
}

int default_ctx_size(const ModelConfig& c, std::FILE* note, int cap) {
  if (c.max_seq_len <= cap) return c.max_seq_len;
  if (note)
    std::fprintf(note, "context: %d positions (model maximum %d; raise with --ctx-size)\n", cap, c.max_seq_len);
  return cap;
}

int sampling_vocab(const ModelConfig& c, int tokenizer_vocab) {
  return tokenizer_vocab > 0 && tokenizer_vocab < c.vocab_size ? tokenizer_vocab : 0;
}

std::vector<float> Backend::verify(const int*, int n, int pos) {
  fail(name(), " backend: speculative decoding needs verify() (", n, " tokens at position ", pos,
       "), not supported by this backend");
}

std::vector<int> Backend::verify_argmax(const int* tokens, int n, int pos, int vocab_limit,
                                        std::vector<float>* margins) {
  const std::vector<float> rows = verify(tokens, n, pos);
  const size_t V = n > 0 ? rows.size() / size_t(n) : 0;
  const int lim = vocab_limit > 0 ? int(std::min<size_t>(size_t(vocab_limit), V)) : int(V);
  std::vector<int> ids(size_t(n > 0 ? n : 0));
  if (margins) margins->assign(ids.size(), INFINITY);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = rows.data() + i * V;
    ids[i] = std::all_of(row, row + lim, [](float v) { return std::isfinite(v); }) ? argmax(row, lim) : -1;
    if (margins && ids[i] >= 0) (*margins)[i] = top2_margin(row, lim, ids[i]);
  }
  return ids;
}

int Backend::exact_rewind_end(int) const { return INT_MAX; }

void Backend::prepare_verify(int) {}

void Backend::rewind(int pos) {
  fail(name(), " backend: speculative decoding needs rewind() (to position ", pos, "), not supported by this backend");
}

void Backend::sample_async(const SamplerParams& p, uint64_t step) {
  last_started_ = sample(p, step);
  started_.push_back(last_started_);
}

void Backend::decode_sampled(int pos) {
  if (last_started_ < 0)
    fail(name(), " backend: decode_sampled at position ", pos, " with no sample started since the last step");
  const int id = last_started_;
  last_started_ = -1;
  decode(id, pos);
}

int Backend::wait_sampled() {
  if (started_.empty()) fail(name(), " backend: wait_sampled with no sample started");
  const int id = started_.front();
  started_.pop_front();
  return id;
}

void Backend::drop_sampled() { started_.clear(); }

void fail_non_finite_logits(uint64_t step) {
  throw NonFiniteLogits("step " + std::to_string(step) +
                        ": the logits hold NaN or Inf (model weights or config produce non-finite values)");
}

ResolvedDevice resolve_device(const std::string& requested) {
  if (requested == "cpu" || requested == "cuda") return {requested, ""};
  if (!requested.empty() && requested != "auto")
    fail("unknown device '", printable(requested), "' (expected cpu, cuda or auto)");
  if (cuda_device_available()) return {"cuda", ""};
  return {"cpu", "--device auto chose the CPU: no CUDA device is available (" + cuda_unavailable_reason() + ")"};
}

void check_gemv_for_device(const std::string& what, const std::string& gemv, const ResolvedDevice& device) {
  check_gemv_mapping(what, gemv, /*on_cpu=*/false);  // an unknown name, whatever the device
  if (device.device != "cpu") return;
  try {
    check_gemv_mapping(what, gemv, /*on_cpu=*/true);
  } catch (const Error& e) {
    if (device.why.empty()) throw;
    throw Error(std::string(e.what()) + "; " + device.why);
  }
}

std::string kv_dtype_refusal(KvDtype kv, const ResolvedDevice& device) {
  if (device.device != "cuda") return "";
  if (kv == KvDtype::F32)
    return "--kv-dtype f32 is CPU-only: the CUDA engine stores the KV cache in BF16 (use --device cpu, or --kv-dtype "
           "bf16)";
  return "";
}

std::string tp_device_refusal(int tp, const ResolvedDevice& device) {
#ifdef LLM_HAVE_CUDA
  if (tp <= 1 || device.device != "cuda") return "";
  if (const char* on = std::getenv("LLM_TP_CUDA"); on && std::string(on) == "1") return "";
  return "--tp " + std::to_string(tp) +
         " on CUDA is experimental, not yet verified past small models (README: Tensor parallelism): set "
         "LLM_TP_CUDA=1 to run it, or --device cpu for the simulated ranks";
#else
  if (tp <= 1 || device.device != "cuda") return "";
  return "--tp " + std::to_string(tp) +
         ": this build has no CUDA engine (--tp runs as simulated ranks on the CPU reference: --device cpu)";
#endif
}

std::unique_ptr<Backend> make_backend(const Model& model, const BackendOptions& opt) {
  const ResolvedDevice device = resolve_device(opt.device);
  check_gemv_for_device("--gemv", opt.gemv, device);
  if (const std::string why = kv_dtype_refusal(opt.kv_dtype, device); !why.empty()) fail(why);
  if (const std::string why = tp_device_refusal(opt.tp, device); !why.empty()) fail(why);
  BackendOptions o = opt;
  o.device = device.device;
  if (o.device == "cpu") return o.tp > 1 ? make_cpu_tp_backend(model, o) : make_cpu_backend(model, o);
  require_cuda_device();
#ifdef LLM_HAVE_CUDA
  if (o.tp > 1) return make_cuda_tp_backend(model, o);
  return make_cuda_backend(model, o);
#else
  fail(kNoCudaBuild);
#endif
}

}  // namespace llm
