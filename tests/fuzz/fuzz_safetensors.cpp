// libFuzzer target: arbitrary bytes as a .safetensors file (first byte even) or as model.safetensors.index.json
// beside the two real shards of a tiny model (first byte odd). Refusal must be llm::Error; an accepted file must
// have every tensor inside the data section, sized by its shape, with no two tensors sharing a byte.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "models/hf_writer.h"
#include "models/model.h"
#include "models/safetensors.h"

namespace {

constexpr const char* kTarget = "fuzz_safetensors";
volatile double g_sink;

// Independent re-check of what open_safetensors promises, from the raw bytes.
void check_accepted(const llm::SafetensorsFile& f, const uint8_t* bytes, size_t size) {
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | bytes[i];
  const uint8_t* base = f.mapping->data();
  const uint64_t data_begin = 8 + hlen;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end) relative to the file start
  for (const auto& kv : f.tensors) {
    const llm::SafetensorsTensor& t = kv.second;
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) llm_fuzz::finding(kTarget, "negative dimension in " + kv.first);
      numel *= uint64_t(d);
    }
    if (t.nbytes != numel * llm::dtype_size(t.dtype)) llm_fuzz::finding(kTarget, "nbytes != shape for " + kv.first);
    const uint64_t begin = uint64_t(static_cast<const uint8_t*>(t.data) - base);
    if (begin < data_begin || begin + t.nbytes > size) llm_fuzz::finding(kTarget, "tensor outside data: " + kv.first);
    if (t.nbytes) spans.emplace_back(begin, begin + t.nbytes);
  }
  if (spans.size() <= 256)
    for (size_t i = 0; i < spans.size(); ++i)
      for (size_t j = i + 1; j < spans.size(); ++j)
        if (spans[i].first < spans[j].second && spans[j].first < spans[i].second)
          llm_fuzz::finding(kTarget, "overlapping tensors accepted");
}

void fuzz_file(const uint8_t* data, size_t size) {
  const std::string path = llm_fuzz::temp_dir() + "/fuzz.safetensors";
  llm_fuzz::write_file(path, data, size);
  llm_fuzz::expect_ok_or_error(kTarget, [&] { check_accepted(llm::open_safetensors(path), data, size); });
}

// A real two-shard checkpoint written once; each input replaces only its index.
const std::string& sharded_dir() {
  static const std::string dir = [] {
    std::string d = llm_fuzz::temp_dir() + "/sharded";
    llm::HfWriteOptions opt;
    opt.dtype = llm::DType::F32;
    opt.shards = 2;
    llm::write_hf_model(llm::load_synthetic("tiny-gqa"), d, opt);
    return d;
  }();
  return dir;
}

void fuzz_index(const uint8_t* data, size_t size) {
  const std::string& dir = sharded_dir();
  llm_fuzz::write_file(dir + "/model.safetensors.index.json", data, size);
  llm_fuzz::expect_ok_or_error(kTarget, [&] {
    llm::Model m = llm::load_hf_dir(dir);
    // Touch every byte of an accepted checkpoint: a view past its mapping faults here.
    double sum = 0;
    for (const llm::LayerWeights& l : m.weights.layers)
      for (const llm::HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        for (float v : t->to_f32()) sum += v;
    for (float v : m.weights.embedding.to_f32()) sum += v;
    g_sink = sum;  // keeps the reads
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1)
    fuzz_index(data + 1, size - 1);
  else
    fuzz_file(data + 1, size - 1);
  return 0;
}
