/* nsinit: PID 1 of one test bed host (tests/testbed).
 * Reaps orphans (sshd children, slurmstepd, daemons that double-fork).
 * On SIGTERM/SIGINT/SIGHUP it SIGTERMs every process of its PID namespace,
 * waits up to 2 s and exits; the kernel then SIGKILLs whatever is left.
 * `nsinit --check` exits 0 at once (can the state dir run programs?). */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
  (void)argv;
  if (argc > 1) return 0;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal; /* no SA_RESTART: wait() returns EINTR */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  while (!stop)
    if (wait(NULL) < 0 && errno == ECHILD) sleep(1);
  kill(-1, SIGTERM); /* every process of this PID namespace but PID 1 */
  for (int i = 0; i < 20; i++) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD) break;
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}
