// Tokenizer over the sentencepiece library (tokenizer.model files and ModelProto bytes).
#include "tokenizer/sentencepiece.h"

#include <sentencepiece_processor.h>  // sentencepiece::SentencePieceProcessor: the model, Encode, Decode

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"  // llm::fail, llm::printable

namespace llm {
namespace {

const std::string kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁", how sentencepiece spells a space

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The library's messages may span lines (and quote the file); ours are one line with no control bytes.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return printable(s, 300);
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec) || !std::ifstream(path, std::ios::binary)) {
      fail("tokenizer model ", path, ": cannot open file (missing, unreadable or not a regular file)");
    }
    sentencepiece::util::Status status;
    try {
      status = sp_.Load(path);
    } catch (const std::exception& e) {  // the library's file reader can throw instead of returning a status
      fail("tokenizer model ", path, ": cannot read (", one_line(e.what()), ")");
    }
    if (!status.ok()) {
      fail("tokenizer model ", path, ": not a sentencepiece model (", one_line(status.ToString()), ")");
    }
    finish_load();
  }

  // A model given as serialized ModelProto bytes (built from a GGUF "llama" vocabulary); `name` is for messages.
  SentencePieceTokenizer(const std::string& proto, const std::string& name) : path_(name) {
    const auto status = sp_.LoadFromSerializedProto(proto);
    if (!status.ok()) fail("tokenizer of ", name, ": the sentencepiece library refused the vocabulary (",
                           one_line(status.ToString()), ")");
    finish_load();
  }

  int vocab_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }

  std::vector<int> encode(const std::string& text, bool add_bos) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) fail("tokenizer ", path_, ": cannot encode text (", one_line(status.ToString()), ")");
    if (add_bos) {
      if (bos_id() < 0) fail("tokenizer ", path_, ": BOS requested but the model has no BOS piece");
      ids.insert(ids.begin(), bos_id());
    }
    return ids;
  }

  std::string decode(const std::vector<int>& ids) const override {
    for (int id : ids) check_id(id);
    std::string text;
    const auto status = sp_.Decode(ids, &text);
    if (!status.ok()) fail("tokenizer ", path_, ": cannot decode ids (", one_line(status.ToString()), ")");
    return text;
  }

  std::string piece(int id) const override {
    check_id(id);
    return sp_.IdToPiece(id);
  }

  int token_id(const std::string& piece) const override {
    const int id = sp_.PieceToId(piece);  // the unknown id when absent
    return id >= 0 && id < vocab_size() && sp_.IdToPiece(id) == piece ? id : -1;
  }

  PieceKind piece_kind(int id) const override {
    check_id(id);
    if (sp_.IsControl(id)) return PieceKind::kControl;
    if (sp_.IsUnknown(id)) return PieceKind::kUnknown;
    if (sp_.IsByte(id)) return PieceKind::kByte;
    return PieceKind::kText;
  }

  std::string unk_surface() const override { return unk_surface_; }
  LeadingSpace leading_space() const override { return leading_space_; }

 private:
  void check_id(int id) const {
    if (id < 0 || id >= vocab_size()) {
      fail("tokenizer ", path_, ": token id ", id, " out of range, expected 0 <= id < vocab size ", vocab_size());
    }
  }

  // The header's C++ API does not expose the normalizer spec (add_dummy_prefix, remove_extra_whitespaces), so ask
  // the library's own decode() what it does with a leading "▁" piece, rather than reimplementing the rule.
  void finish_load() {
    unk_surface_ = sp_.unk_id() >= 0 ? sp_.DecodeIds({sp_.unk_id()}) : "";
    leading_space_ = probe_leading_space();
  }

  LeadingSpace probe_leading_space() const {
    int word = -1;  // a text piece "▁x..." with no second space after the first
    for (int id = 0; id < vocab_size() && word < 0; ++id) {
      const std::string& p = sp_.IdToPiece(id);
      if (piece_kind(id) == PieceKind::kText && starts_with(p, kSpaceSymbol) && p.size() > kSpaceSymbol.size() &&
          p.compare(kSpaceSymbol.size(), kSpaceSymbol.size(), kSpaceSymbol) != 0) {
        word = id;
      }
    }
    const int space = sp_.PieceToId(kSpaceSymbol);
    const bool has_space = space >= 0 && piece_kind(space) == PieceKind::kText && sp_.IdToPiece(space) == kSpaceSymbol;
    if (word < 0) {
      // Only the lone "▁" piece (if any) carries a space: probe with it (found by fuzz_gguf on a GGUF vocabulary).
      if (!has_space || sp_.DecodeIds({space}) == " ") return LeadingSpace::kKeep;
      return sp_.DecodeIds({space, space}).empty() ? LeadingSpace::kDropAll : LeadingSpace::kDropFirst;
    }
    const std::string alone = sp_.DecodeIds({word});
    if (starts_with(alone, " ")) return LeadingSpace::kKeep;
    if (has_space && sp_.DecodeIds({space, word}) == alone) return LeadingSpace::kDropAll;
    return LeadingSpace::kDropFirst;
  }

  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  std::string unk_surface_;
  LeadingSpace leading_space_ = LeadingSpace::kKeep;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

std::unique_ptr<Tokenizer> make_sentencepiece_from_proto(const std::string& proto, const std::string& name) {
  return std::make_unique<SentencePieceTokenizer>(proto, name);
}

}  // namespace llm
