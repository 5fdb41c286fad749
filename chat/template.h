// Chat templates: a conversation (system / user / assistant messages) rendered the way a model was trained to see
// it, for the four families recognised: ChatML (<|im_start|>), Llama 2 ([INST], <<SYS>>), Llama 3
// (<|start_header_id|>, <|eot_id|>) and Zephyr/TinyLlama (<|user|> ... </s>). Rendering yields pieces: text pieces
// are encoded as plain text (never parsed for special tokens), special pieces are looked up as single tokens.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace llm {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kChatML, kLlama2, kLlama3, kZephyr };

struct ChatPiece {
  bool special = false;  // true: one token spelled exactly `text` (e.g. "<|im_end|>", "<s>")
  std::string text;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatFormat format) : format_(format) {}
  ChatFormat format() const { return format_; }
  std::string name() const;  // "chatml", "llama2", "llama3", "zephyr"

  // Which family a Jinja chat template (GGUF tokenizer.chat_template, tokenizer_config.json's chat_template) is, by
  // its markers; nullopt when none matches.
  static std::optional<ChatFormat> detect(const std::string& jinja);
  // "chatml" | "llama2" | "llama3" | "zephyr" (for --chat-template); throws llm::Error listing the names otherwise.
  static ChatFormat from_name(const std::string& name);

  // The whole conversation, as Hugging Face's apply_chat_template renders it with this family's template; with
  // add_generation_prompt the opening of an assistant turn follows.
  std::vector<ChatPiece> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // What follows a generated assistant reply (whose tokens are already in the KV cache, its stop token not) to close
  // that turn and open the next: the end of the assistant turn, the user turn `user`, and the generation prompt.
  // Invariant (tested): text(render(m + [assistant r, user u], true)) ==
  //                     text(render(m, true)) + r' + text(after_reply(u)), r' = r as the template writes a reply.
  std::vector<ChatPiece> after_reply(const std::string& user) const;
  // Special pieces that end an assistant turn ("<|im_end|>", "<|eot_id|>", "</s>").
  std::vector<std::string> end_of_turn() const;

  // Concatenated text of pieces (special pieces as spelled), for comparisons with reference renderings.
  static std::string text(const std::vector<ChatPiece>& pieces);
  // Token ids: text pieces through tok.encode(text, false), special pieces through tok.token_id(); throws
  // llm::Error naming the piece when the vocabulary lacks a special token.
  static std::vector<int> encode(const Tokenizer& tok, const std::vector<ChatPiece>& pieces);

 private:
  ChatFormat format_;
};

}  // namespace llm
