// accrun/log.hpp — diagnostic logging to stderr, steered by ACCRUN_LOG
// (error | warn | info | debug; default warn), read once.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace accrun {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

inline LogLevel log_level() {
  static const LogLevel level = [] {
    const char* v = std::getenv("ACCRUN_LOG");
    if (v == nullptr) return LogLevel::kWarn;
    if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
    if (std::strcmp(v, "info") == 0) return LogLevel::kInfo;
    if (std::strcmp(v, "error") == 0) return LogLevel::kError;
    return LogLevel::kWarn;
  }();
  return level;
}

// log(LogLevel::kDebug, "group %s: backend %s", ...): one line, prefixed "accrun: ".
__attribute__((format(printf, 2, 3))) inline void log(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) > static_cast<int>(log_level())) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "accrun: %s\n", buf);
}

}  // namespace accrun
