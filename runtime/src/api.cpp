// Placeholder C API until the runtime lands: getters return -1, every other
// call ACCRUN_ERR_NOT_SUPPORTED.
#include "accrun/accrun.h"

#define ACCRUN_API extern "C" __attribute__((visibility("default")))

ACCRUN_API int accrun_init(void) { return ACCRUN_ERR_NOT_SUPPORTED; }
ACCRUN_API int accrun_finalize(void) { return ACCRUN_ERR_NOT_SUPPORTED; }
ACCRUN_API int accrun_rank(void) { return -1; }
ACCRUN_API int accrun_size(void) { return -1; }
ACCRUN_API int accrun_local_rank(void) { return -1; }
ACCRUN_API int accrun_local_size(void) { return -1; }
ACCRUN_API const char* accrun_strerror(int) { return "not supported"; }
ACCRUN_API const char* accrun_last_error(void) { return ""; }
