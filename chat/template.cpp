// Chat templates: the four families' Jinja templates re-implemented by hand, piece by piece, so that special tokens
// come only from the template and never from user text (see tests/data/chat_templates/ for the originals).
#include "chat/template.h"

#include <cstdint>

#include "core/error.h"

namespace llm {
namespace {

// Builds a piece list; adjacent text is merged so that each text piece is one segment between special tokens,
// which is how Hugging Face tokenizes a rendered prompt (split on special tokens, encode each segment).
class PieceBuilder {
 public:
  PieceBuilder& text(const std::string& s) {
    if (s.empty()) return *this;
    if (!pieces_.empty() && !pieces_.back().special) {
      pieces_.back().text += s;
    } else {
      pieces_.push_back({false, s});
    }
    return *this;
  }
  PieceBuilder& special(const std::string& s) {
    pieces_.push_back({true, s});
    return *this;
  }
  std::vector<ChatPiece> take() { return std::move(pieces_); }

 private:
  std::vector<ChatPiece> pieces_;
};

// Python's str.isspace() for one code point: what Jinja's `trim` filter and `.strip()` remove.
bool is_python_space(uint32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20)) return true;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Decodes the UTF-8 character starting at s[i] into cp and returns its length; an invalid byte counts as one
// non-space character (Python would never see one: its strings are already decoded).
size_t decode_at(const std::string& s, size_t i, uint32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    cp = 0xFFFD;
    return 1;
  }
  cp = n == 1 ? b : b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) {
      cp = 0xFFFD;
      return 1;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  return n;
}

// Python's str.strip() with no argument.
std::string py_strip(const std::string& s) {
  size_t begin = 0;
  while (begin < s.size()) {
    uint32_t cp;
    const size_t n = decode_at(s, begin, cp);
    if (!is_python_space(cp)) break;
    begin += n;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back up to the first byte of the last character
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    uint32_t cp;
    if (decode_at(s, start, cp) != end - start) start = end - 1, cp = 0xFFFD;
    if (!is_python_space(cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

// SmolLM2-135M-Instruct (ChatML): a default system turn when the first message is not a system message.
constexpr const char* kSmolLMDefaultSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

std::vector<ChatPiece> render_chatml(const std::vector<ChatMessage>& messages, bool gen) {
  PieceBuilder b;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && messages[0].role != "system") {
      b.special("<|im_start|>").text(std::string("system\n") + kSmolLMDefaultSystem).special("<|im_end|>").text("\n");
    }
    b.special("<|im_start|>").text(messages[i].role + "\n" + messages[i].content).special("<|im_end|>").text("\n");
  }
  if (gen) b.special("<|im_start|>").text("assistant\n");
  return b.take();
}

// Llama 2 chat: the system prompt folds into the first user turn; every user turn opens with <s>; the template has no
// generation prompt (a prompt ending in " [/INST]" is already one) and raises when roles do not alternate.
std::vector<ChatPiece> render_llama2(const std::vector<ChatMessage>& messages, bool /*gen*/) {
  const bool has_system = !messages.empty() && messages[0].role == "system";
  PieceBuilder b;
  for (size_t i = has_system ? 1 : 0, index0 = 0; i < messages.size(); ++i, ++index0) {
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != (index0 % 2 == 0)) {
      fail("chat template llama2: conversation roles must alternate user/assistant/user/assistant/... (message " +
           std::to_string(i) + " is '" + printable(m.role) + "')");
    }
    std::string content = m.content;
    if (index0 == 0 && has_system) content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
    if (m.role == "user") {
      b.special("<s>").text("[INST] " + py_strip(content) + " [/INST]");
    } else if (m.role == "assistant") {
      b.text(" " + py_strip(content) + " ").special("</s>");
    }
  }
  return b.take();
}

// Llama 3 Instruct: <|begin_of_text|> before the first message, contents trimmed.
std::vector<ChatPiece> render_llama3(const std::vector<ChatMessage>& messages, bool gen) {
  PieceBuilder b;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) b.special("<|begin_of_text|>");
    b.special("<|start_header_id|>").text(messages[i].role).special("<|end_header_id|>");
    b.text("\n\n" + py_strip(messages[i].content)).special("<|eot_id|>");
  }
  if (gen) b.special("<|start_header_id|>").text("assistant").special("<|end_header_id|>").text("\n\n");
  return b.take();
}

// Zephyr / TinyLlama chat: "<|role|>\n" + content + eos + "\n"; unknown roles are skipped; the generation prompt is
// written inside the loop, so an empty conversation gets none. The template writes no <s>.
std::vector<ChatPiece> render_zephyr(const std::vector<ChatMessage>& messages, bool gen) {
  PieceBuilder b;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "user" || role == "system" || role == "assistant") {
      b.text("<|" + role + "|>\n" + messages[i].content).special("</s>").text("\n");
    }
    if (i + 1 == messages.size() && gen) b.text("<|assistant|>\n");
  }
  return b.take();
}

}  // namespace

std::string ChatTemplate::name() const {
  switch (format_) {
    case ChatFormat::kChatML: return "chatml";
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kZephyr: return "zephyr";
  }
  return "?";
}

std::optional<ChatFormat> ChatTemplate::detect(const std::string& jinja) {
  auto has = [&](const char* marker) { return jinja.find(marker) != std::string::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) return ChatFormat::kLlama3;
  if (has("<|im_start|>")) return ChatFormat::kChatML;
  // Mistral's [INST] templates lack <<SYS>> and space replies differently: not Llama 2, so not guessed.
  if (has("[INST]") && has("<<SYS>>")) return ChatFormat::kLlama2;
  // Phi-3 also writes <|user|> but ends turns with <|end|>, not eos.
  if (has("<|user|>") && has("<|assistant|>") && !has("<|end|>")) return ChatFormat::kZephyr;
  return std::nullopt;
}

ChatFormat ChatTemplate::from_name(const std::string& name) {
  for (ChatFormat f : {ChatFormat::kChatML, ChatFormat::kLlama2, ChatFormat::kLlama3, ChatFormat::kZephyr}) {
    if (ChatTemplate(f).name() == name) return f;
  }
  fail("unknown chat template '" + printable(name) + "': expected one of chatml, llama2, llama3, zephyr");
}

std::vector<ChatPiece> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) const {
  switch (format_) {
    case ChatFormat::kChatML: return render_chatml(messages, add_generation_prompt);
    case ChatFormat::kLlama2: return render_llama2(messages, add_generation_prompt);
    case ChatFormat::kLlama3: return render_llama3(messages, add_generation_prompt);
    case ChatFormat::kZephyr: return render_zephyr(messages, add_generation_prompt);
  }
  return {};
}

std::vector<ChatPiece> ChatTemplate::after_reply(const std::string& user) const {
  PieceBuilder b;
  switch (format_) {
    case ChatFormat::kChatML:
      b.special("<|im_end|>").text("\n").special("<|im_start|>").text("user\n" + user).special("<|im_end|>");
      b.text("\n").special("<|im_start|>").text("assistant\n");
      break;
    case ChatFormat::kLlama2:
      // The reply as written is " " + strip(reply) + " ": the trailing space belongs to the reply, not to this.
      b.special("</s>").special("<s>").text("[INST] " + py_strip(user) + " [/INST]");
      break;
    case ChatFormat::kLlama3:
      b.special("<|eot_id|>").special("<|start_header_id|>").text("user").special("<|end_header_id|>");
      b.text("\n\n" + py_strip(user)).special("<|eot_id|>");
      b.special("<|start_header_id|>").text("assistant").special("<|end_header_id|>").text("\n\n");
      break;
    case ChatFormat::kZephyr:
      b.special("</s>").text("\n<|user|>\n" + user).special("</s>").text("\n<|assistant|>\n");
      break;
  }
  return b.take();
}

std::vector<std::string> ChatTemplate::end_of_turn() const {
  switch (format_) {
    case ChatFormat::kChatML: return {"<|im_end|>"};
    case ChatFormat::kLlama2: return {"</s>"};
    case ChatFormat::kLlama3: return {"<|eot_id|>"};
    case ChatFormat::kZephyr: return {"</s>"};
  }
  return {};
}

std::string ChatTemplate::text(const std::vector<ChatPiece>& pieces) {
  std::string out;
  for (const ChatPiece& p : pieces) out += p.text;
  return out;
}

std::vector<int> ChatTemplate::encode(const Tokenizer& tok, const std::vector<ChatPiece>& pieces) {
  std::vector<int> ids;
  for (const ChatPiece& p : pieces) {
    if (p.special) {
      const int id = tok.token_id(p.text);
      if (id < 0) fail("chat template: the vocabulary has no special token '" + printable(p.text) + "'");
      ids.push_back(id);
    } else {
      const std::vector<int> t = tok.encode(p.text, false);
      ids.insert(ids.end(), t.begin(), t.end());
    }
  }
  return ids;
}

}  // namespace llm
