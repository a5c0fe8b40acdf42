/* An LD_PRELOAD shim for the security tests: makes the process claim the uid
 * and gid in ACCRUN_FAKE_UID / ACCRUN_FAKE_GID, as an intruder would to pass
 * a check that believes what a client says about itself. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static unsigned fake(const char* name, unsigned real) {
  const char* v = getenv(name);
  return v != NULL ? (unsigned)strtoul(v, NULL, 10) : real;
}

uid_t getuid(void) { return fake("ACCRUN_FAKE_UID", 0); }
uid_t geteuid(void) { return fake("ACCRUN_FAKE_UID", 0); }
gid_t getgid(void) { return fake("ACCRUN_FAKE_GID", 0); }
gid_t getegid(void) { return fake("ACCRUN_FAKE_GID", 0); }
