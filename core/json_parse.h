// JSON from files: every json::parse of a file's text goes through parse_json, which refuses nesting deeper than
// kMaxJsonDepth levels while parsing (a 200 KB file can nest 100,000 levels, and dumping or copying such a value
// recurses once per level: a stack overflow). Syntax errors stay json::parse_error for the caller to word.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/error.h"

namespace llm {

constexpr int kMaxJsonDepth = 64;  // real configs and tokenizer.json files nest fewer than 10 levels

namespace detail {
inline nlohmann::json::parser_callback_t json_depth_guard(const std::string& what) {
  return [what](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    // depth = the number of enclosing objects/arrays: the outermost one starts at depth 0.
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      fail(what, ": JSON nesting deeper than ", kMaxJsonDepth, " levels");
    return true;
  };
}
}  // namespace detail

// parse_json(text or stream, "M/config.json"): the value, llm::Error "<what>: JSON nesting deeper than 64 levels",
// or json::parse_error.
template <typename Input>
nlohmann::json parse_json(Input&& input, const std::string& what) {
  return nlohmann::json::parse(std::forward<Input>(input), detail::json_depth_guard(what));
}

// The same over the bytes [first, last).
template <typename Iterator>
nlohmann::json parse_json(Iterator first, Iterator last, const std::string& what) {
  return nlohmann::json::parse(first, last, detail::json_depth_guard(what));
}

}  // namespace llm
