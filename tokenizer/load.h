// Every way to get a Tokenizer, in one place: the factory that picks the kind (sentencepiece or byte-level BPE) for a
// file, for a vocabulary embedded in a checkpoint, and for a loaded model. The kinds (tokenizer/sentencepiece.h,
// tokenizer/bpe.h) and the GGUF vocabulary converter (tokenizer/sp_vocab.h) feed it and never call each other.
// Depends on models/ for the Model and its EmbeddedVocab; nothing in models/ knows of text.
#pragma once
#include <memory>
#include <string>

#include "models/model.h"
#include "models/vocab.h"
#include "tokenizer/tokenizer.h"

namespace llm {

// A sentencepiece model (tokenizer.model) or a Hugging Face tokenizer.json (byte-level BPE), by the file's name;
// throws llm::Error naming the path when it is missing, unreadable or of an unsupported kind.
std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path);

// A vocabulary embedded in a checkpoint (GGUF): "gpt2" -> byte-level BPE, "llama" -> sentencepiece.
std::unique_ptr<Tokenizer> tokenizer_from_vocab(const EmbeddedVocab& vocab);
// A GGUF tokenizer.ggml.model == "llama" vocabulary as a sentencepiece tokenizer (whatever vocab.model says):
// make_sentencepiece_from_proto(sentencepiece_proto_from_vocab(vocab), vocab.source).
std::unique_ptr<Tokenizer> make_sentencepiece_from_vocab(const EmbeddedVocab& vocab);

// The vocabulary of a tokenizer file as a GGUF vocabulary: tokenizer.model -> "llama" (sentencepiece_file_vocab),
// tokenizer.json -> "gpt2" (bpe_json_vocab).
EmbeddedVocab vocab_of_tokenizer_file(const std::string& path);
// The vocabulary to write into a GGUF for a model, by the same precedence as load_tokenizer: override_path, else the
// file beside the weights, else the checkpoint's own vocabulary; null when there is none (synthetic models).
std::shared_ptr<const EmbeddedVocab> vocab_for_gguf(const Model& model, const std::string& override_path);

// The tokenizer that goes with a model: override_path (tokenizer.model or tokenizer.json) when given, else the file
// found beside the weights, else the GGUF's own vocabulary; null when there is none (synthetic models). Checks the
// vocabulary fits the model.
std::unique_ptr<Tokenizer> load_tokenizer(const Model& model, const std::string& override_path);

}  // namespace llm
