/* The victim of the security tests: a rank that joins its job, prints
 * "ready", waits until its stdin ends (the test holds it open while it
 * attacks), then proves the job still works (a fence with data, a publish
 * and a lookup) and prints "victim ok".  Exits 1 on any failure. */
#include <pmix.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "victim: PMIx_Init: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  /* A record of this rank's, as groups and the object store keep theirs. */
  pmix_value_t val;
  PMIX_VALUE_LOAD(&val, "victim's record", PMIX_STRING);
  rc = PMIx_Put(PMIX_GLOBAL, "accrun.victim.record", &val);
  PMIX_VALUE_DESTRUCT(&val);
  if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "victim: put: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char buf[256];
  while (read(0, buf, sizeof buf) > 0) {
  }
  pmix_info_t info;
  bool collect = true;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  rc = PMIx_Fence(NULL, 0, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "victim: fence: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  char key[64];
  snprintf(key, sizeof key, "accrun.victim.%u", me.rank);
  PMIX_INFO_LOAD(&info, key, "mine", PMIX_STRING);
  rc = PMIx_Publish(&info, 1);
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "victim: publish: %s\n", PMIx_Error_string(rc));
    return 1;
  }
  /* Nothing the intruder tried to publish may be there. */
  pmix_pdata_t pd;
  PMIX_PDATA_CONSTRUCT(&pd);
  PMIX_LOAD_KEY(pd.key, "accrun.intruder");
  rc = PMIx_Lookup(&pd, 1, NULL, 0);
  if (rc == PMIX_SUCCESS) {
    fprintf(stderr, "victim: the intruder's key is in the directory\n");
    return 1;
  }
  PMIX_PDATA_DESTRUCT(&pd);
  printf("victim ok\n");
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return 0;
}
