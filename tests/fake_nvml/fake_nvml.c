/* A fake libnvidia-ml for the detection tests: exactly the NVML calls accrun
 * uses, answering from a device list set by fake_nvml_set() (called by a
 * test that dlopens this library first) or, failing that, read from
 * FAKE_NVML_DEVICES at nvmlInit (for CLI tests).  The list is lines
 *   "<bus id>|<name>|<uuid>|<fabric cluster uuid, 32 hex digits or ->|<clique id>"
 * separated by ';'.  FAKE_NVML_FAIL_INIT=1 makes nvmlInit fail.  The
 * structures follow NVML's documented layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct FakeDevice* nvmlDevice_t;
enum { kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kInsufficientSize = 7, kUnknown = 999 };

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef struct {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
} nvmlGpuFabricInfo_t;

struct FakeDevice {
  unsigned domain, bus, dev, fn;
  char name[96];
  char uuid[96];
  int has_fabric;
  unsigned char cluster[16];
  unsigned clique;
};

#define kMaxDevices 64
static struct FakeDevice devices[kMaxDevices];
static int ndevices = 0;
static int configured = 0;
static int initialised = 0;
static int init_calls = 0;
static int shutdown_calls = 0;

static int parse(const char* spec) {
  ndevices = 0;
  if (spec == NULL) return 0;
  char* copy = strdup(spec);
  char* save = NULL;
  for (char* item = strtok_r(copy, ";", &save); item != NULL && ndevices < kMaxDevices;
       item = strtok_r(NULL, ";", &save)) {
    struct FakeDevice* d = &devices[ndevices];
    memset(d, 0, sizeof *d);
    char* fields[5] = {0};
    char* fsave = NULL;
    int n = 0;
    for (char* f = strtok_r(item, "|", &fsave); f != NULL && n < 5; f = strtok_r(NULL, "|", &fsave)) fields[n++] = f;
    if (n < 3) continue;
    if (sscanf(fields[0], "%x:%x:%x.%x", &d->domain, &d->bus, &d->dev, &d->fn) != 4) continue;
    snprintf(d->name, sizeof d->name, "%s", fields[1]);
    snprintf(d->uuid, sizeof d->uuid, "%s", fields[2]);
    if (n >= 5 && strlen(fields[3]) == 32) {
      d->has_fabric = 1;
      for (int i = 0; i < 16; ++i) {
        unsigned v = 0;
        sscanf(fields[3] + 2 * i, "%2x", &v);
        d->cluster[i] = (unsigned char)v;
      }
      d->clique = (unsigned)strtoul(fields[4], NULL, 10);
    }
    ++ndevices;
  }
  free(copy);
  return ndevices;
}

/* Test hooks. */
int fake_nvml_set(const char* spec) {
  configured = 1;
  return parse(spec);
}
void fake_nvml_reset(void) {
  configured = 0;
  ndevices = 0;
  init_calls = shutdown_calls = 0;
}
int fake_nvml_init_calls(void) { return init_calls; }
int fake_nvml_shutdown_calls(void) { return shutdown_calls; }

nvmlReturn_t nvmlInit_v2(void) {
  ++init_calls;
  const char* fail = getenv("FAKE_NVML_FAIL_INIT");
  if (fail != NULL && strcmp(fail, "1") == 0) return kUnknown;
  if (!configured) parse(getenv("FAKE_NVML_DEVICES"));
  initialised = 1;
  return kSuccess;
}

nvmlReturn_t nvmlShutdown(void) {
  ++shutdown_calls;
  if (!initialised) return kUninitialized;
  initialised = 0;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised) return kUninitialized;
  if (count == NULL) return kInvalidArgument;
  *count = (unsigned)ndevices;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!initialised) return kUninitialized;
  if (device == NULL || index >= (unsigned)ndevices) return kInvalidArgument;
  *device = &devices[index];
  return kSuccess;
}

static nvmlReturn_t copy_string(const char* s, char* out, unsigned int length) {
  if (out == NULL) return kInvalidArgument;
  if (strlen(s) + 1 > length) return kInsufficientSize;
  memcpy(out, s, strlen(s) + 1);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  if (!initialised) return kUninitialized;
  if (device == NULL) return kInvalidArgument;
  return copy_string(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  if (!initialised) return kUninitialized;
  if (device == NULL) return kInvalidArgument;
  return copy_string(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (!initialised) return kUninitialized;
  if (device == NULL || pci == NULL) return kInvalidArgument;
  memset(pci, 0, sizeof *pci);
  pci->domain = device->domain;
  pci->bus = device->bus;
  pci->device = device->dev;
  pci->pciDeviceId = 0x233010de;
  /* NVML's forms: 8-digit domain, upper-case hex. */
  snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", device->domain, device->bus, device->dev, device->fn);
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", device->domain, device->bus, device->dev,
           device->fn);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t* info) {
  if (!initialised) return kUninitialized;
  if (device == NULL || info == NULL) return kInvalidArgument;
  memset(info, 0, sizeof *info);
  if (!device->has_fabric) {
    info->state = 0; /* NVML_GPU_FABRIC_STATE_NOT_SUPPORTED */
    return kSuccess;
  }
  memcpy(info->clusterUuid, device->cluster, 16);
  info->status = kSuccess;
  info->cliqueId = device->clique;
  info->state = 3; /* NVML_GPU_FABRIC_STATE_COMPLETED */
  return kSuccess;
}
