/*
 * A stand-in for libcuda.so.1 (the CUDA driver API), driven by a scenario
 * file, so that nodeproof's CUDA probe is tested through the real
 * dlopen/dlsym/FFI path on machines without an NVIDIA GPU or driver.
 *
 * The scenario file is $NODEPROOF_FAKE_CUDA_SCENARIO, else `cuda-scenario`
 * next to this library (found with dladdr), like the fake NVML. It is re-read
 * at cuInit and at every cuDeviceGetCount (the start of a check). Lines:
 *   devices N               how many devices cuDeviceGetCount reports (default 8)
 *   init fail CODE          cuInit returns CODE (802: CUDA_ERROR_SYSTEM_NOT_READY)
 *   init hang MS            cuInit blocks MS milliseconds (0: forever)
 *   ctx I fail CODE         cuCtxCreate_v2 on device I returns CODE
 *   ctx I hang MS           cuCtxCreate_v2 on device I blocks (0: forever)
 *   alloc I fail CODE       cuMemAlloc_v2 in device I's context returns CODE
 *
 * Every load, unload, cuInit, context create/destroy and alloc/free is
 * appended to `cuda-calls` next to the library when that file exists, so
 * tests can check that the probe frees what it allocates and what release
 * mode closes.
 *
 * Device I has UUID GPU-fa4e0000-0000-4000-8000-00000000000I and bus id
 * 0000:(0x18+I):00.0, as the fake NVML reports GPU I.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
};

#define MAX_DEVICES 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int devices;
static int init_fail;
static long init_hang = -1;
static int ctx_fail[MAX_DEVICES];
static long ctx_hang[MAX_DEVICES];
static int alloc_fail[MAX_DEVICES];
static int initialized;
static struct CUctx_st {
    int device;
    int live;
} contexts[MAX_DEVICES];
static __thread struct CUctx_st *current;

static void beside(const char *name, char *out, size_t len)
{
    Dl_info info;
    if (dladdr((void *)beside, &info) && info.dli_fname) {
        snprintf(out, len, "%s", info.dli_fname);
        char *slash = strrchr(out, '/');
        if (slash) {
            snprintf(slash + 1, len - (size_t)(slash + 1 - out), "%s", name);
            return;
        }
    }
    snprintf(out, len, "%s", name);
}

static void record(const char *fmt, int arg)
{
    char path[4096], line[128];
    beside("cuda-calls", path, sizeof path);
    /* Only into an existing log: a benchmark removes it to time the calls alone. */
    int fd = open(path, O_WRONLY | O_APPEND);
    if (fd < 0)
        return;
    int n = snprintf(line, sizeof line - 1, fmt, arg);
    if (n > 0 && n < (int)sizeof line - 1) {
        line[n++] = '\n';
        if (write(fd, line, (size_t)n) < 0)
            n = 0;
    }
    close(fd);
}

static void load_scenario(void)
{
    char path[4096], line[256];
    const char *env = getenv("NODEPROOF_FAKE_CUDA_SCENARIO");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        beside("cuda-scenario", path, sizeof path);
    devices = 8;
    init_fail = 0;
    init_hang = -1;
    for (int i = 0; i < MAX_DEVICES; i++) {
        ctx_fail[i] = 0;
        ctx_hang[i] = -1;
        alloc_fail[i] = 0;
    }
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        int i, code;
        long ms;
        if (sscanf(line, "devices %d", &devices) == 1)
            continue;
        if (sscanf(line, "init fail %d", &code) == 1)
            init_fail = code;
        else if (sscanf(line, "init hang %ld", &ms) == 1)
            init_hang = ms;
        else if (sscanf(line, "ctx %d fail %d", &i, &code) == 2 && i >= 0 && i < MAX_DEVICES)
            ctx_fail[i] = code;
        else if (sscanf(line, "ctx %d hang %ld", &i, &ms) == 2 && i >= 0 && i < MAX_DEVICES)
            ctx_hang[i] = ms;
        else if (sscanf(line, "alloc %d fail %d", &i, &code) == 2 && i >= 0 && i < MAX_DEVICES)
            alloc_fail[i] = code;
    }
    fclose(f);
    if (devices > MAX_DEVICES)
        devices = MAX_DEVICES;
}

static void sleep_ms(long ms)
{
    if (ms == 0) {
        for (;;)
            pause();
    }
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((constructor)) static void loaded(void)
{
    record("load", 0);
}

__attribute__((destructor)) static void unloaded(void)
{
    record("unload", 0);
}

CUresult cuInit(unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    load_scenario();
    int fail = init_fail;
    long hang = init_hang;
    pthread_mutex_unlock(&lock);
    record("cuInit", 0);
    if (hang >= 0)
        sleep_ms(hang);
    if (fail)
        return fail;
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    load_scenario();
    *count = devices;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    if (dev < 0 || dev >= devices)
        return CUDA_ERROR_INVALID_DEVICE;
    static const unsigned char head[10] = {0xfa, 0x4e, 0, 0, 0, 0, 0x40, 0, 0x80, 0};
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    memcpy(uuid->bytes, head, sizeof head);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev)
{
    if (dev < 0 || dev >= devices)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(buf, (size_t)len, "0000:%02X:00.0", 0x18 + dev);
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= devices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (ctx_hang[dev] >= 0)
        sleep_ms(ctx_hang[dev]);
    if (ctx_fail[dev])
        return ctx_fail[dev];
    contexts[dev].device = dev;
    contexts[dev].live = 1;
    current = &contexts[dev];
    *ctx = current;
    record("cuCtxCreate_v2 %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    if (!ctx || !ctx->live)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx->live = 0;
    if (current == ctx)
        current = NULL;
    record("cuCtxDestroy_v2 %d", ctx->device);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (alloc_fail[current->device])
        return alloc_fail[current->device];
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *ptr = 0x7f0000000000ULL + ((CUdeviceptr)current->device << 32);
    record("cuMemAlloc_v2 %d", current->device);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    if (!current)
        return CUDA_ERROR_INVALID_CONTEXT;
    (void)ptr;
    record("cuMemFree_v2 %d", current->device);
    return CUDA_SUCCESS;
}

/* The names and strings cuda.h documents for the codes the tests use. */
static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult lookup(CUresult code, const char **out, int text)
{
    for (size_t k = 0; k < sizeof errors / sizeof errors[0]; k++)
        if (errors[k].code == code) {
            *out = text ? errors[k].text : errors[k].name;
            return CUDA_SUCCESS;
        }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult code, const char **name)
{
    return lookup(code, name, 0);
}

CUresult cuGetErrorString(CUresult code, const char **text)
{
    return lookup(code, text, 1);
}
