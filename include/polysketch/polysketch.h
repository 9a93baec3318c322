/*
 * polysketch: linear-time polynomial attention (PolySketchFormer) on any Vulkan device.
 *
 * This header is the whole public C API and its manual. It compiles as C99 and as C++.
 *
 * Concepts
 * --------
 * PskContext    A Vulkan instance + device + compute queue, the memory allocator and the pipeline
 *               cache. Create one per device and share it; it owns no global state.
 * PskAttention  One attention layer's configuration (kind, degree, head dims, storage type, layout,
 *               sketch). It caches its pipelines and device buffers, so reuse it across calls.
 *
 * Conventions (as in Vulkan and the Vulkan Memory Allocator)
 * ----------------------------------------------------------
 * - Every function that can fail returns a PskResult: PSK_SUCCESS (0) or a negative error code.
 *   pskResultToString() names each code. No C++ exception and no abort crosses this API.
 * - Create functions take a Psk...CreateInfo struct. A zero field means the documented default, so
 *   `PskAttentionCreateInfo info = {0};` followed by the required fields is the intended use.
 * - pskDestroy...() accepts NULL.
 * - On any error the function writes nothing to its outputs (output tensors, out-handles stay as
 *   they were) and, when a message callback is installed, calls it once with the reason.
 *
 * Threading (as in Vulkan and VMA)
 * --------------------------------
 * "Externally synchronized" means the caller must make sure no two calls that use the object run
 * at the same time (a mutex, or using it from one thread only); the library does not lock it.
 * - No global state: pskGetVersion, pskResultToString, pskEnumerateDevices,
 *   pskGetPhysicalDeviceInfo and pskCreateContext may be called from any thread at any time.
 *   Contexts are independent of each other, so each thread may have its own.
 * - A PskContext is internally synchronized: pskGetDeviceInfo and pskCreateAttention on one
 *   context may be called from several threads at once, and concurrently with calls on attention
 *   objects created from it (its pipeline cache, allocator and queue are guarded by mutexes; the
 *   queue submission of concurrent forward calls is serialized, the rest of them runs in parallel).
 * - pskDestroyContext is externally synchronized with every other use of the context: call it
 *   after every attention object created from it has been destroyed (a context must outlive its
 *   attention objects) and when no other call on the context is running.
 * - A PskAttention is externally synchronized: pskAttentionForwardHost and pskDestroyAttention
 *   on one attention object must not run at the same time as any other call taking that object.
 *   Different attention objects, of the same context or not, may be used from different threads
 *   concurrently: give each thread its own.
 * - Arguments are only read during the call. Concurrent calls may share input arrays (q, k, v) and
 *   create infos; their output arrays and stats must not overlap.
 * - The message callback may be called from every thread that uses the context, concurrently,
 *   on the thread of the call that produced the message, so it must be thread-safe. It may run
 *   while the library holds a context lock: it must not call polysketch functions taking the same
 *   context or its attention objects.
 * - pskCreateContext reads the environment (PSK_DEVICE, PSK_VALIDATION) with getenv(); do not
 *   change the environment while it runs.
 *
 * Mathematics
 * -----------
 * The formulas (docs/MATH.md states them in full, with shapes and file formats):
 *   softmax:     O_i = sum_j softmax_j(s q_i.k_j) v_j
 *   polynomial:  w_ij = (s q_i.k_j)^p,  O_i = (sum_j w_ij v_j) / (1 + sum_j w_ij)
 *   polysketch:  the polynomial form with w_ij = <phi(s q_i), phi(k_j)>, phi a non-negative sketch
 *                feature map, computed in time linear in n by blocks.
 * "causal" keeps j <= i, "full" keeps every j. All accumulation is float32 whatever the storage type.
 *
 * Polysketch in one paragraph
 * ---------------------------
 * A sketch S maps a row x (after the optional LayerNorm, and for q the scale s) to r numbers:
 * random (degree 2: S(x) = x; degree 4 and 8: a tree of Gaussian matrices with Hadamard products,
 * generated from `seed` or read from a file) or learned (degree 4, weights from a file). The
 * features are phi(x) = psi(S(x)), the packed self-tensoring with r(r+1)/2 entries, so
 * <phi(q), phi(k)> = <S(q), S(k)>^2 >= 0. Causal attention runs by blocks of b rows: per block the
 * state H_l = phi(K_l)^T [V_l | 1], a parallel (Blelloch) exclusive scan gives Z_l = sum_{j<l} H_j,
 * and row i of block l gets num_i = phi(q_i)^T Z_l + the lower-triangular part inside its block
 * (sketched, or exact polynomial weights with PSK_ATTENTION_LOCAL_EXACT_BIT), then
 * O_i = num_i[0:dv] / (1 + num_i[dv]). Full attention sums all block states instead. Cost is
 * linear in n; the device workspace is O((n/b) r^2 dv) per head (pskGetWorkspaceSize).
 */
#ifndef POLYSKETCH_POLYSKETCH_H
#define POLYSKETCH_POLYSKETCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(PSK_SHARED_LIBRARY)
#  ifdef PSK_BUILDING_LIBRARY
#    define PSK_API __declspec(dllexport)
#  else
#    define PSK_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && defined(PSK_BUILDING_LIBRARY)
#  define PSK_API __attribute__((visibility("default")))
#else
#  define PSK_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

/** Packs a version as Vulkan does: 10 bits major, 10 bits minor, 12 bits patch. */
#define PSK_MAKE_VERSION(major, minor, patch) \
    ((((uint32_t)(major)) << 22) | (((uint32_t)(minor)) << 12) | ((uint32_t)(patch)))
#define PSK_VERSION_MAJOR(version) ((uint32_t)(version) >> 22)
#define PSK_VERSION_MINOR(version) (((uint32_t)(version) >> 12) & 0x3FFu)
#define PSK_VERSION_PATCH(version) ((uint32_t)(version) & 0xFFFu)

/** The version of this header. Compare with pskGetVersion() to detect a mismatched library. */
#define PSK_HEADER_VERSION PSK_MAKE_VERSION(0, 1, 0)

/** The version of the library that is linked (PSK_MAKE_VERSION encoding). */
PSK_API uint32_t pskGetVersion(void);

/* ---------------------------------------------------------------------------------------------
 * Results and messages
 * ------------------------------------------------------------------------------------------- */

typedef enum PskResult {
    PSK_SUCCESS = 0,
    /** A required pointer is NULL, an enum is out of range, or a field has a forbidden value. */
    PSK_ERROR_INVALID_ARGUMENT = -1,
    /** Shapes disagree: a zero or inconsistent size, Hq not a multiple of Hkv, a bad stride. */
    PSK_ERROR_INVALID_SHAPE = -2,
    /** The combination is valid but not supported (by the library or by this device). */
    PSK_ERROR_UNSUPPORTED = -3,
    /** A caller-provided buffer is smaller than the shape and strides require. */
    PSK_ERROR_BUFFER_TOO_SMALL = -4,
    /** An input holds NaN or infinity (checked on host-array calls). */
    PSK_ERROR_NON_FINITE_INPUT = -5,
    /** A size exceeds what the device can address (maxStorageBufferRange, 32-bit indexing). */
    PSK_ERROR_TOO_LARGE = -6,
    PSK_ERROR_OUT_OF_HOST_MEMORY = -7,
    PSK_ERROR_OUT_OF_DEVICE_MEMORY = -8,
    /** No Vulkan loader, no Vulkan device, or the requested device does not exist. */
    PSK_ERROR_NO_DEVICE = -9,
    /** The device was lost while executing; the context must be destroyed. */
    PSK_ERROR_DEVICE_LOST = -10,
    /** Any other Vulkan failure; the message names the Vulkan call and its VkResult. */
    PSK_ERROR_VULKAN = -11,
    /** A file could not be read or is malformed (safetensors, state blobs). */
    PSK_ERROR_BAD_FILE = -12,
    /** An internal invariant failed: a bug in polysketch. Please report the message. */
    PSK_ERROR_INTERNAL = -13,
    /** A call of the MPI component (polysketch_mpi.h) failed in MPI itself. */
    PSK_ERROR_COMMUNICATION = -14
} PskResult;

/** A static string naming the code, e.g. "PSK_ERROR_INVALID_SHAPE". Never NULL. */
PSK_API const char* pskResultToString(PskResult result);

typedef enum PskMessageSeverity {
    /** The reason for an error code returned by the call that is running. */
    PSK_MESSAGE_SEVERITY_ERROR = 0,
    /** A message from the Vulkan validation layers (only with validation enabled). */
    PSK_MESSAGE_SEVERITY_VALIDATION = 1,
    /** Informational: the device chosen, features turned off, and similar. */
    PSK_MESSAGE_SEVERITY_INFO = 2
} PskMessageSeverity;

/**
 * Receives every message of a context. `result` is the error code for ERROR messages and
 * PSK_SUCCESS otherwise. `message` is valid only during the call. May be called from any thread
 * that uses the context, possibly concurrently.
 */
typedef void (*PskMessageCallback)(PskMessageSeverity severity, PskResult result,
                                   const char* message, void* userData);

/* ---------------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------------- */

typedef struct PskContext_T* PskContext;
typedef struct PskAttention_T* PskAttention;
/** A decode state (incremental decoding, below); forward calls may continue one (state passing). */
typedef struct PskDecodeState_T* PskDecodeState;

typedef enum PskContextCreateFlagBits {
    /**
     * Enable the Khronos validation layer (VK_LAYER_KHRONOS_validation) when it is installed and
     * route its messages to the callback with PSK_MESSAGE_SEVERITY_VALIDATION. The environment
     * variable PSK_VALIDATION=1 has the same effect.
     * Threads: validation layers older than mid-2023 (Debian 12 ships 1.3.239) keep their data of
     * every instance and device in one unlocked process-wide map, so creating or destroying a
     * context while another thread makes any Vulkan call can crash inside the layer
     * (KhronosGroup/Vulkan-ValidationLayers issue 4391; reproduced without polysketch). With such
     * a layer, create and destroy validated contexts while no other thread uses Vulkan (the
     * library's tests hold a readers-writer lock: writers create and destroy).
     */
    PSK_CONTEXT_ENABLE_VALIDATION_BIT = 0x1,
    /** Fail with PSK_ERROR_UNSUPPORTED instead of silently running without validation. */
    PSK_CONTEXT_REQUIRE_VALIDATION_BIT = 0x2
} PskContextCreateFlagBits;
typedef uint32_t PskContextCreateFlags;

typedef struct PskContextCreateInfo {
    PskContextCreateFlags flags;
    /**
     * Which Vulkan device to use. NULL or "": the environment variable PSK_DEVICE if set, else the
     * best device present (discrete GPU, then integrated, then virtual, then CPU such as lavapipe;
     * ties keep enumeration order). A decimal number selects by index in enumeration order (the
     * order `psk info` prints); any other string selects the first device whose name contains it,
     * case-insensitively.
     */
    const char* device;
    /** Optional; see PskMessageCallback. */
    PskMessageCallback messageCallback;
    void* messageUserData;
    /**
     * NULL: the library loads Vulkan and creates its own instance and device. Otherwise the app's
     * instance, device and queue to adopt (struct PskExternalVulkan in polysketch_vulkan.h, which
     * documents the rules); `device` must then be NULL.
     */
    const struct PskExternalVulkan* externalVulkan;
    /**
     * Upper bound on the device memory (bytes of VkDeviceMemory) the context allocates, as VMA's
     * heap size limit; 0 means none. An allocation that would exceed it fails with
     * PSK_ERROR_OUT_OF_DEVICE_MEMORY, as a real out-of-memory does: for apps that budget memory.
     */
    uint64_t deviceMemoryLimit;
    /* The field below was appended after deviceMemoryLimit (the struct grew by it). */
    /**
     * Largest single device allocation (bytes of one VkDeviceMemory) the context makes: 0 means the
     * device's maxMemoryAllocationSize; a smaller value makes the library split a forward's
     * workspace into more buffers earlier (pskGetWorkspaceLayout), and is for apps that keep
     * allocations small and for tests; a larger one is clamped to the device's. It also bounds
     * the library's other buffers (q, k, v and out of host-array calls, decode states): one larger
     * than it fails with PSK_ERROR_TOO_LARGE. pskGetDeviceInfo reports the value in effect.
     */
    uint64_t maxAllocationSize;
    /* The field below was appended after maxAllocationSize (the struct grew by it). */
    /**
     * The tuning table the planner reads (measured tile choices per device, written by `psk tune`;
     * docs/PERFORMANCE.md, "Tuning"). NULL or "": the environment variable PSK_TUNING_TABLE when
     * set (read whenever an attention object is created), else the table built into the library
     * for this device (vendor and device id; a table measured with another driver version applies
     * with a note in the plan), else a built-in table of another device of the same chip that lists
     * this device's id (with a note), else none. "none": no table, not even a built-in one (the
     * model's choices). Any other string is the path of a table file, read once here: a file that
     * cannot be read or is not a valid table fails pskCreateContext with PSK_ERROR_BAD_FILE; a table
     * for another device that does not list this one is not applied (pskGetAttentionPlan says so). The plan names the entry behind
     * every tuned choice.
     */
    const char* tuningTable;
} PskContextCreateInfo;

/** Creates a context. `createInfo` may be NULL (all defaults). */
PSK_API PskResult pskCreateContext(const PskContextCreateInfo* createInfo, PskContext* pContext);
PSK_API void pskDestroyContext(PskContext context);

/**
 * One cooperative-matrix configuration a device enumerates (vkGetPhysicalDeviceCooperativeMatrix-
 * Properties{NV,KHR}), in PskDeviceInfo::cooperativeMatrixProperties.
 */
typedef struct PskCooperativeMatrixProperty {
    /** 0: VK_NV_cooperative_matrix, 1: VK_KHR_cooperative_matrix. */
    uint32_t extension;
    uint32_t m, n, k;
    /**
     * Component types of A, B, C and the result as VkComponentTypeKHR values: 0 float16,
     * 1 float32, 2 float64, 3..6 sint8..sint64, 7..10 uint8..uint64, 1000141000 bfloat16.
     */
    uint32_t aType, bType, cType, resultType;
    /** VkScopeKHR: 1 device, 2 workgroup, 3 subgroup, 5 queue family. */
    uint32_t scope;
    uint32_t saturatingAccumulation; /* KHR only */
} PskCooperativeMatrixProperty;

/** What a device can do, as the library detected it. Every field is filled by pskGetDeviceInfo. */
typedef struct PskDeviceInfo {
    char name[256];
    char driverName[256];
    char driverInfo[256];
    uint32_t vendorId;
    uint32_t deviceId;
    /** 0 other, 1 integrated GPU, 2 discrete GPU, 3 virtual GPU, 4 CPU (VkPhysicalDeviceType). */
    uint32_t deviceType;
    uint32_t apiVersion;
    uint32_t driverVersion;
    uint32_t subgroupSize;
    uint32_t minSubgroupSize;
    uint32_t maxSubgroupSize;
    uint32_t maxComputeSharedMemorySize;
    uint32_t maxComputeWorkGroupInvocations;
    uint32_t maxStorageBufferRange;
    uint64_t maxMemoryAllocationSize;
    uint64_t deviceLocalMemoryBytes;
    float timestampPeriodNs;
    uint32_t storageBuffer16BitAccess; /* float16 / bfloat16 storage */
    uint32_t shaderFloat16;            /* float16 arithmetic */
    uint32_t subgroupSizeControl;
    uint32_t pushDescriptors;
    uint32_t cooperativeMatrixNV;
    uint32_t cooperativeMatrixKHR;
    /** Cooperative-matrix shapes with float16 A/B and float32 C (M, N, K), up to 8 of them. */
    uint32_t cooperativeMatrixShapeCount;
    uint32_t cooperativeMatrixShapes[8][3];
    /* The fields below were appended after cooperativeMatrixShapes (the struct grew by them). */
    /**
     * The Vulkan memory model (VkPhysicalDeviceVulkanMemoryModelFeatures::vulkanMemoryModel), which
     * cooperative-matrix shaders are compiled under: 1 when the device has it and a cooperative-
     * matrix extension, so that the library enables it; 0 otherwise.
     */
    uint32_t vulkanMemoryModel;
    /** VK_KHR_shader_bfloat16 with shaderBFloat16CooperativeMatrix (bfloat16 matrix operands). */
    uint32_t bfloat16CooperativeMatrix;
    /**
     * Every enumerated cooperative-matrix configuration, the NV extension's first, then the KHR
     * extension's: cooperativeMatrixPropertyTotal of them, of which the first
     * cooperativeMatrixPropertyCount (at most 64) are stored.
     */
    uint32_t cooperativeMatrixPropertyCount;
    uint32_t cooperativeMatrixPropertyTotal;
    PskCooperativeMatrixProperty cooperativeMatrixProperties[64];
    /* The field below was appended after cooperativeMatrixProperties (the struct grew by it). */
    /**
     * The largest single allocation the library makes: pskGetDeviceInfo the context's
     * (PskContextCreateInfo::maxAllocationSize, clamped), pskGetPhysicalDeviceInfo the device's
     * maxMemoryAllocationSize. The host forward splits its workspace into buffers of at most this.
     */
    uint64_t maxAllocationSize;
} PskDeviceInfo;

/** Number of Vulkan devices the loader reports (no context needed). */
PSK_API PskResult pskEnumerateDevices(uint32_t* pCount);
/** Capabilities of device `index` in enumeration order (no context needed). */
PSK_API PskResult pskGetPhysicalDeviceInfo(uint32_t index, PskDeviceInfo* pInfo);
/** Capabilities of the context's device. */
PSK_API PskResult pskGetDeviceInfo(PskContext context, PskDeviceInfo* pInfo);

/* ---------------------------------------------------------------------------------------------
 * Attention objects
 * ------------------------------------------------------------------------------------------- */

typedef enum PskAttentionKind {
    /** Zero is not a kind: a create info must name one. */
    PSK_ATTENTION_KIND_NONE = 0,
    /** Softmax attention, flash-style (online softmax over key tiles). The baseline. */
    PSK_ATTENTION_KIND_SOFTMAX = 1,
    /** Exact polynomial attention of even degree p, quadratic cost. */
    PSK_ATTENTION_KIND_POLYNOMIAL = 2,
    /** Polysketch attention, linear cost (sketched polynomial of degree p). */
    PSK_ATTENTION_KIND_POLYSKETCH = 3
} PskAttentionKind;

typedef enum PskDataType {
    PSK_DATA_TYPE_FLOAT32 = 0, /**< default */
    PSK_DATA_TYPE_FLOAT16 = 1, /**< IEEE binary16 */
    PSK_DATA_TYPE_BFLOAT16 = 2 /**< the high 16 bits of a float32; rounded to nearest even */
} PskDataType;

typedef enum PskLayout {
    /** [B, H, n, dim] contiguous, as PyTorch's scaled_dot_product_attention. Default. */
    PSK_LAYOUT_BHND = 0,
    /** [B, n, H, dim] contiguous, as FlashAttention. */
    PSK_LAYOUT_BNHD = 1
} PskLayout;

typedef enum PskAttentionCreateFlagBits {
    /** Causal mask: row i attends to j <= i. Without it every row attends to every j ("full"). */
    PSK_ATTENTION_CAUSAL_BIT = 0x1,
    /** Polysketch: exact polynomial weights inside each block ("local exact"). Needs CAUSAL. */
    PSK_ATTENTION_LOCAL_EXACT_BIT = 0x2,
    /**
     * Polysketch, random sketch: the google-research scaling (each G divided by sqrt(r)) instead
     * of the unbiased one, so models trained with that code load unchanged.
     */
    PSK_ATTENTION_REFERENCE_SCALING_BIT = 0x4
} PskAttentionCreateFlagBits;
typedef uint32_t PskAttentionCreateFlags;

typedef enum PskSketchSource {
    /** Random Gaussian sketch generated from `seed` (portable: identical on every device). */
    PSK_SKETCH_SOURCE_SEED = 0,
    /** Random sketch matrices g{l}_{i}a / g{l}_{i}b read from `sketchFile` (.safetensors). */
    PSK_SKETCH_SOURCE_FILE = 1,
    /** Learned sketch (degree 4) with weights read from `sketchFile` (.safetensors). */
    PSK_SKETCH_SOURCE_LEARNED_FILE = 2
} PskSketchSource;

typedef struct PskAttentionCreateInfo {
    PskAttentionKind kind;          /**< required */
    PskAttentionCreateFlags flags;
    /** Degree p for POLYNOMIAL and POLYSKETCH: 2, 4 or 8. 0 means 4. Ignored by SOFTMAX. */
    uint32_t degree;
    /**
     * Score scale s multiplying every q before the kernel. 0 means the default: 1/sqrt(headDim)
     * for SOFTMAX, 1 for the other kinds. Must be finite.
     */
    float scale;
    uint32_t numQueryHeads;         /**< Hq; 0 means 1 */
    uint32_t numKeyValueHeads;      /**< Hkv; 0 means Hq. Hq must be a multiple of Hkv. */
    uint32_t headDim;               /**< h, required: 16 to 256 */
    uint32_t valueDim;              /**< dv: 0 means headDim; 1 to 256 */
    PskDataType dataType;           /**< storage type of q, k, v and the output */
    PskLayout layout;               /**< default strides of the tensors */

    /* Polysketch only (ignored by the other kinds). */
    /**
     * r: 8 to 128. 0 means 32 for a seeded sketch and "the file's sketch_size" for a sketch file
     * (a non-zero value must then match the file). Degree 2 ignores it: S(x) = x has length h,
     * so the features number h(h+1)/2.
     */
    uint32_t sketchSize;
    /** b: 16 to 1024, any value (n need not be a multiple); 0 means 256. */
    uint32_t blockSize;
    PskSketchSource sketchSource;
    /** PSK_SKETCH_SOURCE_SEED: the same seed gives bit-identical matrices on every device and OS. */
    uint64_t seed;
    /**
     * PSK_SKETCH_SOURCE_FILE: a .safetensors file with tensors g{l}_{i}a, g{l}_{i}b (docs/MATH.md)
     * and __metadata__ kind "random", degree, sketch_size, scaling "unbiased" | "reference"; the
     * file's scaling is used (PSK_ATTENTION_REFERENCE_SCALING_BIT must agree if set).
     * PSK_SKETCH_SOURCE_LEARNED_FILE: tensors f{1,2}.{0,1}.{ln.scale, ln.bias, dense1, dense2},
     * __metadata__ kind "learned", degree "4", sketch_size; the degree must be 4 and
     * REFERENCE_SCALING must be unset. Read once, at creation. Errors: PSK_ERROR_BAD_FILE.
     */
    const char* sketchFile;
    /**
     * Optional q/k LayerNorm (.safetensors: "ln.scale", "ln.bias" of shape [h], eps 1e-5) applied to
     * q and k before the sketch, fused into the feature map. Optionally also "local_ln.scale",
     * "local_ln.bias": a separate LayerNorm for the exact local part, which needs
     * PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT. NULL for none.
     */
    const char* qkNormFile;
    /**
     * Optional: a prefix of every tensor name read from sketchFile and qkNormFile (NULL or "" for
     * none), so that one model file holds every layer's sketch and LayerNorm: with "layers.3.attn."
     * the learned sketch is read from "layers.3.attn.f1.0.ln.scale" and so on, and the q/k
     * LayerNorm from "layers.3.attn.ln.scale" (the same file may be both sketchFile and qkNormFile:
     * under a prefix each reads only the names of its kind, ln.* and local_ln.* being the
     * LayerNorm's, f1.*, f2.*, g*_*a|b the sketch's, so the layer's other weights may sit under the
     * same prefix). Other tensors are not read (the file's header is still validated whole); the metadata
     * (kind, degree, sketch_size, scaling) is the file's, shared by every prefix. At most 255
     * bytes. Format: docs/MATH.md section 8.
     */
    const char* tensorPrefix;
} PskAttentionCreateInfo;

PSK_API PskResult pskCreateAttention(PskContext context, const PskAttentionCreateInfo* createInfo,
                                     PskAttention* pAttention);

/**
 * Whether pskCreateAttention(context, createInfo) would accept the configuration on this context's
 * device (its enabled capabilities included): PSK_SUCCESS, or the code (and message) creation
 * would fail with for the configuration itself. Creates no pipeline, allocates no device memory
 * and reads no file: a sketch or LayerNorm file that is missing or malformed is reported only by
 * pskCreateAttention.
 */
PSK_API PskResult pskIsAttentionSupported(PskContext context, const PskAttentionCreateInfo* createInfo);
PSK_API void pskDestroyAttention(PskAttention attention);

/* ---------------------------------------------------------------------------------------------
 * Forward on host arrays
 * ------------------------------------------------------------------------------------------- */

/**
 * Element strides of a 4-D tensor whose last (feature) dimension is contiguous. Element
 * (b, head, t, d) lives at b*batch + head*head + t*token + d. All three must be non-zero.
 * With layout BHND the defaults are (H*n*dim, n*dim, dim); with BNHD (n*H*dim, dim, H*dim).
 */
typedef struct PskTensorStrides {
    uint64_t batch;
    uint64_t head;
    uint64_t token;
} PskTensorStrides;

/** The stages of a forward call that PskForwardStats times separately. */
typedef enum PskForwardStage {
    /** Polysketch: the sketches S(q), S(k) (and the local-exact rows q', k'). */
    PSK_FORWARD_STAGE_FEATURE_MAP = 0,
    /** Polysketch: the block states H_l = phi(K_l)^T [V_l | 1]. */
    PSK_FORWARD_STAGE_BLOCK_STATES = 1,
    /** Polysketch: the prefix over blocks (causal) or their sum (full). */
    PSK_FORWARD_STAGE_PREFIX = 2,
    /** Polysketch: phi(q)^T Z plus the local part, normalized. Softmax and polynomial: everything. */
    PSK_FORWARD_STAGE_OUTPUT = 3,
    PSK_FORWARD_STAGE_COUNT = 4
} PskForwardStage;

/** Optional results of a forward call. */
typedef struct PskForwardStats {
    /** GPU time of the attention dispatches alone (timestamp queries), in milliseconds. */
    double gpuMilliseconds;
    /** Bytes of device workspace the call used beyond q, k, v and the output. */
    uint64_t workspaceBytes;
    /**
     * GPU time of each stage (PskForwardStage), in milliseconds: timestamps written between the
     * stages' dispatches, so they add up to gpuMilliseconds. 0 for a stage the kind does not have
     * and on a queue without timestamps. Decode steps leave them 0.
     */
    double stageMilliseconds[PSK_FORWARD_STAGE_COUNT];
} PskForwardStats;

typedef struct PskForwardHostInfo {
    uint32_t batchSize;        /**< B; 0 means 1 */
    uint32_t seqLen;           /**< n: required, >= 1 */
    /** Host arrays in the attention's dataType (float, or uint16_t bit patterns for 16-bit types).
     *  q: [B, Hq, n, h], k: [B, Hkv, n, h], v: [B, Hkv, n, dv], out: [B, Hq, n, dv] (layout). */
    const void* q;
    const void* k;
    const void* v;
    void* out;
    /** Sizes in bytes of the four arrays, checked against the shape: required (non-zero). */
    size_t qBytes;
    size_t kBytes;
    size_t vBytes;
    size_t outBytes;
    /** Optional strides (NULL: from the attention's layout). */
    const PskTensorStrides* qStrides;
    const PskTensorStrides* kStrides;
    const PskTensorStrides* vStrides;
    const PskTensorStrides* outStrides;
    /** Optional, filled on success. */
    PskForwardStats* stats;
    /* The fields below were appended after stats (the struct grew by them). */
    /**
     * Optional state passing (docs/DECODING.md, "State passing"): a decode state of this attention.
     * The call then continues sequences stateFirstSequence .. + batchSize - 1 of the state, which
     * must all be at the same position p: row i of the output is position p + i of its sequence,
     * attending to everything the state holds and to rows 0..i of this call (exactly one causal
     * forward over the concatenation, block boundaries at multiples of b from the sequence's
     * start), and the sequences are left at p + n holding the final state (decode steps, or
     * another forward with the state, continue from it). NULL: a fresh sequence, nothing kept.
     *
     * So a prompt may be prefilled in chunks of any length (1 token, fewer than b, not multiples
     * of b), prefill and steps may alternate, and the rows equal one forward over the whole
     * sequence within float32 rounding. Supported: causal POLYSKETCH at any position (local exact
     * or not); causal SOFTMAX at any position: at 0 the forward, whose k, v rows fill the KV cache;
     * later the call's k, v rows join the cache and its queries attend over it, the keys split
     * across workgroups (a short query block against a long cache: chunked prefill, speculative
     * decoding's verification). A softmax position > 0 needs a tiling of the FP32 FlashAttention-2
     * kernel for h, dv (every h up to 256 on 26 KiB of shared memory or more; PSK_ERROR_UNSUPPORTED
     * where none fits, and under PSK_FP32_BASELINE=rows: continue with decode steps there).
     * Errors (the state, its positions and `out` are then unchanged): PSK_ERROR_UNSUPPORTED for
     * POLYNOMIAL or non-causal attention (which have no decode state) and the softmax cases above;
     * PSK_ERROR_INVALID_ARGUMENT for a state of another attention object, sequences beyond the
     * state's batchSize, or stateFirstSequence != 0 without a state; PSK_ERROR_INVALID_SHAPE when
     * the sequences are at different positions; PSK_ERROR_BUFFER_TOO_SMALL when a softmax cache
     * cannot hold position + n tokens; PSK_ERROR_TOO_LARGE past a polysketch position of 2^53, or where
     * the call's workspace (pskGetStateWorkspaceSize, which can exceed pskGetWorkspaceSize) does
     * not fit the device. 16-bit attention objects pass their state too: the call's arrays are
     * the storage type, the state stays float32.
     * The state is externally synchronized with the attention, as for the decode calls.
     */
    PskDecodeState state;
    uint32_t stateFirstSequence;
    /* The field below was appended after stateFirstSequence (the struct grew by it). */
    /**
     * Optional variable-length packed batch (as FlashAttention's varlen API): batchSize + 1 token
     * offsets (batchSize 0 means 1), cuSeqlens[0] == 0, non-decreasing, cuSeqlens[batchSize] ==
     * seqLen. Sequence i is tokens cuSeqlens[i] .. cuSeqlens[i + 1] - 1 of the call; each sequence
     * is attended on its own (causal or full as the attention; polysketch blocks start at the
     * sequence's first token) and its rows equal a call on that sequence alone; no work is spent
     * on padding, and an empty sequence (two equal offsets) produces nothing.
     * The tensors then have the shape and strides of batchSize 1 with n = seqLen = total tokens:
     * in layout BNHD q is [total, Hq, h], k [total, Hkv, h], v [total, Hkv, dv], out [total, Hq, dv]
     * (packed rows); a BHND attention reads [H, total, d]; custom strides apply the same way (their
     * batch stride is unused). Sequence i's rows start cuSeqlens[i] token strides into each array.
     * Each sequence is its own forward over its token range, recorded one after the other in one
     * command buffer. The device binds each sequence's range at that offset, so for every
     * non-empty sequence cuSeqlens[i] * tokenStride * elementBytes must be a multiple of the
     * device's minStorageBufferOffsetAlignment (true for every i when h * elementBytes, with the
     * layout's token stride, is: BNHD token stride = H * h); PSK_ERROR_UNSUPPORTED otherwise.
     * Workspace: the largest sequence's need, never more than pskGetWorkspaceSize(attention, 1,
     * seqLen) (so that size always suffices). The array is read during the call only (host memory).
     * Errors (nothing written): PSK_ERROR_INVALID_ARGUMENT when cuSeqlens[0] != 0 or the offsets
     * decrease; PSK_ERROR_INVALID_SHAPE when cuSeqlens[batchSize] != seqLen; PSK_ERROR_UNSUPPORTED
     * with a decode state (state passing continues equal-length sequences: use one call per
     * sequence) and for unaligned sequence starts (above). NULL: the ordinary padded batch.
     */
    const uint32_t* cuSeqlens;
} PskForwardHostInfo;

/**
 * Computes out = attention(q, k, v) on the device: uploads, records one command buffer, submits,
 * waits, downloads. Inputs are checked for NaN and infinity first.
 * The device workspace (pskGetWorkspaceSize) is allocated by the attention object and kept for
 * later calls. Where it exceeds the largest allocation (PskContextCreateInfo::maxAllocationSize,
 * by default the device's maxMemoryAllocationSize) it is split into several buffers
 * (pskGetWorkspaceLayout with maxBufferSize 0 says which); the results do not depend on the
 * split. Only a single workspace region larger than that, or than maxStorageBufferRange, fails
 * with PSK_ERROR_TOO_LARGE (the message names the region); out of device memory fails with
 * PSK_ERROR_OUT_OF_DEVICE_MEMORY and frees what the call allocated.
 */
PSK_API PskResult pskAttentionForwardHost(PskAttention attention, const PskForwardHostInfo* info);

/**
 * Bytes of device workspace a forward call of `batchSize` (0 means 1) sequences of `seqLen` tokens
 * needs beyond q, k, v and the output, with the attention's default strides. Polysketch: the
 * sketch rows of q and k (n r floats per head), in local-exact mode the prepared q and k rows
 * (n h), and the block states ((n/b) r(r+1)/2 rows of dv+1 floats rounded up to a multiple of 4,
 * per key/value head), never O(n^2).
 * Softmax and exact polynomial: 0 up to 8192 tokens, then a per-row state. This is the size of
 * ONE buffer holding every region (PskCmdForwardInfo::workspace); pskGetWorkspaceLayout gives
 * the buffers when it exceeds one allocation. Fails with PSK_ERROR_TOO_LARGE exactly when a
 * region exceeds what one binding can address (maxStorageBufferRange), as a call would.
 */
PSK_API PskResult pskGetWorkspaceSize(PskAttention attention, uint32_t batchSize, uint32_t seqLen, uint64_t* pBytes);

/**
 * Bytes of device workspace a forward call with a decode state (PskCmdForwardInfo::state, state
 * passing) of `batchSize` (0 means 1) sequences of `seqLen` tokens needs, at any position of the
 * state, so one allocation serves every chunk of a prompt. At least pskGetWorkspaceSize.
 * Polysketch: the forward's workspace plus the last block's value rows (b dv floats per key/value
 * head), and in local-exact mode, where a call that starts inside a block runs behind that block's
 * rows, the forward's workspace over seqLen + b - 1 rows and dense copies of q, k, v and out of
 * that many rows. Softmax: pskGetWorkspaceSize. Errors: PSK_ERROR_UNSUPPORTED for POLYNOMIAL and
 * non-causal attention, PSK_ERROR_TOO_LARGE exactly when such a call would fail with it.
 */
PSK_API PskResult pskGetStateWorkspaceSize(PskAttention attention, uint32_t batchSize, uint32_t seqLen, uint64_t* pBytes);

/** What pskGetWorkspaceLayout describes: a call's geometry and the largest buffer wanted. */
typedef struct PskWorkspaceLayoutInfo {
    uint32_t batchSize; /**< B; 0 means 1 (a cuSeqlens call: 1, seqLen = its total tokens) */
    uint32_t seqLen;    /**< n: required, >= 1 */
    /**
     * Largest buffer, in bytes: 0 means the context's largest allocation
     * (PskContextCreateInfo::maxAllocationSize, by default the device's maxMemoryAllocationSize),
     * i.e. the buffers pskAttentionForwardHost allocates. Any other value, for an app that
     * allocates its own workspace buffers under its own budget, is used as given.
     */
    uint64_t maxBufferSize;
    /** Non-zero: the workspace of a forward with a decode state (pskGetStateWorkspaceSize's). */
    uint32_t withDecodeState;
} PskWorkspaceLayoutInfo;

/**
 * The device workspace of a forward call as several buffers, none larger than
 * info->maxBufferSize: for a call whose workspace (pskGetWorkspaceSize) exceeds one allocation.
 * The workspace is a fixed sequence of regions (polysketch: the q and k sketch rows, the local
 * rows, the degree-8 node scratch, the block states, the cooperative output's packed Z records;
 * softmax / polynomial: the key-chunk state),
 * each of which must lie in one buffer at an offset aligned to 256 bytes (and to
 * minStorageBufferOffsetAlignment); the regions fill the buffers in order, a region that does
 * not fit the rest of a buffer beginning the next one. So buffer i of these sizes holds a run of
 * consecutive regions, and pskCmdAttentionForward (PskCmdForwardInfo::pWorkspaces) accepts any
 * buffers at least these sizes, given in this order. One buffer when the whole fits (its size
 * is then at most pskGetWorkspaceSize); zero buffers when the call needs no workspace.
 *
 * Two calls, as Vulkan's enumerations: with pBufferSizes NULL, *pBufferCount receives the
 * number of buffers; otherwise *pBufferCount is the capacity of pBufferSizes and receives the
 * number written. Errors (nothing written but *pBufferCount where said):
 * PSK_ERROR_INVALID_ARGUMENT (NULL attention, info or pBufferCount); PSK_ERROR_INVALID_SHAPE
 * (seqLen 0); PSK_ERROR_BUFFER_TOO_SMALL when *pBufferCount is less than the number of buffers
 * (*pBufferCount is then set to it); PSK_ERROR_TOO_LARGE when a single region exceeds
 * maxBufferSize or maxStorageBufferRange (the message names the region and the limit);
 * PSK_ERROR_UNSUPPORTED with withDecodeState for an attention that has no decode state.
 */
PSK_API PskResult pskGetWorkspaceLayout(PskAttention attention, const PskWorkspaceLayoutInfo* info, uint32_t* pBufferCount,
                                        uint64_t* pBufferSizes);

/**
 * Which GPU kernels a forward call of this attention runs on its device, and why: one line per
 * kernel, "<variant> (<generic|team|cooperative>) NAME=value ...: <reason>", where the variant
 * names the shader source and its build axes and NAME=value are its specialization constants.
 * Lines that start with "# " are comments: the cooperative-matrix switches set in the environment
 * (when any differs from its default) and the verdicts of the cooperative kernels' start-up
 * self-test on this device ("# self-test: <kernel>: passed (...)" or "FAILED, disabled on this
 * device"): a cooperative kernel that disagrees with the generic one on a known-answer case is not
 * used on that device (docs/ARCHITECTURE.md, "Cooperative self-test").
 * The text is what `psk info --plan` prints. Writes at most `*pSize` bytes including the
 * terminating NUL into `text`; with text == NULL only sets `*pSize` to the bytes needed.
 * Errors: PSK_ERROR_INVALID_ARGUMENT (NULL attention or pSize), PSK_ERROR_BUFFER_TOO_SMALL
 * (`*pSize` is then set to the bytes needed and `text` is left untouched).
 */
PSK_API PskResult pskGetAttentionPlan(PskAttention attention, char* text, size_t* pSize);

/** The configuration an attention object was created with, defaults applied. */
typedef struct PskAttentionInfo {
    PskAttentionKind kind;
    PskAttentionCreateFlags flags;
    uint32_t degree;          /**< p (0 for SOFTMAX) */
    float scale;              /**< s, the default applied */
    uint32_t numQueryHeads;   /**< Hq */
    uint32_t numKeyValueHeads; /**< Hkv */
    uint32_t headDim;         /**< h */
    uint32_t valueDim;        /**< dv */
    PskDataType dataType;
    PskLayout layout;
    /** Polysketch: R, the sketch length (r; h at degree 2), b, and F = R(R+1)/2 features; else 0. */
    uint32_t sketchLength;
    uint32_t blockSize;
    uint32_t features;
} PskAttentionInfo;

/** Fills *pInfo. Errors: INVALID_ARGUMENT (a NULL argument). */
PSK_API PskResult pskGetAttentionInfo(PskAttention attention, PskAttentionInfo* pInfo);

/* ---------------------------------------------------------------------------------------------
 * Incremental decoding (docs/DECODING.md)
 * -------------------------------------------------------------------------------------------
 * A PskDecodeState holds what a causal attention needs to produce the output row of one more
 * token per sequence, for a batch of B sequences, each at its own position:
 *
 * - POLYSKETCH (causal only): per (sequence, key/value head) the sum z of the block states
 *   H_l = phi(K_l)^T [V_l | 1] of the tokens consumed (F x (dv + 1) float32, F = R(R+1)/2), and in
 *   LOCAL_EXACT mode the current unfinished block's running sum of phi(k_j) [v_j | 1] (another
 *   F x (dv + 1)) and its rows (at most b local key rows and v rows). Without LOCAL_EXACT every
 *   consumed token is folded into z at once (the sketched local part is the same inner product);
 *   with it a block's sum enters z when the block completes. The size depends on r, b, h, dv, B and Hkv, never on the position: constant
 *   memory for any context length. Row i produced by decoding equals row i of the causal forward
 *   over the same tokens within float32 rounding (docs/MATH.md section 7).
 * - SOFTMAX (causal only): the baseline, a KV cache of `capacity` tokens per sequence.
 * - POLYNOMIAL and non-causal attention: PSK_ERROR_UNSUPPORTED.
 *
 * Every storage type decodes. With a FLOAT16 or BFLOAT16 attention, q, k, v and out of prefill,
 * steps and forwards with a state are that type (uint16_t bit patterns, as the forward takes
 * them): they are converted to float32 on load and the rows rounded to nearest even on store,
 * while the state itself (z, the block rows, the KV cache) and its serialized data stay float32;
 * decoded rows equal the 16-bit forward's within the 16-bit output rounding. The attention must
 * outlive its decode states. A state is externally synchronized together with its attention: no
 * call on the state may run at the same time as another call on the state or on the attention.
 *
 * Besides prefill and steps, forward calls continue a state and leave their final state in it
 * (PskForwardHostInfo::state, PskCmdForwardInfo::state: state passing), so prompts may be
 * prefilled in chunks and prefill, forward and steps interoperate. (PskDecodeState is declared
 * with PskContext above.)
 */

typedef enum PskDecodeStateFlagBits {
    /**
     * Steps recorded by pskCmdDecodeStep do not depend on the positions, so a command buffer
     * holding them may be submitted again and again (the Vulkan counterpart of replaying a CUDA
     * graph): each execution is one more step of every sequence, the positions advancing on the
     * device. Every call on the state that needs the positions (pskGetDecodePosition, prefill,
     * steps, forwards, reset, serialize, restore) reads them back from the device (a copy and a
     * wait), so every execution must have completed before it. A softmax step is then split over
     * the whole capacity rather than the current length (slower at short contexts), and a step
     * that finds a sequence's cache full stores nothing and the next call on the state fails with
     * PSK_ERROR_BUFFER_TOO_SMALL (once; the positions stay at the capacity).
     */
    PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT = 0x1
} PskDecodeStateFlagBits;
typedef uint32_t PskDecodeStateFlags;

typedef struct PskDecodeStateCreateInfo {
    uint32_t batchSize; /**< B, the number of sequences; 0 means 1 */
    /**
     * SOFTMAX: required, tokens per sequence the KV cache holds (prompt + steps), 1 to 2^24.
     * POLYSKETCH: must be 0 (the state does not grow).
     */
    uint32_t capacity;
    PskDecodeStateFlags flags; /**< PskDecodeStateFlagBits; 0: steps recorded for their positions */
} PskDecodeStateCreateInfo;

/** Creates a decode state with every sequence at position 0 (nothing consumed). */
PSK_API PskResult pskCreateDecodeState(PskAttention attention, const PskDecodeStateCreateInfo* createInfo,
                                       PskDecodeState* pState);
PSK_API void pskDestroyDecodeState(PskDecodeState state);

/**
 * Bytes of device memory the state itself holds: polysketch B Hkv F (dv + 1) 4 (plus, local exact,
 * B Hkv (F (dv + 1) + b (h + dv)) 4), softmax B Hkv capacity (h + dv) 4, plus 8 bytes per sequence of
 * positions. The same at every position. (The per-step scratch, a forward over one token and the
 * step tensors, is also fixed at creation and not counted.)
 */
PSK_API PskResult pskGetDecodeStateSize(PskDecodeState state, uint64_t* pBytes);

/** Tokens sequence `sequence` has consumed so far (its next step produces row *pPosition). */
PSK_API PskResult pskGetDecodePosition(PskDecodeState state, uint32_t sequence, uint64_t* pPosition);

typedef struct PskDecodePrefillInfo {
    uint32_t firstSequence; /**< the prompt goes to sequences firstSequence .. + batchSize - 1 */
    uint32_t batchSize;     /**< sequences in this call; 0 means 1 */
    uint32_t seqLen;        /**< prompt length n, >= 1 */
    /** As PskForwardHostInfo, with the attention's default strides (its layout):
     *  q [batchSize, Hq, n, h], k [batchSize, Hkv, n, h], v [batchSize, Hkv, n, dv],
     *  out [batchSize, Hq, n, dv]; sizes in bytes required.
     *  out may be NULL (outBytes is then ignored): the call only fills the state and computes
     *  no output rows where it can avoid them: SOFTMAX then runs no attention at all (the KV
     *  cache is the prompt's k and v, so a 128k-token cache costs a copy, not a quadratic
     *  forward); POLYSKETCH still runs its linear forward, whose block-state prefix is the state,
     *  and discards the rows, over chunks of whole blocks when the prompt is too long for one
     *  forward call (so state-only prompts are not bounded by the forward's workspace limits).
     *  q, k and v are checked (NULL, sizes, NaN) either way. */
    const void* q;
    const void* k;
    const void* v;
    void* out;
    size_t qBytes;
    size_t kBytes;
    size_t vBytes;
    size_t outBytes;
} PskDecodePrefillInfo;

/**
 * Runs the causal forward over a prompt (out, when not NULL, as pskAttentionForwardHost would
 * write it) and
 * leaves those sequences at position n, ready to step; whatever they held before is replaced.
 * Sequences of one call share n: prefill prompts of other lengths with further calls.
 * Softmax: n must not exceed the capacity (PSK_ERROR_BUFFER_TOO_SMALL).
 */
PSK_API PskResult pskDecodePrefillHost(PskDecodeState state, const PskDecodePrefillInfo* info);

typedef struct PskDecodeStepInfo {
    /** One token of every sequence (all B step), in the attention's storage type (float, or
     *  uint16_t bit patterns for FLOAT16 / BFLOAT16, checked for NaN and infinity), dense:
     *  q [B, Hq, h], k [B, Hkv, h], v [B, Hkv, dv]; out [B, Hq, dv] receives row `position` of
     *  every sequence. Sizes in bytes required. */
    const void* q;
    const void* k;
    const void* v;
    void* out;
    size_t qBytes;
    size_t kBytes;
    size_t vBytes;
    size_t outBytes;
    /** Optional, filled on success: gpuMilliseconds of the step's dispatches. */
    PskForwardStats* stats;
} PskDecodeStepInfo;

/**
 * Consumes one token per sequence and writes its output row; each sequence advances by one.
 * Inputs are checked for NaN and infinity first. Softmax: a sequence whose cache is full fails
 * the whole call with PSK_ERROR_BUFFER_TOO_SMALL (nothing is consumed).
 */
PSK_API PskResult pskDecodeStepHost(PskDecodeState state, const PskDecodeStepInfo* info);

/** Returns sequence `sequence` to position 0 (empty), leaving the other sequences as they are. */
PSK_API PskResult pskResetDecodeSequence(PskDecodeState state, uint32_t sequence);

/**
 * Serializes the state (as pskGetPipelineCacheData in Vulkan): with data NULL, *pSize receives
 * the size; otherwise *pSize must be at least that size (else PSK_ERROR_BUFFER_TOO_SMALL, nothing
 * written) and receives the bytes written. Format (little-endian, docs/DECODING.md): magic
 * "PSKDECST", format version (3), the attention config (kind, degree, R, b, h, dv, Hq, Hkv, flags,
 * scale, data type, a 64-bit hash of the sketch weights and LayerNorm parameters), B, capacity
 * (0 for polysketch), the B positions, the float32 data: polysketch z (and, local exact, the
 * unfinished block's sum and rows), softmax the cached K and V rows up to each position; then the
 * XXH64 checksum (seed 0) of all the bytes before it. Softmax blobs grow with the positions;
 * polysketch blobs do not. A polysketch sequence's position is at most 2^53: a step of a
 * sequence at 2^53 fails with PSK_ERROR_TOO_LARGE (reset it to continue).
 */
PSK_API PskResult pskSerializeDecodeState(PskDecodeState state, void* data, size_t* pSize);

/**
 * Replaces the state's contents by a blob from pskSerializeDecodeState, possibly made by another
 * context or process. The state must belong to an attention with the same configuration and
 * sketch and have the same B (softmax: a capacity holding every position). Otherwise, and for a
 * truncated or corrupt blob, PSK_ERROR_BAD_FILE with a message naming the mismatch; the state is
 * then unchanged. Every field is checked before the state is touched: magic, version, the
 * checksum, each config field, B, the capacity (0 for polysketch; softmax 1 to 2^24), each
 * position (polysketch at most 2^53; softmax at most the blob's capacity and this state's), the
 * size, and the data (NaN or infinity is rejected). Blobs of format version 2 (earlier releases:
 * the same layout without the checksum) are still accepted, with every other check.
 */
PSK_API PskResult pskRestoreDecodeState(PskDecodeState state, const void* data, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* POLYSKETCH_POLYSKETCH_H */
