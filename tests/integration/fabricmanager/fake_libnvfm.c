/*
 * A stand-in for Fabric Manager's API library, libnvfm.so.1, for tests without NVSwitches.
 *
 * It exports the calls adapters/fabricmanager/_nvfm.py binds, with the ABI of FM's public
 * headers (nv_fm_types.h: struct layouts, fmReturn_t values, MAKE_FM_PARAM_VERSION), declared
 * here from those facts, so that a layout our ctypes binding gets wrong shows up as
 * FM_ST_VERSION_MISMATCH or garbage partitions. The conftest fixture compiles it into a
 * temporary directory with a generated "fake_table.h" (FAKE_TABLE: the partition table, from
 * core.gpu.fm_partitions.HGX_8GPU_PARTITIONS).
 *
 * Fabric Manager's rules it keeps: nothing works before fmLibInit (FM_ST_UNINITIALIZED);
 * fmConnect checks the params version and really connects to the unix socket or TCP address
 * (FM_ST_CONNECTION_NOT_VALID where nothing listens); the partition list's version must be
 * sizeof | 1 << 24; an unknown partition id is FM_ST_BADPARAM; activating a partition that is
 * active, or that shares a GPU with an active one, is FM_ST_IN_USE.
 *
 * Limits (where it is not Fabric Manager):
 * - It speaks no protocol: the connection only proves something listens; it is closed at
 *   once, and every later call reads and writes the state file, not a service.
 * - The active partitions live in the file FAKE_NVFM_STATE names (space-separated ids,
 *   replaced by rename; no lock: callers run one at a time). Unset: in this process only.
 * - Deactivating an inactive partition answers FM_ST_BADPARAM (what FM answers is not
 *   documented; the client checks the state first and never asks).
 * - No NVLink training, GPU resets, degraded GPUs, fmActivateFabricPartitionWithVFs,
 *   fmSetActivatedFabricPartitions, unsupported-partition or failed-NVLink queries, VSOCK.
 * - Connect params of version 1 (fmConnectParams_v1) are refused; only v2 is accepted.
 *
 * Knobs (environment), to reach every error path of the client:
 *   FAKE_NVFM_FAIL=<call>:<fmReturn_t>   that call returns the code and does nothing
 *   FAKE_NVFM_CRASH=<call>               that call abort()s
 *   FAKE_NVFM_CRASH_ONCE=<path>          the next call aborts if <path> exists (removed first)
 *   FAKE_NVFM_HANG=<call>                that call never returns
 *   FAKE_NVFM_LIST_VERSION=<n>           expect fmFabricPartitionList_t version n, not 1
 *   FAKE_NVFM_OVERCOUNT=1                report more partitions than the struct holds
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define FM_MAX_STR_LENGTH 256
#define FM_UUID_BUFFER_SIZE 80
#define FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define FM_MAX_NUM_GPUS 16
#define FM_MAX_FABRIC_PARTITIONS 64
#define FM_CMD_PORT_NUMBER 6666
#define MAKE_FM_PARAM_VERSION(type, ver) (unsigned int)(sizeof(type) | ((ver) << 24))

typedef enum {
    FM_ST_SUCCESS = 0,
    FM_ST_BADPARAM = -1,
    FM_ST_GENERIC_ERROR = -2,
    FM_ST_NOT_SUPPORTED = -3,
    FM_ST_UNINITIALIZED = -4,
    FM_ST_TIMEOUT = -5,
    FM_ST_VERSION_MISMATCH = -6,
    FM_ST_IN_USE = -7,
    FM_ST_NOT_CONFIGURED = -8,
    FM_ST_CONNECTION_NOT_VALID = -9,
} fmReturn_t;

typedef void *fmHandle_t;
typedef unsigned int fmFabricPartitionId_t;

typedef struct {
    unsigned int version;
    char addressInfo[FM_MAX_STR_LENGTH];
    unsigned int timeoutMs;
    unsigned int addressIsUnixSocket;
    int addressType; /* enum nvFmApiAddrTypes: 1 INET, 2 UNIX */
} fmConnectParams_v2;

typedef struct {
    unsigned int physicalId;
    char uuid[FM_UUID_BUFFER_SIZE];
    char pciBusId[FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int numNvLinksAvailable;
    unsigned int maxNumNvLinks;
    unsigned int nvlinkLineRateMBps;
} fmFabricPartitionGpuInfo_t;

typedef struct {
    fmFabricPartitionId_t partitionId;
    unsigned int isActive;
    unsigned int numGpus;
    fmFabricPartitionGpuInfo_t gpuInfo[FM_MAX_NUM_GPUS];
} fmFabricPartitionInfo_t;

typedef struct {
    unsigned int version;
    unsigned int numPartitions;
    unsigned int maxNumPartitions;
    fmFabricPartitionInfo_t partitionInfo[FM_MAX_FABRIC_PARTITIONS];
} fmFabricPartitionList_v2;

struct fake_partition {
    unsigned int id;
    unsigned int num_gpus;
    unsigned int modules[FM_MAX_NUM_GPUS];
};

#include "fake_table.h" /* static const struct fake_partition FAKE_TABLE[] = {...}; */

#define FAKE_NUM_PARTITIONS (sizeof(FAKE_TABLE) / sizeof(FAKE_TABLE[0]))
#define MAX_CONNECTIONS 8

static int initialized;
static int connections[MAX_CONNECTIONS]; /* a handle is &connections[i]; 1 while open */
static int memory_active[FAKE_NUM_PARTITIONS];

/* The knobs: called first in every entry point. Returns 1 when `*forced` must be returned. */
static int knobs(const char *call, fmReturn_t *forced)
{
    const char *once = getenv("FAKE_NVFM_CRASH_ONCE");
    const char *crash = getenv("FAKE_NVFM_CRASH");
    const char *hang = getenv("FAKE_NVFM_HANG");
    const char *fail = getenv("FAKE_NVFM_FAIL");
    size_t length = strlen(call);

    if (once && *once && unlink(once) == 0)
        abort();
    if (crash && strcmp(crash, call) == 0)
        abort();
    if (hang && strcmp(hang, call) == 0)
        for (;;)
            pause();
    if (fail && strncmp(fail, call, length) == 0 && fail[length] == ':') {
        *forced = (fmReturn_t)atoi(fail + length + 1);
        return 1;
    }
    return 0;
}

#define ENTER(call)                                                                           \
    do {                                                                                      \
        fmReturn_t forced_;                                                                   \
        if (knobs(call, &forced_))                                                            \
            return forced_;                                                                   \
        if (!initialized && strcmp(call, "fmLibInit") != 0)                                   \
            return FM_ST_UNINITIALIZED;                                                       \
    } while (0)

static int valid(fmHandle_t handle)
{
    int *slot = (int *)handle;
    return slot >= connections && slot < connections + MAX_CONNECTIONS && *slot;
}

static int find(fmFabricPartitionId_t id)
{
    for (size_t i = 0; i < FAKE_NUM_PARTITIONS; i++)
        if (FAKE_TABLE[i].id == id)
            return (int)i;
    return -1;
}

/* The active flags, by table index, from the state file (absent: none active). */
static void load(int *active)
{
    const char *path = getenv("FAKE_NVFM_STATE");
    unsigned int id;
    FILE *file;

    if (!path) {
        memcpy(active, memory_active, sizeof(memory_active));
        return;
    }
    memset(active, 0, sizeof(memory_active));
    file = fopen(path, "r");
    if (!file)
        return;
    while (fscanf(file, "%u", &id) == 1)
        if (find(id) >= 0)
            active[find(id)] = 1;
    fclose(file);
}

static fmReturn_t store(const int *active)
{
    const char *path = getenv("FAKE_NVFM_STATE");
    char temp[4096];
    FILE *file;

    if (!path) {
        memcpy(memory_active, active, sizeof(memory_active));
        return FM_ST_SUCCESS;
    }
    snprintf(temp, sizeof(temp), "%s.%d.tmp", path, (int)getpid());
    file = fopen(temp, "w");
    if (!file)
        return FM_ST_GENERIC_ERROR;
    for (size_t i = 0; i < FAKE_NUM_PARTITIONS; i++)
        if (active[i])
            fprintf(file, "%u ", FAKE_TABLE[i].id);
    if (fclose(file) != 0 || rename(temp, path) != 0)
        return FM_ST_GENERIC_ERROR;
    return FM_ST_SUCCESS;
}

static int shares_gpu(const struct fake_partition *a, const struct fake_partition *b)
{
    for (unsigned int i = 0; i < a->num_gpus; i++)
        for (unsigned int j = 0; j < b->num_gpus; j++)
            if (a->modules[i] == b->modules[j])
                return 1;
    return 0;
}

/* Whether something accepts a connection at the address (unix path, or "ipv4[:port]"). */
static int reachable(const fmConnectParams_v2 *params)
{
    char address[FM_MAX_STR_LENGTH + 1];
    int fd, connected;

    memcpy(address, params->addressInfo, FM_MAX_STR_LENGTH);
    address[FM_MAX_STR_LENGTH] = '\0';
    if (params->addressIsUnixSocket) {
        struct sockaddr_un unix_address = {.sun_family = AF_UNIX};
        if (strlen(address) >= sizeof(unix_address.sun_path))
            return 0;
        strcpy(unix_address.sun_path, address);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        connected = fd >= 0 &&
                    connect(fd, (struct sockaddr *)&unix_address, sizeof(unix_address)) == 0;
    } else {
        struct sockaddr_in inet_address = {.sin_family = AF_INET};
        char *colon = strchr(address, ':');
        inet_address.sin_port = htons(colon ? (unsigned short)atoi(colon + 1) : FM_CMD_PORT_NUMBER);
        if (colon)
            *colon = '\0';
        if (inet_pton(AF_INET, address, &inet_address.sin_addr) != 1)
            return 0;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        connected = fd >= 0 &&
                    connect(fd, (struct sockaddr *)&inet_address, sizeof(inet_address)) == 0;
    }
    if (fd >= 0)
        close(fd);
    return connected;
}

fmReturn_t fmLibInit(void)
{
    ENTER("fmLibInit");
    initialized++;
    return FM_ST_SUCCESS;
}

fmReturn_t fmLibShutdown(void)
{
    ENTER("fmLibShutdown");
    initialized--;
    return FM_ST_SUCCESS;
}

fmReturn_t fmConnect(fmConnectParams_v2 *params, fmHandle_t *handle)
{
    ENTER("fmConnect");
    if (!params || !handle)
        return FM_ST_BADPARAM;
    if (params->version != MAKE_FM_PARAM_VERSION(fmConnectParams_v2, 2))
        return FM_ST_VERSION_MISMATCH;
    if ((params->addressType == 2) != (params->addressIsUnixSocket != 0))
        return FM_ST_BADPARAM;
    if (!reachable(params))
        return FM_ST_CONNECTION_NOT_VALID;
    for (int i = 0; i < MAX_CONNECTIONS; i++) {
        if (!connections[i]) {
            connections[i] = 1;
            *handle = &connections[i];
            return FM_ST_SUCCESS;
        }
    }
    return FM_ST_GENERIC_ERROR;
}

fmReturn_t fmDisconnect(fmHandle_t handle)
{
    ENTER("fmDisconnect");
    if (!valid(handle))
        return FM_ST_BADPARAM;
    *(int *)handle = 0;
    return FM_ST_SUCCESS;
}

fmReturn_t fmGetSupportedFabricPartitions(fmHandle_t handle, fmFabricPartitionList_v2 *list)
{
    const char *version = getenv("FAKE_NVFM_LIST_VERSION");
    int active[FAKE_NUM_PARTITIONS];

    ENTER("fmGetSupportedFabricPartitions");
    if (!valid(handle))
        return FM_ST_CONNECTION_NOT_VALID;
    if (!list)
        return FM_ST_BADPARAM;
    if (list->version != MAKE_FM_PARAM_VERSION(fmFabricPartitionList_v2, version ? atoi(version) : 1))
        return FM_ST_VERSION_MISMATCH;
    load(active);
    memset(&list->numPartitions, 0, sizeof(*list) - sizeof(list->version));
    list->numPartitions = getenv("FAKE_NVFM_OVERCOUNT") ? FM_MAX_FABRIC_PARTITIONS + 1
                                                        : (unsigned int)FAKE_NUM_PARTITIONS;
    list->maxNumPartitions = FM_MAX_FABRIC_PARTITIONS;
    for (size_t i = 0; i < FAKE_NUM_PARTITIONS; i++) {
        fmFabricPartitionInfo_t *info = &list->partitionInfo[i];
        info->partitionId = FAKE_TABLE[i].id;
        info->isActive = (unsigned int)active[i];
        info->numGpus = FAKE_TABLE[i].num_gpus;
        for (unsigned int g = 0; g < FAKE_TABLE[i].num_gpus; g++) {
            fmFabricPartitionGpuInfo_t *gpu = &info->gpuInfo[g];
            unsigned int module = FAKE_TABLE[i].modules[g];
            gpu->physicalId = module;
            snprintf(gpu->uuid, sizeof(gpu->uuid), "GPU-fa4e0000-0000-0000-0000-%012u", module);
            snprintf(gpu->pciBusId, sizeof(gpu->pciBusId), "00000000:%02X:00.0", 0x10 * module);
            gpu->numNvLinksAvailable = 18;
            gpu->maxNumNvLinks = 18;
            gpu->nvlinkLineRateMBps = 26562;
        }
    }
    return FM_ST_SUCCESS;
}

fmReturn_t fmActivateFabricPartition(fmHandle_t handle, fmFabricPartitionId_t id)
{
    int active[FAKE_NUM_PARTITIONS];
    int index;

    ENTER("fmActivateFabricPartition");
    if (!valid(handle))
        return FM_ST_CONNECTION_NOT_VALID;
    index = find(id);
    if (index < 0)
        return FM_ST_BADPARAM;
    load(active);
    for (size_t i = 0; i < FAKE_NUM_PARTITIONS; i++)
        if (active[i] && shares_gpu(&FAKE_TABLE[i], &FAKE_TABLE[index]))
            return FM_ST_IN_USE; /* NB: also the partition itself, when already active */
    active[index] = 1;
    return store(active);
}

fmReturn_t fmDeactivateFabricPartition(fmHandle_t handle, fmFabricPartitionId_t id)
{
    int active[FAKE_NUM_PARTITIONS];
    int index;

    ENTER("fmDeactivateFabricPartition");
    if (!valid(handle))
        return FM_ST_CONNECTION_NOT_VALID;
    index = find(id);
    if (index < 0)
        return FM_ST_BADPARAM;
    load(active);
    if (!active[index])
        return FM_ST_BADPARAM;
    active[index] = 0;
    return store(active);
}
