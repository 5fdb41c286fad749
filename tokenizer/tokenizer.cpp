// The streaming decoder that rebuilds a tokenizer's decode() one id at a time. It sees a tokenizer only through the
// Tokenizer interface: the kinds (tokenizer/sentencepiece.cpp, tokenizer/bpe.cpp) and the factory that picks one
// (tokenizer/load.cpp) are elsewhere, and nothing here calls them.
#include "tokenizer/tokenizer.h"

#include "core/error.h"  // llm::fail, llm::printable
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

std::vector<int> encode_prompt(const Tokenizer& tok, const std::string& prompt) {
  if (prompt.empty() && tok.bos_id() < 0) fail("the prompt is empty and the vocabulary has no BOS token to start from");
  return tok.encode(prompt, prompt.empty() || (tok.adds_bos() && tok.bos_id() >= 0));
}

}  // namespace llm
