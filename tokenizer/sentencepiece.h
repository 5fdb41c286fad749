// The sentencepiece kind of Tokenizer: a tokenizer.model file, or serialized ModelProto bytes (how a GGUF "llama"
// vocabulary arrives, through tokenizer/sp_vocab.h). Over the sentencepiece library; knows nothing of other kinds.
#pragma once
#include <memory>
#include <string>

#include "models/vocab.h"
#include "tokenizer/tokenizer.h"

namespace llm {

// A sentencepiece model file (tokenizer.model); throws llm::Error naming the path when it is missing, unreadable or
// not a sentencepiece model.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);
// A sentencepiece tokenizer from serialized ModelProto bytes (LoadFromSerializedProto); `name` is for messages.
std::unique_ptr<Tokenizer> make_sentencepiece_from_proto(const std::string& proto, const std::string& name);

// A tokenizer.model as the GGUF "llama" vocabulary llama.cpp's converter (_create_vocab_sentencepiece) writes for it:
// every piece with its score, its type as the library classifies it (unknown 2, control 3, unused 5, byte 6, else
// normal 1), the library's bos/eos/unk/pad ids, add_bos, and add_space_prefix = the normalizer's add_dummy_prefix.
// Fails like load_sentencepiece on a file that is not a sentencepiece model.
EmbeddedVocab sentencepiece_file_vocab(const std::string& path);

}  // namespace llm
