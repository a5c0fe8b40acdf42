/* A library planted in a job's working directory under the names of the
 * libraries accrun and libaccrun need: loading it leaves a marker there. */
#include <fcntl.h>
#include <unistd.h>

__attribute__((constructor)) static void planted_loaded(void) {
  int fd = open("planted-library-was-loaded", O_CREAT | O_WRONLY, 0644);
  if (fd >= 0) close(fd);
}
