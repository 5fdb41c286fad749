// A GGUF "llama" vocabulary -> sentencepiece ModelProto bytes (hand-written protobuf wire format).
// The Debian sentencepiece package ships no sentencepiece_model.pb.h, so the few fields the library reads at
// encode/decode time are written by hand; field numbers are those of sentencepiece_model.proto.
#include "tokenizer/sp_vocab.h"

#include <cstdint>
#include <cstring>
#include <unordered_set>

#include "core/error.h"  // llm::fail
#include "tokenizer/utf8.h"  // utf8_step: pieces must be well-formed text

namespace llm {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kLengthDelimited = 2, kFixed32 = 5;

// GGUF tokenizer.ggml.token_type values, which llama.cpp's converter took from the sentencepiece piece types
// (and which are the sentencepiece ModelProto.SentencePiece.Type enum values, so they pass through unchanged).
constexpr int32_t kTypeUnknown = 2, kTypeByte = 6;
constexpr int32_t kTypeMin = 1, kTypeMax = 6;

constexpr uint64_t kModelTypeBpe = 2;  // TrainerSpec.ModelType: llama vocabularies are sentencepiece BPE

// Appends protobuf fields to a byte string.
class ProtoWriter {
 public:
  void varint_field(uint32_t field, uint64_t v) {
    tag(field, kVarint);
    varint(v);
  }
  // int32 fields are sign-extended to 64 bits on the wire, so -1 takes ten bytes.
  void int32_field(uint32_t field, int32_t v) { varint_field(field, static_cast<uint64_t>(static_cast<int64_t>(v))); }
  void bool_field(uint32_t field, bool v) { varint_field(field, v ? 1 : 0); }
  void float_field(uint32_t field, float v) {
    tag(field, kFixed32);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));  // little-endian
  }
  // Strings, bytes and embedded messages alike: length, then the bytes.
  void bytes_field(uint32_t field, const std::string& bytes) {
    tag(field, kLengthDelimited);
    varint(bytes.size());
    out_ += bytes;
  }
  const std::string& bytes() const { return out_; }

 private:
  void tag(uint32_t field, uint32_t wire_type) { varint((static_cast<uint64_t>(field) << 3) | wire_type); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

// Fails unless the arrays agree in length, every type is a known one and the special ids name real tokens.
void validate(const EmbeddedVocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) fail("vocabulary of ", v.source, ": tokenizer.ggml.tokens is empty");
  if (!v.scores.empty() && v.scores.size() != n) {
    fail("vocabulary of ", v.source, ": tokenizer.ggml.scores has ", v.scores.size(), " entries, expected ", n,
         " (one per token)");
  }
  if (v.token_types.size() != n) {
    fail("vocabulary of ", v.source, ": tokenizer.ggml.token_type has ", v.token_types.size(), " entries, expected ",
         n, " (one per token)");
  }
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = v.token_types[i];
    if (t < kTypeMin || t > kTypeMax) {
      fail("vocabulary of ", v.source, ": token ", i, " has token_type ", t, ", expected 1..6");
    }
    // The library refuses both; saying which token is more useful than its message.
    if (v.tokens[i].empty()) fail("vocabulary of ", v.source, ": token ", i, " is an empty string");
    // A sentencepiece piece is text: decode() copies it out as it is, so a malformed one would print malformed UTF-8
    // (raw bytes are <0xNN> byte pieces, which are ASCII).
    for (size_t at = 0, len = 0; at < v.tokens[i].size(); at += len)
      if (utf8_step(v.tokens[i], at, &len) != Utf8Step::kChar)
        fail("vocabulary of ", v.source, ": token ", i, " (", printable(v.tokens[i], 60),
             ") is not well-formed UTF-8");
    if (!seen.insert(v.tokens[i]).second) {
      fail("vocabulary of ", v.source, ": token ", i, " (\"", printable(v.tokens[i]), "\") appears twice");
    }
  }
  const std::pair<const char*, int> ids[] = {{"bos", v.bos_id}, {"eos", v.eos_id}, {"unk", v.unk_id},
                                             {"pad", v.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<int>(n)) {
      fail("vocabulary of ", v.source, ": ", name, " token id ", id, " is out of range [0, ", n, ")");
    }
  }
}

// The id the library will treat as unknown: it goes by piece type, so the GGUF's unk id must agree with it.
int unknown_id(const EmbeddedVocab& v) {
  int found = -1;
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    if (v.token_types[i] != kTypeUnknown) continue;
    if (found >= 0) fail("vocabulary of ", v.source, ": tokens ", found, " and ", i, " are both of type unknown");
    found = static_cast<int>(i);
  }
  if (found < 0) fail("vocabulary of ", v.source, ": no token has token_type 2 (unknown); sentencepiece needs one");
  if (v.unk_id >= 0 && v.unk_id != found) {
    fail("vocabulary of ", v.source, ": unknown token id ", v.unk_id, " but token ", found, " has the unknown type");
  }
  return found;
}

// The library finds BOS/EOS/PAD by piece string (TrainerSpec.bos_piece...), not by id, so each is named by the
// string of the GGUF's id; an empty string when absent, which resolves to no id.
std::string piece_or_empty(const EmbeddedVocab& v, int id) { return id >= 0 ? v.tokens[id] : std::string(); }

std::string trainer_spec(const EmbeddedVocab& v, int unk_id) {
  bool byte_fallback = false;
  for (int32_t t : v.token_types) byte_fallback |= (t == kTypeByte);
  ProtoWriter w;
  w.varint_field(3, kModelTypeBpe);                    // model_type
  w.int32_field(4, static_cast<int32_t>(v.tokens.size()));  // vocab_size
  w.bool_field(35, byte_fallback);                     // byte_fallback
  w.int32_field(40, unk_id);                           // unk_id
  w.int32_field(41, v.bos_id);                         // bos_id
  w.int32_field(42, v.eos_id);                         // eos_id
  w.int32_field(43, v.pad_id);                         // pad_id
  w.bytes_field(45, v.tokens[unk_id]);                 // unk_piece
  w.bytes_field(46, piece_or_empty(v, v.bos_id));      // bos_piece
  w.bytes_field(47, piece_or_empty(v, v.eos_id));      // eos_piece
  w.bytes_field(48, piece_or_empty(v, v.pad_id));      // pad_piece
  return w.bytes();
}

// llama.cpp's "llama" tokenizer keeps every space (no collapsing, no trimming) and escapes them as "▁"; the
// only normalizer switch a GGUF records is add_space_prefix.
std::string normalizer_spec(const EmbeddedVocab& v) {
  ProtoWriter w;
  w.bytes_field(1, "identity");             // name
  w.bool_field(3, v.add_space_prefix);      // add_dummy_prefix
  w.bool_field(4, false);                   // remove_extra_whitespaces
  w.bool_field(5, true);                    // escape_whitespaces
  return w.bytes();
}

}  // namespace

std::string sentencepiece_proto_from_vocab(const EmbeddedVocab& vocab) {
  validate(vocab);
  const int unk_id = unknown_id(vocab);
  ProtoWriter model;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    ProtoWriter piece;
    piece.bytes_field(1, vocab.tokens[i]);                                  // piece
    piece.float_field(2, vocab.scores.empty() ? 0.0f : vocab.scores[i]);  // score
    piece.varint_field(3, static_cast<uint64_t>(vocab.token_types[i]));   // type
    model.bytes_field(1, piece.bytes());                                    // ModelProto.pieces
  }
  model.bytes_field(2, trainer_spec(vocab, unk_id));  // ModelProto.trainer_spec
  model.bytes_field(3, normalizer_spec(vocab));       // ModelProto.normalizer_spec
  return model.bytes();
}

}  // namespace llm
