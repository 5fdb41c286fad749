// libFuzzer target: arbitrary bytes as the body of a request to the server (server/api.h); the first byte picks
// /v1/chat/completions (odd) or /v1/completions (even). A refusal must be an ApiError with status 400 and a short
// printable message; an accepted request must hold values in their documented ranges, and its stop strings must cut
// text as the OpenAI API does (StopText fed the prompt in pieces == the prompt cut before the first stop string).
#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "server/api.h"
#include "server/stop_text.h"

namespace {

constexpr const char* kTarget = "fuzz_server_request";

void check_accepted(const llm::server::GenerationRequest& r) {
  if (r.max_tokens < 0 || r.max_tokens > llm::server::kMaxTokensLimit) llm_fuzz::finding(kTarget, "max_tokens");
  if (!(r.temperature >= 0.0f && r.temperature <= 2.0f)) llm_fuzz::finding(kTarget, "temperature");
  if (!(r.top_p >= 0.0f && r.top_p <= 1.0f)) llm_fuzz::finding(kTarget, "top_p");
  if (r.top_k < 0) llm_fuzz::finding(kTarget, "top_k");
  if (r.seed && *r.seed > (uint64_t(1) << 62)) llm_fuzz::finding(kTarget, "seed");
  if (r.stop.size() > llm::server::kMaxStopStrings) llm_fuzz::finding(kTarget, "stop count");
  if (r.chat == r.messages.empty()) llm_fuzz::finding(kTarget, "messages");
  for (const llm::ChatMessage& m : r.messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant") llm_fuzz::finding(kTarget, "role " + m.role);
  // The responses of an accepted request serialize (any text, any model name).
  const llm::server::Usage u{1, 2, 0};
  (void)llm::server::chat_completion("id", 0, r.model, r.prompt, "stop", u).dump();
  (void)llm::server::sse_event(llm::server::text_chunk("id", 0, r.model, r.prompt, nullptr));
  // Stop strings over the text (the prompt, or the last message) fed in pieces of 3 bytes.
  const std::string text = r.chat ? r.messages.back().content : r.prompt;
  size_t cut = std::string::npos;
  for (const std::string& s : r.stop) cut = std::min(cut, text.find(s));
  llm::server::StopText st(r.stop);
  std::string out;
  for (size_t i = 0; i < text.size(); i += 3) out += st.push(text.substr(i, 3));
  out += st.flush();
  if (out != text.substr(0, cut) || st.stopped() != (cut != std::string::npos))
    llm_fuzz::finding(kTarget, "stop strings cut the text wrongly");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    check_accepted(chat ? llm::server::parse_chat_request(body) : llm::server::parse_completion_request(body));
  } catch (const llm::server::ApiError& e) {
    const std::string msg = e.what();
    if (e.status != 400) llm_fuzz::finding(kTarget, "status " + std::to_string(e.status));
    if (msg.empty() || msg.size() > 1024) llm_fuzz::finding(kTarget, "error message of " + std::to_string(msg.size()));
    for (unsigned char c : msg)
      if (c < 0x20 || c == 0x7F) llm_fuzz::finding(kTarget, "control byte in: " + llm::printable(msg));
    (void)llm::server::error_body(e);
  } catch (const std::exception& e) {
    llm_fuzz::finding(kTarget, std::string("exception other than ApiError: ") + e.what());
  }
  return 0;
}
