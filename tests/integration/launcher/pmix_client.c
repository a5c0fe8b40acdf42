/* A PMIx client for the launcher tests: checks what accrun's PMIx server
 * tells it (rank, size, local rank), exchanges data through put/commit/
 * fence/get, and exercises the job's name directory (publish is
 * create-if-absent, lookup waits, lookup times out).  Prints one "OK" line
 * and exits 0, or prints what failed and exits 1. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* argv[1] "die-connecting": the process closes its connection and ends
 * (status 0) as soon as its PMIx_Init has sent the server its connection
 * request (one send), before the server answers, as a rank killed while it
 * connects does.  The library's sends are this program's send, which takes
 * the place of libc's. */
static int die_connecting;

ssize_t send(int fd, const void* buf, size_t len, int flags) {
  ssize_t n = syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
  if (die_connecting && n == (ssize_t)len) {
    close(fd);
    _exit(0);
  }
  return n;
}

#define CHECK(cond, ...)                            \
  do {                                              \
    if (!(cond)) {                                  \
      fprintf(stderr, "pmix_client: " __VA_ARGS__); \
      fputc('\n', stderr);                          \
      PMIx_Finalize(NULL, 0);                       \
      return 1;                                     \
    }                                               \
  } while (0)

int main(int argc, char** argv) {
  die_connecting = argc > 1 && strcmp(argv[1], "die-connecting") == 0;
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "pmix_client: PMIx_Init: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  /* argv[1] "quit=R": rank R leaves without PMIx_Finalize, status 0 */
  if (argc > 1 && strncmp(argv[1], "quit=", 5) == 0 && (unsigned)atoi(argv[1] + 5) == me.rank) _exit(0);
  if (argc > 1 && strncmp(argv[1], "quit=", 5) == 0) {
    sleep(30); /* the survivors are terminated by accrun */
    return 0;
  }
  /* argv[1] "fail=R": rank R ends with status 3 right after PMIx_Init; the
   * others go on as with "fence-after=1" */
  if (argc > 1 && strncmp(argv[1], "fail=", 5) == 0) {
    if ((unsigned)atoi(argv[1] + 5) == me.rank) _exit(3);
    argv[1] = "fence-after=1";
  }
  /* argv[1] "fence-after=S": sleeps S seconds, then fences the whole job
   * and prints how the fence ended (one with a lost host's ranks fails,
   * never hangs) */
  if (argc > 1 && strncmp(argv[1], "fence-after=", 12) == 0) {
    sleep((unsigned)atoi(argv[1] + 12));
    rc = PMIx_Fence(NULL, 0, NULL, 0);
    printf("fence rank %u: %s\n", me.rank, PMIx_Error_string(rc));
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return 0;
  }
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* val = NULL;
  rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
  CHECK(rc == PMIX_SUCCESS, "get job size: %s", PMIx_Error_string(rc));
  unsigned size = val->data.uint32;
  PMIX_VALUE_RELEASE(val);
  /* argv[1] "control": rank 0 asks the server what it knows
   * (PMIx_Query_info) and, once every rank is up, terminates the last rank
   * with PMIx_Job_control, which waits to be terminated; the job ends
   * without a failure. */
  if (argc > 1 && strcmp(argv[1], "control") == 0) {
    rc = PMIx_Fence(NULL, 0, NULL, 0);
    CHECK(rc == PMIX_SUCCESS, "control fence: %s", PMIx_Error_string(rc));
    if (me.rank == size - 1 && size > 1) {
      sleep(30); /* terminated by rank 0's request */
      return 3;
    }
    if (me.rank == 0) {
      pmix_query_t* q;
      PMIX_QUERY_CREATE(q, 3);
      PMIX_ARGV_APPEND(rc, q[0].keys, PMIX_QUERY_NAMESPACES);
      PMIX_ARGV_APPEND(rc, q[1].keys, PMIX_QUERY_SPAWN_SUPPORT);
      PMIX_ARGV_APPEND(rc, q[2].keys, PMIX_JOB_SIZE);
      PMIX_QUERY_QUALIFIERS_CREATE(&q[2], 1);
      PMIX_INFO_LOAD(&q[2].qualifiers[0], PMIX_NSPACE, me.nspace, PMIX_STRING);
      pmix_info_t* results = NULL;
      size_t nresults = 0;
      rc = PMIx_Query_info(q, 3, &results, &nresults);
      CHECK(rc == PMIX_SUCCESS, "query: %s", PMIx_Error_string(rc));
      const char *ns = "-", *spawn = "-";
      unsigned qsize = 0;
      for (size_t i = 0; i < nresults; ++i) {
        if (PMIX_CHECK_KEY(&results[i], PMIX_QUERY_NAMESPACES)) ns = results[i].value.data.string;
        if (PMIX_CHECK_KEY(&results[i], PMIX_QUERY_SPAWN_SUPPORT)) spawn = results[i].value.data.string;
        if (PMIX_CHECK_KEY(&results[i], PMIX_JOB_SIZE)) qsize = results[i].value.data.uint32;
      }
      printf("query ns=%s spawn=%s size=%u\n", ns, spawn, qsize);
      pmix_proc_t target;
      PMIX_LOAD_PROCID(&target, me.nspace, size - 1);
      pmix_info_t term;
      bool yes = true;
      PMIX_INFO_LOAD(&term, PMIX_JOB_CTRL_TERMINATE, &yes, PMIX_BOOL);
      rc = PMIx_Job_control(&target, 1, &term, 1, NULL, NULL);
      CHECK(rc == PMIX_SUCCESS, "job control: %s", PMIx_Error_string(rc));
      printf("OK control rank=%u terminated rank %u\n", me.rank, size - 1);
      fflush(stdout);
    }
    PMIx_Finalize(NULL, 0);
    return 0;
  }
  /* argv[1] "dmodex": no fence carries the data; each rank gets the value
   * of the rank half the job away (on another host when the job's hosts
   * hold equal halves), which its server must fetch on demand. */
  if (argc > 1 && strcmp(argv[1], "dmodex") == 0) {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_UINT32;
    v.data.uint32 = 3000 + me.rank;
    rc = PMIx_Put(PMIX_GLOBAL, "accrun.test.dm", &v);
    CHECK(rc == PMIX_SUCCESS, "dmodex put: %s", PMIx_Error_string(rc));
    rc = PMIx_Commit();
    CHECK(rc == PMIX_SUCCESS, "dmodex commit: %s", PMIx_Error_string(rc));
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, me.nspace, (me.rank + size / 2) % size);
    rc = PMIx_Get(&peer, "accrun.test.dm", NULL, 0, &val);
    CHECK(rc == PMIX_SUCCESS, "dmodex get from rank %u: %s", peer.rank, PMIx_Error_string(rc));
    CHECK(val->type == PMIX_UINT32 && val->data.uint32 == 3000 + peer.rank, "dmodex: rank %u's value is %u",
          peer.rank, val->data.uint32);
    PMIX_VALUE_RELEASE(val);
    /* nobody leaves before every rank has its answer */
    rc = PMIx_Fence(NULL, 0, NULL, 0);
    CHECK(rc == PMIX_SUCCESS, "dmodex fence: %s", PMIx_Error_string(rc));
    printf("OK dmodex rank %u got rank %u's value\n", me.rank, peer.rank);
    PMIx_Finalize(NULL, 0);
    return 0;
  }
  rc = PMIx_Get(&me, PMIX_LOCAL_RANK, NULL, 0, &val);
  CHECK(rc == PMIX_SUCCESS, "get local rank: %s", PMIx_Error_string(rc));
  unsigned local_rank = val->data.uint16;
  PMIX_VALUE_RELEASE(val);
  rc = PMIx_Get(&wild, PMIX_LOCAL_SIZE, NULL, 0, &val);
  CHECK(rc == PMIX_SUCCESS, "get local size: %s", PMIx_Error_string(rc));
  unsigned local_size = val->data.uint32;
  PMIX_VALUE_RELEASE(val);
  const char* env_rank = getenv("ACCRUN_RANK");
  CHECK(env_rank && (unsigned)atoi(env_rank) == me.rank, "ACCRUN_RANK %s != PMIx rank %u",
        env_rank ? env_rank : "(unset)", me.rank);

  /* put / commit / fence with data / get from every rank */
  char key[] = "accrun.test.value";
  pmix_value_t mine;
  PMIX_VALUE_CONSTRUCT(&mine);
  mine.type = PMIX_UINT32;
  mine.data.uint32 = 1000 + me.rank;
  rc = PMIx_Put(PMIX_GLOBAL, key, &mine);
  CHECK(rc == PMIX_SUCCESS, "put: %s", PMIx_Error_string(rc));
  CHECK(PMIx_Commit() == PMIX_SUCCESS, "commit");
  pmix_info_t collect;
  bool yes = true;
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  rc = PMIx_Fence(&wild, 1, &collect, 1);
  CHECK(rc == PMIX_SUCCESS, "fence: %s", PMIx_Error_string(rc));
  for (unsigned r = 0; r < size; ++r) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, me.nspace, r);
    rc = PMIx_Get(&p, key, NULL, 0, &val);
    CHECK(rc == PMIX_SUCCESS, "get from rank %u: %s", r, PMIx_Error_string(rc));
    CHECK(val->data.uint32 == 1000 + r, "rank %u's value is %u", r, val->data.uint32);
    PMIX_VALUE_RELEASE(val);
  }

  /* publish is create-if-absent: exactly one rank wins "accrun.test.claim" */
  pmix_info_t pub;
  unsigned claim = me.rank;
  PMIX_INFO_LOAD(&pub, "accrun.test.claim", &claim, PMIX_UINT32);
  pmix_status_t prc = PMIx_Publish(&pub, 1);
  CHECK(prc == PMIX_SUCCESS || prc == PMIX_ERR_DUPLICATE_KEY, "publish claim: %s", PMIx_Error_string(prc));
  int won = prc == PMIX_SUCCESS;

  /* lookup with PMIX_WAIT: the last rank publishes late */
  if (me.rank == size - 1) {
    usleep(200 * 1000);
    pmix_info_t late;
    PMIX_INFO_LOAD(&late, "accrun.test.late", "from-last", PMIX_STRING);
    rc = PMIx_Publish(&late, 1);
    CHECK(rc == PMIX_SUCCESS, "publish late: %s", PMIx_Error_string(rc));
  }
  pmix_pdata_t pd[2];
  PMIX_PDATA_CONSTRUCT(&pd[0]);
  PMIX_PDATA_CONSTRUCT(&pd[1]);
  PMIX_LOAD_KEY(pd[0].key, "accrun.test.late");
  PMIX_LOAD_KEY(pd[1].key, "accrun.test.claim");
  pmix_info_t wait[2];
  int zero = 0, ten = 10;
  PMIX_INFO_LOAD(&wait[0], PMIX_WAIT, &zero, PMIX_INT);
  PMIX_INFO_LOAD(&wait[1], PMIX_TIMEOUT, &ten, PMIX_INT);
  rc = PMIx_Lookup(pd, 2, wait, 2);
  CHECK(rc == PMIX_SUCCESS, "lookup with wait: %s", PMIx_Error_string(rc));
  CHECK(pd[0].value.type == PMIX_STRING && strcmp(pd[0].value.data.string, "from-last") == 0, "late value");
  CHECK(pd[0].proc.rank == size - 1, "late publisher %u", pd[0].proc.rank);
  unsigned winner = pd[1].value.data.uint32;
  CHECK(won == (winner == me.rank), "claim: won=%d but directory says rank %u", won, winner);

  /* a lookup that waits for a key nobody publishes times out */
  pmix_pdata_t never;
  PMIX_PDATA_CONSTRUCT(&never);
  PMIX_LOAD_KEY(never.key, "accrun.test.never");
  int one = 1;
  PMIX_INFO_LOAD(&wait[1], PMIX_TIMEOUT, &one, PMIX_INT);
  rc = PMIx_Lookup(&never, 1, wait, 2);
  CHECK(rc == PMIX_ERR_TIMEOUT, "lookup of a missing key: %s (want timeout)", PMIx_Error_string(rc));

  /* libaccrun's slices (accrun.wait.ms): a wait of a millisecond ends as
     one, even where the deadline has passed before the request leaves the
     host's agent (it was then sent as no deadline at all) */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 20; ++i) {
    int ms = 1;
    PMIX_INFO_LOAD(&wait[1], "accrun.wait.ms", &ms, PMIX_INT);
    rc = PMIx_Lookup(&never, 1, wait, 2);
    CHECK(rc == PMIX_ERR_TIMEOUT, "lookup held for 1 ms: %s (want timeout)", PMIx_Error_string(rc));
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double held = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  CHECK(held < 2.0, "20 lookups held for 1 ms each took %.2f s", held);

  /* every rank is past its checks before anyone finalizes */
  rc = PMIx_Fence(&wild, 1, NULL, 0);
  CHECK(rc == PMIX_SUCCESS, "fence 2: %s", PMIx_Error_string(rc));
  printf("OK rank=%u size=%u local_rank=%u local_size=%u claim=%s\n", me.rank, size, local_rank,
         local_size, won ? "won" : "lost");
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return 0;
}
