/*
 * A stand-in for libnvidia-ml.so.1, driven by a scenario file, so that
 * nodeproof's NVML probe is tested through the real dlopen/dlsym/FFI path on
 * machines without an NVIDIA GPU or driver.
 *
 * The scenario file is $NODEPROOF_FAKE_NVML_SCENARIO, else `scenario` next to
 * this library (found with dladdr): tests copy the library into one directory
 * per scenario, so scenarios run in parallel in one process (each copy is a
 * distinct file, hence a distinct dlopen handle with its own state).
 *
 * The file is re-read at nvmlInit and at every nvmlDeviceGetCount_v2 (the
 * start of a snapshot), so a test rewrites it to change the node between
 * snapshots. Lines (all optional):
 *   driver 550.54.15        nvmlSystemGetDriverVersion
 *   nvml 12.550.54.15       nvmlSystemGetNVMLVersion
 *   cuda 12040              nvmlSystemGetCudaDriverVersion_v2
 *   gpus 8                  how many GPUs exist (default 8)
 *   count 7                 what nvmlDeviceGetCount_v2 answers (default: gpus)
 *   init ok | init fail N | init hang MS   (MS 0: forever)
 *   hang count MS           nvmlDeviceGetCount_v2 blocks MS milliseconds
 *   hang shutdown MS        nvmlShutdown blocks MS milliseconds
 *   lost I                  GPU I answers NVML_ERROR_GPU_IS_LOST
 *   ecc I VOLATILE AGGREGATE   uncorrectable ECC counts of GPU I
 *   pages-pending I         GPU I has retired pages pending
 *   remap I CORR UNC PENDING FAILED
 *   xid SEQ I CODE          an XID event; delivered once (SEQ increasing)
 *   mig I N [PROFILE]       GPU I is in MIG mode with N instances (default
 *                           profile 1g.10gb), UUIDs MIG-fa4e0000-0000-4000-80II-0000000000JJ
 *   fabric I STATE [STATUS [MASK]]   GPU I's fabric info (nvmlGpuFabricState_t,
 *                           the registration's nvmlReturn_t, the v2 health
 *                           mask); without it the fabric calls answer NOT_SUPPORTED
 *   nvlinks I N             GPU I has N NVLinks (others answer NOT_SUPPORTED)
 *   nvlink-down I L         link L of GPU I is inactive
 *   util I GPU MEM          nvmlDeviceGetUtilizationRates of GPU I, percent (default 0 0;
 *                           NOT_SUPPORTED in MIG mode, as the driver answers)
 *   memory I USED TOTAL     nvmlDeviceGetMemoryInfo(_v2) of GPU I, MiB (default 0 of 81920)
 *   mig-memory I K USED TOTAL   the same for MIG instance K of GPU I (default 0 of 10240)
 *   temp I C                temperature of GPU I (default 35 + I)
 *   power I MW              power draw of GPU I in milliwatts (default 70000 + 1000 * I)
 *   ecc-corrected I VOLATILE AGGREGATE   correctable ECC counts of GPU I
 *   unsupported I WHAT      GPU I answers NOT_SUPPORTED for WHAT: util, memory, temp, power
 *                           or ecc (every ECC count)
 *   no-memory-v2            nvmlDeviceGetMemoryInfo_v2 is missing (a driver before R510): v1 only
 *
 * nvml-wrapper resolves every NVML symbol when it loads the library but keeps
 * each lookup as a Result, so symbols this file does not define only fail
 * when called (FailedToLoadSymbol). Only nvmlShutdown and nvmlEventSetFree
 * are called unconditionally (from Drop) and must exist.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

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
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

#define MAX_GPUS 64
#define MAX_XIDS 256
#define XID_EVENT 8ULL
/* An H100 holds at most 7 MIG instances. */
#define MAX_MIG 7
/* MIG device handles: MIG_HANDLE + parent * 16 + instance, far above GPU handles. */
#define MIG_HANDLE 0x10000UL

struct gpu {
    int lost;
    unsigned long long ecc_volatile, ecc_aggregate;
    int pages_pending;
    unsigned remap_corr, remap_unc, remap_pending, remap_failed;
    unsigned mig; /* MIG instances; 0: MIG mode off */
    char mig_profile[24];
    int fabric; /* 0: not supported; else state + 1 */
    unsigned fabric_status, fabric_mask;
    unsigned nvlinks;
    unsigned long long nvlink_down; /* bit per link */
    unsigned util_gpu, util_mem;
    unsigned long long mem_used_mib, mem_total_mib;
    unsigned long long mig_used_mib[MAX_MIG], mig_total_mib[MAX_MIG];
    int temp_set, power_set;
    unsigned temp, power_mw;
    unsigned long long ecc_corr_volatile, ecc_corr_aggregate;
    unsigned unsupported; /* UNSUPPORTED_* bits */
};

enum { UNSUPPORTED_UTIL = 1, UNSUPPORTED_MEMORY = 2, UNSUPPORTED_TEMP = 4, UNSUPPORTED_POWER = 8, UNSUPPORTED_ECC = 16 };

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

struct xid {
    long seq;
    unsigned gpu;
    unsigned long long code;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char driver[80], nvml_version[80];
static int cuda;
static unsigned gpus, count;
static char init_mode[16];
static long init_arg, hang_count_ms, hang_shutdown_ms;
static struct gpu gpu[MAX_GPUS];
static struct xid xids[MAX_XIDS];
static unsigned nxids;
static long delivered_seq;
static int initialized;
static int no_memory_v2;
static struct nvmlEventSet_st { int unused; } the_set;

static void scenario_path(char *out, size_t len)
{
    const char *env = getenv("NODEPROOF_FAKE_NVML_SCENARIO");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    Dl_info info;
    if (dladdr((void *)scenario_path, &info) && info.dli_fname) {
        snprintf(out, len, "%s", info.dli_fname);
        char *slash = strrchr(out, '/');
        if (slash) {
            snprintf(slash + 1, len - (size_t)(slash + 1 - out), "scenario");
            return;
        }
    }
    snprintf(out, len, "scenario");
}

static void load_scenario(void)
{
    char path[4096], line[256];
    snprintf(driver, sizeof driver, "550.54.15");
    snprintf(nvml_version, sizeof nvml_version, "12.550.54.15");
    cuda = 12040;
    gpus = 8;
    count = (unsigned)-1;
    snprintf(init_mode, sizeof init_mode, "ok");
    init_arg = 0;
    hang_count_ms = 0;
    hang_shutdown_ms = 0;
    memset(gpu, 0, sizeof gpu);
    for (unsigned g = 0; g < MAX_GPUS; g++) {
        gpu[g].mem_total_mib = 81920;
        for (unsigned k = 0; k < MAX_MIG; k++)
            gpu[g].mig_total_mib[k] = 10240;
    }
    no_memory_v2 = 0;
    nxids = 0;
    scenario_path(path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        goto done;
    while (fgets(line, sizeof line, f)) {
        unsigned i, a, b, c, d;
        unsigned long long x, y;
        long seq, ms;
        char word[16], profile[24];
        if (sscanf(line, "driver %79s", driver) == 1 || sscanf(line, "nvml %79s", nvml_version) == 1 ||
            sscanf(line, "cuda %d", &cuda) == 1 || sscanf(line, "gpus %u", &gpus) == 1 ||
            sscanf(line, "count %u", &count) == 1)
            continue;
        if (sscanf(line, "init %15s %ld", word, &ms) >= 1) {
            snprintf(init_mode, sizeof init_mode, "%s", word);
            init_arg = ms;
        } else if (sscanf(line, "hang count %ld", &ms) == 1) {
            hang_count_ms = ms;
        } else if (sscanf(line, "hang shutdown %ld", &ms) == 1) {
            hang_shutdown_ms = ms;
        } else if (sscanf(line, "lost %u", &i) == 1 && i < MAX_GPUS) {
            gpu[i].lost = 1;
        } else if (sscanf(line, "ecc %u %llu %llu", &i, &x, &y) == 3 && i < MAX_GPUS) {
            gpu[i].ecc_volatile = x;
            gpu[i].ecc_aggregate = y;
        } else if (sscanf(line, "pages-pending %u", &i) == 1 && i < MAX_GPUS) {
            gpu[i].pages_pending = 1;
        } else if (sscanf(line, "remap %u %u %u %u %u", &i, &a, &b, &c, &d) == 5 && i < MAX_GPUS) {
            gpu[i].remap_corr = a;
            gpu[i].remap_unc = b;
            gpu[i].remap_pending = c;
            gpu[i].remap_failed = d;
        } else if ((b = (unsigned)sscanf(line, "mig %u %u %23s", &i, &a, profile)) >= 2 && i < MAX_GPUS) {
            gpu[i].mig = a < MAX_MIG ? a : MAX_MIG;
            snprintf(gpu[i].mig_profile, sizeof gpu[i].mig_profile, "%s", b == 3 ? profile : "1g.10gb");
        } else if ((c = 0, d = 0, sscanf(line, "fabric %u %u %u %u", &i, &a, &c, &d)) >= 2 && i < MAX_GPUS) {
            gpu[i].fabric = (int)a + 1;
            gpu[i].fabric_status = c;
            gpu[i].fabric_mask = d;
        } else if (sscanf(line, "nvlinks %u %u", &i, &a) == 2 && i < MAX_GPUS) {
            gpu[i].nvlinks = a;
        } else if (sscanf(line, "nvlink-down %u %u", &i, &a) == 2 && i < MAX_GPUS && a < 64) {
            gpu[i].nvlink_down |= 1ULL << a;
        } else if (sscanf(line, "util %u %u %u", &i, &a, &b) == 3 && i < MAX_GPUS) {
            gpu[i].util_gpu = a;
            gpu[i].util_mem = b;
        } else if (sscanf(line, "memory %u %llu %llu", &i, &x, &y) == 3 && i < MAX_GPUS) {
            gpu[i].mem_used_mib = x;
            gpu[i].mem_total_mib = y;
        } else if (sscanf(line, "mig-memory %u %u %llu %llu", &i, &a, &x, &y) == 4 && i < MAX_GPUS && a < MAX_MIG) {
            gpu[i].mig_used_mib[a] = x;
            gpu[i].mig_total_mib[a] = y;
        } else if (sscanf(line, "temp %u %u", &i, &a) == 2 && i < MAX_GPUS) {
            gpu[i].temp_set = 1;
            gpu[i].temp = a;
        } else if (sscanf(line, "power %u %u", &i, &a) == 2 && i < MAX_GPUS) {
            gpu[i].power_set = 1;
            gpu[i].power_mw = a;
        } else if (sscanf(line, "ecc-corrected %u %llu %llu", &i, &x, &y) == 3 && i < MAX_GPUS) {
            gpu[i].ecc_corr_volatile = x;
            gpu[i].ecc_corr_aggregate = y;
        } else if (sscanf(line, "unsupported %u %15s", &i, word) == 2 && i < MAX_GPUS) {
            gpu[i].unsupported |= strcmp(word, "util") == 0     ? UNSUPPORTED_UTIL
                                  : strcmp(word, "memory") == 0 ? UNSUPPORTED_MEMORY
                                  : strcmp(word, "temp") == 0   ? UNSUPPORTED_TEMP
                                  : strcmp(word, "power") == 0  ? UNSUPPORTED_POWER
                                  : strcmp(word, "ecc") == 0    ? UNSUPPORTED_ECC
                                                                : 0;
        } else if (strncmp(line, "no-memory-v2", 12) == 0) {
            no_memory_v2 = 1;
        } else if (sscanf(line, "xid %ld %u %llu", &seq, &i, &x) == 3 && nxids < MAX_XIDS) {
            xids[nxids].seq = seq;
            xids[nxids].gpu = i;
            xids[nxids].code = x;
            nxids++;
        }
    }
    fclose(f);
done:
    if (gpus > MAX_GPUS)
        gpus = MAX_GPUS;
    if (count == (unsigned)-1 || count > gpus)
        count = gpus;
}

static void sleep_ms(long ms)
{
    if (ms <= 0) {
        for (;;)
            pause();
    }
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Device handles are index + 1, so a null handle is never valid. */
static int dev_index(nvmlDevice_t d, unsigned *out)
{
    unsigned long i = (unsigned long)d;
    if (i == 0 || i > count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned)(i - 1);
    return gpu[i - 1].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

#define DEVICE(d, i)                                                                               \
    unsigned i;                                                                                    \
    do {                                                                                           \
        if (!initialized)                                                                          \
            return NVML_ERROR_UNINITIALIZED;                                                       \
        int rc_ = dev_index(d, &i);                                                                \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int put_string(char *buf, unsigned len, const char *s)
{
    if (!buf || strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void)
{
    pthread_mutex_lock(&lock);
    load_scenario();
    char mode[16];
    long arg = init_arg;
    snprintf(mode, sizeof mode, "%s", init_mode);
    pthread_mutex_unlock(&lock);
    if (strcmp(mode, "hang") == 0)
        sleep_ms(arg);
    if (strcmp(mode, "fail") == 0)
        return arg ? (int)arg : 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void)
{
    if (hang_shutdown_ms > 0)
        sleep_ms(hang_shutdown_ms);
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    (void)r;
    return "fake NVML error";
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len)
{
    return put_string(buf, len, driver);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len)
{
    return put_string(buf, len, nvml_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    *v = cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    return nvmlSystemGetCudaDriverVersion_v2(v);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&lock);
    load_scenario();
    long hang = hang_count_ms;
    *n = count;
    pthread_mutex_unlock(&lock);
    if (hang)
        sleep_ms(hang);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *d)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu[index].lost)
        return NVML_ERROR_GPU_IS_LOST;
    *d = (nvmlDevice_t)(unsigned long)(index + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *out)
{
    DEVICE(d, i);
    *out = i;
    return NVML_SUCCESS;
}

/* A MIG device handle's parent and instance; non-zero when d is not one. */
static int mig_index(nvmlDevice_t d, unsigned *parent, unsigned *instance)
{
    unsigned long h = (unsigned long)d;
    if (h < MIG_HANDLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = (unsigned)((h - MIG_HANDLE) / 16);
    *instance = (unsigned)((h - MIG_HANDLE) % 16);
    if (*parent >= count || *instance >= gpu[*parent].mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    return gpu[*parent].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending)
{
    DEVICE(d, i);
    *current = *pending = gpu[i].mig ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *n)
{
    DEVICE(d, i);
    (void)i;
    *n = MAX_MIG;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index, nvmlDevice_t *mig)
{
    DEVICE(d, i);
    if (!gpu[i].mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= gpu[i].mig)
        return NVML_ERROR_NOT_FOUND;
    *mig = (nvmlDevice_t)(MIG_HANDLE + i * 16 + index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is_mig)
{
    unsigned p, k;
    *is_mig = mig_index(d, &p, &k) == NVML_SUCCESS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent)
{
    unsigned p, k;
    int rc = mig_index(d, &p, &k);
    if (rc)
        return rc;
    *parent = (nvmlDevice_t)(unsigned long)(p + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len)
{
    unsigned p, k;
    if (initialized && mig_index(d, &p, &k) == NVML_SUCCESS) {
        char m[96];
        snprintf(m, sizeof m, "MIG-fa4e0000-0000-4000-80%02u-0000000000%02u", p, k);
        return put_string(buf, len, m);
    }
    DEVICE(d, i);
    char s[96];
    snprintf(s, sizeof s, "GPU-fa4e0000-0000-4000-8000-%012u", i);
    return put_string(buf, len, s);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len)
{
    unsigned p, k;
    if (initialized && mig_index(d, &p, &k) == NVML_SUCCESS) {
        char m[96];
        snprintf(m, sizeof m, "NVIDIA H100 80GB HBM3 MIG %s", gpu[p].mig_profile);
        return put_string(buf, len, m);
    }
    DEVICE(d, i);
    (void)i;
    return put_string(buf, len, "NVIDIA H100 80GB HBM3");
}

/* GPU i sits at bus 0x18 + i, which the tests' fake sysfs mirrors. */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    DEVICE(d, i);
    memset(p, 0, sizeof *p);
    p->domain = 0;
    p->bus = 0x18 + i;
    p->device = 0;
    p->pciDeviceId = 0x233010de;
    p->pciSubSystemId = 0x16c110de;
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", 0x18 + i);
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", 0x18 + i);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *mode)
{
    DEVICE(d, i);
    (void)i;
    *mode = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n)
{
    DEVICE(d, i);
    if (gpu[i].unsupported & UNSUPPORTED_ECC)
        return NVML_ERROR_NOT_SUPPORTED;
    if (type == 0) /* NVML_MEMORY_ERROR_TYPE_CORRECTED */
        *n = counter == 0 ? gpu[i].ecc_corr_volatile : gpu[i].ecc_corr_aggregate;
    else
        *n = counter == 0 ? gpu[i].ecc_volatile : gpu[i].ecc_aggregate;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *pending)
{
    DEVICE(d, i);
    *pending = gpu[i].pages_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned *corr, unsigned *unc, unsigned *pending,
                                       unsigned *failed)
{
    DEVICE(d, i);
    *corr = gpu[i].remap_corr;
    *unc = gpu[i].remap_unc;
    *pending = gpu[i].remap_pending;
    *failed = gpu[i].remap_failed;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t)
{
    DEVICE(d, i);
    (void)sensor;
    if (gpu[i].unsupported & UNSUPPORTED_TEMP)
        return NVML_ERROR_NOT_SUPPORTED;
    *t = gpu[i].temp_set ? gpu[i].temp : 35 + i;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r)
{
    DEVICE(d, i);
    (void)i;
    *r = 1; /* GpuIdle */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw)
{
    DEVICE(d, i);
    if (gpu[i].unsupported & UNSUPPORTED_POWER)
        return NVML_ERROR_NOT_SUPPORTED;
    *mw = gpu[i].power_set ? gpu[i].power_mw : 70000 + 1000 * i;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    unsigned p, k;
    if (initialized && mig_index(d, &p, &k) == NVML_SUCCESS)
        return NVML_ERROR_NOT_SUPPORTED;
    DEVICE(d, i);
    if (gpu[i].mig || (gpu[i].unsupported & UNSUPPORTED_UTIL))
        return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = gpu[i].util_gpu;
    u->memory = gpu[i].util_mem;
    return NVML_SUCCESS;
}

/* Used and total of a GPU or MIG device handle, in bytes. */
static int memory_of(nvmlDevice_t d, unsigned long long *used, unsigned long long *total)
{
    unsigned p, k;
    if (initialized && mig_index(d, &p, &k) == NVML_SUCCESS) {
        *used = gpu[p].mig_used_mib[k] << 20;
        *total = gpu[p].mig_total_mib[k] << 20;
        return NVML_SUCCESS;
    }
    DEVICE(d, i);
    if (gpu[i].unsupported & UNSUPPORTED_MEMORY)
        return NVML_ERROR_NOT_SUPPORTED;
    *used = gpu[i].mem_used_mib << 20;
    *total = gpu[i].mem_total_mib << 20;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    unsigned long long used, total;
    int rc = memory_of(d, &used, &total);
    if (rc)
        return rc;
    m->used = used;
    m->total = total;
    m->free = total - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    unsigned long long used, total;
    /* A driver before R510 has no _v2: NVML itself would not export it; the
     * nearest a fake can come is "not supported by this driver". */
    if (no_memory_v2)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (m->version != (sizeof *m | (2u << 24)))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    int rc = memory_of(d, &used, &total);
    if (rc)
        return rc;
    m->used = used;
    m->total = total;
    m->reserved = 0;
    m->free = total - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
    DEVICE(d, i);
    (void)i;
    *types = XID_EVENT | 1 | 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    *set = &the_set;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
    DEVICE(d, i);
    (void)i;
    if (set != &the_set || (types & ~(XID_EVENT | 1 | 2)))
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (set != &the_set)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    const struct xid *next = NULL;
    for (unsigned k = 0; k < nxids; k++)
        if (xids[k].seq > delivered_seq && (!next || xids[k].seq < next->seq))
            next = &xids[k];
    if (next) {
        delivered_seq = next->seq;
        memset(data, 0, sizeof *data);
        data->device = (nvmlDevice_t)(unsigned long)(next->gpu + 1);
        data->eventType = XID_EVENT;
        data->eventData = next->code;
        data->gpuInstanceId = 0xFFFFFFFF;
        data->computeInstanceId = 0xFFFFFFFF;
    }
    pthread_mutex_unlock(&lock);
    if (next)
        return NVML_SUCCESS;
    if (timeout_ms)
        sleep_ms(timeout_ms < 50 ? timeout_ms : 50);
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    (void)set;
    return NVML_SUCCESS;
}

/* GPU fabric info (nvml.h, R525+ v1; R550+ the versioned V call). */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

static void fill_fabric(unsigned i, unsigned char *uuid, nvmlReturn_t *status, unsigned *clique,
                        unsigned char *state)
{
    memset(uuid, 0, 16);
    uuid[0] = 0xc1;
    *status = (nvmlReturn_t)gpu[i].fabric_status;
    *clique = 1;
    *state = (unsigned char)(gpu[i].fabric - 1);
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, nvmlGpuFabricInfo_t *f)
{
    DEVICE(d, i);
    if (!gpu[i].fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_fabric(i, f->clusterUuid, &f->status, &f->cliqueId, &f->state);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfo_v2_t *f)
{
    DEVICE(d, i);
    if (f->version != ((unsigned)sizeof(nvmlGpuFabricInfo_v2_t) | (2u << 24)))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!gpu[i].fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_fabric(i, f->clusterUuid, &f->status, &f->cliqueId, &f->state);
    f->healthMask = gpu[i].fabric_mask;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active)
{
    DEVICE(d, i);
    if (link >= gpu[i].nvlinks)
        return gpu[i].nvlinks ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    *active = (gpu[i].nvlink_down >> link) & 1 ? 0 : 1;
    return NVML_SUCCESS;
}
