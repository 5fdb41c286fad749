// A GGUF "llama" vocabulary (tokenizer.ggml.* arrays) turned back into sentencepiece ModelProto bytes: plain data in,
// bytes out. It makes no tokenizer (tokenizer/load.cpp hands the bytes to tokenizer/sentencepiece.h).
#pragma once
#include <string>

#include "models/vocab.h"

namespace llm {

// Serialized sentencepiece ModelProto bytes for a GGUF tokenizer.ggml.model == "llama" vocabulary.
std::string sentencepiece_proto_from_vocab(const EmbeddedVocab& vocab);

}  // namespace llm
