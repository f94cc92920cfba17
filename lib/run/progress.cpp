#include "run/progress.h"

#include <fmt/format.h>
#include <unistd.h>

namespace rssm {

namespace {
std::string hms(double s) {
  if (!(s >= 0) || s > 1e7) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60)
                   : fmt::format("{:02d}:{:02d}", t / 60, t % 60);
}
}  // namespace

Progress::Progress(std::string label, long long total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(isatty(fileno(stderr)) != 0) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

void Progress::update(long long done) {
  if (!enabled_ || total_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double el = std::chrono::duration<double>(now - start_).count();
  const double frac = static_cast<double>(done) / total_;
  const double eta = done > 0 ? el * (1.0 - frac) / frac : -1;
  if (tty_) {
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30, fill = static_cast<int>(frac * width);
    fmt::print(stderr, "\r{} [{}{}] {:5.1f}% {}/{} elapsed {} eta {}  ", label_, std::string(fill, '#'),
               std::string(width - fill, '.'), 100 * frac, done, total_, hms(el), hms(eta));
  } else {
    const int decile = static_cast<int>(frac * 10);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    fmt::print(stderr, "{}: {:3.0f}% ({}/{}) elapsed {} eta {}\n", label_, 100 * frac, done, total_, hms(el),
               hms(eta));
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_) fmt::print(stderr, "\n");
}

}  // namespace rssm
