// libFuzzer target: arbitrary bytes as a GGUF file. Refusal must be llm::Error; the parser must place every
// accepted tensor inside the file, and (when tiny) must run one CPU forward step and sample an in-range token or
// stop with the non-finite-logits error (only when the logits really hold NaN or Inf). An embedded vocabulary (gpt2 or llama) must become a tokenizer or
// an llm::Error, and an accepted one must encode, decode and stream-decode consistently.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "fuzz_common.h"
#include "models/gguf.h"
#include "models/model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr const char* kTarget = "fuzz_gguf";

// Every tensor the parser accepted lies inside the mapping, with the byte count its type and dims imply.
void check_parsed(const llm::GgufFile& f) {
  const uint8_t* base = f.mapping->data();
  const size_t size = f.mapping->size();
  for (const auto& kv : f.tensors) {
    const llm::GgufTensor& t = kv.second;
    if (t.data < base || t.nbytes > size || t.data + t.nbytes > base + size)
      llm_fuzz::finding(kTarget, "tensor outside the file: " + t.name);
    if ((t.data - base) % f.alignment != 0) llm_fuzz::finding(kTarget, "misaligned tensor: " + t.name);
  }
}

void check_accepted(const llm::Model& m, size_t size) {
  const llm::ModelWeights& w = m.weights;
  if (int(w.layers.size()) != m.config.n_layers) llm_fuzz::finding(kTarget, "layer count differs from the metadata");
  std::vector<const llm::HostTensor*> all{&w.embedding, &w.final_norm, &w.head};
  for (const llm::LayerWeights& l : w.layers)
    for (const llm::HostTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up,
                                     &l.w_down})
      all.push_back(t);
  for (const llm::HostTensor* t : all)
    if (t->rows <= 0 || t->cols <= 0 || !t->data) llm_fuzz::finding(kTarget, "empty or unbacked tensor: " + t->name);
  if (size > (1 << 16) || int64_t(m.config.vocab_size) * m.config.dim > (1 << 16)) return;  // keeps runs fast

  llm_fuzz::check_forward_and_sample(kTarget, m);
}

// The vocabulary as a tokenizer: ids in range, stream == decode, well-formed UTF-8, for a fixed text and for ids made
// from the file's own bytes.
void check_vocab(const llm::Model& m, const uint8_t* data, size_t size) {
  if (!m.vocab) return;
  const auto tok = llm::tokenizer_from_vocab(*m.vocab);
  for (const std::string text : {"Hello world, 123 caf\xC3\xA9 \xE2\x82\xAC!", "  a  b\n\nab", ""}) {
    const std::vector<int> ids = tok->encode(text, false);
    for (int id : ids)
      if (id < 0 || id >= tok->vocab_size()) llm_fuzz::finding(kTarget, "encode gave an id out of range");
    llm_fuzz::check_stream(kTarget, *tok, ids);
  }
  std::vector<int> raw;
  for (size_t i = 0; i + 1 < size && i < 512; i += 2) raw.push_back((data[i] | data[i + 1] << 8) % tok->vocab_size());
  llm_fuzz::check_stream(kTarget, *tok, raw);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = llm_fuzz::temp_dir() + "/model.gguf";
  llm_fuzz::write_file(path, data, size);
  llm_fuzz::expect_ok_or_error(kTarget, [&] { check_parsed(llm::open_gguf(path)); });
  llm_fuzz::expect_ok_or_error(kTarget, [&] {
    const llm::Model m = llm::load_gguf(path);
    check_accepted(m, size);
    check_vocab(m, data, size);
  });
  return 0;
}
