// Stop strings as the OpenAI API applies them: the text is cut before the first occurrence of any stop string, and
// the stop string itself is not returned. Streamed text goes through push(), which returns only what can no longer
// become part of a stop string (a tail that is the beginning of one is held until the next piece decides it).
#pragma once
#include <string>
#include <vector>

namespace llm::server {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `piece`; returns the text now safe to emit. Once a stop string has matched, stopped() is true and
  // nothing more is returned.
  std::string push(const std::string& piece);
  // The text still held back (at the end of the generation).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace llm::server
