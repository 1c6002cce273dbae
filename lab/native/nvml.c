/*
 * libnvidia-ml.so.1 for lab nodes: the NVML calls the toolkit uses, with NVML's
 * signatures, structs, enum values and return codes, answering from the node's
 * hardware state (lab/CONTRACT.md).
 *
 * - Every nvmlInit reads state.txt afresh when the library is not yet initialized;
 *   nvmlShutdown balances nvmlInit.
 * - Handles of a GPU the state marks lost are refused with NVML_ERROR_GPU_IS_LOST.
 * - Current link generation and performance state follow busy/<i> (written by
 *   libcuda while copies run): idle gen_idle and P8, under load P0; the link reaches
 *   gen_load only after link.ramp_ms of sustained copies and drops back to gen_idle
 *   when the GPU goes idle (labstate.h).
 * - Persistence mode lives in persistence/<i>, shared with nvidia-smi and
 *   nvidia-persistenced; setting it needs root.
 * - Memory: 1 MiB used (the driver's own), reserved 0, like nvidia-smi shows.
 * - MIG mode: NOT_SUPPORTED unless the GPU is MIG-capable (A100, A30, H100, ...).
 * - Clock event reasons (both call names): idle while not busy, plus each clock_events
 *   fault's bits in every Nth reading of the GPU, counted from the process's nvmlInit.
 * - Field values: only NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, from the state's
 *   recovery_action (null: NOT_SUPPORTED, as drivers before R570 answer).
 * - NVLink error counters: 0 on every link, but for each nvlink_errors fault's counter on
 *   the GPU's first link, rising with the wall clock from the fault's since_unix_s.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "labstate.h"

#define EXPORT __attribute__((visibility("default")))

typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

typedef enum {
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_CAPS_INDEX_WRITE = 1,
    NVML_P2P_CAPS_INDEX_NVLINK = 2,
    NVML_P2P_CAPS_INDEX_ATOMICS = 3,
    NVML_P2P_CAPS_INDEX_PCI = 4,
    NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum {
    NVML_P2P_STATUS_OK = 0,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
    NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
    NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
    NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
    NVML_P2P_STATUS_NOT_SUPPORTED = 5,
    NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

typedef enum { NVML_PSTATE_0 = 0, NVML_PSTATE_8 = 8, NVML_PSTATE_UNKNOWN = 32 } nvmlPstates_t;

typedef enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 } nvmlPcieUtilCounter_t;

typedef enum { NVML_AFFINITY_SCOPE_NODE = 0, NVML_AFFINITY_SCOPE_SOCKET = 1 } nvmlAffinityScope_t;

typedef enum {
    NVML_BRAND_UNKNOWN = 0,
    NVML_BRAND_QUADRO = 1,
    NVML_BRAND_TESLA = 2,
    NVML_BRAND_GEFORCE = 5,
    NVML_BRAND_TITAN = 6,
    NVML_BRAND_QUADRO_RTX = 12,
    NVML_BRAND_NVIDIA_RTX = 13,
    NVML_BRAND_NVIDIA = 14
} nvmlBrandType_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_NVLINK_MAX_LINKS 18
#define NVSWITCH_PCI_DEVICE_ID 0x22a310deu
#define DRIVER_USED_MEMORY_BYTES (1024ULL * 1024ULL)

typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

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

#define NVML_MEMORY_V2_VERSION ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

struct nvmlDevice_st {
    int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static lab_state_t state;
static struct nvmlDevice_st devices[LAB_MAX_GPUS];
/* Clock event readings of each GPU since the state was loaded (see the header comment). */
static unsigned long long clock_event_readings[LAB_MAX_GPUS];

/* ---- helpers -------------------------------------------------------------------- */

static nvmlReturn_t copy_text(char *out, unsigned int length, const char *text)
{
    if (!out) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (strlen(text) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

/* Resolves a handle to its GPU; returns the error for an invalid or lost one. */
static nvmlReturn_t resolve(nvmlDevice_t device, const lab_gpu_t **gpu)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (device < devices || device >= devices + state.gpu_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *gpu = &state.gpus[device->index];
    return (*gpu)->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

#define RESOLVE(device, gpu)                                                                      \
    const lab_gpu_t *gpu = NULL;                                                                  \
    do {                                                                                          \
        nvmlReturn_t resolved = resolve(device, &gpu);                                            \
        if (resolved != NVML_SUCCESS) {                                                           \
            return resolved;                                                                      \
        }                                                                                         \
    } while (0)

static nvmlReturn_t handle_for_index(int index, nvmlDevice_t *device)
{
    if (state.gpus[index].lost) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    *device = &devices[index];
    return NVML_SUCCESS;
}

static void fill_pci_info(const lab_gpu_t *gpu, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    pci->domain = gpu->domain;
    pci->bus = gpu->bus;
    pci->device = gpu->device;
    pci->pciDeviceId = gpu->pci_device_id;
    pci->pciSubSystemId = gpu->pci_subsystem_id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", gpu->domain & 0xffff,
             gpu->bus, gpu->device, gpu->function);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", gpu->domain, gpu->bus,
             gpu->device, gpu->function);
}

/* The GPU at the far end of NVLink number link, or LAB_NVLINK_TO_NVSWITCH. */
static int nvlink_remote(const lab_gpu_t *gpu, unsigned int link, int *remote)
{
    unsigned int first = 0;
    for (int g = 0; g < gpu->nvlink_group_count; g++) {
        unsigned int count = (unsigned int)gpu->nvlinks[g].count;
        if (link < first + count) {
            *remote = gpu->nvlinks[g].to;
            return 0;
        }
        first += count;
    }
    return -1;
}

static int nvlink_total(const lab_gpu_t *gpu)
{
    int total = 0;
    for (int g = 0; g < gpu->nvlink_group_count; g++) {
        total += gpu->nvlinks[g].count;
    }
    return total;
}

/* ---- init, errors, system ------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    nvmlReturn_t result = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0) {
        char error[LAB_ERROR_LEN];
        if (lab_state_load(&state, error, sizeof error) != 0) {
            fprintf(stderr, "libnvidia-ml (lingbot lab): %s\n", error);
            result = NVML_ERROR_DRIVER_NOT_LOADED;
        } else if (strcmp(state.library_version, state.driver_version) != 0) {
            /* The libraries of one driver version, the kernel module of another. */
            result = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
        } else {
            for (int i = 0; i < LAB_MAX_GPUS; i++) {
                devices[i].index = i;
                clock_event_readings[i] = 0;
            }
        }
    }
    if (result == NVML_SUCCESS) {
        init_count++;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t result = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0) {
        result = NVML_ERROR_UNINITIALIZED;
    } else {
        init_count--;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "The requested vgpu operation is not available on target device, becasue ECC is "
               "enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return copy_text(version, length, state.driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return copy_text(version, length, state.nvml_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cuda_driver_version)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!cuda_driver_version) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *cuda_driver_version = state.cuda_driver_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cuda_driver_version)
{
    return nvmlSystemGetCudaDriverVersion(cuda_driver_version);
}

/* ---- devices and handles -------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = (unsigned int)state.gpu_count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    return nvmlDeviceGetCount_v2(count);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!device || index >= (unsigned int)state.gpu_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return handle_for_index((int)index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci_bus_id, nvmlDevice_t *device)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    unsigned domain, bus, dev, function;
    if (!pci_bus_id || !device || lab_parse_bdf(pci_bus_id, &domain, &bus, &dev, &function) != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < state.gpu_count; i++) {
        const lab_gpu_t *gpu = &state.gpus[i];
        if (gpu->domain == domain && gpu->bus == bus && gpu->device == dev &&
            gpu->function == function) {
            return handle_for_index(i, device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pci_bus_id, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!init_count) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!uuid || !device) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < state.gpu_count; i++) {
        if (strcasecmp(state.gpus[i].uuid, uuid) == 0) {
            return handle_for_index(i, device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    RESOLVE(device, gpu);
    if (!index) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = (unsigned int)device->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor_number)
{
    return nvmlDeviceGetIndex(device, minor_number);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    RESOLVE(device, gpu);
    return copy_text(name, length, gpu->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    RESOLVE(device, gpu);
    return copy_text(uuid, length, gpu->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    RESOLVE(device, gpu);
    return copy_text(serial, length, gpu->serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *brand)
{
    static const struct {
        const char *word;
        nvmlBrandType_t value;
    } brands[] = {
        {"GeForce", NVML_BRAND_GEFORCE},       {"NVIDIA RTX", NVML_BRAND_NVIDIA_RTX},
        {"Quadro RTX", NVML_BRAND_QUADRO_RTX}, {"Quadro", NVML_BRAND_QUADRO},
        {"Tesla", NVML_BRAND_TESLA},           {"Titan", NVML_BRAND_TITAN},
        {"NVIDIA", NVML_BRAND_NVIDIA},
    };
    RESOLVE(device, gpu);
    if (!brand) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *brand = NVML_BRAND_UNKNOWN;
    for (size_t i = 0; i < sizeof brands / sizeof brands[0]; i++) {
        if (strcasecmp(gpu->brand, brands[i].word) == 0) {
            *brand = brands[i].value;
            break;
        }
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    RESOLVE(device, gpu);
    if (!pci) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    fill_pci_info(gpu, pci);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    RESOLVE(device, gpu);
    if (!memory) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memory->total = gpu->memory_total_bytes;
    memory->free = gpu->memory_total_bytes - DRIVER_USED_MEMORY_BYTES;
    memory->used = DRIVER_USED_MEMORY_BYTES;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    RESOLVE(device, gpu);
    if (!memory) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (memory->version != NVML_MEMORY_V2_VERSION) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory->total = gpu->memory_total_bytes;
    memory->reserved = 0;
    memory->free = gpu->memory_total_bytes - DRIVER_USED_MEMORY_BYTES;
    memory->used = DRIVER_USED_MEMORY_BYTES;
    return NVML_SUCCESS;
}

/* ---- PCIe link, performance, persistence, MIG ----------------------------------- */

static nvmlReturn_t report_uint(nvmlDevice_t device, unsigned int *out, int field_offset)
{
    RESOLVE(device, gpu);
    if (!out) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = (unsigned int)*(const int *)((const char *)gpu + field_offset);
    return NVML_SUCCESS;
}

#define FIELD(name) ((int)__builtin_offsetof(lab_gpu_t, name))

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    RESOLVE(device, gpu);
    if (!gen) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *gen = (unsigned int)lab_gpu_link_gen(&state, device->index);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    return report_uint(device, gen, FIELD(max_gen));
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    return report_uint(device, gen, FIELD(max_gen_gpu));
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    return report_uint(device, width, FIELD(width));
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    return report_uint(device, width, FIELD(max_width));
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t device, unsigned int *speed_mbps)
{
    static const unsigned int per_lane_mbps[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    RESOLVE(device, gpu);
    if (!speed_mbps) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int gen = lab_gpu_link_gen(&state, device->index);
    *speed_mbps = (gen >= 1 && gen <= 6) ? per_lane_mbps[gen] : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pstate)
{
    RESOLVE(device, gpu);
    if (!pstate) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *pstate = lab_gpu_is_busy(device->index) ? NVML_PSTATE_0 : NVML_PSTATE_8;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pstate)
{
    return nvmlDeviceGetPerformanceState(device, pstate);
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    RESOLVE(device, gpu);
    if (!mode) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *mode = lab_persistence_get(&state, device->index) ? NVML_FEATURE_ENABLED
                                                        : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
    RESOLVE(device, gpu);
    if (mode != NVML_FEATURE_DISABLED && mode != NVML_FEATURE_ENABLED) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (geteuid() != 0) {
        return NVML_ERROR_NO_PERMISSION;
    }
    if (lab_persistence_set(device->index, mode == NVML_FEATURE_ENABLED) != 0) {
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

static int mig_capable(const lab_gpu_t *gpu)
{
    static const char *const models[] = {"A100", "A30", "H100", "H200", "H800", "H20", "B200"};
    if (gpu->mig_mode) {
        return 1;
    }
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        if (strstr(gpu->name, models[i])) {
            return 1;
        }
    }
    return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current_mode,
                                         unsigned int *pending_mode)
{
    RESOLVE(device, gpu);
    if (!current_mode || !pending_mode) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!mig_capable(gpu)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *current_mode = (unsigned int)gpu->mig_mode;
    *pending_mode = (unsigned int)gpu->mig_mode;
    return NVML_SUCCESS;
}

/* ---- memory health: ECC, row remapping ------------------------------------------ */

typedef enum {
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
} nvmlMemoryErrorType_t;
typedef enum { NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1 } nvmlEccCounterType_t;

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                         nvmlEnableState_t *pending)
{
    RESOLVE(device, gpu);
    if (!current || !pending) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *current = NVML_FEATURE_ENABLED;
    *pending = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

/* The lab's counters start at the boot: volatile and aggregate counts are the same. */
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                nvmlMemoryErrorType_t error_type,
                                                nvmlEccCounterType_t counter_type,
                                                unsigned long long *count)
{
    RESOLVE(device, gpu);
    if (!count || (unsigned)error_type > NVML_MEMORY_ERROR_TYPE_UNCORRECTED ||
        (unsigned)counter_type > NVML_AGGREGATE_ECC) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? gpu->ecc_uncorrected : 0;
    return NVML_SUCCESS;
}

/* nvmlPageRetirementCause_t */
#define NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS 0
#define NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR 1

/* Retired pages (before Ampere): the count alone when addresses is NULL or too small
 * (INSUFFICIENT_SIZE unless there are none), then made-up page addresses. */
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause,
                                              unsigned int *page_count,
                                              unsigned long long *addresses)
{
    RESOLVE(device, gpu);
    if (!page_count || cause < NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ||
        cause > NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!gpu->page_retirement) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    unsigned int pages = (unsigned int)(cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
                                            ? gpu->pages_retired_double_bit
                                            : gpu->pages_retired_single_bit);
    if (!addresses || *page_count < pages) {
        *page_count = pages;
        return pages ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned int i = 0; i < pages; i++) {
        addresses[i] = 0x100000ULL * (unsigned long long)(cause + 1) + i;
    }
    *page_count = pages;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                           nvmlEnableState_t *is_pending)
{
    RESOLVE(device, gpu);
    if (!is_pending) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!gpu->page_retirement) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *is_pending = gpu->pages_retirement_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *correctable,
                                              unsigned int *uncorrectable,
                                              unsigned int *is_pending,
                                              unsigned int *failure_occurred)
{
    RESOLVE(device, gpu);
    if (!correctable || !uncorrectable || !is_pending || !failure_occurred) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *correctable = 0;
    *uncorrectable = (unsigned int)gpu->rows_remapped_uncorrectable;
    *is_pending = (unsigned int)gpu->remap_pending;
    *failure_occurred = (unsigned int)gpu->remap_failed;
    return NVML_SUCCESS;
}

/* ---- clock event reasons, field values ------------------------------------------ */

#define NVML_CLOCKS_EVENT_REASON_GPU_IDLE 0x1ULL
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230

typedef enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
} nvmlValueType_t;

typedef union {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp; /* microseconds since the epoch */
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                           unsigned long long *reasons)
{
    RESOLVE(device, gpu);
    if (!reasons) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&lock);
    unsigned long long reading = ++clock_event_readings[device->index];
    pthread_mutex_unlock(&lock);
    unsigned long long mask =
        lab_gpu_is_busy(device->index) ? 0 : NVML_CLOCKS_EVENT_REASON_GPU_IDLE;
    for (int k = 0; k < gpu->clock_event_count; k++) {
        if (reading % (unsigned long long)gpu->clock_event_every[k] == 0) {
            mask |= gpu->clock_event_masks[k];
        }
    }
    *reasons = mask;
    return NVML_SUCCESS;
}

/* The name drivers before the rename give the same call. */
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                              unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int values_count,
                                             nvmlFieldValue_t *values)
{
    RESOLVE(device, gpu);
    if (!values || values_count < 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    struct timeval now;
    gettimeofday(&now, NULL);
    for (int i = 0; i < values_count; i++) {
        nvmlFieldValue_t *field = &values[i];
        field->timestamp = (long long)now.tv_sec * 1000000LL + now.tv_usec;
        field->latencyUsec = 0;
        memset(&field->value, 0, sizeof field->value);
        if (field->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION &&
            gpu->recovery_action != LAB_RECOVERY_ACTION_NOT_SUPPORTED) {
            field->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            field->value.uiVal = (unsigned int)gpu->recovery_action;
            field->nvmlReturn = NVML_SUCCESS;
        } else {
            field->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- NVLink fabric (NVSwitch systems) --------------------------------------------- */

typedef unsigned char nvmlGpuFabricState_t;
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    RESOLVE(device, gpu);
    if (!info) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memset(info, 0, sizeof *info);
    info->status = NVML_SUCCESS;
    info->state = (nvmlGpuFabricState_t)gpu->fabric_state;
    return NVML_SUCCESS;
}

/* ---- topology, P2P, NVLink ------------------------------------------------------ */

static nvmlReturn_t resolve_pair(nvmlDevice_t device1, nvmlDevice_t device2,
                                 const lab_pair_t **pair)
{
    const lab_gpu_t *gpu1 = NULL, *gpu2 = NULL;
    nvmlReturn_t result = resolve(device1, &gpu1);
    if (result == NVML_SUCCESS) {
        result = resolve(device2, &gpu2);
    }
    if (result != NVML_SUCCESS) {
        return result;
    }
    *pair = device1 == device2 ? NULL : &state.pairs[device1->index][device2->index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                        nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t *level)
{
    const lab_pair_t *pair = NULL;
    nvmlReturn_t result = resolve_pair(device1, device2, &pair);
    if (result != NVML_SUCCESS) {
        return result;
    }
    if (!level) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *level = pair ? (nvmlGpuTopologyLevel_t)pair->topology_level : NVML_TOPOLOGY_INTERNAL;
    return NVML_SUCCESS;
}

static nvmlGpuP2PStatus_t p2p_status_from_word(const char *word)
{
    static const struct {
        const char *word;
        nvmlGpuP2PStatus_t status;
    } words[] = {
        {"OK", NVML_P2P_STATUS_OK},
        {"CNS", NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED},
        {"GNS", NVML_P2P_STATUS_GPU_NOT_SUPPORTED},
        {"TNS", NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED},
        {"NS", NVML_P2P_STATUS_NOT_SUPPORTED},
        {"U", NVML_P2P_STATUS_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (strcmp(word, words[i].word) == 0) {
            return words[i].status;
        }
    }
    return NVML_P2P_STATUS_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                           nvmlGpuP2PCapsIndex_t caps_index,
                                           nvmlGpuP2PStatus_t *status)
{
    const lab_pair_t *pair = NULL;
    nvmlReturn_t result = resolve_pair(device1, device2, &pair);
    if (result != NVML_SUCCESS) {
        return result;
    }
    if (!status || !pair || (unsigned)caps_index >= (unsigned)NVML_P2P_CAPS_INDEX_UNKNOWN) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *status = p2p_status_from_word(pair->p2p_status[caps_index]);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             nvmlEnableState_t *is_active)
{
    RESOLVE(device, gpu);
    if (!is_active || link >= NVML_NVLINK_MAX_LINKS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int remote;
    int total = nvlink_total(gpu);
    if (total == 0 || nvlink_remote(gpu, link, &remote) != 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    /* A link that did not train is there and inactive (fault nvlink_down). */
    int trained = total - gpu->nvlinks_inactive;
    *is_active = (int)link < trained ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                    int counter, unsigned long long *value)
{
    RESOLVE(device, gpu);
    if (!value || link >= NVML_NVLINK_MAX_LINKS || counter < 0 ||
        counter >= LAB_NVLINK_ERROR_COUNTERS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int remote;
    if (nvlink_total(gpu) == 0 || nvlink_remote(gpu, link, &remote) != 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    double total = 0;
    double now = lab_epoch_seconds();
    for (int k = 0; link == 0 && k < gpu->nvlink_error_count; k++) {
        if (gpu->nvlink_error_counters[k] != counter) {
            continue;
        }
        double elapsed_s = now - gpu->nvlink_error_since_unix_s[k];
        total += gpu->nvlink_error_counts[k] +
                 (elapsed_s > 0 ? gpu->nvlink_error_per_minute[k] * elapsed_s / 60.0 : 0);
    }
    *value = (unsigned long long)total;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t *pci)
{
    RESOLVE(device, gpu);
    if (!pci || link >= NVML_NVLINK_MAX_LINKS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int remote;
    if (nvlink_remote(gpu, link, &remote) != 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (remote == LAB_NVLINK_TO_NVSWITCH || remote < 0 || remote >= state.gpu_count) {
        memset(pci, 0, sizeof *pci);
        pci->pciDeviceId = NVSWITCH_PCI_DEVICE_ID;
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:00:00.0");
        snprintf(pci->busId, sizeof pci->busId, "00000000:00:00.0");
    } else {
        fill_pci_info(&state.gpus[remote], pci);
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                     nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

/* ---- affinity, NUMA ------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpu_set_size,
                                             unsigned long *cpu_set)
{
    RESOLVE(device, gpu);
    if (!cpu_set || cpu_set_size == 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (lab_parse_cpu_list(gpu->cpu_list, cpu_set, cpu_set_size) != 0) {
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device,
                                                        unsigned int cpu_set_size,
                                                        unsigned long *cpu_set,
                                                        nvmlAffinityScope_t scope)
{
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return nvmlDeviceGetCpuAffinity(device, cpu_set_size, cpu_set);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int node_set_size,
                                                unsigned long *node_set, nvmlAffinityScope_t scope)
{
    RESOLVE(device, gpu);
    if (!node_set || node_set_size == 0 ||
        (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memset(node_set, 0, node_set_size * sizeof *node_set);
    if (gpu->numa_node >= 0) {
        if ((unsigned)gpu->numa_node / 64 < node_set_size) {
            node_set[gpu->numa_node / 64] |= 1UL << (gpu->numa_node % 64);
        }
        return NVML_SUCCESS;
    }
    /* No NUMA information (pci=noacpi): every node is equally near. */
    for (int i = 0; i < state.numa_node_count; i++) {
        int node = state.numa_node_ids[i];
        if (node >= 0 && (unsigned)node / 64 < node_set_size) {
            node_set[node / 64] |= 1UL << (node % 64);
        }
    }
    if (state.numa_node_count == 0) {
        node_set[0] = 1;
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    RESOLVE(device, gpu);
    if (!node) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *node = (unsigned int)gpu->numa_node;
    return NVML_SUCCESS;
}

/* ---- PCIe counters -------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    RESOLVE(device, gpu);
    if (!value) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *value = 0;
    return NVML_SUCCESS;
}

/* KB/s over the last sampling period: the host figures while a copy runs, else 0. */
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device,
                                                nvmlPcieUtilCounter_t counter,
                                                unsigned int *value_kbytes_per_s)
{
    RESOLVE(device, gpu);
    if (!value_kbytes_per_s ||
        (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!lab_gpu_is_busy(device->index)) {
        *value_kbytes_per_s = 0;
        return NVML_SUCCESS;
    }
    double gbytes_per_s =
        counter == NVML_PCIE_UTIL_TX_BYTES ? gpu->d2h_gbytes_per_s : gpu->h2d_gbytes_per_s;
    *value_kbytes_per_s = (unsigned int)(gbytes_per_s * 1e6);
    return NVML_SUCCESS;
}
