// engine/load_progress.h.
#include "engine/load_progress.h"

#include <unistd.h>

namespace llm {

LoadProgress::LoadProgress(std::string what, uint64_t total, std::FILE* out)
    : LoadProgress(std::move(what), total, out, out != nullptr && isatty(fileno(out)) != 0) {}

LoadProgress::LoadProgress(std::string what, uint64_t total, std::FILE* out, bool tty)
    : what_(std::move(what)), total_(total), out_(out), tty_(tty) {}

void LoadProgress::add(uint64_t bytes) {
  done_ += bytes;
  if (total_ < kQuietBelow || out_ == nullptr) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double gb = double(done_) / 1e9, rate = s > 0 ? gb / s : 0.0;
  if (tty_) {
    const int width = 30, fill = int(double(width) * double(done_ < total_ ? done_ : total_) / double(total_));
    std::fprintf(out_, "\r%s [%.*s%*s] %.2f / %.2f GB  %.2f GB/s", what_.c_str(), fill,
                 "##############################", width - fill, "", gb, double(total_) / 1e9, rate);
    if (done_ >= total_) std::fputc('\n', out_);
  } else {
    for (; quarter_ < 4 && done_ * 4 >= total_ * uint64_t(quarter_ + 1); ++quarter_)
      std::fprintf(out_, "%s: %d%% (%.2f / %.2f GB, %.2f GB/s)\n", what_.c_str(), 25 * (quarter_ + 1), gb,
                   double(total_) / 1e9, rate);
  }
  std::fflush(out_);
}

}  // namespace llm
