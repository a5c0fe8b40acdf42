// object_fetch.hpp — the object store's client for objects that live on
// another host: it asks that host's node agent for the object's file
// (accrun/object_wire.hpp) and reads the bytes straight into the caller's
// buffer.  Blocking; each wait is bounded (connect 5 s per address, the
// agent's answer 5 s, 30 s without progress during a transfer) except a
// get's wait for its turn at a busy agent (object_fetch.cpp, await_turn).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "accrun/status.hpp"

namespace accrun::runtime {

// Reads the object file `file` from the agent serving at `server`
// ("address:port[,address:port...]", tried in order) on `host` into
// buf[0, len).  Errors: Code::kNotFound (the object was deleted),
// Code::kRemote (no address answers, the agent closed, the size differs
// from len, or once the bytes flow nothing moved for `stall`), Code::kSystem.
Status fetch_remote_object(const std::string& server, const std::string& host,
                           const std::string& file, void* buf, std::uint64_t len,
                           std::chrono::seconds stall = std::chrono::seconds(30));

// Deletes the object file on that host; its bytes return to that host's
// store accounting.  Errors as above.
Status delete_remote_object(const std::string& server, const std::string& host, const std::string& file);

}  // namespace accrun::runtime
