// libFuzzer target: the PMI-1/PMI-2 wire protocols as a rank writes them on
// its PMI_FD socket (launcher/src/pmi/).  Two ranks of one job share the
// key-value space; the input is cut at 0xff bytes into pieces fed to rank 0
// and rank 1 in turn, so fences, puts and gets of both interleave.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pmi/pmi_host.hpp"
#include "pmi/pmi_server.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace accrun::launcher::pmi;
  PmiJobInfo info{"accrun.fuzz", 2, 2, 0, "(vector,(0,1,2))", ""};
  PmiEvents events;
  PmiJobSpace space(2, &events);
  size_t replied = 0;
  auto send = [&replied](std::string_view b) { replied += b.size(); };
  std::unique_ptr<PmiConnection> conns[2] = {std::make_unique<PmiConnection>(0, &info, &space, send),
                                             std::make_unique<PmiConnection>(1, &info, &space, send)};
  bool open[2] = {true, true};
  int rank = 0;
  size_t start = 0;
  for (size_t i = 0; i <= size; ++i) {
    if (i < size && data[i] != 0xff) continue;
    if (open[rank]) open[rank] = conns[rank]->feed(reinterpret_cast<const char*>(data + start), i - start);
    rank ^= 1;
    start = i + 1;
  }
  return 0;
}
