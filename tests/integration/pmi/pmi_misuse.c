/* A PMI-1 client that speaks the wire protocol by hand (test_pmi_mpich.cpp):
 *   pmi_misuse R [linger]  rank R sends barrier_in twice at once; the others
 *                          one barrier, half a second later.  With "linger"
 *                          rank R then sleeps 30 s instead of exiting.
 *   pmi_misuse R leave     rank R exits with status 3 right after init,
 *                          without finalize; the others as above.
 * Prints each reply; exits 0 once a reply came for every request it waits on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fd;

static void say(const char* line) {
  if (write(fd, line, strlen(line)) < 0) exit(4);
}

static void answer(void) {
  char buf[1024];
  size_t n = 0;
  while (n < sizeof buf - 1) {
    ssize_t got = read(fd, buf + n, 1);
    if (got <= 0) break;
    if (buf[n++] == '\n') break;
  }
  buf[n] = '\0';
  printf("rank %s: %s", getenv("PMI_RANK"), n ? buf : "(closed)\n");
  fflush(stdout);
}

int main(int argc, char** argv) {
  const char* env = getenv("PMI_FD");
  if (env == NULL || argc < 2) return 2;
  fd = atoi(env);
  int bad = atoi(getenv("PMI_RANK")) == atoi(argv[1]);
  int leave = argc > 2 && strcmp(argv[2], "leave") == 0;
  say("cmd=init pmi_version=1 pmi_subversion=1\n");
  answer();
  if (bad && leave) return 3;
  /* The others come later, so the fence is still open when the second comes. */
  if (!bad) usleep(500000);
  say(bad ? "cmd=barrier_in\ncmd=barrier_in\n" : "cmd=barrier_in\n");
  answer();
  if (bad && argc > 2) sleep(30); /* a misbehaving rank that lingers: the job must not wait for it */
  return 0;
}
