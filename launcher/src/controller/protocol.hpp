// protocol.hpp — the messages between the job controller and the node
// agents (DESIGN.md §4), carried in wire frames (wire/frame.hpp) after the
// handshake that proves the job's secret (wire/auth.hpp).  Each payload is
// written with wire::Writer and read with wire::Reader; the field lists
// below are the whole format.
#pragma once

#include <cstdint>

namespace accrun::launcher::msg {

enum Type : uint16_t {
  // agent → controller: u32 index, str host name (as the agent sees it),
  // bool detected, str inventory JSON (accrun --detect --json, one host) or
  // the detection error.
  kHello = 1,
  // agent → controller: u32 index of a child agent whose launch agent
  // exited, i32 waitpid status.  The controller fails the job if that
  // agent never said hello.
  kLaunchExited = 2,
  // controller → agent: nothing; the agent ends (its ranks, if any, are
  // killed) and exits 0.
  kShutdown = 3,
};

}  // namespace accrun::launcher::msg
