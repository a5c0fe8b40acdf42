/* The intruder of the security tests: a process of another local user,
 * started with the job's PMIx server address, namespace and rank taken from
 * a victim rank's environment and a faked uid (fake_id.c).  It tries, in
 * order, to join the job, read a rank's record, publish a key, abort the
 * job, and to talk to the server's port without the library.  It prints
 * one line per step, "<step> refused: <why>" or "<step> ACCEPTED ...", and
 * exits 0 whatever happened; the test reads the lines. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Connects to the server's port from PMIX_SERVER_URI4 and sends bytes: a
 * server that refuses us closes the connection at once. */
static void raw_attempt(void) {
  const char* uri = getenv("PMIX_SERVER_URI4");
  const char* at = uri ? strstr(uri, "tcp4://127.0.0.1:") : NULL;
  if (at == NULL) {
    printf("raw refused: no server address to try\n");
    return;
  }
  int port = atoi(at + strlen("tcp4://127.0.0.1:"));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    printf("raw refused: connect failed\n");
    close(fd);
    return;
  }
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char junk[64];
  memset(junk, 'A', sizeof junk);
  (void)!write(fd, junk, sizeof junk);
  char buf[16];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n <= 0) {
    printf("raw refused: the server closed the connection\n");
  } else {
    printf("raw ACCEPTED: the server answered %zd bytes\n", n);
  }
  close(fd);
}

int main(void) {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  int joined = rc == PMIX_SUCCESS;
  if (joined) {
    printf("join ACCEPTED as rank %u of %s\n", me.rank, me.nspace);
  } else {
    printf("join refused: %s\n", PMIx_Error_string(rc));
  }
  fflush(stdout);

  /* Rank 1's record, which only the server can hand out. */
  const char* ns = getenv("PMIX_NAMESPACE");
  pmix_proc_t victim;
  PMIX_LOAD_PROCID(&victim, ns ? ns : "", 1); /* the rank it does not claim to be */
  pmix_value_t* val = NULL;
  rc = PMIx_Get(&victim, "accrun.victim.record", NULL, 0, &val);
  if (rc == PMIX_SUCCESS && val != NULL && val->type == PMIX_STRING) {
    printf("read ACCEPTED: %s\n", val->data.string);
  } else {
    printf("read refused: %s\n", PMIx_Error_string(rc));
  }
  if (val != NULL) PMIX_VALUE_RELEASE(val);
  fflush(stdout);

  pmix_info_t info;
  PMIX_INFO_LOAD(&info, "accrun.intruder", "was here", PMIX_STRING);
  rc = PMIx_Publish(&info, 1);
  if (rc == PMIX_SUCCESS) {
    printf("publish ACCEPTED\n");
  } else {
    printf("publish refused: %s\n", PMIx_Error_string(rc));
  }
  PMIX_INFO_DESTRUCT(&info);
  fflush(stdout);

  /* PMIx_Abort without a connection would only crash the library: there is
   * nothing to send it on. */
  if (joined) {
    rc = PMIx_Abort(42, "\033[31mintruder aborted the job\033[0m", NULL, 0);
    if (rc == PMIX_SUCCESS) {
      printf("abort ACCEPTED\n");
    } else {
      printf("abort refused: %s\n", PMIx_Error_string(rc));
    }
  } else {
    printf("abort refused: no connection to the server to send it on\n");
  }
  fflush(stdout);
  raw_attempt();
  fflush(stdout);
  if (joined) PMIx_Finalize(NULL, 0);
  return 0;
}
