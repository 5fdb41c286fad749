// The OpenAI API as the server speaks it: request bodies parsed and checked into plain structs, and the JSON of
// responses, stream chunks and errors. No network and no engine here: tests and the fuzz target drive it directly.
//
// Requests (POST /v1/chat/completions, POST /v1/completions). Fields read, each checked for type and range:
//   model (string, any value accepted: one model is served), messages (chat: [{role, content}], role system,
//   developer (= system), user or assistant; content a string or an array of {"type": "text", "text": ...} parts),
//   prompt (completions: a string, or an array of exactly one string), max_tokens / max_completion_tokens
//   (1 to 1000000; absent = up to the end of the context), temperature (0 to 2), top_p (0 to 1), top_k (extension,
//   0 = all, as run-llama's --top-k), ignore_eos (extension, bool, as llama.cpp's server: generate past the model's
//   end-of-text tokens, for benchmarks), seed (0 to 2^62), stop (a string or an array of at most 4 non-empty strings of
//   at most 256 bytes), stream (bool), stream_options.include_usage (bool), n (1 only). Other fields are ignored, as
//   clients send many (user, frequency_penalty, ...). Every failure is an ApiError naming the field.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "chat/template.h"  // ChatMessage

namespace llm::server {

// An error as the OpenAI API reports it: HTTP status and {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", "not_found_error", "server_error", ...
  std::string param;  // the field at fault, or ""
  std::string code;   // "context_length_exceeded", "invalid_api_key", ..., or ""
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = "",
           std::string code = "")
      : std::runtime_error(std::move(message)),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
};

constexpr size_t kMaxStopStrings = 4;       // as the OpenAI API
constexpr size_t kMaxStopBytes = 256;       // one stop string
constexpr int kMaxTokensLimit = 1000000;    // max_tokens at most (the context bounds it further)
constexpr int kMaxRequestJsonDepth = 32;    // a request nests 4 levels; deeper is refused while parsing

struct GenerationRequest {
  bool chat = false;
  std::string model;                   // as sent ("" when absent)
  std::vector<ChatMessage> messages;   // chat
  std::string prompt;                  // completions
  int max_tokens = 0;                  // 0: up to the end of the context
  float temperature = 1.0f;            // the OpenAI API's defaults
  float top_p = 1.0f;
  int top_k = 0;                       // 0 = all
  std::optional<uint64_t> seed;        // absent: the server picks one
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool ignore_eos = false;             // extension: the model's stop tokens do not end the generation
};

// The body as JSON: ApiError 400 for malformed JSON, a body that is not an object, or nesting deeper than
// kMaxRequestJsonDepth.
nlohmann::json parse_json_body(const std::string& body);

GenerationRequest parse_chat_request(const std::string& body);
GenerationRequest parse_completion_request(const std::string& body);

// ---- responses ----

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV rows were reused from the previous request
};

// {"error": {...}} of an ApiError.
std::string error_body(const ApiError& e);
nlohmann::json usage_json(const Usage& u);

// A whole (non-streamed) answer. finish_reason: "stop" or "length".
nlohmann::json chat_completion(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason, const Usage& u);
nlohmann::json text_completion(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason, const Usage& u);

// One stream chunk. Chat: delta {role} when role is given, {content} when content is given (both may be absent);
// finish_reason null unless given. Completions: text, finish_reason.
nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model, const char* role,
                          const std::string* content, const char* finish_reason);
nlohmann::json text_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                          const char* finish_reason);
// The usage chunk of stream_options.include_usage: empty choices, usage set.
nlohmann::json usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                           const Usage& u);

// "data: JSON\n\n", the server-sent event of one chunk; kSseDone ends the stream.
std::string sse_event(const nlohmann::json& chunk);
constexpr const char* kSseDone = "data: [DONE]\n\n";

// GET /v1/models.
nlohmann::json models_list(const std::string& model, int64_t created);

}  // namespace llm::server
