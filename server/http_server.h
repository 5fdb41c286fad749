// The HTTP side of the OpenAI-compatible server (cpp-httplib): routes, the API key, body limits, server-sent events,
// and the error JSON of every failure. Routes:
//   POST /v1/chat/completions, POST /v1/completions   (stream: true answers text/event-stream chunks, then [DONE])
//   GET  /v1/models, GET /health, GET /metrics         (/health answers without the API key)
// Errors are the OpenAI API's {"error": {...}}: 400 malformed or out-of-range requests and prompts longer than the
// context, 401 a missing or wrong key (compared in constant time), 404 an unknown route, 413 a body over the limit,
// 503 with Retry-After when the queue is full, 500 a failed generation.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "server/generator.h"
#include "server/metrics.h"

namespace llm::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port (bind() returns it)
  std::string api_key;          // "": no key required
  size_t max_body = 1 << 20;    // request bodies larger than this: 413
  int threads = 32;             // connections served at once (each waiting request holds one)
  int retry_after_s = 1;        // the Retry-After of a 503
};

// The key check: true when `authorization` is "Bearer KEY" with KEY == api_key; the comparison takes the same time
// wherever the first difference is (it depends only on the lengths).
bool authorized(const std::string& authorization, const std::string& api_key);

// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost): anything else needs an API key.
bool is_loopback_host(const std::string& host);

class HttpServer {
 public:
  HttpServer(Generator& generator, Metrics& metrics, ServerInfo info, HttpOptions opt);
  ~HttpServer();
  // Binds host:port; returns the port. Throws llm::Error naming the address when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal watcher).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llm::server
