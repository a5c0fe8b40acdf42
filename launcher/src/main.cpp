// The accrun program: parses the command line and runs one mode.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "accrun/commands.hpp"
#include "accrun/log.hpp"
#include "accrun/options.hpp"
#include "controller/output_queue.hpp"
#include "controller/slurm.hpp"
#include "version.hpp"

extern char** environ;

namespace {

// Puts /dev/null on each of fds 0-2 that is closed, before anything else
// opens a descriptor: otherwise the next one opened (the signalfd, the
// janitor's pipe, a rank's pipe) would become stdin/stdout/stderr and be
// read as input, written to as output, or replaced by the janitor's own
// redirection.  Returns false if one cannot be opened.
bool open_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    if (fd > 0) accrun::launcher::OutputQueue::closed_at_start(fd);
    int got = open("/dev/null", O_RDWR);  // the lowest free descriptor: `fd`
    if (got < 0) return false;
    if (got != fd) {
      dup2(got, fd);
      close(got);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace accrun::launcher;
  if (!open_standard_fds()) return 1;  // nowhere to say so either
  auto opts = parse_options(argc, argv);
  if (!opts) {
    std::fprintf(stderr, "accrun: %s\n", opts.status().message().c_str());
    return 2;
  }
  if (opts->help) return print_to_stdout(usage(), "the usage");
  if (opts->version) return print_to_stdout(version_text(), "the version");
  if (opts->daemon) return daemon_main(*opts, environ);
  if (accrun::Status s = check_environment(environ); !s) {
    std::fprintf(stderr, "accrun: %s\n", s.message().c_str());
    return 2;
  }
  if (std::string mark = forward_open_mpi_settings(*opts, environ); !mark.empty())
    accrun::log(accrun::LogLevel::kDebug,
                "inside another launcher's job (%s is set): no OMPI_MCA_* or PMIX_MCA_* "
                "variable is passed to the ranks unless named with -x",
                mark.c_str());
  // Inside a Slurm allocation the allocation is the host list.
  if (accrun::Status s = apply_slurm_allocation(*opts, environ); !s) {
    std::fprintf(stderr, "accrun: %s\n", s.message().c_str());
    return 2;
  }
  if (opts->detect) return detect_main(*opts, environ);
  if (opts->dry_run) return dry_run_main(*opts, environ);
  if (accrun::Status s = check_tmpdir(environ); !s) {
    std::fprintf(stderr, "accrun: %s\n", s.message().c_str());
    return 2;
  }
  return launch_main(*opts, environ);
}
