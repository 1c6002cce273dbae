/*
 * Hardware state of a lab node, as the firmware wrote it at boot in
 * $LINGBOT_LAB_ROOT/run/lingbot-lab/state.txt (see lab/CONTRACT.md), plus the
 * live files next to it (persistence/<i>, busy/<i>).
 *
 * busy/<i> is "<until> <since> <last>" in epoch seconds: the GPU is under load (P0)
 * until <until>; the current stretch of copies began at <since> and its latest copy
 * ends at <last>. A link that idles below its load generation reaches it only once
 * <last> - <since> is at least the GPU's link.ramp_ms. A file with one number (written
 * by hand) means under load until then, long enough to have ramped.
 *
 * Shared by libnvidia-ml.so.1 and libcuda.so.1; nothing here is exported.
 */
#ifndef LINGBOT_LAB_STATE_H
#define LINGBOT_LAB_STATE_H

#include <stddef.h>

#define LAB_MAX_GPUS 16
#define LAB_MAX_NVLINK_GROUPS 8
#define LAB_MAX_NUMA_NODES 16
#define LAB_TEXT_LEN 96
#define LAB_PATH_LEN 4096
#define LAB_ERROR_LEN 512
/* Sustained copy time after which an idle-gen link reaches its load generation. */
#define LAB_DEFAULT_LINK_RAMP_MS 250.0
/* Startup costs when the state names none (profile.py DEFAULT_DRIVER has the same). */
#define LAB_DEFAULT_GPU_INIT_MS 400
#define LAB_DEFAULT_CONTEXT_CREATE_MS 150
#define LAB_DEFAULT_PEER_MAPPING_MS 40
/* How long a GPU stays under load (P0, link up) after its last copy. */
#define LAB_BUSY_HOLD_SECONDS 1.0

/* Ports per pair whose ACS redirect decides the pair's P2P route, and the longest
 * sysfs path of their config spaces the state may name. */
#define LAB_MAX_ACS_PORTS 8
#define LAB_SYSFS_PATH_LEN 128
/* PCI Express extended capabilities: where the list starts, ACS's id, its control
 * register and the control bits that send peer traffic upstream. */
#define LAB_PCI_CONFIG_SPACE_BYTES 4096
#define LAB_PCI_EXT_CAP_START 0x100
#define LAB_PCI_EXT_CAP_ID_ACS 0x000D
#define LAB_PCI_ACS_CONTROL_OFFSET 6
#define LAB_PCI_ACS_REQUEST_REDIRECT 0x0004
#define LAB_PCI_ACS_COMPLETION_REDIRECT 0x0008

/* Clock event faults per GPU (state gpu.<i>.clock_events), and the recovery action of a
 * driver without NVML's recovery action field (state gpu.<i>.recovery_action null). */
#define LAB_MAX_CLOCK_EVENTS 8
#define LAB_MAX_NVLINK_ERRORS 8
#define LAB_NVLINK_ERROR_COUNTERS 5 /* nvmlNvLinkErrorCounter_t: replay .. ecc_data */
#define LAB_RECOVERY_ACTION_NOT_SUPPORTED (-1LL)

/* Remote end of an NVLink group: a GPU index, or this value for an NVSwitch. */
#define LAB_NVLINK_TO_NVSWITCH (-1)

enum lab_p2p_cap { LAB_P2P_READ, LAB_P2P_WRITE, LAB_P2P_NVLINK, LAB_P2P_ATOMICS, LAB_P2P_PROP,
                   LAB_P2P_CAP_COUNT };

typedef struct {
    int present; /* 0 when the state says null (no such path) */
    double gbytes_per_s;
    double bidir_gbytes_per_s;
    double latency_ns;
} lab_path_t;

typedef struct {
    int count;
    int to; /* GPU index or LAB_NVLINK_TO_NVSWITCH */
} lab_nvlink_group_t;

typedef struct {
    char bdf[LAB_TEXT_LEN];
    unsigned domain, bus, device, function;
    char name[LAB_TEXT_LEN];
    char brand[LAB_TEXT_LEN];
    char uuid[LAB_TEXT_LEN];
    char serial[LAB_TEXT_LEN];
    unsigned pci_device_id;    /* NVML form: (device << 16) | 0x10de */
    unsigned pci_subsystem_id;
    unsigned long long memory_total_bytes;
    int numa_node; /* -1 when the kernel has no NUMA information */
    char cpu_list[LAB_TEXT_LEN * 4];
    int max_gen_gpu, max_width_gpu, max_gen, max_width, width, gen_load, gen_idle;
    double link_ramp_s; /* sustained load before gen_idle rises to gen_load */
    double h2d_gbytes_per_s, d2h_gbytes_per_s, host_latency_ns;
    int nvlink_group_count;
    lab_nvlink_group_t nvlinks[LAB_MAX_NVLINK_GROUPS];
    int mig_mode;
    int lost;
    int fail_after_copies; /* 0: never */
    int nvlinks_inactive;  /* the last this many of its NVLinks did not train */
    unsigned long long ecc_uncorrected; /* uncorrectable ECC errors since the boot */
    int rows_remapped_uncorrectable;
    int remap_pending;
    int remap_failed;
    int page_retirement; /* 0: NOT_SUPPORTED, as on Ampere and later */
    int pages_retired_single_bit, pages_retired_double_bit, pages_retirement_pending;
    int fabric_state; /* nvmlGpuFabricState_t: 0 no fabric, 1 not started, 3 completed */
    /* Clock event reasons beyond idle: clock_event_masks[k] is set in every
     * clock_event_every[k]-th reading (counted per process from its nvmlInit). */
    int clock_event_count;
    unsigned long long clock_event_masks[LAB_MAX_CLOCK_EVENTS];
    int clock_event_every[LAB_MAX_CLOCK_EVENTS];
    long long recovery_action; /* nvmlDeviceGpuRecoveryAction_t, or ..._NOT_SUPPORTED */
    /* NVLink error counters that rise (fault nvlink_errors), all on the first NVLink:
     * counter nvlink_error_counters[k] is count + per_minute for each minute since. */
    int nvlink_error_count;
    int nvlink_error_counters[LAB_MAX_NVLINK_ERRORS];
    double nvlink_error_counts[LAB_MAX_NVLINK_ERRORS];
    double nvlink_error_per_minute[LAB_MAX_NVLINK_ERRORS];
    double nvlink_error_since_unix_s[LAB_MAX_NVLINK_ERRORS];
    int persistence_default;
} lab_gpu_t;

typedef struct {
    char topology[16];
    int topology_level;
    int nvlink_count;
    char p2p_status[LAB_P2P_CAP_COUNT][8]; /* nvidia-smi words: OK, CNS, GNS, TNS, NS, U */
    lab_path_t p2p;
    /* present: the P2P figures once no port in acs_config_paths redirects (ACS request
     * or completion redirect off on all of them); p2p holds the redirected ones. */
    lab_path_t p2p_without_acs_redirect;
    int acs_port_count;
    char acs_config_paths[LAB_MAX_ACS_PORTS][LAB_SYSFS_PATH_LEN]; /* as the node sees them */
    lab_path_t host_staged;
    int p2p_drops_writes;
} lab_pair_t;

typedef struct {
    char driver_version[LAB_TEXT_LEN];
    char library_version[LAB_TEXT_LEN]; /* the user-space libraries' (mismatch: another) */
    char nvml_version[LAB_TEXT_LEN];
    int cuda_driver_version;
    /* Wall-clock costs libcuda spends (see cuda.c, "Startup costs"). */
    int gpu_init_ms, context_create_ms, peer_mapping_ms;
    char iommu_mode[LAB_TEXT_LEN];
    int acpi_pci;
    int numa_node_count;
    int numa_node_ids[LAB_MAX_NUMA_NODES];
    int gpu_count;
    lab_gpu_t gpus[LAB_MAX_GPUS];
    lab_pair_t pairs[LAB_MAX_GPUS][LAB_MAX_GPUS]; /* [a][b], a != b */
} lab_state_t;

/* Path of a run-time file: $LINGBOT_LAB_ROOT/run/lingbot-lab/<relative>. */
void lab_run_path(char *out, size_t out_len, const char *relative);

/* Path of a file as the node sees it, e.g. /sys/...: $LINGBOT_LAB_ROOT<absolute>. */
void lab_node_path(char *out, size_t out_len, const char *absolute);

/* Whether any of the pair's ACS ports has request or completion redirect set in its live
 * config space (read now, walking the extended capability list to ACS). A config space
 * that cannot be read far enough counts as redirecting, as the firmware left it. */
int lab_pair_acs_redirects(const lab_pair_t *pair);

/* The pair's direct P2P figures now: p2p_without_acs_redirect when the state has it and
 * no ACS port redirects, else p2p. Reads the ports' config spaces: once per copy. */
const lab_path_t *lab_pair_p2p_now(const lab_pair_t *pair);

/* Reads state.txt into *state. Returns 0, or -1 with a message in error. */
int lab_state_load(lab_state_t *state, char *error, size_t error_len);

/* Persistence mode of GPU index: persistence/<i> if present, else the default. */
int lab_persistence_get(const lab_state_t *state, int index);
/* Writes persistence/<i>. Returns 0, or -1 (errno set). */
int lab_persistence_set(int index, int enabled);

/* Whether busy/<i> holds an epoch time still in the future. */
int lab_gpu_is_busy(int index);
/* The link generation GPU index shows now: gen_load once the load has lasted its
 * ramp time, else gen_idle. */
int lab_gpu_link_gen(const lab_state_t *state, int index);
/* Records a copy of `seconds` starting now on GPU index in busy/<i> (a new stretch
 * when the GPU was idle; under load until at least LAB_BUSY_HOLD_SECONDS after the
 * copy ends). Errors are ignored. */
void lab_gpu_mark_load(int index, double seconds);

/* Parses "0000:41:00.0" or "00000000:41:00.0". Returns 0 or -1. */
int lab_parse_bdf(const char *text, unsigned *domain, unsigned *bus, unsigned *device,
                  unsigned *function);

/* Parses a cpulist such as "0-15,32-47" into a bitmask of 64-bit words. */
int lab_parse_cpu_list(const char *text, unsigned long *mask_words, unsigned word_count);

/* Seconds since the epoch, wall clock (what the state's *_unix_s count in). */
double lab_epoch_seconds(void);

#endif
