/* Exercises the main calls of both lab driver libraries; run under valgrind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nvml_device *nvml_device_t;
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info_t;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvml_device_t *device);
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvml_device_t *device);
int nvmlDeviceGetName(nvml_device_t device, char *name, unsigned length);
int nvmlDeviceGetPciInfo_v3(nvml_device_t device, nvml_pci_info_t *pci);
int nvmlDeviceGetMemoryInfo(nvml_device_t device, nvml_memory_t *memory);
int nvmlDeviceGetCurrPcieLinkGeneration(nvml_device_t device, unsigned *gen);
int nvmlDeviceGetPersistenceMode(nvml_device_t device, int *mode);
int nvmlDeviceGetP2PStatus(nvml_device_t a, nvml_device_t b, int index, int *status);
int nvmlDeviceGetCpuAffinity(nvml_device_t device, unsigned size, unsigned long *set);

typedef unsigned long long cu_ptr_t;
int cuInit(unsigned flags);
int cuDeviceGetCount(int *count);
int cuDevicePrimaryCtxRetain(void **context, int device);
int cuDevicePrimaryCtxRelease_v2(int device);
int cuCtxSetCurrent(void *context);
int cuCtxEnablePeerAccess(void *peer, unsigned flags);
int cuMemAlloc_v2(cu_ptr_t *pointer, size_t bytes);
int cuMemFree_v2(cu_ptr_t pointer);
int cuMemAllocHost_v2(void **pointer, size_t bytes);
int cuMemFreeHost(void *pointer);
int cuMemcpyHtoD_v2(cu_ptr_t dst, const void *src, size_t bytes);
int cuMemcpyDtoH_v2(void *dst, cu_ptr_t src, size_t bytes);
int cuMemcpyPeerAsync(cu_ptr_t dst, void *dst_ctx, cu_ptr_t src, void *src_ctx, size_t bytes,
                      void *stream);
int cuMemsetD8_v2(cu_ptr_t dst, unsigned char value, size_t count);
int cuMemsetD8Async(cu_ptr_t dst, unsigned char value, size_t count, void *stream);
int cuStreamCreate(void **stream, unsigned flags);
int cuStreamDestroy_v2(void *stream);
int cuStreamSynchronize(void *stream);
int cuEventCreate(void **event, unsigned flags);
int cuEventRecord(void *event, void *stream);
int cuEventSynchronize(void *event);
int cuEventElapsedTime(float *ms, void *start, void *end);
int cuEventDestroy_v2(void *event);

#define CHECK(call)                                                                               \
    do {                                                                                          \
        int result_ = (call);                                                                     \
        if (result_ != 0) {                                                                       \
            fprintf(stderr, "%s failed: %d\n", #call, result_);                                   \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

#define SIZE (1 << 20)

static int nvml_calls(void)
{
    unsigned count = 0, gen = 0;
    nvml_device_t first, second, by_bus;
    char name[96];
    nvml_pci_info_t pci;
    nvml_memory_t memory;
    int mode = -1, status = -1;
    unsigned long cpus[2];
    CHECK(nvmlInit_v2());
    CHECK(nvmlDeviceGetCount_v2(&count));
    CHECK(nvmlDeviceGetHandleByIndex_v2(0, &first));
    CHECK(nvmlDeviceGetHandleByIndex_v2(1, &second));
    CHECK(nvmlDeviceGetName(first, name, sizeof name));
    CHECK(nvmlDeviceGetPciInfo_v3(first, &pci));
    CHECK(nvmlDeviceGetHandleByPciBusId_v2(pci.bus_id, &by_bus));
    CHECK(nvmlDeviceGetMemoryInfo(first, &memory));
    CHECK(nvmlDeviceGetCurrPcieLinkGeneration(first, &gen));
    CHECK(nvmlDeviceGetPersistenceMode(first, &mode));
    CHECK(nvmlDeviceGetP2PStatus(first, second, 0, &status));
    CHECK(nvmlDeviceGetCpuAffinity(first, 2, cpus));
    printf("nvml: %u GPUs, %s at %s, gen %u, p2p %d\n", count, name, pci.bus_id, gen, status);
    CHECK(nvmlShutdown());
    return 0;
}

static int cuda_calls(void)
{
    void *first, *second, *stream, *start, *end, *host;
    cu_ptr_t src, dst;
    float ms = 0;
    int count = 0;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count));
    CHECK(cuDevicePrimaryCtxRetain(&first, 0));
    CHECK(cuDevicePrimaryCtxRetain(&second, 1));
    CHECK(cuCtxSetCurrent(second));
    CHECK(cuMemAlloc_v2(&dst, SIZE));
    CHECK(cuCtxEnablePeerAccess(first, 0));
    CHECK(cuCtxSetCurrent(first));
    CHECK(cuMemAlloc_v2(&src, SIZE));
    CHECK(cuMemAllocHost_v2(&host, SIZE));
    memset(host, 0x5a, SIZE);
    CHECK(cuMemcpyHtoD_v2(src, host, SIZE));
    CHECK(cuStreamCreate(&stream, 0));
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&end, 0));
    CHECK(cuEventRecord(start, stream));
    CHECK(cuMemcpyPeerAsync(dst, second, src, first, SIZE, stream));
    CHECK(cuEventRecord(end, stream));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime(&ms, start, end));
    memset(host, 0, SIZE);
    CHECK(cuMemcpyDtoH_v2(host, dst, SIZE));
    if (((unsigned char *)host)[SIZE - 1] != 0x5a) {
        fprintf(stderr, "peer copy did not land\n");
        return 1;
    }
    printf("cuda: %d devices, 1 MiB peer copy %.4f ms\n", count, (double)ms);
    /* The same copy again (dst already holds it), then memsets: one that lands on its
     * stream, one left pending when its buffer is freed. */
    CHECK(cuMemcpyPeerAsync(dst, second, src, first, SIZE, stream));
    CHECK(cuMemsetD8Async(src, 0x11, SIZE, stream));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemcpyDtoH_v2(host, src, SIZE));
    if (((unsigned char *)host)[0] != 0x11) {
        fprintf(stderr, "memset did not land\n");
        return 1;
    }
    CHECK(cuCtxSetCurrent(second));
    CHECK(cuMemsetD8_v2(dst, 0x22, SIZE));
    CHECK(cuCtxSetCurrent(first));
    CHECK(cuEventDestroy_v2(start));
    CHECK(cuEventDestroy_v2(end));
    CHECK(cuStreamDestroy_v2(stream));
    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFree_v2(src));
    CHECK(cuMemFree_v2(dst));
    CHECK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(cuDevicePrimaryCtxRelease_v2(1));
    return 0;
}

int main(void)
{
    return nvml_calls() || cuda_calls();
}
