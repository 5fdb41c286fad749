// Tokenizer: text <-> token ids, the interface every kind implements: sentencepiece (tokenizer/sentencepiece.h:
// tokenizer.model, or a GGUF "llama" vocabulary via tokenizer/sp_vocab.h) and byte-level BPE (tokenizer/bpe.h:
// tokenizer.json, or a GGUF "gpt2" vocabulary). tokenizer/load.h picks the kind for a file, a vocabulary or a model.
// Plus a streaming decoder that never emits half a UTF-8 character.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace llm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  // Encodes text as the library does (leading-space rule included), with BOS first when add_bos.
  virtual std::vector<int> encode(const std::string& text, bool add_bos) const = 0;
  // Decodes a whole sequence to text, as the library does.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  // The piece string of one id (for display and debugging).
  virtual std::string piece(int id) const = 0;
  // The id of the piece spelled exactly `piece` (special tokens such as "<|im_end|>" included), or -1. This is how
  // chat templates get their special tokens: encode() never turns text into special tokens.
  virtual int token_id(const std::string& piece) const = 0;
  // Whether a prompt starts with BOS for this vocabulary (sentencepiece/llama: yes; SmolLM2's BPE: no).
  virtual bool adds_bos() const { return true; }
  // Byte-level BPE: every id stands for a byte string (see StreamDecoder); sentencepiece: false.
  virtual bool byte_level() const { return false; }
  // Byte-level BPE: the bytes one id contributes to decode() (empty for a special token), which may be part of a
  // UTF-8 character; others: the piece.
  virtual std::string token_bytes(int id) const { return piece(id); }

  // What StreamDecoder needs to rebuild decode() one id at a time, as the library classifies pieces.
  enum class PieceKind { kText, kControl, kUnknown, kByte };  // kControl (<s>, </s>) decodes to nothing
  virtual PieceKind piece_kind(int id) const = 0;
  // decode()'s text for an unknown id (the model's unk_surface, " ⁇ " by default).
  virtual std::string unk_surface() const = 0;
  // Which leading "▁" decode() drops while no text has been produced yet: none, the first one
  // (add_dummy_prefix), or every one (remove_extra_whitespaces).
  enum class LeadingSpace { kKeep, kDropFirst, kDropAll };
  virtual LeadingSpace leading_space() const = 0;
};

// Streaming decode: feed ids one at a time, get back only complete UTF-8 text. Handles byte-fallback tokens
// (<0xE2> <0x82> <0xAC> -> "€") and the leading-space rule (the first piece's "▁" becomes no space when
// strip_leading_space, as llama2.c prints after BOS).
// The rule, exactly: push()+flush() over a sequence == decode() of it when strip_leading_space (control ids are
// skipped, so "<s> ▁Once" gives "Once"); without it, the same except that the leading "▁"s decode() drops (see
// Tokenizer::leading_space) come out as spaces. Bytes of a character split across byte tokens are held until it is
// complete; a non-byte id or flush() ends the run and each byte that cannot start a valid character becomes
// U+FFFD, as decode() does, so no output is ever malformed UTF-8.
// Byte-level BPE (Tokenizer::byte_level): every id is a byte string (token_bytes), held until its characters are
// complete; special ids are skipped; ill-formed bytes become U+FFFD as decode()'s from_utf8_lossy does.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool strip_leading_space = true);
  // Returns the text that is now complete (possibly empty).
  std::string push(int id);
  // Returns whatever is still held (invalid trailing bytes become U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool strip_leading_space_;
  bool first_ = true;    // no text produced and no leading space dropped yet: decode()'s "at start" state
  std::string pending_;  // bytes of an incomplete UTF-8 character

  std::string drain(bool run_ended);  // complete characters of pending_; all of it when run_ended
};

// A prompt's ids as run-llama and the server's /v1/completions encode it: BOS first where the vocabulary wants one
// and has one, and always for an empty prompt (the model needs a token). Throws llm::Error for an empty prompt when
// the vocabulary has no BOS.
std::vector<int> encode_prompt(const Tokenizer& tok, const std::string& prompt);

}  // namespace llm
