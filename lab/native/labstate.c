#define _GNU_SOURCE
#include "labstate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct {
    char *key;
    char *value;
} entry_t;

typedef struct {
    char *text; /* whole file, split in place */
    entry_t *entries;
    size_t count;
    const char *path;
    char *error;
    size_t error_len;
    int failed;
} table_t;

void lab_run_path(char *out, size_t out_len, const char *relative)
{
    const char *root = getenv("LINGBOT_LAB_ROOT");
    snprintf(out, out_len, "%s/run/lingbot-lab/%s", root ? root : "", relative);
}

void lab_node_path(char *out, size_t out_len, const char *absolute)
{
    const char *root = getenv("LINGBOT_LAB_ROOT");
    snprintf(out, out_len, "%s%s", root ? root : "", absolute);
}

static void fail(table_t *table, const char *format, ...)
{
    if (table->failed) {
        return;
    }
    table->failed = 1;
    va_list args;
    va_start(args, format);
    vsnprintf(table->error, table->error_len, format, args);
    va_end(args);
}

static char *read_whole_file(const char *path)
{
    FILE *file = fopen(path, "r");
    if (!file) {
        return NULL;
    }
    size_t capacity = 65536, length = 0;
    char *text = malloc(capacity);
    while (text) {
        size_t got = fread(text + length, 1, capacity - length - 1, file);
        length += got;
        if (length < capacity - 1) {
            break;
        }
        capacity *= 2;
        char *grown = realloc(text, capacity);
        if (!grown) {
            free(text);
            text = NULL;
        }
        text = grown;
    }
    fclose(file);
    if (text) {
        text[length] = '\0';
    }
    return text;
}

static int split_lines(table_t *table)
{
    size_t capacity = 256;
    table->entries = malloc(capacity * sizeof(entry_t));
    if (!table->entries) {
        return -1;
    }
    char *cursor = table->text;
    while (*cursor) {
        char *line = cursor;
        char *newline = strchr(cursor, '\n');
        if (newline) {
            *newline = '\0';
            cursor = newline + 1;
        } else {
            cursor += strlen(cursor);
        }
        size_t line_len = strlen(line);
        if (line_len && line[line_len - 1] == '\r') {
            line[line_len - 1] = '\0';
        }
        if (!*line || *line == '#') {
            continue;
        }
        char *space = strchr(line, ' ');
        if (table->count == capacity) {
            capacity *= 2;
            entry_t *grown = realloc(table->entries, capacity * sizeof(entry_t));
            if (!grown) {
                return -1;
            }
            table->entries = grown;
        }
        table->entries[table->count].key = line;
        table->entries[table->count].value = space ? space + 1 : line + strlen(line);
        if (space) {
            *space = '\0';
        }
        table->count++;
    }
    return 0;
}

static const char *find(const table_t *table, const char *key)
{
    for (size_t i = 0; i < table->count; i++) {
        if (strcmp(table->entries[i].key, key) == 0) {
            return table->entries[i].value;
        }
    }
    return NULL;
}

static const char *require(table_t *table, const char *key)
{
    const char *value = find(table, key);
    if (!value) {
        fail(table, "%s: key '%s' is missing; rerun the lab firmware to rewrite the state",
             table->path, key);
        return "";
    }
    return value;
}

static double parse_number(table_t *table, const char *key, const char *value)
{
    char *end = NULL;
    errno = 0;
    double number = strtod(value, &end);
    if (errno || end == value || *end != '\0') {
        fail(table, "%s: key '%s' has value '%s', expected a number", table->path, key, value);
        return 0;
    }
    return number;
}

static double get_number(table_t *table, const char *key)
{
    const char *value = require(table, key);
    return table->failed ? 0 : parse_number(table, key, value);
}

static double get_number_or(table_t *table, const char *key, double fallback)
{
    const char *value = find(table, key);
    if (!value || strcmp(value, "-") == 0) {
        return fallback;
    }
    return parse_number(table, key, value);
}

/* A whole number too large for a double to hold exactly (a bit mask). */
static unsigned long long get_unsigned(table_t *table, const char *key)
{
    const char *value = require(table, key);
    if (table->failed) {
        return 0;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long number = strtoull(value, &end, 10);
    if (errno || end == value || *end != '\0' || *value == '-') {
        fail(table, "%s: key '%s' has value '%s', expected a whole number", table->path, key,
             value);
        return 0;
    }
    return number;
}

static void get_text(table_t *table, const char *key, char *out, size_t out_len)
{
    snprintf(out, out_len, "%s", require(table, key));
}

static const char *keyf(char *buffer, size_t len, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(buffer, len, format, args);
    va_end(args);
    return buffer;
}

#define KEY(...) keyf(key, sizeof key, __VA_ARGS__)

static void load_path(table_t *table, const char *prefix, lab_path_t *path)
{
    char key[256];
    const char *whole = find(table, prefix);
    if (whole && strcmp(whole, "-") == 0) {
        path->present = 0;
        return;
    }
    path->present = 1;
    path->gbytes_per_s = get_number(table, KEY("%s.gbytes_per_s", prefix));
    path->bidir_gbytes_per_s = get_number(table, KEY("%s.bidir_gbytes_per_s", prefix));
    path->latency_ns = get_number(table, KEY("%s.latency_ns", prefix));
}

/* A figure set the state may leave out (old states) or set to null. */
static void load_optional_path(table_t *table, const char *prefix, lab_path_t *path)
{
    char key[256];
    const char *whole = find(table, prefix);
    if ((whole && strcmp(whole, "-") == 0) || !find(table, KEY("%s.gbytes_per_s", prefix))) {
        path->present = 0;
        return;
    }
    load_path(table, prefix, path);
}

static void load_acs_ports(table_t *table, int a, int b, lab_pair_t *pair)
{
    char key[256];
    int count = (int)get_number_or(table, KEY("pair.%d.%d.acs_redirect_ports.count", a, b), 0);
    if (count < 0 || count > LAB_MAX_ACS_PORTS) {
        fail(table, "%s: pair.%d.%d.acs_redirect_ports.count is %d, at most %d are supported",
             table->path, a, b, count, LAB_MAX_ACS_PORTS);
        return;
    }
    pair->acs_port_count = count;
    for (int port = 0; port < count; port++) {
        const char *config_path =
            require(table, KEY("pair.%d.%d.acs_redirect_ports.%d.config_path", a, b, port));
        if (strlen(config_path) >= sizeof pair->acs_config_paths[port]) {
            fail(table, "%s: pair.%d.%d.acs_redirect_ports.%d.config_path is longer than %d",
                 table->path, a, b, port, LAB_SYSFS_PATH_LEN - 1);
            return;
        }
        snprintf(pair->acs_config_paths[port], sizeof pair->acs_config_paths[port], "%s",
                 config_path);
    }
}

static void load_clock_events(table_t *table, int index, lab_gpu_t *gpu)
{
    char key[256];
    int count = (int)get_number_or(table, KEY("gpu.%d.clock_events.count", index), 0);
    if (count < 0 || count > LAB_MAX_CLOCK_EVENTS) {
        fail(table, "%s: gpu.%d.clock_events.count is %d, at most %d are supported", table->path,
             index, count, LAB_MAX_CLOCK_EVENTS);
        return;
    }
    gpu->clock_event_count = count;
    for (int k = 0; k < count; k++) {
        gpu->clock_event_masks[k] =
            get_unsigned(table, KEY("gpu.%d.clock_events.%d.mask", index, k));
        gpu->clock_event_every[k] =
            (int)get_number(table, KEY("gpu.%d.clock_events.%d.every", index, k));
        if (!table->failed && gpu->clock_event_every[k] < 1) {
            fail(table, "%s: gpu.%d.clock_events.%d.every is %d, it must be 1 or more",
                 table->path, index, k, gpu->clock_event_every[k]);
        }
    }
}

static void load_nvlink_errors(table_t *table, int index, lab_gpu_t *gpu)
{
    char key[256];
    int count = (int)get_number_or(table, KEY("gpu.%d.nvlink_errors.count", index), 0);
    if (count < 0 || count > LAB_MAX_NVLINK_ERRORS) {
        fail(table, "%s: gpu.%d.nvlink_errors.count is %d, at most %d are supported",
             table->path, index, count, LAB_MAX_NVLINK_ERRORS);
        return;
    }
    gpu->nvlink_error_count = count;
    for (int k = 0; k < count; k++) {
        int counter = (int)get_number(table, KEY("gpu.%d.nvlink_errors.%d.counter", index, k));
        if (!table->failed && (counter < 0 || counter >= LAB_NVLINK_ERROR_COUNTERS)) {
            fail(table, "%s: gpu.%d.nvlink_errors.%d.counter is %d, not 0..%d", table->path,
                 index, k, counter, LAB_NVLINK_ERROR_COUNTERS - 1);
        }
        gpu->nvlink_error_counters[k] = counter;
        gpu->nvlink_error_counts[k] =
            get_number(table, KEY("gpu.%d.nvlink_errors.%d.count", index, k));
        gpu->nvlink_error_per_minute[k] =
            get_number(table, KEY("gpu.%d.nvlink_errors.%d.per_minute", index, k));
        gpu->nvlink_error_since_unix_s[k] =
            get_number(table, KEY("gpu.%d.nvlink_errors.%d.since_unix_s", index, k));
    }
}

static void load_gpu(table_t *table, int index, lab_gpu_t *gpu)
{
    char key[256];
    get_text(table, KEY("gpu.%d.bdf", index), gpu->bdf, sizeof gpu->bdf);
    if (!table->failed &&
        lab_parse_bdf(gpu->bdf, &gpu->domain, &gpu->bus, &gpu->device, &gpu->function) != 0) {
        fail(table, "%s: gpu.%d.bdf '%s' is not a PCI address like 0000:41:00.0", table->path,
             index, gpu->bdf);
    }
    get_text(table, KEY("gpu.%d.name", index), gpu->name, sizeof gpu->name);
    get_text(table, KEY("gpu.%d.brand", index), gpu->brand, sizeof gpu->brand);
    get_text(table, KEY("gpu.%d.uuid", index), gpu->uuid, sizeof gpu->uuid);
    get_text(table, KEY("gpu.%d.serial", index), gpu->serial, sizeof gpu->serial);
    gpu->pci_device_id = (unsigned)get_number(table, KEY("gpu.%d.pci_device_id", index));
    gpu->pci_subsystem_id = (unsigned)get_number(table, KEY("gpu.%d.pci_subsystem_id", index));
    gpu->memory_total_bytes =
        (unsigned long long)get_number(table, KEY("gpu.%d.memory_total_bytes", index));
    gpu->numa_node = (int)get_number(table, KEY("gpu.%d.numa_node", index));
    get_text(table, KEY("gpu.%d.cpu_list", index), gpu->cpu_list, sizeof gpu->cpu_list);
    gpu->max_gen_gpu = (int)get_number(table, KEY("gpu.%d.link.max_gen_gpu", index));
    gpu->max_width_gpu = (int)get_number(table, KEY("gpu.%d.link.max_width_gpu", index));
    gpu->max_gen = (int)get_number(table, KEY("gpu.%d.link.max_gen", index));
    gpu->max_width = (int)get_number(table, KEY("gpu.%d.link.max_width", index));
    gpu->width = (int)get_number(table, KEY("gpu.%d.link.width", index));
    gpu->gen_load = (int)get_number(table, KEY("gpu.%d.link.gen_load", index));
    gpu->gen_idle = (int)get_number(table, KEY("gpu.%d.link.gen_idle", index));
    gpu->link_ramp_s =
        get_number_or(table, KEY("gpu.%d.link.ramp_ms", index), LAB_DEFAULT_LINK_RAMP_MS) / 1e3;
    gpu->h2d_gbytes_per_s = get_number(table, KEY("gpu.%d.host.h2d_gbytes_per_s", index));
    gpu->d2h_gbytes_per_s = get_number(table, KEY("gpu.%d.host.d2h_gbytes_per_s", index));
    gpu->host_latency_ns = get_number(table, KEY("gpu.%d.host.latency_ns", index));
    int groups = (int)get_number_or(table, KEY("gpu.%d.nvlinks.count", index), 0);
    if (groups < 0 || groups > LAB_MAX_NVLINK_GROUPS) {
        fail(table, "%s: gpu.%d.nvlinks.count is %d, at most %d are supported", table->path,
             index, groups, LAB_MAX_NVLINK_GROUPS);
        groups = 0;
    }
    gpu->nvlink_group_count = groups;
    for (int g = 0; g < groups; g++) {
        gpu->nvlinks[g].count = (int)get_number(table, KEY("gpu.%d.nvlinks.%d.count", index, g));
        const char *to = require(table, KEY("gpu.%d.nvlinks.%d.to", index, g));
        gpu->nvlinks[g].to = strcmp(to, "nvswitch") == 0 ? LAB_NVLINK_TO_NVSWITCH : atoi(to);
    }
    gpu->mig_mode = (int)get_number_or(table, KEY("gpu.%d.mig_mode", index), 0);
    gpu->lost = (int)get_number_or(table, KEY("gpu.%d.lost", index), 0);
    gpu->fail_after_copies = (int)get_number_or(table, KEY("gpu.%d.fail_after_copies", index), 0);
    gpu->nvlinks_inactive = (int)get_number_or(table, KEY("gpu.%d.nvlinks_inactive", index), 0);
    gpu->ecc_uncorrected =
        (unsigned long long)get_number_or(table, KEY("gpu.%d.memory.ecc_uncorrected", index), 0);
    gpu->rows_remapped_uncorrectable =
        (int)get_number_or(table, KEY("gpu.%d.memory.rows_remapped_uncorrectable", index), 0);
    gpu->remap_pending = (int)get_number_or(table, KEY("gpu.%d.memory.remap_pending", index), 0);
    gpu->page_retirement =
        (int)get_number_or(table, KEY("gpu.%d.memory.page_retirement", index), 0);
    gpu->pages_retired_single_bit =
        (int)get_number_or(table, KEY("gpu.%d.memory.pages_retired_single_bit", index), 0);
    gpu->pages_retired_double_bit =
        (int)get_number_or(table, KEY("gpu.%d.memory.pages_retired_double_bit", index), 0);
    gpu->pages_retirement_pending =
        (int)get_number_or(table, KEY("gpu.%d.memory.pages_retirement_pending", index), 0);
    gpu->remap_failed = (int)get_number_or(table, KEY("gpu.%d.memory.remap_failed", index), 0);
    gpu->fabric_state = (int)get_number_or(table, KEY("gpu.%d.fabric_state", index), 0);
    load_clock_events(table, index, gpu);
    load_nvlink_errors(table, index, gpu);
    gpu->recovery_action = (long long)get_number_or(
        table, KEY("gpu.%d.recovery_action", index), (double)LAB_RECOVERY_ACTION_NOT_SUPPORTED);
    gpu->persistence_default =
        (int)get_number_or(table, KEY("gpu.%d.persistence_default", index), 0);
}

static void load_pair(table_t *table, int a, int b, lab_pair_t *pair)
{
    static const char *const cap_names[LAB_P2P_CAP_COUNT] = {"read", "write", "nvlink", "atomics",
                                                             "prop"};
    char key[256];
    char prefix[64];
    get_text(table, KEY("pair.%d.%d.topology", a, b), pair->topology, sizeof pair->topology);
    pair->topology_level = (int)get_number(table, KEY("pair.%d.%d.topology_level", a, b));
    pair->nvlink_count = (int)get_number_or(table, KEY("pair.%d.%d.nvlink_count", a, b), 0);
    for (int cap = 0; cap < LAB_P2P_CAP_COUNT; cap++) {
        get_text(table, KEY("pair.%d.%d.p2p_status.%s", a, b, cap_names[cap]),
                 pair->p2p_status[cap], sizeof pair->p2p_status[cap]);
    }
    snprintf(prefix, sizeof prefix, "pair.%d.%d.p2p", a, b);
    load_path(table, prefix, &pair->p2p);
    snprintf(prefix, sizeof prefix, "pair.%d.%d.p2p_without_acs_redirect", a, b);
    load_optional_path(table, prefix, &pair->p2p_without_acs_redirect);
    load_acs_ports(table, a, b, pair);
    snprintf(prefix, sizeof prefix, "pair.%d.%d.host_staged", a, b);
    load_path(table, prefix, &pair->host_staged);
    if (!pair->host_staged.present) {
        fail(table, "%s: pair.%d.%d.host_staged is null; every pair needs a host-staged path",
             table->path, a, b);
    }
    pair->p2p_drops_writes = (int)get_number_or(table, KEY("pair.%d.%d.p2p_drops_writes", a, b), 0);
}

static void load_numa_nodes(table_t *table, lab_state_t *state)
{
    char key[256];
    int count = (int)get_number_or(table, "numa_node_count", 0);
    if (count > LAB_MAX_NUMA_NODES) {
        count = LAB_MAX_NUMA_NODES;
    }
    state->numa_node_count = count;
    for (int i = 0; i < count; i++) {
        state->numa_node_ids[i] = (int)get_number(table, KEY("numa_node.%d.id", i));
    }
}

static void load_all(table_t *table, lab_state_t *state)
{
    get_text(table, "driver.version", state->driver_version, sizeof state->driver_version);
    get_text(table, "driver.nvml_version", state->nvml_version, sizeof state->nvml_version);
    snprintf(state->library_version, sizeof state->library_version, "%s", state->driver_version);
    const char *library = find(table, "driver.library_version");
    if (library) {
        snprintf(state->library_version, sizeof state->library_version, "%s", library);
    }
    state->cuda_driver_version = (int)get_number(table, "driver.cuda_driver_version");
    state->gpu_init_ms = (int)get_number_or(table, "driver.gpu_init_ms", LAB_DEFAULT_GPU_INIT_MS);
    state->context_create_ms =
        (int)get_number_or(table, "driver.context_create_ms", LAB_DEFAULT_CONTEXT_CREATE_MS);
    state->peer_mapping_ms =
        (int)get_number_or(table, "driver.peer_mapping_ms", LAB_DEFAULT_PEER_MAPPING_MS);
    get_text(table, "boot.iommu_mode", state->iommu_mode, sizeof state->iommu_mode);
    state->acpi_pci = (int)get_number_or(table, "boot.acpi_pci", 1);
    load_numa_nodes(table, state);
    int count = (int)get_number(table, "gpu_count");
    if (count < 0 || count > LAB_MAX_GPUS) {
        fail(table, "%s: gpu_count is %d, the lab libraries support 0 to %d GPUs", table->path,
             count, LAB_MAX_GPUS);
        return;
    }
    state->gpu_count = count;
    for (int i = 0; i < count && !table->failed; i++) {
        load_gpu(table, i, &state->gpus[i]);
    }
    for (int a = 0; a < count && !table->failed; a++) {
        for (int b = 0; b < count && !table->failed; b++) {
            if (a != b) {
                load_pair(table, a, b, &state->pairs[a][b]);
            }
        }
    }
}

int lab_state_load(lab_state_t *state, char *error, size_t error_len)
{
    char path[LAB_PATH_LEN];
    lab_run_path(path, sizeof path, "state.txt");
    memset(state, 0, sizeof *state);
    table_t table = {.path = path, .error = error, .error_len = error_len};
    table.text = read_whole_file(path);
    if (!table.text) {
        snprintf(error, error_len,
                 "cannot read %s (%s); the lab firmware writes it at boot "
                 "(on the host, set LINGBOT_LAB_ROOT to the lab's root)",
                 path, strerror(errno));
        return -1;
    }
    if (split_lines(&table) != 0) {
        fail(&table, "%s: out of memory while reading", path);
    } else {
        load_all(&table, state);
    }
    free(table.entries);
    free(table.text);
    return table.failed ? -1 : 0;
}

/* ---- live ACS control of the ports on a pair's path ------------------------------- */

static unsigned read_le(const unsigned char *bytes, int length)
{
    unsigned value = 0;
    for (int i = length - 1; i >= 0; i--) {
        value = (value << 8) | bytes[i];
    }
    return value;
}

/* Reads up to LAB_PCI_CONFIG_SPACE_BYTES of a config file; returns the byte count or -1. */
static long read_config_space(const char *path, unsigned char *space)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    long length = 0;
    while (length < LAB_PCI_CONFIG_SPACE_BYTES) {
        ssize_t got = pread(fd, space + length, (size_t)(LAB_PCI_CONFIG_SPACE_BYTES - length),
                            (off_t)length);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;
        }
        length += got;
    }
    close(fd);
    return length;
}

/* 1: ACS request or completion redirect set; 0: clear, or the port has no ACS
 * capability; -1: the config space cannot be read as far as the capability list goes. */
static int port_acs_redirects(const char *config_path)
{
    char path[LAB_PATH_LEN];
    unsigned char space[LAB_PCI_CONFIG_SPACE_BYTES];
    lab_node_path(path, sizeof path, config_path);
    long length = read_config_space(path, space);
    unsigned offset = LAB_PCI_EXT_CAP_START;
    /* Each capability takes at least 4 bytes: a longer list loops. */
    int budget = (LAB_PCI_CONFIG_SPACE_BYTES - LAB_PCI_EXT_CAP_START) / 4;
    while (budget-- > 0) {
        if (length < 0 || (long)offset + 4 > length) {
            return -1;
        }
        unsigned header = read_le(space + offset, 4);
        if (header == 0 || header == 0xffffffffU) {
            return 0;
        }
        if ((header & 0xffffU) == LAB_PCI_EXT_CAP_ID_ACS) {
            unsigned control_at = offset + LAB_PCI_ACS_CONTROL_OFFSET;
            if ((long)control_at + 2 > length) {
                return -1;
            }
            unsigned control = read_le(space + control_at, 2);
            return (control & (LAB_PCI_ACS_REQUEST_REDIRECT | LAB_PCI_ACS_COMPLETION_REDIRECT))
                       ? 1
                       : 0;
        }
        unsigned next = (header >> 20) & 0xffcU;
        if (next < LAB_PCI_EXT_CAP_START) {
            return 0;
        }
        offset = next;
    }
    return 0;
}

int lab_pair_acs_redirects(const lab_pair_t *pair)
{
    for (int port = 0; port < pair->acs_port_count; port++) {
        if (port_acs_redirects(pair->acs_config_paths[port]) != 0) {
            return 1;
        }
    }
    return 0;
}

const lab_path_t *lab_pair_p2p_now(const lab_pair_t *pair)
{
    if (pair->p2p_without_acs_redirect.present && pair->acs_port_count > 0 &&
        !lab_pair_acs_redirects(pair)) {
        return &pair->p2p_without_acs_redirect;
    }
    return &pair->p2p;
}

static void make_parent_dirs(const char *path)
{
    char buffer[LAB_PATH_LEN];
    snprintf(buffer, sizeof buffer, "%s", path);
    for (char *slash = strchr(buffer + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(buffer, 0755);
        *slash = '/';
    }
}

static int write_text_atomically(const char *path, const char *text)
{
    char temporary[LAB_PATH_LEN + 32];
    snprintf(temporary, sizeof temporary, "%s.%ld.tmp", path, (long)getpid());
    make_parent_dirs(path);
    FILE *file = fopen(temporary, "w");
    if (!file) {
        return -1;
    }
    int ok = fputs(text, file) >= 0;
    ok = (fclose(file) == 0) && ok;
    if (!ok || rename(temporary, path) != 0) {
        int saved = errno;
        unlink(temporary);
        errno = saved;
        return -1;
    }
    return 0;
}

static int read_first_line(const char *path, char *out, size_t out_len)
{
    FILE *file = fopen(path, "r");
    if (!file) {
        return -1;
    }
    char *got = fgets(out, (int)out_len, file);
    fclose(file);
    return got ? 0 : -1;
}

int lab_persistence_get(const lab_state_t *state, int index)
{
    char path[LAB_PATH_LEN], relative[64], line[32];
    snprintf(relative, sizeof relative, "persistence/%d", index);
    lab_run_path(path, sizeof path, relative);
    if (read_first_line(path, line, sizeof line) == 0) {
        return atoi(line) ? 1 : 0;
    }
    return state->gpus[index].persistence_default ? 1 : 0;
}

int lab_persistence_set(int index, int enabled)
{
    char path[LAB_PATH_LEN], relative[64];
    snprintf(relative, sizeof relative, "persistence/%d", index);
    lab_run_path(path, sizeof path, relative);
    return write_text_atomically(path, enabled ? "1\n" : "0\n");
}

double lab_epoch_seconds(void)
{
    struct timeval now;
    gettimeofday(&now, NULL);
    return (double)now.tv_sec + (double)now.tv_usec / 1e6;
}

typedef struct {
    double until, since, last;
} busy_record_t;

/* busy/<i>; 0 when absent or unreadable. One number: held busy by hand, long ramped. */
static int read_busy(int index, busy_record_t *record)
{
    char path[LAB_PATH_LEN], relative[64], line[128];
    snprintf(relative, sizeof relative, "busy/%d", index);
    lab_run_path(path, sizeof path, relative);
    if (read_first_line(path, line, sizeof line) != 0) {
        return 0;
    }
    int fields = sscanf(line, "%lf %lf %lf", &record->until, &record->since, &record->last);
    if (fields < 1) {
        return 0;
    }
    if (fields < 3) {
        record->since = 0;
        record->last = record->until;
    }
    return 1;
}

int lab_gpu_is_busy(int index)
{
    busy_record_t record;
    return read_busy(index, &record) && record.until > lab_epoch_seconds();
}

int lab_gpu_link_gen(const lab_state_t *state, int index)
{
    const lab_gpu_t *gpu = &state->gpus[index];
    busy_record_t record;
    double now = lab_epoch_seconds();
    if (!read_busy(index, &record) || record.until <= now) {
        return gpu->gen_idle;
    }
    double sustained = (record.last < now ? record.last : now) - record.since;
    return sustained >= gpu->link_ramp_s ? gpu->gen_load : gpu->gen_idle;
}

void lab_gpu_mark_load(int index, double seconds)
{
    char path[LAB_PATH_LEN], relative[64], text[128];
    double now = lab_epoch_seconds();
    busy_record_t record = {0, 0, 0};
    if (!read_busy(index, &record) || record.until <= now) {
        record.since = now;
        record.last = now;
        record.until = now;
    }
    if (now + seconds > record.last) {
        record.last = now + seconds;
    }
    if (record.last + LAB_BUSY_HOLD_SECONDS > record.until) {
        record.until = record.last + LAB_BUSY_HOLD_SECONDS;
    }
    snprintf(relative, sizeof relative, "busy/%d", index);
    lab_run_path(path, sizeof path, relative);
    snprintf(text, sizeof text, "%.6f %.6f %.6f\n", record.until, record.since, record.last);
    (void)write_text_atomically(path, text);
}

int lab_parse_bdf(const char *text, unsigned *domain, unsigned *bus, unsigned *device,
                  unsigned *function)
{
    unsigned d = 0, b = 0, dev = 0, fn = 0;
    int consumed = 0;
    if (sscanf(text, "%x:%x:%x.%x%n", &d, &b, &dev, &fn, &consumed) != 4 ||
        text[consumed] != '\0' || b > 0xff || dev > 0x1f || fn > 7) {
        return -1;
    }
    *domain = d;
    *bus = b;
    *device = dev;
    *function = fn;
    return 0;
}

int lab_parse_cpu_list(const char *text, unsigned long *mask_words, unsigned word_count)
{
    memset(mask_words, 0, word_count * sizeof *mask_words);
    const char *cursor = text;
    while (*cursor) {
        char *end = NULL;
        long first = strtol(cursor, &end, 10);
        if (end == cursor || first < 0) {
            return -1;
        }
        long last = first;
        cursor = end;
        if (*cursor == '-') {
            last = strtol(cursor + 1, &end, 10);
            if (end == cursor + 1 || last < first) {
                return -1;
            }
            cursor = end;
        }
        for (long cpu = first; cpu <= last; cpu++) {
            if ((unsigned long)cpu / 64 < word_count) {
                mask_words[cpu / 64] |= 1UL << (cpu % 64);
            }
        }
        if (*cursor == ',') {
            cursor++;
        } else if (*cursor != '\0') {
            return -1;
        }
    }
    return 0;
}
