// object_fetch.hpp — the object store's client for objects that live on
// another host: it asks that host's node agent for the object's file
// (accrun/object_wire.hpp) and reads the bytes straight into the caller's
// buffer.  Blocking; each wait is bounded (connect 5 s per address, 30 s
// without progress during a transfer).
#pragma once

#include <cstdint>
#include <string>

#include "accrun/status.hpp"

namespace accrun::runtime {

// Reads the object file `file` from the agent serving at `server`
// ("address:port[,address:port...]", tried in order) on `host` into
// buf[0, len).  Errors: Code::kNotFound (the object was deleted),
// Code::kRemote (no address answers, the agent closed or stalled, the size
// differs from len), Code::kSystem.
Status fetch_remote_object(const std::string& server, const std::string& host, const std::string& file, void* buf,
                           std::uint64_t len);

// Deletes the object file on that host; its bytes return to that host's
// store accounting.  Errors as above.
Status delete_remote_object(const std::string& server, const std::string& host, const std::string& file);

}  // namespace accrun::runtime
