// Writes a loaded Model and its vocabulary as one GGUF v3 "llama" file that our loader (models/gguf.h) and llama.cpp
// load alike: llama.* hyper-parameters, general.alignment 32 with every tensor's data aligned to it, llama.cpp's tensor
// names (token_embd, blk.N.attn_norm/attn_q/attn_k/attn_v/attn_output/ffn_norm/ffn_gate/ffn_up/ffn_down,
// output_norm, output unless tied, rope_freqs for Llama 3 scaling), and the tokenizer.ggml.* vocabulary.
//
// What goes to disk, tensor by tensor, streamed (at most one quantized tensor in memory at a time):
//   * rows in the ENGINE's order: q/k rows in interleaved-RoPE order, which is what llama.cpp's converter writes (it
//     permutes Hugging Face's rotate-half rows) and what our GGUF loader reads without permuting (rope_head_dim = 0).
//     A tensor loaded with rope_head_dim (a Hugging Face q/k) is written row by row through HostTensor::file_row, so
//     write -> load gives the same engine rows; a quantized one moves whole rows of blocks (rows are independent);
//   * quantized tensors as their GGML blocks; F32/F16/BF16 matrices in their own type (synthetic weights as BF16,
//     exact); 1-D tensors (norms) as F32, as llama.cpp's converter writes them (exact for every float type);
//   * with a QuantizeScheme (models/quantize_model.h), each tensor the scheme quantizes is quantized just before it
//     is written, rows in parallel.
// Checked by hand against llama.cpp (llama-cpp-python 0.3.36's, CPU build): stories260K written as F32 gives
// llama.cpp's logits within 3.1e-7 relative of ours (F32 KV cache, no flash attention) and the same token ids;
// SmolLM2's Q4_1 GGUF rewritten keeps every tensor byte for byte and llama.cpp's logits bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/quantize_model.h"
#include "models/vocab.h"

namespace llm {

struct GgufWriteOptions {
  std::optional<QuantizeScheme> quantize;  // quantize the float weights on the way (refused on quantized ones)
  int threads = 0;                         // quantization threads (0 = the hardware's)
  std::string name;                        // general.name (default: the model's source)
  // Called after each tensor: its GGUF name, data bytes written so far and in total.
  std::function<void(const std::string& tensor, uint64_t done, uint64_t total)> progress;
};

struct GgufWriteSummary {
  uint64_t file_bytes = 0;
  std::map<std::string, int> tensors_by_type;  // "Q4_K" -> count, every tensor of the file
  std::vector<std::string> fallbacks;          // quantize_fallbacks of the scheme (empty without one)
  std::string vocab;                           // "llama (512 tokens)", "stand-in llama (32000 tokens)", ...
};

// Writes `model` with `vocab` (null: stand_in_vocab, for a model without a tokenizer) to `path`. A vocabulary
// shorter than the embedding is padded with unused "[PADn]" tokens as llama.cpp's converter pads it (llama.cpp wants
// one token per embedding row); a longer one is refused. tokenizer.ggml.bos/eos_token_id are the model's
// (config.bos_id, config.eos_ids[0]). Throws llm::Error with one line naming the file (or tensor) on failure, and
// leaves no partial file behind.
GgufWriteSummary write_gguf(const Model& model, const EmbeddedVocab* vocab, const std::string& path,
                            const GgufWriteOptions& opt = {});

// A stand-in sentencepiece ("llama") vocabulary of exactly vocab_size tokens for a model that has no tokenizer
// (synthetic:NAME): "<unk>" (unknown) at the lowest free id, "<s>" and "</s>" (control) at bos_id and eos_id, the
// byte tokens "<0x00>".."<0xFF>" (type 6; as many as fit when vocab_size < 259, "<0x0A>" always among them) at the
// next free ids, then normal filler pieces "▁tN" (N = the id). llama.cpp's vocabulary loader accepts it (it needs
// the byte tokens, e.g. "<0x0A>" for its newline) and so does ours.
EmbeddedVocab stand_in_vocab(int vocab_size, int bos_id, int eos_id);

}  // namespace llm
