// wire/strangers.hpp — connections that have not proven the job's secret
// yet.  Anyone who reaches a listening port may open them, so a listener
// keeps a bounded number (past it, the oldest that has sent nothing goes:
// a peer of the job answers at once), takes a few at a time between
// serving the others, and reports only the first refusals in full.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <string>

namespace accrun::wire {

inline constexpr int kAcceptsPerRound = 16;  // then the connections already taken are served
inline constexpr int kReportedRefusals = 10;

// Whether the peer has sent nothing that waits to be read (a closed
// connection counts as silent too).
inline bool silent(int fd) {
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

// Past a listener's limit, the stranger to let go: of [begin, end), oldest
// first, the first for which silent_one() holds, else the first (end when
// empty).  silent_one(stranger): it has sent nothing (see silent()).
template <class It, class SilentOne>
It stranger_to_drop(It begin, It end, SilentOne silent_one) {
  for (It i = begin; i != end; ++i)
    if (silent_one(*i)) return i;
  return begin;
}

// Counts refusals: the line to print for the next one ("" once the first
// kReportedRefusals were printed and the one saying so).
class RefusalLog {
 public:
  std::string next(const std::string& line) {
    const int n = count_++;
    if (n < kReportedRefusals) return line;
    if (n == kReportedRefusals)
      return std::to_string(kReportedRefusals) + " connections refused; further refusals are not reported";
    return std::string();
  }
  int count() const { return count_; }

 private:
  int count_ = 0;
};

}  // namespace accrun::wire
