// The sentencepiece kind of Tokenizer: a tokenizer.model file, or serialized ModelProto bytes (how a GGUF "llama"
// vocabulary arrives, through tokenizer/sp_vocab.h). Over the sentencepiece library; knows nothing of other kinds.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace llm {

// A sentencepiece model file (tokenizer.model); throws llm::Error naming the path when it is missing, unreadable or
// not a sentencepiece model.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);
// A sentencepiece tokenizer from serialized ModelProto bytes (LoadFromSerializedProto); `name` is for messages.
std::unique_ptr<Tokenizer> make_sentencepiece_from_proto(const std::string& proto, const std::string& name);

}  // namespace llm
