// Shared plumbing of the libFuzzer targets: a private temp directory, file writing, and the verdict on exceptions
// (llm::Error is the expected way to refuse bad input; any other exception is a finding and aborts).
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "tokenizer/tokenizer.h"
#include "../utf8_check.h"

namespace llm_fuzz {

// One directory per process, created on first use (libFuzzer's -fork/-jobs workers each get their own) and
// removed at exit: libFuzzer ends a bounded run with exit(); a crash leaves the files for inspection. The name is
// never destroyed, so the exit handler cannot outlive it.
inline const std::string& temp_dir() {
  static const std::string* dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/llm_fuzz_XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    return new std::string(tmpl);
  }();
  static const bool cleanup = std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(*dir, ec);
  }) == 0;
  (void)cleanup;
  return *dir;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

[[noreturn]] inline void finding(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: FINDING: %s\n", target, what.c_str());
  std::abort();
}

// Runs f; llm::Error is fine when its message is one printable line (values from the input escaped with
// llm::printable: no control byte, at most 200 bytes of each, so the whole line stays short); any other exception is
// a finding.
template <typename F>
void expect_ok_or_error(const char* target, F f) {
  try {
    f();
  } catch (const llm::Error& e) {
    const std::string msg = e.what();
    if (msg.empty()) finding(target, "llm::Error with an empty message");
    for (unsigned char c : msg)
      if (c < 0x20 || c == 0x7F) finding(target, "control byte in an error message: " + llm::printable(msg, 4096));
    if (msg.size() > 4096) finding(target, "error message of " + std::to_string(msg.size()) + " bytes");
  } catch (const std::exception& e) {
    finding(target, std::string("exception other than llm::Error: ") + e.what());
  }
}

using llm_test::valid_utf8;

// decode(ids) and a StreamDecoder fed the same ids agree, and every piece of output is well-formed UTF-8.
inline void check_stream(const char* target, const llm::Tokenizer& tok, const std::vector<int>& ids) {
  const std::string whole = tok.decode(ids);
  if (!valid_utf8(whole)) finding(target, "malformed UTF-8 from decode");
  llm::StreamDecoder dec(tok);
  std::string all;
  for (int id : ids) {
    const std::string out = dec.push(id);
    if (!valid_utf8(out)) finding(target, "malformed UTF-8 from push: " + out);
    all += out;
  }
  const std::string rest = dec.flush();
  if (!valid_utf8(rest)) finding(target, "malformed UTF-8 from flush: " + rest);
  if (all + rest != whole) finding(target, "stream differs from decode: " + all + rest + " vs " + whole);
}

// An accepted tiny model runs one CPU forward step and, greedy and sampled, gives an in-range token, or stops with the
// non-finite-logits error, and only when the logits really hold NaN or Inf (as run-llama would stop).
inline void check_forward_and_sample(const char* target, const llm::Model& m) {
  llm::BackendOptions bo;
  bo.ctx_size = m.config.max_seq_len < 4 ? m.config.max_seq_len : 4;
  auto be = llm::make_cpu_backend(m, bo);
  const int token = m.config.vocab_size > 1 ? 1 : 0;
  be->prefill(&token, 1, 0);
  for (float temp : {0.0f, 1.0f}) {
    llm::SamplerParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 0.9f;
    bool non_finite = false;
    for (float v : be->logits()) non_finite = non_finite || !std::isfinite(v);
    try {
      const int id = be->sample(p, 0);
      if (non_finite) finding(target, "sampled id " + std::to_string(id) + " from non-finite logits");
      if (id < 0 || id >= m.config.vocab_size) finding(target, "sampled id " + std::to_string(id));
    } catch (const llm::Error& e) {
      const std::string what = e.what();
      if (!non_finite || what.find("the logits hold NaN or Inf") == std::string::npos)
        finding(target, "sample refused finite logits: " + what);
      return;  // the run stops here, as run-llama does
    }
  }
}

}  // namespace llm_fuzz
