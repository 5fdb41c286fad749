// Tokenizer over the sentencepiece library, and the streaming decoder that rebuilds its decode() one id at a time.
#include "tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>  // sentencepiece::SentencePieceProcessor: the model, Encode, Decode

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"  // llm::fail
#include "tokenizer/bpe.h"
#include "tokenizer/sp_vocab.h"
#include "tokenizer/utf8.h"

namespace llm {
namespace {

const std::string kSpaceSymbol = "\xE2\x96\x81";      // U+2581 "▁", how sentencepiece spells a space
const std::string kReplacement = "\xEF\xBF\xBD";      // U+FFFD, what decode() prints for a malformed byte

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
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

// Length of the well-formed UTF-8 character at s[i] (exactly what the library's DecodeUTF8 accepts: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when there is none there. *incomplete says the bytes there
// are a proper prefix of a well-formed character that the next bytes may complete.
size_t utf8_char_at(const std::string& s, size_t i, bool* incomplete) {
  size_t len = 0;
  const Utf8Step step = utf8_step(s, i, &len);
  *incomplete = step == Utf8Step::kTruncated;
  return step == Utf8Step::kChar ? len : 0;
}

int byte_value(const std::string& piece) {  // "<0xNN>" -> NN
  if (piece.size() != 6 || !starts_with(piece, "<0x") || piece[5] != '>') return -1;
  return static_cast<int>(std::stoul(piece.substr(3, 2), nullptr, 16));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  const std::string json = ".json";
  if (path.size() >= json.size() && path.compare(path.size() - json.size(), json.size(), json) == 0)
    return load_bpe_json(path);
  return std::make_unique<SentencePieceTokenizer>(path);
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(const EmbeddedVocab& vocab) {
  if (vocab.model == "gpt2") return make_bpe_tokenizer(vocab);
  if (vocab.model == "llama") return make_sentencepiece_from_vocab(vocab);
  fail(vocab.source, ": tokenizer.ggml.model '", printable(vocab.model),
       "' is not supported (supported: gpt2 = byte-level BPE, llama = sentencepiece)");
}

std::unique_ptr<Tokenizer> make_sentencepiece_from_proto(const std::string& proto, const std::string& name) {
  return std::make_unique<SentencePieceTokenizer>(proto, name);
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool strip_leading_space)
    : tok_(tok), strip_leading_space_(strip_leading_space) {}

namespace {

// Byte-level BPE (HF decode: the bytes of every non-special id, then from_utf8_lossy over all of them): complete
// characters of *pending, one U+FFFD per maximal ill-formed subsequence; a proper prefix of a character at the end
// is kept for the next id unless the sequence has ended.
std::string drain_lossy(std::string* pending, bool ended) {
  std::string out;
  size_t i = 0;
  while (i < pending->size()) {
    size_t len = 0;
    const Utf8Step step = utf8_step(*pending, i, &len);
    if (step == Utf8Step::kTruncated && !ended) break;
    if (step == Utf8Step::kChar) {
      out.append(*pending, i, len);
    } else {
      out += kReplacement;
    }
    i += len;
  }
  pending->erase(0, i);
  return out;
}

}  // namespace

// Mirrors the library's Decode: a run of byte pieces is one byte string, resolved character by character when the
// run ends; every other piece is rendered on its own, and a leading "▁" is dropped only while nothing is printed.
// Byte-level BPE instead: special ids are skipped without ending anything (HF filters them out before decoding).
std::string StreamDecoder::push(int id) {
  const auto kind = tok_.piece_kind(id);
  if (tok_.byte_level()) {
    if (kind == Tokenizer::PieceKind::kControl) return "";
    pending_ += tok_.token_bytes(id);
    return drain_lossy(&pending_, false);
  }
  std::string out;
  if (kind == Tokenizer::PieceKind::kByte) {
    const int byte = byte_value(tok_.piece(id));
    if (byte < 0) fail("tokenizer: byte piece ", id, " is not spelled <0xNN>: ", printable(tok_.piece(id)));
    pending_.push_back(static_cast<char>(byte));
    out = drain(false);
  } else {
    out = drain(true);
    if (!out.empty()) first_ = false;
    if (kind == Tokenizer::PieceKind::kUnknown) {
      out += tok_.unk_surface();
    } else if (kind == Tokenizer::PieceKind::kText) {
      std::string piece = tok_.piece(id);
      const auto rule = tok_.leading_space();
      if (first_ && strip_leading_space_ && rule != Tokenizer::LeadingSpace::kKeep &&
          starts_with(piece, kSpaceSymbol)) {
        piece.erase(0, kSpaceSymbol.size());
        // With kDropAll decode() keeps dropping leading spaces until some text appears.
        if (rule == Tokenizer::LeadingSpace::kDropFirst) first_ = false;
      }
      out += replace_all(piece, kSpaceSymbol, " ");
    }
  }
  if (!out.empty()) first_ = false;
  return out;
}

std::string StreamDecoder::flush() {
  if (tok_.byte_level()) return drain_lossy(&pending_, true);
  std::string out = drain(true);
  if (!out.empty()) first_ = false;
  return out;
}

std::string StreamDecoder::drain(bool run_ended) {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    bool incomplete = false;
    const size_t len = utf8_char_at(pending_, i, &incomplete);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (incomplete && !run_ended) {
      break;  // wait for the rest of the character
    } else {
      out += kReplacement;  // one U+FFFD per byte that starts no valid character, as decode() does
      i += 1;
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace llm
