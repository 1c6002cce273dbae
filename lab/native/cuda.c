/*
 * libcuda.so.1 for lab nodes: the CUDA driver-API calls a copy-engine probe needs,
 * answering from the node's hardware state (lab/CONTRACT.md).
 *
 * Memory: device memory is host memory (malloc) underneath, so copies really move
 * the bytes and a readback checks them. Live device allocations are capped per GPU
 * at min(GPU memory, LAB_DEVICE_ALLOCATION_LIMIT_BYTES).
 *
 * Time: every operation is timed on a virtual clock. Each stream has a cursor (ns);
 * the host has one too (host_now_ns). An operation on a stream starts at
 * max(stream cursor, host_now_ns) and moves the stream's cursor by
 *     latency_ns + bytes / gbytes_per_s      (1 GB/s = 1 byte/ns)
 * scaled by a deterministic noise of at most +-1 % (seed: LINGBOT_LAB_NOISE_SEED).
 * The legacy default stream (NULL) also starts after the work of every blocking stream
 * of its context, and a blocking stream after the default stream's work; streams
 * created with CU_STREAM_NON_BLOCKING are ordered with neither. Events record a
 * stream's cursor; synchronizing (stream, event, context, or a synchronous copy) moves
 * host_now_ns forward to the awaited time. So cuEventElapsedTime returns the profile's
 * figures, and a run takes no virtual time on the host.
 *
 * Data: copies move their bytes when they are issued (a device-to-device copy that would
 * write what its destination already holds, the same copy again with neither buffer
 * written since, skips the move: same bytes, less host time). Memsets are asynchronous, as on
 * the driver (cuMemsetD8_v2 and friends too, for device memory: they are queued on the
 * default stream): their bytes land when the memset completes on its stream's clock,
 * i.e. just before the first later operation that starts at or after that time. An
 * operation not ordered after a memset (another stream, no event or host wait between
 * them) reads the bytes from before it, and what it writes is overwritten when the
 * memset lands.
 *
 * Paths: host to device and back use the GPU's host figures. Between two GPUs a
 * copy uses the pair's p2p path when peer access is enabled (either direction)
 * and the pair supports P2P, else the host-staged path. The p2p path is the pair's
 * p2p_without_acs_redirect when the state has it and, read at the copy, no switch port
 * in the pair's acs_redirect_ports has ACS request or completion redirect set in its
 * config space (lab_pair_p2p_now). Device-internal copies and memsets run at
 * LAB_DEVICE_INTERNAL_GBYTES_PER_S.
 * Bidirectional: a GPU-to-GPU copy that starts while a copy in the opposite
 * direction between the same two GPUs is running on another stream gets half the
 * path's bidirectional bandwidth. For two equal copies started together, the pair's
 * aggregate (2 x bytes / time of the later to finish) equals the profile's
 * bidirectional figure.
 *
 * Faults: with pair p2p_drops_writes, a direct P2P copy reports success but the
 * destination is left unchanged. With gpu fail_after_copies N, copy N+1 touching
 * the GPU fails with CUDA_ERROR_LAUNCH_FAILED and every later operation on it too.
 * A lost GPU is listed (ordinals stay aligned with NVML) but its context cannot be
 * created: CUDA_ERROR_DEVICE_UNAVAILABLE.
 *
 * Load: each copy touching GPU i records itself in busy/<i> (labstate.h): NVML and
 * nvidia-smi show P0 until LAB_BUSY_HOLD_SECONDS after the last copy, and a link that
 * idles low at its load generation once the copies have gone on for link.ramp_ms.
 *
 * Startup costs (wall-clock time, not the virtual clock: the calls block the host as a
 * driver's do): a process's first context on a GPU (cuDevicePrimaryCtxRetain,
 * cuCtxCreate) takes driver.context_create_ms, plus driver.gpu_init_ms when the GPU is not
 * in persistence mode (persistence/<i>: the driver keeps a GPU in persistence mode
 * initialized between processes; otherwise each process brings it up again). A context's
 * first cuCtxEnablePeerAccess to a peer takes driver.peer_mapping_ms. Both are per process:
 * contexts and peer mappings never outlive the process that made them, and a context
 * released or reset to nothing pays again when it is made anew.
 *
 * Device ordinals are in PCI bus order (the state's order), filtered and reordered
 * by CUDA_VISIBLE_DEVICES (indices or UUID prefixes) like the real driver.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "labstate.h"

#define EXPORT __attribute__((visibility("default")))

#define LAB_DEVICE_ALLOCATION_LIMIT_BYTES (4ULL << 30)
#define LAB_DEVICE_INTERNAL_GBYTES_PER_S 500.0
#define LAB_DEVICE_INTERNAL_LATENCY_NS 2000.0
#define LAB_HOST_MEMCPY_GBYTES_PER_S 10.0
#define LAB_NOISE_FRACTION 0.01
#define LAB_RECENT_COPIES 64
#define LAB_SETTLED_COPIES 16
#define LAB_CONTEXT_STACK_DEPTH 16
#define CU_STREAM_NON_BLOCKING 0x1

typedef enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_SYSTEM_NOT_READY = 802,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct cuda_context *CUcontext;
typedef struct cuda_stream *CUstream;
typedef struct cuda_event *CUevent;
typedef struct {
    char bytes[16];
} CUuuid;

typedef enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_TCC_DRIVER = 35,
    CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 83
} CUdevice_attribute;

typedef enum {
    CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK = 1,
    CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2,
    CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
    CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED = 4
} CUdevice_P2PAttribute;

#define CU_EVENT_DISABLE_TIMING 0x2
#define STREAM_MAGIC 0x5754524du
#define EVENT_MAGIC 0x45564e54u
#define HOST_SIDE (-1)

struct cuda_stream {
    unsigned magic;
    unsigned flags;
    struct cuda_context *context;
    double cursor_ns;
    struct cuda_stream *next; /* list of created streams */
};

struct cuda_context {
    int gpu;     /* index in the state (NVML index) */
    int ordinal; /* CUDA device ordinal */
    int retain_count;
    int peer_enabled[LAB_MAX_GPUS]; /* by GPU index of the peer */
    struct cuda_stream default_stream;
};

struct cuda_event {
    unsigned magic;
    unsigned flags;
    int recorded;
    double time_ns;
};

typedef struct {
    char *base;
    size_t size;
    int gpu; /* HOST_SIDE for pinned host memory */
    unsigned long long version; /* write_clock at its last write (device memory) */
} allocation_t;

/* A device-to-device copy whose destination still holds what it wrote. */
typedef struct {
    uintptr_t dst, src;
    size_t bytes;
    unsigned long long dst_version, src_version;
} settled_copy_t;

typedef struct {
    int src_gpu, dst_gpu;
    const struct cuda_stream *stream;
    double start_ns, end_ns;
} recent_copy_t;

/* A memset whose bytes land at end_ns (virtual time). */
typedef struct {
    unsigned char *base;
    size_t count;
    size_t element_size;
    unsigned value;
    double end_ns;
} pending_memset_t;

typedef struct {
    double gbytes_per_s;
    double latency_ns;
    int drops_data;
    int bidirectional_partner_possible;
    double bidir_gbytes_per_s;
} copy_path_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int state_loaded;
static int initialized;
static lab_state_t state;
static int visible_count;
static int ordinal_to_gpu[LAB_MAX_GPUS];
static struct cuda_context contexts[LAB_MAX_GPUS];
static int gpu_failed[LAB_MAX_GPUS];
static int context_paid[LAB_MAX_GPUS];             /* by GPU index: startup cost paid */
static int peer_mapping_paid[LAB_MAX_GPUS][LAB_MAX_GPUS]; /* [context GPU][peer GPU] */
static int gpu_copy_count[LAB_MAX_GPUS];
static unsigned long long gpu_allocated_bytes[LAB_MAX_GPUS];
static allocation_t *allocations;
static size_t allocation_count, allocation_capacity;
static struct cuda_stream *streams;
static pending_memset_t *pending_memsets;
static size_t pending_count, pending_capacity;
static recent_copy_t recent_copies[LAB_RECENT_COPIES];
static unsigned recent_copy_next;
static settled_copy_t settled_copies[LAB_SETTLED_COPIES];
static unsigned settled_copy_next;
static unsigned long long write_clock;
static double host_now_ns;
static uint64_t noise_state;

static __thread struct cuda_context *context_stack[LAB_CONTEXT_STACK_DEPTH];
static __thread int context_depth; /* current context: context_stack[context_depth - 1] */

#define LOCKED(call)                                                                              \
    do {                                                                                          \
        pthread_mutex_lock(&lock);                                                                \
        CUresult locked_result = (call);                                                          \
        pthread_mutex_unlock(&lock);                                                              \
        return locked_result;                                                                     \
    } while (0)

static void forget_copies_of_stream(const struct cuda_stream *stream);
static void drop_pending_memsets_in(uintptr_t base, size_t bytes);

/* ---- state, devices ------------------------------------------------------------- */

static CUresult ensure_state(void)
{
    if (state_loaded) {
        return CUDA_SUCCESS;
    }
    char error[LAB_ERROR_LEN];
    if (lab_state_load(&state, error, sizeof error) != 0) {
        fprintf(stderr, "libcuda (lingbot lab): %s\n", error);
        return CUDA_ERROR_NO_DEVICE;
    }
    if (strcmp(state.library_version, state.driver_version) != 0) {
        return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH; /* libcuda of one version, module of another */
    }
    for (int i = 0; i < state.gpu_count; i++) {
        if (state.gpus[i].fabric_state == 1) {
            return CUDA_ERROR_SYSTEM_NOT_READY; /* an NVSwitch system whose fabric is not up */
        }
    }
    state_loaded = 1;
    return CUDA_SUCCESS;
}

static int gpu_for_visible_token(const char *token, size_t length)
{
    char text[LAB_TEXT_LEN];
    if (length == 0 || length >= sizeof text) {
        return -1;
    }
    memcpy(text, token, length);
    text[length] = '\0';
    if (strncmp(text, "GPU-", 4) == 0) {
        int found = -1;
        for (int i = 0; i < state.gpu_count; i++) {
            if (strncmp(state.gpus[i].uuid, text, length) == 0) {
                if (found >= 0) {
                    return -1; /* ambiguous prefix */
                }
                found = i;
            }
        }
        return found;
    }
    char *end = NULL;
    long index = strtol(text, &end, 10);
    if (*end != '\0' || index < 0 || index >= state.gpu_count) {
        return -1;
    }
    return (int)index;
}

static void set_visible_devices(void)
{
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    visible_count = 0;
    if (!visible) {
        for (int i = 0; i < state.gpu_count; i++) {
            ordinal_to_gpu[visible_count++] = i;
        }
        return;
    }
    const char *cursor = visible;
    while (*cursor && visible_count < state.gpu_count) {
        size_t length = strcspn(cursor, ",");
        int gpu = gpu_for_visible_token(cursor, length);
        for (int k = 0; k < visible_count && gpu >= 0; k++) {
            if (ordinal_to_gpu[k] == gpu) {
                gpu = -1;
            }
        }
        if (gpu < 0) {
            break; /* like the driver: the list ends at the first invalid entry */
        }
        ordinal_to_gpu[visible_count++] = gpu;
        cursor += length;
        if (*cursor == ',') {
            cursor++;
        }
    }
}

static CUresult gpu_of(CUdevice device, const lab_gpu_t **gpu)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (device < 0 || device >= visible_count) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *gpu = &state.gpus[ordinal_to_gpu[device]];
    return CUDA_SUCCESS;
}

#define GPU_OF(device, gpu)                                                                       \
    const lab_gpu_t *gpu = NULL;                                                                  \
    do {                                                                                          \
        CUresult found = gpu_of(device, &gpu);                                                    \
        if (found != CUDA_SUCCESS) {                                                              \
            return found;                                                                         \
        }                                                                                         \
    } while (0)

static struct cuda_context *current_context(void)
{
    return context_depth > 0 ? context_stack[context_depth - 1] : NULL;
}

static int context_is_live(const struct cuda_context *context)
{
    return context >= contexts && context < contexts + LAB_MAX_GPUS && context->retain_count > 0;
}

static CUresult require_context(struct cuda_context **context)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    *context = current_context();
    if (!*context) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!context_is_live(*context)) {
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    return gpu_failed[(*context)->gpu] ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}

/* ---- init, versions, errors ----------------------------------------------------- */

static CUresult init_locked(unsigned int flags)
{
    if (flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (initialized) {
        return CUDA_SUCCESS;
    }
    CUresult loaded = ensure_state();
    if (loaded != CUDA_SUCCESS) {
        return loaded;
    }
    set_visible_devices();
    if (visible_count == 0) {
        return CUDA_ERROR_NO_DEVICE;
    }
    for (int i = 0; i < LAB_MAX_GPUS; i++) {
        contexts[i].gpu = i;
        contexts[i].default_stream.magic = STREAM_MAGIC;
        contexts[i].default_stream.context = &contexts[i];
    }
    const char *seed = getenv("LINGBOT_LAB_NOISE_SEED");
    noise_state = 0x9e3779b97f4a7c15ULL ^ (seed ? strtoull(seed, NULL, 10) : 0);
    if (noise_state == 0) {
        noise_state = 1;
    }
    initialized = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags)
{
    LOCKED(init_locked(flags));
}

static CUresult driver_version_locked(int *version)
{
    if (!version) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult loaded = ensure_state();
    if (loaded != CUDA_SUCCESS) {
        return loaded;
    }
    *version = state.cuda_driver_version;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *driver_version)
{
    LOCKED(driver_version_locked(driver_version));
}

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
     "peer access has not been enabled"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
     "primary context active"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult lookup_error(CUresult error, const char **out, int want_name)
{
    if (!out) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++) {
        if (error_table[i].code == error) {
            *out = want_name ? error_table[i].name : error_table[i].text;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **name)
{
    return lookup_error(error, name, 1);
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text)
{
    return lookup_error(error, text, 0);
}

/* ---- device queries ------------------------------------------------------------- */

static CUresult device_count_locked(int *count)
{
    if (!count) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    *count = visible_count;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
    LOCKED(device_count_locked(count));
}

static CUresult device_get_locked(CUdevice *device, int ordinal)
{
    if (!device) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    GPU_OF(ordinal, gpu);
    (void)gpu;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    LOCKED(device_get_locked(device, ordinal));
}

static CUresult device_name_locked(char *name, int length, CUdevice device)
{
    GPU_OF(device, gpu);
    if (!name || length <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    snprintf(name, (size_t)length, "%s", gpu->name);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int length, CUdevice device)
{
    LOCKED(device_name_locked(name, length, device));
}

static CUresult device_uuid_locked(CUuuid *uuid, CUdevice device)
{
    GPU_OF(device, gpu);
    if (!uuid) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    memset(uuid, 0, sizeof *uuid);
    const char *text = gpu->uuid;
    if (strncmp(text, "GPU-", 4) == 0) {
        text += 4;
    }
    int nibbles = 0;
    for (; *text && nibbles < 32; text++) {
        char c = *text;
        int value = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
        if (value < 0) {
            continue; /* dashes */
        }
        uuid->bytes[nibbles / 2] = (char)(uuid->bytes[nibbles / 2] | (value << (nibbles % 2 ? 0 : 4)));
        nibbles++;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device)
{
    LOCKED(device_uuid_locked(uuid, device));
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device)
{
    LOCKED(device_uuid_locked(uuid, device));
}

static CUresult device_bus_id_locked(char *bus_id, int length, CUdevice device)
{
    GPU_OF(device, gpu);
    if (!bus_id || length <= 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    snprintf(bus_id, (size_t)length, "%04X:%02X:%02X.%X", gpu->domain, gpu->bus, gpu->device,
             gpu->function);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *bus_id, int length, CUdevice device)
{
    LOCKED(device_bus_id_locked(bus_id, length, device));
}

static CUresult device_by_bus_id_locked(CUdevice *device, const char *bus_id)
{
    unsigned domain, bus, dev, function;
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!device || !bus_id || lab_parse_bdf(bus_id, &domain, &bus, &dev, &function) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (int ordinal = 0; ordinal < visible_count; ordinal++) {
        const lab_gpu_t *gpu = &state.gpus[ordinal_to_gpu[ordinal]];
        if (gpu->domain == domain && gpu->bus == bus && gpu->device == dev &&
            gpu->function == function) {
            *device = ordinal;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *device, const char *bus_id)
{
    LOCKED(device_by_bus_id_locked(device, bus_id));
}

static CUresult total_mem_locked(size_t *bytes, CUdevice device)
{
    GPU_OF(device, gpu);
    if (!bytes) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *bytes = (size_t)gpu->memory_total_bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    LOCKED(total_mem_locked(bytes, device));
}

typedef struct {
    const char *name_part;
    int major, minor, multiprocessors;
} architecture_t;

static const architecture_t *architecture_of(const char *name)
{
    static const architecture_t table[] = {
        {"H200", 9, 0, 132},  {"H100", 9, 0, 132},  {"H800", 9, 0, 132},  {"B200", 10, 0, 148},
        {"A100", 8, 0, 108},  {"A800", 8, 0, 108},  {"A30", 8, 0, 56},    {"L40", 8, 9, 142},
        {"L4", 8, 9, 58},     {"Ada", 8, 9, 142},   {"RTX 40", 8, 9, 128}, {"A6000", 8, 6, 84},
        {"A5000", 8, 6, 64},  {"A4000", 8, 6, 48},  {"A40", 8, 6, 84},    {"A10", 8, 6, 72},
        {"RTX 30", 8, 6, 82}, {"V100", 7, 0, 80},   {"T4", 7, 5, 40},     {"RTX 20", 7, 5, 68},
    };
    static const architecture_t fallback = {"", 8, 0, 108};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strstr(name, table[i].name_part)) {
            return &table[i];
        }
    }
    return &fallback;
}

static CUresult attribute_locked(int *value, CUdevice_attribute attribute, CUdevice device)
{
    GPU_OF(device, gpu);
    if (!value) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    const architecture_t *architecture = architecture_of(gpu->name);
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = architecture->multiprocessors; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = (int)gpu->bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = (int)gpu->device; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = (int)gpu->domain; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = architecture->major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = architecture->minor; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
    LOCKED(attribute_locked(value, attribute, device));
}

/* ---- contexts ------------------------------------------------------------------- */

static void free_device_allocations(int gpu)
{
    size_t kept = 0;
    for (size_t i = 0; i < allocation_count; i++) {
        if (allocations[i].gpu == gpu) {
            drop_pending_memsets_in((uintptr_t)allocations[i].base, allocations[i].size);
            free(allocations[i].base);
        } else {
            allocations[kept++] = allocations[i];
        }
    }
    allocation_count = kept;
    gpu_allocated_bytes[gpu] = 0;
}

static void destroy_streams_of(const struct cuda_context *context)
{
    struct cuda_stream **link = &streams;
    while (*link) {
        struct cuda_stream *stream = *link;
        if (stream->context == context) {
            *link = stream->next;
            forget_copies_of_stream(stream);
            stream->magic = 0;
            free(stream);
        } else {
            link = &stream->next;
        }
    }
}

/* Block the calling thread for a startup cost (see "Startup costs"). */
static void spend_wall_ms(int milliseconds)
{
    if (milliseconds <= 0) {
        return;
    }
    struct timespec left = {milliseconds / 1000, (long)(milliseconds % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0) {
    }
}

static void deactivate_context(struct cuda_context *context)
{
    context_paid[context->gpu] = 0;
    for (int i = 0; i < LAB_MAX_GPUS; i++) {
        peer_mapping_paid[context->gpu][i] = 0;
        peer_mapping_paid[i][context->gpu] = 0;
    }
    free_device_allocations(context->gpu);
    destroy_streams_of(context);
    memset(context->peer_enabled, 0, sizeof context->peer_enabled);
    for (int i = 0; i < LAB_MAX_GPUS; i++) {
        contexts[i].peer_enabled[context->gpu] = 0;
    }
    context->default_stream.cursor_ns = 0;
}

static CUresult primary_retain_locked(CUcontext *context, CUdevice device)
{
    GPU_OF(device, gpu);
    if (!context) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (gpu->lost) {
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    int index = ordinal_to_gpu[device];
    if (!context_paid[index]) {
        int persistent = lab_persistence_get(&state, index);
        spend_wall_ms(state.context_create_ms + (persistent ? 0 : state.gpu_init_ms));
        context_paid[index] = 1;
    }
    struct cuda_context *primary = &contexts[index];
    primary->ordinal = device;
    primary->retain_count++;
    *context = primary;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
    LOCKED(primary_retain_locked(context, device));
}

static void forget_current(const struct cuda_context *context)
{
    for (int i = 0; i < context_depth; i++) {
        if (context_stack[i] == context) {
            context_stack[i] = NULL;
        }
    }
    while (context_depth > 0 && context_stack[context_depth - 1] == NULL) {
        context_depth--;
    }
}

static CUresult primary_release_locked(CUdevice device)
{
    GPU_OF(device, gpu);
    (void)gpu;
    struct cuda_context *primary = &contexts[ordinal_to_gpu[device]];
    if (primary->retain_count == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--primary->retain_count == 0) {
        deactivate_context(primary);
        forget_current(primary);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    LOCKED(primary_release_locked(device));
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice device)
{
    LOCKED(primary_release_locked(device));
}

static CUresult primary_reset_locked(CUdevice device)
{
    GPU_OF(device, gpu);
    (void)gpu;
    struct cuda_context *primary = &contexts[ordinal_to_gpu[device]];
    if (primary->retain_count > 0) {
        deactivate_context(primary);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device)
{
    LOCKED(primary_reset_locked(device));
}

static CUresult set_current_locked(CUcontext context)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (context && !context_is_live(context)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (context_depth == 0) {
        if (context) {
            context_stack[context_depth++] = context;
        }
    } else if (context) {
        context_stack[context_depth - 1] = context;
    } else {
        context_depth--;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext context)
{
    LOCKED(set_current_locked(context));
}

static CUresult get_current_locked(CUcontext *context)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!context) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *context = current_context();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *context)
{
    LOCKED(get_current_locked(context));
}

static CUresult push_locked(CUcontext context)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!context_is_live(context)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (context_depth == LAB_CONTEXT_STACK_DEPTH) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    context_stack[context_depth++] = context;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext context)
{
    LOCKED(push_locked(context));
}

static CUresult pop_locked(CUcontext *context)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (context_depth == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct cuda_context *popped = context_stack[--context_depth];
    if (context) {
        *context = popped;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *context)
{
    LOCKED(pop_locked(context));
}

/* cuCtxCreate hands out the device's primary context, made current. */
static CUresult create_locked(CUcontext *context, unsigned int flags, CUdevice device)
{
    (void)flags;
    CUresult retained = primary_retain_locked(context, device);
    if (retained != CUDA_SUCCESS) {
        return retained;
    }
    return push_locked(*context);
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *context, unsigned int flags, CUdevice device)
{
    LOCKED(create_locked(context, flags, device));
}

static CUresult destroy_locked(CUcontext context)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!context_is_live(context)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--context->retain_count == 0) {
        deactivate_context(context);
        forget_current(context);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext context)
{
    LOCKED(destroy_locked(context));
}

static CUresult ctx_device_locked(CUdevice *device)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_LAUNCH_FAILED) {
        return result;
    }
    if (!device) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *device = context->ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    LOCKED(ctx_device_locked(device));
}

static void wait_host_until(double time_ns)
{
    if (time_ns > host_now_ns) {
        host_now_ns = time_ns;
    }
}

static CUresult ctx_synchronize_locked(void)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    wait_host_until(context->default_stream.cursor_ns);
    for (const struct cuda_stream *stream = streams; stream; stream = stream->next) {
        if (stream->context == context) {
            wait_host_until(stream->cursor_ns);
        }
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    LOCKED(ctx_synchronize_locked());
}

/* ---- peer access ---------------------------------------------------------------- */

static int peer_supported(int gpu_a, int gpu_b)
{
    return gpu_a != gpu_b && !state.gpus[gpu_a].lost && !state.gpus[gpu_b].lost &&
           state.pairs[gpu_a][gpu_b].p2p.present;
}

static CUresult can_access_peer_locked(int *can_access, CUdevice device, CUdevice peer)
{
    GPU_OF(device, gpu);
    GPU_OF(peer, peer_gpu);
    (void)gpu;
    (void)peer_gpu;
    if (!can_access) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (device == peer) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *can_access = peer_supported(ordinal_to_gpu[device], ordinal_to_gpu[peer]);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can_access, CUdevice device, CUdevice peer)
{
    LOCKED(can_access_peer_locked(can_access, device, peer));
}

static CUresult p2p_attribute_locked(int *value, CUdevice_P2PAttribute attribute, CUdevice src,
                                     CUdevice dst)
{
    GPU_OF(src, src_gpu);
    GPU_OF(dst, dst_gpu);
    (void)src_gpu;
    (void)dst_gpu;
    if (!value) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (src == dst) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    int a = ordinal_to_gpu[src], b = ordinal_to_gpu[dst];
    int supported = peer_supported(a, b);
    const lab_pair_t *pair = &state.pairs[a][b];
    switch (attribute) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = pair->nvlink_count > 0 ? 0 : pair->topology_level / 10;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = supported; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
        *value = supported && strcmp(pair->p2p_status[LAB_P2P_ATOMICS], "OK") == 0;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = supported; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attribute,
                                        CUdevice src, CUdevice dst)
{
    LOCKED(p2p_attribute_locked(value, attribute, src, dst));
}

static CUresult peer_pair(CUcontext peer, struct cuda_context **context)
{
    CUresult result = require_context(context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!peer || !context_is_live(peer)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (peer == *context) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    return CUDA_SUCCESS;
}

static CUresult enable_peer_locked(CUcontext peer, unsigned int flags)
{
    struct cuda_context *context = NULL;
    CUresult result = peer_pair(peer, &context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!peer_supported(context->gpu, peer->gpu)) {
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    }
    if (context->peer_enabled[peer->gpu]) {
        return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    }
    if (!peer_mapping_paid[context->gpu][peer->gpu]) {
        spend_wall_ms(state.peer_mapping_ms);
        peer_mapping_paid[context->gpu][peer->gpu] = 1;
    }
    context->peer_enabled[peer->gpu] = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    LOCKED(enable_peer_locked(peer, flags));
}

static CUresult disable_peer_locked(CUcontext peer)
{
    struct cuda_context *context = NULL;
    CUresult result = peer_pair(peer, &context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!context->peer_enabled[peer->gpu]) {
        return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    }
    context->peer_enabled[peer->gpu] = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    LOCKED(disable_peer_locked(peer));
}

/* ---- memory --------------------------------------------------------------------- */

static CUresult remember_allocation(void *base, size_t size, int gpu)
{
    if (allocation_count == allocation_capacity) {
        size_t capacity = allocation_capacity ? allocation_capacity * 2 : 64;
        allocation_t *grown = realloc(allocations, capacity * sizeof *grown);
        if (!grown) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocations = grown;
        allocation_capacity = capacity;
    }
    allocations[allocation_count++] =
        (allocation_t){.base = base, .size = size, .gpu = gpu, .version = ++write_clock};
    return CUDA_SUCCESS;
}

/* The allocation holding [address, address + bytes), or NULL. */
static allocation_t *find_allocation(uintptr_t address, size_t bytes)
{
    for (size_t i = 0; i < allocation_count; i++) {
        uintptr_t base = (uintptr_t)allocations[i].base;
        if (address >= base && address - base <= allocations[i].size &&
            bytes <= allocations[i].size - (address - base)) {
            return &allocations[i];
        }
    }
    return NULL;
}

static CUresult forget_allocation(void *base, int want_device)
{
    for (size_t i = 0; i < allocation_count; i++) {
        if (allocations[i].base == base && (allocations[i].gpu >= 0) == want_device) {
            if (allocations[i].gpu >= 0) {
                gpu_allocated_bytes[allocations[i].gpu] -= allocations[i].size;
            }
            drop_pending_memsets_in((uintptr_t)base, allocations[i].size);
            free(base);
            allocations[i] = allocations[--allocation_count];
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static unsigned long long device_allocation_limit(int gpu)
{
    unsigned long long total = state.gpus[gpu].memory_total_bytes;
    return total < LAB_DEVICE_ALLOCATION_LIMIT_BYTES ? total : LAB_DEVICE_ALLOCATION_LIMIT_BYTES;
}

static CUresult mem_alloc_locked(CUdeviceptr *pointer, size_t bytes)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!pointer || bytes == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    int gpu = context->gpu;
    if (gpu_allocated_bytes[gpu] + bytes > device_allocation_limit(gpu)) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *base = malloc(bytes);
    if (!base) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (remember_allocation(base, bytes, gpu) != CUDA_SUCCESS) {
        free(base);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    gpu_allocated_bytes[gpu] += bytes;
    *pointer = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t bytes)
{
    LOCKED(mem_alloc_locked(pointer, bytes));
}

static CUresult mem_free_locked(CUdeviceptr pointer)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (pointer == 0) {
        return CUDA_SUCCESS;
    }
    return forget_allocation((void *)(uintptr_t)pointer, 1);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr pointer)
{
    LOCKED(mem_free_locked(pointer));
}

static CUresult host_alloc_locked(void **pointer, size_t bytes)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!pointer || bytes == 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *base = malloc(bytes);
    if (!base) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (remember_allocation(base, bytes, HOST_SIDE) != CUDA_SUCCESS) {
        free(base);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pointer = base;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void **pointer, size_t bytes)
{
    LOCKED(host_alloc_locked(pointer, bytes));
}

EXPORT CUresult cuMemHostAlloc(void **pointer, size_t bytes, unsigned int flags)
{
    (void)flags;
    LOCKED(host_alloc_locked(pointer, bytes));
}

static CUresult host_free_locked(void *pointer)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return forget_allocation(pointer, 0);
}

EXPORT CUresult cuMemFreeHost(void *pointer)
{
    LOCKED(host_free_locked(pointer));
}

static CUresult mem_info_locked(size_t *free_bytes, size_t *total_bytes)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!free_bytes || !total_bytes) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *total_bytes = (size_t)state.gpus[context->gpu].memory_total_bytes;
    *free_bytes = (size_t)(*total_bytes - gpu_allocated_bytes[context->gpu]);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    LOCKED(mem_info_locked(free_bytes, total_bytes));
}

/* ---- streams and events --------------------------------------------------------- */

static CUresult stream_create_locked(CUstream *stream, unsigned int flags)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!stream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct cuda_stream *created = calloc(1, sizeof *created);
    if (!created) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    created->magic = STREAM_MAGIC;
    created->flags = flags;
    created->context = context;
    created->cursor_ns = host_now_ns;
    created->next = streams;
    streams = created;
    *stream = created;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    LOCKED(stream_create_locked(stream, flags));
}

/* The stream an operation runs on: NULL means the current context's default one. */
static CUresult resolve_stream(CUstream stream, struct cuda_stream **resolved)
{
    struct cuda_context *context = NULL;
    CUresult result = require_context(&context);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!stream) {
        *resolved = &context->default_stream;
        return CUDA_SUCCESS;
    }
    for (struct cuda_stream *known = streams; known; known = known->next) {
        if (known == stream) {
            *resolved = known;
            return gpu_failed[known->context->gpu] ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_destroy_locked(CUstream stream)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    for (struct cuda_stream **link = &streams; *link; link = &(*link)->next) {
        if (*link == stream) {
            *link = stream->next;
            forget_copies_of_stream(stream);
            stream->magic = 0;
            free(stream);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
    LOCKED(stream_destroy_locked(stream));
}

static CUresult stream_synchronize_locked(CUstream stream)
{
    struct cuda_stream *resolved = NULL;
    CUresult result = resolve_stream(stream, &resolved);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    wait_host_until(resolved->cursor_ns);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
    LOCKED(stream_synchronize_locked(stream));
}

/* Work is done eagerly, so a query finds it complete (time moves to its end). */
EXPORT CUresult cuStreamQuery(CUstream stream)
{
    LOCKED(stream_synchronize_locked(stream));
}

static CUresult event_create_locked(CUevent *event, unsigned int flags)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!event) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct cuda_event *created = calloc(1, sizeof *created);
    if (!created) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    created->magic = EVENT_MAGIC;
    created->flags = flags;
    *event = created;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    LOCKED(event_create_locked(event, flags));
}

static int event_is_valid(const struct cuda_event *event)
{
    return event && event->magic == EVENT_MAGIC;
}

static CUresult event_destroy_locked(CUevent event)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!event_is_valid(event)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    event->magic = 0;
    free(event);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
    LOCKED(event_destroy_locked(event));
}

static double later(double a, double b)
{
    return a > b ? a : b;
}

/* When the next operation on the stream can start: after the stream's own work and the
 * host's wait, and across the legacy default stream's implicit synchronization. */
static double stream_start_ns(const struct cuda_stream *stream)
{
    double start = later(stream->cursor_ns, host_now_ns);
    const struct cuda_stream *legacy = &stream->context->default_stream;
    if (stream == legacy) {
        for (const struct cuda_stream *other = streams; other; other = other->next) {
            if (other->context == stream->context && !(other->flags & CU_STREAM_NON_BLOCKING)) {
                start = later(start, other->cursor_ns);
            }
        }
    } else if (!(stream->flags & CU_STREAM_NON_BLOCKING)) {
        start = later(start, legacy->cursor_ns);
    }
    return start;
}

static CUresult event_record_locked(CUevent event, CUstream stream)
{
    struct cuda_stream *resolved = NULL;
    CUresult result = resolve_stream(stream, &resolved);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!event_is_valid(event)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    resolved->cursor_ns = stream_start_ns(resolved);
    event->time_ns = resolved->cursor_ns;
    event->recorded = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream)
{
    LOCKED(event_record_locked(event, stream));
}

static CUresult event_synchronize_locked(CUevent event)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!event_is_valid(event)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (event->recorded) {
        wait_host_until(event->time_ns);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(CUevent event)
{
    LOCKED(event_synchronize_locked(event));
}

EXPORT CUresult cuEventQuery(CUevent event)
{
    LOCKED(event_synchronize_locked(event));
}

static CUresult elapsed_locked(float *milliseconds, CUevent start, CUevent end)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!milliseconds) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!event_is_valid(start) || !event_is_valid(end) || !start->recorded || !end->recorded ||
        (start->flags & CU_EVENT_DISABLE_TIMING) || (end->flags & CU_EVENT_DISABLE_TIMING)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *milliseconds = (float)((end->time_ns - start->time_ns) / 1e6);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float *milliseconds, CUevent start, CUevent end)
{
    LOCKED(elapsed_locked(milliseconds, start, end));
}

static CUresult stream_wait_event_locked(CUstream stream, CUevent event, unsigned int flags)
{
    (void)flags;
    struct cuda_stream *resolved = NULL;
    CUresult result = resolve_stream(stream, &resolved);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if (!event_is_valid(event)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (event->recorded && event->time_ns > resolved->cursor_ns) {
        resolved->cursor_ns = event->time_ns;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    LOCKED(stream_wait_event_locked(stream, event, flags));
}

/* ---- copies --------------------------------------------------------------------- */

static double noise_factor(void)
{
    noise_state ^= noise_state << 13;
    noise_state ^= noise_state >> 7;
    noise_state ^= noise_state << 17;
    double unit = (double)(noise_state >> 11) / (double)(1ULL << 53); /* [0, 1) */
    return 1.0 + LAB_NOISE_FRACTION * (2.0 * unit - 1.0);
}

static int peer_access_on(int gpu_a, int gpu_b)
{
    return contexts[gpu_a].peer_enabled[gpu_b] || contexts[gpu_b].peer_enabled[gpu_a];
}

static copy_path_t choose_path(int src_gpu, int dst_gpu)
{
    copy_path_t path = {0};
    if (src_gpu == HOST_SIDE && dst_gpu == HOST_SIDE) {
        path.gbytes_per_s = LAB_HOST_MEMCPY_GBYTES_PER_S;
    } else if (src_gpu == HOST_SIDE) {
        path.gbytes_per_s = state.gpus[dst_gpu].h2d_gbytes_per_s;
        path.latency_ns = state.gpus[dst_gpu].host_latency_ns;
    } else if (dst_gpu == HOST_SIDE) {
        path.gbytes_per_s = state.gpus[src_gpu].d2h_gbytes_per_s;
        path.latency_ns = state.gpus[src_gpu].host_latency_ns;
    } else if (src_gpu == dst_gpu) {
        path.gbytes_per_s = LAB_DEVICE_INTERNAL_GBYTES_PER_S;
        path.latency_ns = LAB_DEVICE_INTERNAL_LATENCY_NS;
    } else {
        const lab_pair_t *pair = &state.pairs[src_gpu][dst_gpu];
        int direct = pair->p2p.present && peer_access_on(src_gpu, dst_gpu);
        const lab_path_t *chosen = direct ? lab_pair_p2p_now(pair) : &pair->host_staged;
        path.gbytes_per_s = chosen->gbytes_per_s;
        path.bidir_gbytes_per_s = chosen->bidir_gbytes_per_s;
        path.latency_ns = chosen->latency_ns;
        path.drops_data = direct && pair->p2p_drops_writes;
        path.bidirectional_partner_possible = 1;
    }
    return path;
}

static int opposite_copy_running(int src_gpu, int dst_gpu, const struct cuda_stream *stream,
                                 double start_ns)
{
    for (unsigned i = 0; i < LAB_RECENT_COPIES; i++) {
        const recent_copy_t *other = &recent_copies[i];
        if (other->stream && other->stream != stream && other->src_gpu == dst_gpu &&
            other->dst_gpu == src_gpu && other->start_ns <= start_ns && start_ns < other->end_ns) {
            return 1;
        }
    }
    return 0;
}

static void remember_copy(int src_gpu, int dst_gpu, const struct cuda_stream *stream,
                          double start_ns, double end_ns)
{
    recent_copies[recent_copy_next % LAB_RECENT_COPIES] = (recent_copy_t){
        .src_gpu = src_gpu,
        .dst_gpu = dst_gpu,
        .stream = stream,
        .start_ns = start_ns,
        .end_ns = end_ns,
    };
    recent_copy_next++;
}

static void forget_copies_of_stream(const struct cuda_stream *stream)
{
    for (unsigned i = 0; i < LAB_RECENT_COPIES; i++) {
        if (recent_copies[i].stream == stream) {
            recent_copies[i].stream = NULL;
        }
    }
}

/* ---- asynchronous memsets ------------------------------------------------------ */

static void write_memset(const pending_memset_t *memset_op)
{
    allocation_t *target = find_allocation((uintptr_t)memset_op->base, 1);
    if (target) {
        target->version = ++write_clock;
    }
    if (memset_op->element_size == 1) {
        memset(memset_op->base, (int)(memset_op->value & 0xff), memset_op->count);
        return;
    }
    for (size_t i = 0; i < memset_op->count; i++) {
        memcpy(memset_op->base + i * memset_op->element_size, &memset_op->value,
               memset_op->element_size);
    }
}

/* Lands every memset complete by time_ns, earliest first (a later one wins overlaps). */
static void land_memsets_until(double time_ns)
{
    for (;;) {
        size_t earliest = pending_count;
        for (size_t i = 0; i < pending_count; i++) {
            if (pending_memsets[i].end_ns <= time_ns &&
                (earliest == pending_count ||
                 pending_memsets[i].end_ns < pending_memsets[earliest].end_ns)) {
                earliest = i;
            }
        }
        if (earliest == pending_count) {
            return;
        }
        write_memset(&pending_memsets[earliest]);
        memmove(&pending_memsets[earliest], &pending_memsets[earliest + 1],
                (pending_count - earliest - 1) * sizeof *pending_memsets);
        pending_count--;
    }
}

static CUresult queue_memset(const pending_memset_t *memset_op)
{
    if (pending_count == pending_capacity) {
        size_t capacity = pending_capacity ? pending_capacity * 2 : 16;
        pending_memset_t *grown = realloc(pending_memsets, capacity * sizeof *grown);
        if (!grown) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pending_memsets = grown;
        pending_capacity = capacity;
    }
    pending_memsets[pending_count++] = *memset_op;
    return CUDA_SUCCESS;
}

/* Freed memory: its memsets never land. */
static void drop_pending_memsets_in(uintptr_t base, size_t bytes)
{
    size_t kept = 0;
    for (size_t i = 0; i < pending_count; i++) {
        uintptr_t address = (uintptr_t)pending_memsets[i].base;
        if (address < base || address >= base + bytes) {
            pending_memsets[kept++] = pending_memsets[i];
        }
    }
    pending_count = kept;
}

/* Counts a copy on a GPU; fails it (sticky) past the profile's fault threshold. */
static CUresult count_copy_on(int gpu)
{
    if (gpu == HOST_SIDE) {
        return CUDA_SUCCESS;
    }
    if (gpu_failed[gpu]) {
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    gpu_copy_count[gpu]++;
    int limit = state.gpus[gpu].fail_after_copies;
    if (limit > 0 && gpu_copy_count[gpu] > limit) {
        gpu_failed[gpu] = 1;
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    return CUDA_SUCCESS;
}

/* memmove, skipped for a device-to-device copy that ran last into dst with neither buffer
 * written since (dst already holds these bytes). */
static void move_bytes(void *dst, const void *src, size_t bytes)
{
    allocation_t *to = find_allocation((uintptr_t)dst, bytes);
    const allocation_t *from = find_allocation((uintptr_t)src, bytes);
    int device_to_device = to && from && to != from && to->gpu >= 0 && from->gpu >= 0;
    if (device_to_device) {
        for (unsigned i = 0; i < LAB_SETTLED_COPIES; i++) {
            const settled_copy_t *settled = &settled_copies[i];
            if (settled->dst == (uintptr_t)dst && settled->src == (uintptr_t)src &&
                settled->bytes == bytes && settled->dst_version == to->version &&
                settled->src_version == from->version) {
                return;
            }
        }
    }
    memmove(dst, src, bytes);
    if (to && to->gpu >= 0) {
        to->version = ++write_clock;
    }
    if (device_to_device) {
        settled_copies[settled_copy_next++ % LAB_SETTLED_COPIES] = (settled_copy_t){
            .dst = (uintptr_t)dst,
            .src = (uintptr_t)src,
            .bytes = bytes,
            .dst_version = to->version,
            .src_version = from->version,
        };
    }
}

/* Moves the bytes and times the copy on the stream. src/dst_gpu: GPU index or HOST_SIDE. */
static CUresult run_copy(void *dst, const void *src, size_t bytes, int dst_gpu, int src_gpu,
                         struct cuda_stream *stream)
{
    CUresult counted = count_copy_on(src_gpu);
    if (counted == CUDA_SUCCESS && dst_gpu != src_gpu) {
        counted = count_copy_on(dst_gpu);
    }
    if (counted != CUDA_SUCCESS) {
        return counted;
    }
    copy_path_t path = choose_path(src_gpu, dst_gpu);
    double start_ns = stream_start_ns(stream);
    land_memsets_until(start_ns);
    double gbytes_per_s = path.gbytes_per_s;
    if (path.bidirectional_partner_possible &&
        opposite_copy_running(src_gpu, dst_gpu, stream, start_ns)) {
        gbytes_per_s = path.bidir_gbytes_per_s / 2.0;
    }
    double duration_ns = (path.latency_ns + (double)bytes / gbytes_per_s) * noise_factor();
    stream->cursor_ns = start_ns + duration_ns;
    if (path.bidirectional_partner_possible) {
        remember_copy(src_gpu, dst_gpu, stream, start_ns, stream->cursor_ns);
    }
    if (!path.drops_data && bytes > 0 && dst != src) {
        move_bytes(dst, src, bytes);
    }
    if (src_gpu != HOST_SIDE) {
        lab_gpu_mark_load(src_gpu, duration_ns / 1e9);
    }
    if (dst_gpu != HOST_SIDE && dst_gpu != src_gpu) {
        lab_gpu_mark_load(dst_gpu, duration_ns / 1e9);
    }
    return CUDA_SUCCESS;
}

/* The GPU owning device memory [address, address + bytes), or -1 (not device memory). */
static int device_memory_gpu(uintptr_t address, size_t bytes)
{
    const allocation_t *allocation = find_allocation(address, bytes);
    return allocation && allocation->gpu >= 0 ? allocation->gpu : -1;
}

enum copy_kind { HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, ANY_TO_ANY };

static CUresult copy_locked(uintptr_t dst, uintptr_t src, size_t bytes, enum copy_kind kind,
                            CUstream stream, int synchronous)
{
    struct cuda_stream *resolved = NULL;
    CUresult result = resolve_stream(stream, &resolved);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    if ((!dst || !src) && bytes > 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    int dst_gpu = device_memory_gpu(dst, bytes);
    int src_gpu = device_memory_gpu(src, bytes);
    int dst_must_be_device = kind == HOST_TO_DEVICE || kind == DEVICE_TO_DEVICE;
    int src_must_be_device = kind == DEVICE_TO_HOST || kind == DEVICE_TO_DEVICE;
    if ((dst_must_be_device && dst_gpu < 0) || (src_must_be_device && src_gpu < 0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (kind == HOST_TO_DEVICE) {
        src_gpu = HOST_SIDE;
    } else if (kind == DEVICE_TO_HOST) {
        dst_gpu = HOST_SIDE;
    }
    result = run_copy((void *)dst, (const void *)src, bytes, dst_gpu < 0 ? HOST_SIDE : dst_gpu,
                      src_gpu < 0 ? HOST_SIDE : src_gpu, resolved);
    if (result == CUDA_SUCCESS && synchronous) {
        wait_host_until(resolved->cursor_ns);
    }
    return result;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, HOST_TO_DEVICE, NULL, 1));
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, DEVICE_TO_HOST, NULL, 1));
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, DEVICE_TO_DEVICE, NULL, 1));
}

EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, ANY_TO_ANY, NULL, 1));
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
                                     CUstream stream)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, HOST_TO_DEVICE, stream, 0));
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, DEVICE_TO_HOST, stream, 0));
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                     CUstream stream)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, DEVICE_TO_DEVICE, stream, 0));
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
    LOCKED(copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, ANY_TO_ANY, stream, 0));
}

static CUresult peer_copy_locked(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                                 CUcontext src_context, size_t bytes, CUstream stream,
                                 int synchronous)
{
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!context_is_live(dst_context) || !context_is_live(src_context)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (device_memory_gpu((uintptr_t)dst, bytes) != dst_context->gpu ||
        device_memory_gpu((uintptr_t)src, bytes) != src_context->gpu) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return copy_locked((uintptr_t)dst, (uintptr_t)src, bytes, DEVICE_TO_DEVICE, stream,
                       synchronous);
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                             CUcontext src_context, size_t bytes)
{
    LOCKED(peer_copy_locked(dst, dst_context, src, src_context, bytes, NULL, 1));
}

EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                                  CUcontext src_context, size_t bytes, CUstream stream)
{
    LOCKED(peer_copy_locked(dst, dst_context, src, src_context, bytes, stream, 0));
}

/* Device memory only (the driver's memsets into pinned host memory are not modelled).
 * Asynchronous with respect to the host for every entry point, as the driver's are for
 * device memory: the bytes land when the memset completes on the stream. */
static CUresult memset_locked(CUdeviceptr dst, unsigned int value, size_t element_size,
                              size_t count, CUstream stream)
{
    struct cuda_stream *resolved = NULL;
    CUresult result = resolve_stream(stream, &resolved);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    size_t bytes = element_size * count;
    int gpu = device_memory_gpu((uintptr_t)dst, bytes);
    if (gpu < 0 || (dst % element_size) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (gpu_failed[gpu]) {
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    double start_ns = stream_start_ns(resolved);
    land_memsets_until(start_ns);
    double end_ns =
        start_ns + LAB_DEVICE_INTERNAL_LATENCY_NS + (double)bytes / LAB_DEVICE_INTERNAL_GBYTES_PER_S;
    pending_memset_t queued = {
        .base = (unsigned char *)(uintptr_t)dst,
        .count = count,
        .element_size = element_size,
        .value = value,
        .end_ns = end_ns,
    };
    result = queue_memset(&queued);
    if (result != CUDA_SUCCESS) {
        return result;
    }
    resolved->cursor_ns = end_ns;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count)
{
    LOCKED(memset_locked(dst, value, 1, count, NULL));
}

EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t count)
{
    LOCKED(memset_locked(dst, value, 2, count, NULL));
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count)
{
    LOCKED(memset_locked(dst, value, 4, count, NULL));
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                                CUstream stream)
{
    LOCKED(memset_locked(dst, value, 1, count, stream));
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count,
                                 CUstream stream)
{
    LOCKED(memset_locked(dst, value, 4, count, stream));
}

/* ---- teardown ------------------------------------------------------------------- */

__attribute__((destructor)) static void release_everything(void)
{
    for (size_t i = 0; i < allocation_count; i++) {
        free(allocations[i].base);
    }
    free(allocations);
    allocations = NULL;
    allocation_count = allocation_capacity = 0;
    free(pending_memsets);
    pending_memsets = NULL;
    pending_count = pending_capacity = 0;
    while (streams) {
        struct cuda_stream *next = streams->next;
        free(streams);
        streams = next;
    }
}
