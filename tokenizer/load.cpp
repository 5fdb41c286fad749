// The tokenizer factory: which kind a file, an embedded vocabulary or a model gets.
#include "tokenizer/load.h"

#include "core/error.h"  // llm::fail, llm::printable
#include "tokenizer/bpe.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/sp_vocab.h"

namespace llm {

namespace {

// A Hugging Face tokenizer.json (byte-level BPE) by its name; anything else is taken for a sentencepiece model.
bool is_json(const std::string& path) {
  const std::string json = ".json";
  return path.size() >= json.size() && path.compare(path.size() - json.size(), json.size(), json) == 0;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path) {
  return is_json(path) ? load_bpe_json(path) : load_sentencepiece(path);
}

EmbeddedVocab vocab_of_tokenizer_file(const std::string& path) {
  return is_json(path) ? bpe_json_vocab(path) : sentencepiece_file_vocab(path);
}

std::shared_ptr<const EmbeddedVocab> vocab_for_gguf(const Model& model, const std::string& override_path) {
  const std::string& file = !override_path.empty() ? override_path : model.tokenizer_path;
  if (!file.empty()) return std::make_shared<const EmbeddedVocab>(vocab_of_tokenizer_file(file));
  return model.vocab;
}

std::unique_ptr<Tokenizer> make_sentencepiece_from_vocab(const EmbeddedVocab& vocab) {
  return make_sentencepiece_from_proto(sentencepiece_proto_from_vocab(vocab), vocab.source);
}

std::unique_ptr<Tokenizer> tokenizer_from_vocab(const EmbeddedVocab& vocab) {
  if (vocab.model == "gpt2") return make_bpe_tokenizer(vocab);
  if (vocab.model == "llama") return make_sentencepiece_from_vocab(vocab);
  fail(vocab.source, ": tokenizer.ggml.model '", printable(vocab.model),
       "' is not supported (supported: gpt2 = byte-level BPE, llama = sentencepiece)");
}

std::unique_ptr<Tokenizer> load_tokenizer(const Model& model, const std::string& override_path) {
  std::unique_ptr<Tokenizer> tok;
  std::string from;
  if (!override_path.empty()) {
    tok = load_tokenizer_file(from = override_path);
  } else if (!model.tokenizer_path.empty()) {
    tok = load_tokenizer_file(from = model.tokenizer_path);
  } else if (model.vocab) {
    tok = tokenizer_from_vocab(*model.vocab);
    from = model.source + " (its vocabulary)";
  } else {
    return nullptr;
  }
  if (tok->vocab_size() > model.config.vocab_size)
    fail("tokenizer ", from, " has ", tok->vocab_size(), " pieces, more than the model's vocabulary of ",
         model.config.vocab_size);
  return tok;
}

}  // namespace llm
