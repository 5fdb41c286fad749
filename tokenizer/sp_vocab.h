// A GGUF "llama" vocabulary (tokenizer.ggml.* arrays) turned back into a sentencepiece ModelProto and tokenizer.
#pragma once
#include <memory>
#include <string>

#include "models/vocab.h"
#include "tokenizer/tokenizer.h"

namespace llm {

// Serialized sentencepiece ModelProto bytes for a GGUF tokenizer.ggml.model == "llama" vocabulary.
std::string sentencepiece_proto_from_vocab(const EmbeddedVocab& vocab);
// The tokenizer itself: make_sentencepiece_from_proto(sentencepiece_proto_from_vocab(v), v.source).
std::unique_ptr<Tokenizer> make_sentencepiece_from_vocab(const EmbeddedVocab& vocab);

}  // namespace llm
