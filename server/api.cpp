// Request parsing and response JSON of the OpenAI API (see server/api.h).
#include "server/api.h"

#include <cmath>

#include "core/error.h"  // printable

namespace llm::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

// A value of `param` quoted for a message: printable, at most 60 bytes.
std::string shown(const json& v) { return printable(v.dump(-1, ' ', false, json::error_handler_t::replace), 60); }

const char* type_name(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// body[key] when present and not null.
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number_in(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) bad(param, "'" + param + "' must be a number, not " + type_name(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad(param, shown(v) + " is not valid for '" + param + "': it must be between " + shown(json(lo)) + " and " +
                   shown(json(hi)));
  return d;
}

long long integer_in(const json& v, const std::string& param, long long lo, long long hi) {
  if (!v.is_number_integer()) bad(param, "'" + param + "' must be an integer, not " + shown(v));
  // nlohmann keeps non-negative integers as unsigned: compare those as unsigned (a value past 2^63 stays large).
  const bool out = v.is_number_unsigned()
                       ? v.get<unsigned long long>() > (unsigned long long)hi ||
                             (lo > 0 && v.get<unsigned long long>() < (unsigned long long)lo)
                       : v.get<long long>() < lo || v.get<long long>() > hi;
  if (out)
    bad(param, shown(v) + " is not valid for '" + param + "': it must be between " + std::to_string(lo) + " and " +
                   std::to_string(hi));
  return v.get<long long>();
}

bool boolean(const json& v, const std::string& param) {
  if (!v.is_boolean()) bad(param, "'" + param + "' must be a boolean, not " + type_name(v));
  return v.get<bool>();
}

std::string string_field(const json& v, const std::string& param) {
  if (!v.is_string()) bad(param, "'" + param + "' must be a string, not " + type_name(v));
  return v.get<std::string>();
}

std::vector<std::string> stop_strings(const json& v) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxStopStrings)
      bad("stop", "'stop' holds " + std::to_string(v.size()) + " strings; at most " +
                      std::to_string(kMaxStopStrings) + " are allowed");
    for (const json& s : v) out.push_back(string_field(s, "stop"));
  } else {
    bad("stop", std::string("'stop' must be a string or an array of strings, not ") + type_name(v));
  }
  for (const std::string& s : out) {
    if (s.empty()) bad("stop", "'stop' strings must not be empty");
    if (s.size() > kMaxStopBytes)
      bad("stop", "a 'stop' string is " + std::to_string(s.size()) + " bytes long; at most " +
                      std::to_string(kMaxStopBytes) + " are allowed");
  }
  return out;
}

// The fields completions and chat share.
void common_fields(const json& body, GenerationRequest& r) {
  if (const json* v = field(body, "model")) r.model = string_field(*v, "model");
  const json* max_tokens = field(body, "max_completion_tokens");
  const char* max_name = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = field(body, "max_tokens");
    max_name = "max_tokens";
  }
  if (max_tokens) r.max_tokens = int(integer_in(*max_tokens, max_name, 1, kMaxTokensLimit));
  if (const json* v = field(body, "temperature")) r.temperature = float(number_in(*v, "temperature", 0.0, 2.0));
  if (const json* v = field(body, "top_p")) r.top_p = float(number_in(*v, "top_p", 0.0, 1.0));
  if (const json* v = field(body, "top_k")) r.top_k = int(integer_in(*v, "top_k", 0, 1 << 24));
  if (const json* v = field(body, "seed")) r.seed = uint64_t(integer_in(*v, "seed", 0, 1LL << 62));
  if (const json* v = field(body, "stop")) r.stop = stop_strings(*v);
  if (const json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(body, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(body, "n"); v && integer_in(*v, "n", 1, 128) != 1)
    bad("n", "only n = 1 is supported: the server generates one choice per request");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) bad("stream_options", std::string("'stream_options' must be an object, not ") + type_name(*v));
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
}

// A message's content: a string, or an array of text parts (concatenated).
std::string message_content(const json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(param, "'" + param + "' must be a string or an array of text parts, not " + type_name(v));
  std::string text;
  for (const json& part : v) {
    if (!part.is_object()) bad(param, "'" + param + "' parts must be objects, not " + type_name(part));
    const json* type = field(part, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text")
      bad(param, "'" + param + "': only parts of type \"text\" are supported");
    const json* t = field(part, "text");
    if (!t) bad(param, "'" + param + "': a text part needs 'text'");
    text += string_field(*t, param + ".text");
  }
  return text;
}

}  // namespace

json parse_json_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t event, json&) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
          depth >= kMaxRequestJsonDepth)
        throw ApiError(400, "the request body nests JSON deeper than " + std::to_string(kMaxRequestJsonDepth) +
                                " levels");
      return true;
    });
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number too large for a double
    throw ApiError(400, "the request body is not valid JSON: " + printable(e.what(), 200));
  }
  if (!j.is_object()) throw ApiError(400, std::string("the request body must be a JSON object, not ") + type_name(j));
  return j;
}

GenerationRequest parse_chat_request(const std::string& text) {
  const json body = parse_json_body(text);
  GenerationRequest r;
  r.chat = true;
  const json* messages = field(body, "messages");
  if (!messages) bad("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty())
    bad("messages", "'messages' must be a non-empty array of {role, content} objects");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(at, "'" + at + "' must be an object, not " + type_name(m));
    const json* role = field(m, "role");
    if (!role) bad(at + ".role", "'" + at + ".role' is required");
    std::string name = string_field(*role, at + ".role");
    if (name == "developer") name = "system";
    if (name != "system" && name != "user" && name != "assistant")
      bad(at + ".role", "'" + at + ".role' is " + shown(*role) +
                            "; the chat template takes system, developer, user and assistant messages");
    const json* content = field(m, "content");
    if (!content) bad(at + ".content", "'" + at + ".content' is required");
    r.messages.push_back({name, message_content(*content, at + ".content")});
  }
  common_fields(body, r);
  return r;
}

GenerationRequest parse_completion_request(const std::string& text) {
  const json body = parse_json_body(text);
  GenerationRequest r;
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string())
    r.prompt = (*prompt)[0].get<std::string>();
  else if (prompt->is_string())
    r.prompt = prompt->get<std::string>();
  else
    bad("prompt", "'prompt' must be a string (or an array of one string)");
  common_fields(body, r);
  return r;
}

// ---- responses ----

std::string error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {

json envelope(const char* object, const std::string& id, int64_t created, const std::string& model) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

json reason(const char* finish_reason) { return finish_reason ? json(finish_reason) : json(nullptr); }

}  // namespace

json chat_completion(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                     const std::string& finish_reason, const Usage& u) {
  json r = envelope("chat.completion", id, created, model);
  r["choices"] = json::array({{{"index", 0},
                               {"message", {{"role", "assistant"}, {"content", text}}},
                               {"logprobs", nullptr},
                               {"finish_reason", finish_reason}}});
  r["usage"] = usage_json(u);
  return r;
}

json text_completion(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                     const std::string& finish_reason, const Usage& u) {
  json r = envelope("text_completion", id, created, model);
  r["choices"] = json::array(
      {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}});
  r["usage"] = usage_json(u);
  return r;
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, const char* role,
                const std::string* content, const char* finish_reason) {
  json delta = json::object();
  if (role) delta["role"] = role;
  if (content) delta["content"] = *content;
  json r = envelope("chat.completion.chunk", id, created, model);
  r["choices"] =
      json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", reason(finish_reason)}}});
  return r;
}

json text_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                const char* finish_reason) {
  json r = envelope("text_completion", id, created, model);
  r["choices"] =
      json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", reason(finish_reason)}}});
  return r;
}

json usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model, const Usage& u) {
  json r = envelope(chat ? "chat.completion.chunk" : "text_completion", id, created, model);
  r["choices"] = json::array();
  r["usage"] = usage_json(u);
  return r;
}

std::string sse_event(const json& chunk) {
  return "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json models_list(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "llama-gemv"}}})}};
}

}  // namespace llm::server
