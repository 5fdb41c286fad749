// Routes, authentication, streaming and errors over cpp-httplib (see server/http_server.h).
#include "server/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>

#include "core/error.h"
#include "server/connection.h"

namespace llm::server {

using nlohmann::json;

bool authorized(const std::string& authorization, const std::string& api_key) {
  static const std::string kBearer = "Bearer ";
  const std::string given = authorization.compare(0, kBearer.size(), kBearer) == 0
                                ? authorization.substr(kBearer.size())
                                : std::string();
  // Every byte of the key is compared (against the given text or, past its end, against itself), so the time
  // depends on the lengths only.
  unsigned diff = given.size() == api_key.size() ? 0u : 1u;
  for (size_t i = 0; i < api_key.size(); ++i) {
    const unsigned char g = i < given.size() ? (unsigned char)given[i] : (unsigned char)~api_key[i];
    diff |= unsigned(g ^ (unsigned char)api_key[i]);
  }
  return !api_key.empty() && diff == 0;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

namespace {

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), kJson);
}

// The route a request counts under in /metrics (unknown paths share one label, so the label set stays bounded).
// The routes and the one method each takes (the handlers below): the metrics label and the 405's Allow.
struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
                             {"/health", "GET"}, {"/metrics", "GET"}};

std::string route_label(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return r.path;
  return "other";
}

// The method a route of ours takes, or null for a path that is not one.
const char* route_method(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return r.method;
  return nullptr;
}

// The SSE writer of one streamed job: role chunk first (chat), text chunks as they come, the closing chunk with the
// finish reason, the usage chunk when asked, then [DONE].
struct Stream {
  std::shared_ptr<Job> job;
  std::string id, model;
  int64_t created = 0;
  bool started = false;

  std::string piece_chunk(const std::string& text) const {
    return sse_event(job->req.chat ? chat_chunk(id, created, model, nullptr, &text, nullptr)
                                   : text_chunk(id, created, model, text, nullptr));
  }

  // One call of the chunked content provider: what is ready is written; false when the client has gone.
  bool step(httplib::DataSink& sink) {
    std::string out;
    if (!started && job->req.chat) {
      const std::string empty;
      out += sse_event(chat_chunk(id, created, model, "assistant", &empty, nullptr));
    }
    started = true;
    std::vector<std::string> pieces;
    const bool done = job->take_pieces(&pieces, 100);
    for (const std::string& p : pieces) out += piece_chunk(p);
    if (done) out += closing();
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      job->cancel = true;  // the worker stops after this token; the socket stays open until it has
      job->wait_done();
      return false;
    }
    if (done) sink.done();
    return true;
  }

  std::string closing() const {
    std::lock_guard<std::mutex> lock(job->m);
    std::string out;
    if (job->error) {  // a failure after the stream started: an error event, as the OpenAI API sends one
      out += "data: " + error_body(*job->error) + "\n\n";
    } else {
      const char* reason = job->finish_reason.c_str();
      out += sse_event(job->req.chat ? chat_chunk(id, created, model, nullptr, nullptr, reason)
                                     : text_chunk(id, created, model, "", reason));
      if (job->req.include_usage) out += sse_event(usage_chunk(job->req.chat, id, created, model, job->usage));
    }
    return out + kSseDone;
  }
};

}  // namespace

struct HttpServer::Impl {
  Generator& gen;
  Metrics& metrics;
  ServerInfo info;
  HttpOptions opt;
  httplib::Server svr;
  std::atomic<uint64_t> ids{0};
  uint64_t id_salt = std::random_device{}();

  Impl(Generator& g, Metrics& m, ServerInfo i, HttpOptions o)
      : gen(g), metrics(m), info(std::move(i)), opt(std::move(o)) {}

  std::string next_id(const char* prefix) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s-%08llx%06llx", prefix, (unsigned long long)(id_salt & 0xffffffffu),
                  (unsigned long long)ids.fetch_add(1));
    return buf;
  }

  void routes();
  void generation(const httplib::Request& req, httplib::Response& res, bool chat);
  void answer_whole(const std::shared_ptr<Job>& job, httplib::Response& res);
};

void HttpServer::Impl::routes() {
  svr.new_task_queue = [n = opt.threads] { return new httplib::ThreadPool(size_t(n)); };
  svr.set_payload_max_length(opt.max_body);
  svr.set_keep_alive_timeout(2);  // an idle connection holds a thread; stop() waits for them
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt.api_key.empty() || req.path == "/health" || authorized(req.get_header_value("Authorization"), opt.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401,
                             req.has_header("Authorization") ? "Incorrect API key provided."
                                                             : "You didn't provide an API key: send it as "
                                                               "'Authorization: Bearer KEY'.",
                             "authentication_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every status >= 400 passes here; those without a body yet (httplib's own: 404, 413, 400) get the error JSON.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* allowed = route_method(req.path);
    if (allowed && req.method != allowed) {  // a route of ours, asked with another method (httplib: 404 or 400)
      res.status = 405;
      res.set_header("Allow", allowed);
      send_error(res, ApiError(405, printable(req.method, 20) + " is not allowed on " + printable(req.path, 100) +
                                        "; use " + allowed, "invalid_request_error"));
    } else if (res.status == 404)
      send_error(res, ApiError(404, "no route " + printable(req.method, 20) + " " + printable(req.path, 100),
                               "not_found_error"));
    else if (res.status == 413)
      send_error(res, ApiError(413, "the request body is larger than the server's limit (--max-body)",
                               "invalid_request_error"));
    else
      send_error(res, ApiError(res.status, "bad request", "invalid_request_error"));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal error: " + printable(what), "server_error"));
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.request(route_label(req.path), res.status);
  });
  svr.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) { generation(req, res, true); });
  svr.Post("/v1/completions",
           [this](const httplib::Request& req, httplib::Response& res) { generation(req, res, false); });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_list(info.model, int64_t(std::time(nullptr))).dump(), kJson);
  });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJson);
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.text(info, gen.queue_depth(), gen.queue_limit()), "text/plain; version=0.0.4");
  });
}

void HttpServer::Impl::generation(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::shared_ptr<Job> job;
  try {
    job = std::make_shared<Job>(chat ? parse_chat_request(req.body) : parse_completion_request(req.body));
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  // The request's socket, polled by the worker after every token: a client that goes away cancels its generation.
  const int fd = find_connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (fd >= 0) job->client_alive = [fd] { return peer_connected(fd); };
  if (!gen.submit(job)) {
    res.set_header("Retry-After", std::to_string(opt.retry_after_s));
    return send_error(res, ApiError(503,
                                    "the server is busy: " + std::to_string(gen.queue_limit()) +
                                        " requests are waiting; retry later",
                                    "server_error", "", "queue_full"));
  }
  if (!job->req.stream) return answer_whole(job, res);
  job->wait_started();  // a prompt refused (too long, ...) is an error status, not a stream
  {
    std::lock_guard<std::mutex> lock(job->m);
    if (job->error) return send_error(res, *job->error);
    if (job->cancelled) return send_error(res, ApiError(499, "the client closed the connection"));
  }
  auto stream = std::make_shared<Stream>();
  stream->job = job;
  stream->id = next_id(chat ? "chatcmpl" : "cmpl");
  stream->model = info.model;
  stream->created = int64_t(std::time(nullptr));
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->step(sink); },
      [job](bool) {  // the connection ends: no generation may outlive its socket
        job->cancel = true;
        job->wait_done();
      });
}

void HttpServer::Impl::answer_whole(const std::shared_ptr<Job>& job, httplib::Response& res) {
  job->wait_done();
  std::lock_guard<std::mutex> lock(job->m);
  if (job->error) return send_error(res, *job->error);
  if (job->cancelled) return send_error(res, ApiError(499, "the client closed the connection"));
  const int64_t created = int64_t(std::time(nullptr));
  const json body = job->req.chat ? chat_completion(next_id("chatcmpl"), created, info.model, job->text,
                                                    job->finish_reason, job->usage)
                                  : text_completion(next_id("cmpl"), created, info.model, job->text,
                                                    job->finish_reason, job->usage);
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

HttpServer::HttpServer(Generator& generator, Metrics& metrics, ServerInfo info, HttpOptions opt)
    : impl_(std::make_unique<Impl>(generator, metrics, std::move(info), std::move(opt))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& s = *impl_;
  int port = s.opt.port;
  const bool ok = port == 0 ? (port = s.svr.bind_to_any_port(s.opt.host)) > 0 : s.svr.bind_to_port(s.opt.host, port);
  if (!ok) fail("cannot listen on ", s.opt.host, ":", s.opt.port, " (in use, or not an address of this machine)");
  return port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace llm::server
