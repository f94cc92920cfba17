// A progress line on stderr with rate and ETA. On a terminal it redraws one line; otherwise (logs, CI) it prints a
// line at every 10% so logs stay short.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace rssm {

class Progress {
 public:
  Progress(std::string label, long long total, bool enabled);
  void update(long long done);
  void finish();

 private:
  std::string label_;
  long long total_;
  bool enabled_, tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace rssm
