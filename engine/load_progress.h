// Progress of loading a model's weights onto the GPU (multi-gigabyte loads take a while: 70B Q4_K_M is ~42 GB): a bar
// with bytes and rate when the stream is a terminal, a plain line at every quarter otherwise; silent under 256 MiB.
// Plain C++ (no CUDA), so CI checks its lines; the CUDA engine's upload (BF16 copy) and prepack (quantized planes)
// each report through one.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace llm {

class LoadProgress {
 public:
  // what: "loading weights", "prepacking 'warp-dp4a'"; total: bytes that add() will be given in all.
  LoadProgress(std::string what, uint64_t total, std::FILE* out = stderr);
  LoadProgress(std::string what, uint64_t total, std::FILE* out, bool tty);  // tests: the terminal decided
  void add(uint64_t bytes);
  uint64_t done() const { return done_; }

  static constexpr uint64_t kQuietBelow = uint64_t(1) << 28;  // 256 MiB: nothing worth watching

 private:
  std::string what_;
  uint64_t total_ = 0, done_ = 0;
  int quarter_ = 0;
  std::FILE* out_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace llm
