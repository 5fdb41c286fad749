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

namespace {

// NormalizerSpec.add_dummy_prefix (ModelProto field 3, its field 3; true when absent) read off the protobuf wire
// format: the library's header does not expose the normalizer spec. The last occurrence wins, as in protobuf.
bool add_dummy_prefix(const std::string& proto) {
  auto varint = [](const std::string& s, size_t& i, uint64_t* v) {
    *v = 0;
    for (int shift = 0; i < s.size() && shift < 64; shift += 7) {
      const uint8_t b = uint8_t(s[i++]);
      *v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  // Calls f(field, wire type, varint value, length-delimited bytes) for each field of `msg`; false when malformed.
  auto walk = [&](const std::string& msg, auto&& f) {
    for (size_t i = 0; i < msg.size();) {
      uint64_t tag = 0, v = 0;
      if (!varint(msg, i, &tag)) return false;
      const uint32_t wire = uint32_t(tag & 7), field = uint32_t(tag >> 3);
      std::string bytes;
      if (wire == 0) {
        if (!varint(msg, i, &v)) return false;
      } else if (wire == 1 || wire == 5) {
        i += wire == 1 ? 8 : 4;
      } else if (wire == 2) {
        if (!varint(msg, i, &v) || v > msg.size() - i) return false;
        bytes = msg.substr(i, size_t(v));
        i += size_t(v);
      } else {
        return false;
      }
      if (i > msg.size()) return false;
      f(field, wire, v, bytes);
    }
    return true;
  };
  std::string normalizer;
  walk(proto, [&](uint32_t field, uint32_t wire, uint64_t, const std::string& b) {
    if (field == 3 && wire == 2) normalizer = b;
  });
  bool prefix = true;
  walk(normalizer, [&](uint32_t field, uint32_t wire, uint64_t v, const std::string&) {
    if (field == 3 && wire == 0) prefix = v != 0;
  });
  return prefix;
}

}  // namespace

EmbeddedVocab sentencepiece_file_vocab(const std::string& path) {
  load_sentencepiece(path);  // the same checks and messages as loading it as a tokenizer
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(path);
  if (!status.ok()) fail("tokenizer model ", path, ": not a sentencepiece model (", one_line(status.ToString()), ")");
  EmbeddedVocab v;
  v.source = path;
  v.model = "llama";
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    v.tokens.push_back(sp.IdToPiece(id));
    v.scores.push_back(sp.GetScore(id));
    v.token_types.push_back(sp.IsUnknown(id) ? 2 : sp.IsControl(id) ? 3 : sp.IsUnused(id) ? 5 : sp.IsByte(id) ? 6 : 1);
  }
  v.bos_id = sp.bos_id();
  v.eos_id = sp.eos_id();
  v.unk_id = sp.unk_id();
  v.pad_id = sp.pad_id();
  v.add_bos = true;
  v.add_space_prefix = add_dummy_prefix(sp.serialized_model_proto());
  return v;
}

}  // namespace llm
