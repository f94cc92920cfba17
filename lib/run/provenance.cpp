#include "run/provenance.h"

#include <omp.h>
#include <unistd.h>

#include <ctime>
#include <fmt/format.h>
#include <fstream>
#include <string>

#include "replayssm_version.h"

namespace rssm {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
    }
  return "unknown cpu";
}

}  // namespace

AttrMap provenance_attrs() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {{"replayssm_version", std::string(REPLAYSSM_VERSION)},
          {"git_commit", std::string(REPLAYSSM_GIT_COMMIT)},
          {"created", utc_now()},
          {"host", std::string(host)},
          {"device", fmt::format("cpu: {} ({} threads)", cpu_name(), omp_get_max_threads())}};
}

}  // namespace rssm
