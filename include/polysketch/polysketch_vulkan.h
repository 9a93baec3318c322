/*
 * polysketch_vulkan.h: embedding polysketch in an application that has its own Vulkan device.
 *
 * polysketch.h is self-contained and never includes Vulkan headers; this header adds the part of
 * the API that takes Vulkan handles, so it includes <vulkan/vulkan.h> (define VK_NO_PROTOTYPES
 * before including it if your app loads Vulkan itself; this header needs no prototypes). C99.
 *
 * Three pieces (docs/EMBEDDING.md walks through them; samples/app_device is a complete program):
 *
 * 1. Adopting the app's objects: PskExternalVulkan, pointed to by
 *    PskContextCreateInfo::externalVulkan, makes pskCreateContext use the app's VkInstance,
 *    VkPhysicalDevice, VkDevice and one of its compute queues instead of creating its own.
 *    Entry points are loaded through the app's vkGetInstanceProcAddr into the context's own
 *    tables (no global state; the Vulkan loader is never dlopen'ed in this mode, so the app may
 *    link the loader, dlopen it, or use any other source of vkGetInstanceProcAddr).
 *    pskDestroyContext destroys only what the library created (pipelines, memory, pools), never
 *    the app's device, queue or instance; destroy the context before the device.
 *    Since the library cannot read which features the app enabled, the app states it in
 *    `enabledCapabilities`; pskGetVulkanDeviceRequirements lists the extensions and features each
 *    capability needs, for the app to add to its VkDeviceCreateInfo.
 *
 * 2. Queries: pskGetVulkanDeviceRequirements (before the app creates its device) and
 *    pskIsAttentionSupported (polysketch.h; before anything is created or recorded).
 *
 * 3. Recording into the app's command buffer: pskCmdAttentionForward records the same kernels
 *    as pskAttentionForwardHost, reading and writing the app's buffers, and submits nothing;
 *    pskCmdDecodeStep does the same for one incremental-decoding step (pskDecodeStepHost).
 */
#ifndef POLYSKETCH_POLYSKETCH_VULKAN_H
#define POLYSKETCH_POLYSKETCH_VULKAN_H

#include <vulkan/vulkan.h>

#include "polysketch.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Optional device capabilities the kernels use when the device has them enabled. */
typedef enum PskDeviceCapabilityFlagBits {
    /** shaderFloat16 (VkPhysicalDeviceShaderFloat16Int8Features; VK_KHR_shader_float16_int8 before 1.2). */
    PSK_DEVICE_CAPABILITY_FLOAT16_ARITHMETIC_BIT = 0x1,
    /** storageBuffer16BitAccess (VkPhysicalDevice16BitStorageFeatures, core 1.1): needed by FLOAT16 and
     *  BFLOAT16 attention objects (PSK_ERROR_UNSUPPORTED without it). */
    PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT = 0x2,
    /** subgroupSizeControl + computeFullSubgroups (VK_EXT_subgroup_size_control before 1.3). */
    PSK_DEVICE_CAPABILITY_SUBGROUP_SIZE_CONTROL_BIT = 0x4,
    /** VK_KHR_push_descriptor. Without it pskCmdAttentionForward allocates descriptor sets (see there). */
    PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT = 0x8,
    /** cooperativeMatrix of VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix, with what the
     *  cooperative kernels are compiled under: vulkanMemoryModel (core 1.2; VK_KHR_vulkan_memory_model
     *  before) and, where the device has it, VK_KHR_shader_bfloat16 for bfloat16 operands. */
    PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT = 0x10,
    /** shaderInt64 (VkPhysicalDeviceFeatures): the kernels for CPU drivers (lavapipe) load 8 floats
     *  at a time as 64-bit vectors; without it they use the generic kernels, several times slower there. */
    PSK_DEVICE_CAPABILITY_INT64_BIT = 0x20,
    PSK_DEVICE_CAPABILITY_ALL = 0x3F
} PskDeviceCapabilityFlagBits;
typedef uint32_t PskDeviceCapabilityFlags;

/** What the app must enable on its VkDevice for a set of capabilities (all strings are static). */
typedef struct PskVulkanDeviceRequirements {
    /** The requested capabilities that this physical device supports; the rest are left out below. */
    PskDeviceCapabilityFlags supportedCapabilities;
    /** Device extensions to add to VkDeviceCreateInfo::ppEnabledExtensionNames. */
    uint32_t extensionCount;
    const char* extensionNames[8];
    /** Feature fields to set to VK_TRUE in the VkDeviceCreateInfo::pNext chain (VK_FALSE: not needed). */
    VkBool32 storageBuffer16BitAccess; /**< VkPhysicalDevice16BitStorageFeatures */
    VkBool32 shaderFloat16;            /**< VkPhysicalDeviceShaderFloat16Int8Features */
    VkBool32 subgroupSizeControl;      /**< VkPhysicalDeviceSubgroupSizeControlFeatures */
    VkBool32 computeFullSubgroups;     /**< VkPhysicalDeviceSubgroupSizeControlFeatures */
    VkBool32 cooperativeMatrixKHR;     /**< VkPhysicalDeviceCooperativeMatrixFeaturesKHR */
    VkBool32 cooperativeMatrixNV;      /**< VkPhysicalDeviceCooperativeMatrixFeaturesNV */
    /** A queue family with VK_QUEUE_COMPUTE_BIT (a compute-only one when present), or ~0u. */
    uint32_t computeQueueFamily;
    VkBool32 shaderInt64;              /**< VkPhysicalDeviceFeatures (VkDeviceCreateInfo::pEnabledFeatures or VkPhysicalDeviceFeatures2) */
    /** With PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT: VkPhysicalDeviceVulkanMemoryModelFeatures
     *  (or VkPhysicalDeviceVulkan12Features), which the cooperative-matrix kernels are compiled under.
     *  An app that names that capability in PskExternalVulkan::enabledCapabilities enables these too. */
    VkBool32 vulkanMemoryModel;
    VkBool32 vulkanMemoryModelDeviceScope;
    /** With PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT, where the device has VK_KHR_shader_bfloat16
     *  (then in extensionNames): VkPhysicalDeviceShaderBfloat16FeaturesKHR, for bfloat16 operands. */
    VkBool32 shaderBFloat16Type;
    VkBool32 shaderBFloat16CooperativeMatrix;
} PskVulkanDeviceRequirements;

/**
 * Fills `pRequirements` for the capabilities in `requested` (PSK_DEVICE_CAPABILITY_ALL for
 * everything the library can use) on `physicalDevice` of the app's `instance`, created with API
 * version `instanceApiVersion` (at least 1.1). Calls only instance-level Vulkan functions
 * obtained from `getInstanceProcAddr`; creates nothing.
 */
PSK_API PskResult pskGetVulkanDeviceRequirements(PFN_vkGetInstanceProcAddr getInstanceProcAddr, VkInstance instance,
                                                 uint32_t instanceApiVersion, VkPhysicalDevice physicalDevice,
                                                 PskDeviceCapabilityFlags requested,
                                                 PskVulkanDeviceRequirements* pRequirements);

/**
 * The app's Vulkan objects for pskCreateContext (PskContextCreateInfo::externalVulkan). They must
 * outlive the context. With it, PskContextCreateInfo::device must be NULL, and validation flags
 * are rejected (enable the validation layer on your own instance; its messages go to your
 * messenger, not to the context's callback).
 *
 * Queue: the library submits to `queue` (pskAttentionForwardHost, pskCreateAttention uploads)
 * under the context's mutex, and waits for its own fences only. Vulkan requires submissions to a
 * queue to be externally synchronized: the app must not call vkQueueSubmit (or vkQueueWaitIdle,
 * vkQueuePresentKHR...) on this queue while a polysketch call taking this context or one of its
 * attention objects runs (as with VMA's use of the app's device). pskCmdAttentionForward does
 * not touch the queue.
 */
typedef struct PskExternalVulkan {
    PFN_vkGetInstanceProcAddr getInstanceProcAddr; /**< required */
    VkInstance instance;                           /**< required */
    /** The API version the instance was created with (VkApplicationInfo::apiVersion), >= 1.1. 0 means 1.1. */
    uint32_t instanceApiVersion;
    VkPhysicalDevice physicalDevice; /**< required */
    VkDevice device;                 /**< required, created with at least one queue of queueFamilyIndex */
    uint32_t queueFamilyIndex;       /**< must support VK_QUEUE_COMPUTE_BIT */
    VkQueue queue;                   /**< required: a queue of queueFamilyIndex */
    /**
     * Which capabilities (and so which extensions and features, pskGetVulkanDeviceRequirements)
     * the app enabled on `device`. The library uses exactly these; naming one the device does not
     * support fails with PSK_ERROR_UNSUPPORTED.
     */
    PskDeviceCapabilityFlags enabledCapabilities;
    /** Optional: passed to every vkCreate / vkDestroy / vkAllocateMemory / vkFreeMemory call the library makes. */
    const VkAllocationCallbacks* allocationCallbacks;
} PskExternalVulkan;

/** A tensor in one of the app's buffers. */
typedef struct PskVulkanTensor {
    /** Created with VK_BUFFER_USAGE_STORAGE_BUFFER_BIT on the context's device. */
    VkBuffer buffer;
    /** Bytes; a multiple of VkPhysicalDeviceLimits::minStorageBufferOffsetAlignment. */
    VkDeviceSize offset;
    /** Bytes available from `offset` (checked against the shape and strides). Required. */
    VkDeviceSize size;
    /** Optional element strides (NULL: the attention's layout), as in PskForwardHostInfo. */
    const PskTensorStrides* strides;
} PskVulkanTensor;

/** One buffer range of a workspace given as several buffers (PskCmdForwardInfo::pWorkspaces). */
typedef struct PskWorkspaceRange {
    VkBuffer buffer;
    VkDeviceSize offset;
    VkDeviceSize size;
} PskWorkspaceRange;

typedef struct PskCmdForwardInfo {
    uint32_t batchSize; /**< B; 0 means 1 */
    uint32_t seqLen;    /**< n: required, >= 1 */
    /** In the attention's dataType and layout, shapes as in PskForwardHostInfo. out must not overlap the inputs. */
    PskVulkanTensor q, k, v, out;
    /**
     * Scratch of at least pskGetWorkspaceSize(attention, batchSize, seqLen) bytes (with `state`:
     * pskGetStateWorkspaceSize; custom strides do not change either), usage STORAGE_BUFFER |
     * TRANSFER_DST, offset aligned as the tensors', not overlapping them. Its contents need not be
     * preserved between calls (it may be reused, e.g. aliased with other transient memory, once
     * the recorded commands completed). May be VK_NULL_HANDLE when the workspace size is 0.
     * Where that size exceeds one allocation, give several buffers instead (workspaceCount below).
     */
    VkBuffer workspace;
    VkDeviceSize workspaceOffset;
    VkDeviceSize workspaceSize;
    /* The fields below were appended after workspaceSize (the struct grew by them). */
    /**
     * Optional state passing, as PskForwardHostInfo::state and stateFirstSequence (semantics and
     * errors there): the recorded forward continues those sequences of the decode state and
     * leaves their final state in it. The workspace must then hold pskGetStateWorkspaceSize bytes
     * (not pskGetWorkspaceSize; BUFFER_TOO_SMALL otherwise). As with pskCmdDecodeStep, the
     * positions advance when the call returns and what is recorded depends on them: the recorded
     * commands must execute exactly once, in the order of recording relative to the state's other
     * recorded commands (steps, forwards), on one queue; every recorded command of the state must
     * have completed before any host call on the state or its attention. The recorded commands
     * start with a memory barrier (COMPUTE_SHADER | TRANSFER to COMPUTE_SHADER | TRANSFER) that
     * orders them after the state's earlier recorded commands; they also read and write the
     * state's own buffers with dispatches and transfer commands (copies, fills), and fill and copy
     * into the workspace, so the app's earlier accesses of the workspace must also be made
     * available to VK_PIPELINE_STAGE_TRANSFER_BIT (TRANSFER_WRITE); q, k, v and out are accessed by
     * compute dispatches only, as without a state. NULL: no state.
     */
    PskDecodeState state;
    uint32_t stateFirstSequence;
    /* The field below was appended after stateFirstSequence (the struct grew by it). */
    /**
     * Optional variable-length packed batch: batchSize + 1 token offsets, semantics, shapes,
     * alignment rule and errors as PskForwardHostInfo::cuSeqlens. Read at record time (host
     * memory; the recorded commands do not refer to it). Every sequence's dispatches are recorded
     * into commandBuffer, sequence after sequence, each on its own offset ranges of q, k, v and
     * out, all sharing the workspace at workspaceOffset: pskGetWorkspaceSize(attention, 1,
     * seqLen) bytes always suffice (the largest sequence's need is checked). NULL: none.
     */
    const uint32_t* cuSeqlens;
    /* The fields below were appended after cuSeqlens (the struct grew by them). */
    /**
     * Optional: the workspace as several buffers, for a call whose workspace exceeds one
     * allocation (maxMemoryAllocationSize). 0: the single buffer workspace / workspaceOffset /
     * workspaceSize above (pWorkspaces is then ignored). Otherwise workspace must be
     * VK_NULL_HANDLE and pWorkspaces points to workspaceCount ranges, each with usage and
     * alignment as `workspace` (usage STORAGE_BUFFER | TRANSFER_DST, offset a multiple of
     * minStorageBufferOffsetAlignment), not overlapping each other or the tensors. The call's
     * workspace regions fill them in order (pskGetWorkspaceLayout: the sizes it returns, for any
     * maxBufferSize, given in that order, always suffice; larger buffers are fine, trailing
     * unused ones too). Read at record time.
     * Errors (nothing recorded): PSK_ERROR_INVALID_ARGUMENT when pWorkspaces is NULL, workspace is
     * also set, or a range's buffer is VK_NULL_HANDLE or its offset misaligned (the message names
     * pWorkspaces[i]); PSK_ERROR_BUFFER_TOO_SMALL naming the range that cannot hold its next region,
     * or the last one when the regions need more buffers.
     */
    uint32_t workspaceCount;
    const PskWorkspaceRange* pWorkspaces;
} PskCmdForwardInfo;

/**
 * Records out = attention(q, k, v) into `commandBuffer` (a primary or secondary command buffer in
 * the recording state, of the context's device, from a pool of a queue family with compute).
 * Nothing is submitted, waited for, or read back: the app submits the command buffer when it
 * wants, as often as it wants while the buffers stay valid.
 *
 * Synchronization contract:
 * - Before: the app's writes of q, k and v (and earlier reads or writes of out and the workspace)
 *   must be made available and visible to VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT with
 *   VK_ACCESS_SHADER_READ_BIT (q, k, v) and VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT
 *   (out, workspace), e.g. one vkCmdPipelineBarrier(srcStage = the stage that wrote them,
 *   dstStage = COMPUTE_SHADER). The library records no barrier before its first dispatch.
 * - The recorded commands: compute dispatches (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT) that read
 *   q, k and v (SHADER_READ), write out (SHADER_WRITE) and read and write the workspace; possibly
 *   vkCmdFillBuffer on the workspace (TRANSFER_WRITE); memory barriers between its own dispatches
 *   (COMPUTE_SHADER | TRANSFER to COMPUTE_SHADER | TRANSFER), which also order earlier commands.
 * - After: the library adds no barrier after its last dispatch. Before reading out (or reusing the
 *   workspace) the app records a barrier from COMPUTE_SHADER / SHADER_WRITE to its consumer.
 * - State: the call replaces the bound compute pipeline, the compute descriptor set 0 and the
 *   push constants; rebind your own compute state afterwards. Graphics state is untouched.
 *
 * Descriptors: with PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT enabled (and on contexts the library
 * created itself when the device has the extension) descriptors are pushed into the command
 * buffer and nothing is allocated. Otherwise each call allocates one descriptor set per dispatch
 * (at most 8) from pools the attention object owns. They stay allocated, and valid, until
 * pskResetCommandDescriptors(attention) or pskDestroyAttention: call it once every command buffer
 * recorded with this attention has completed or been reset (e.g. once per frame after the
 * frame's fence), or memory grows with every call.
 *
 * Checks as pskAttentionForwardHost (handles non-NULL, shapes, strides, sizes, workspace size,
 * offset alignment) except NaN and infinity, which would need the device data. Errors:
 * INVALID_ARGUMENT (NULL handle or command buffer, misaligned offset), INVALID_SHAPE,
 * BUFFER_TOO_SMALL (a tensor's or the workspace's size), TOO_LARGE. On error nothing is recorded.
 * The attention is externally synchronized as for pskAttentionForwardHost; the command buffer
 * (and its pool) as Vulkan requires.
 */
PSK_API PskResult pskCmdAttentionForward(PskAttention attention, VkCommandBuffer commandBuffer,
                                         const PskCmdForwardInfo* info);

/**
 * Frees (for reuse) the descriptor sets pskCmdAttentionForward allocated on a device without push
 * descriptors. Every command buffer recorded with this attention must have completed execution
 * (or have been reset or freed). A no-op with push descriptors.
 */
PSK_API PskResult pskResetCommandDescriptors(PskAttention attention);

/* ---------------------------------------------------------------------------------------------
 * Incremental decoding: recording a step into the app's command buffer (docs/DECODING.md)
 * ------------------------------------------------------------------------------------------- */

/** One token of every sequence of a decode state, in the app's buffers. */
typedef struct PskCmdDecodeStepInfo {
    /**
     * In the attention's storage type (float32, or float16 / bfloat16 elements: the step converts
     * them to the float32 state on load and rounds out to nearest even), dense (strides must be
     * NULL): q [B, Hq, h], k [B, Hkv, h], v [B, Hkv, dv],
     * out [B, Hq, dv] (B the state's batchSize). Usage STORAGE_BUFFER; k and v also TRANSFER_SRC
     * (kept from earlier versions, whose step copied the new rows into the state; the step kernel
     * now reads them itself). Offsets aligned as in PskVulkanTensor, sizes at least the shape's
     * bytes. out must not overlap q, k or v.
     */
    PskVulkanTensor q, k, v, out;
} PskCmdDecodeStepInfo;

/**
 * Records one decode step (what pskDecodeStepHost computes: every sequence consumes one token and
 * out receives row `position` of each) into `commandBuffer`, reading and writing the app's
 * buffers; nothing is submitted or waited for. The outputs equal pskDecodeStepHost's bit for bit.
 *
 * Positions advance when the call returns (pskGetDecodePosition then counts the recorded step),
 * and what is recorded depends on them, so every recorded step must execute exactly once, in the
 * order of recording, on one queue (several may be recorded into one command buffer or into
 * several submitted in that order). A state created with PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT
 * records steps that do not depend on the positions instead: the command buffer may be submitted
 * any number of times, one execution at a time on one queue, each execution one step, and the
 * positions do not advance at recording (the state reads them back from the device when a later
 * call needs them). Before any other call on the state (pskDecodeStepHost,
 * prefill, reset, serialize, restore, destroy) every recorded step must have completed: those
 * calls submit to the context's queue and wait for their own work only.
 *
 * Synchronization as pskCmdAttentionForward: the app makes its writes of q, k, v visible to
 * COMPUTE_SHADER / SHADER_READ and TRANSFER / TRANSFER_READ before, and adds a barrier from
 * COMPUTE_SHADER / SHADER_WRITE before reading out. The recorded commands start with a memory
 * barrier (COMPUTE_SHADER | TRANSFER to COMPUTE_SHADER | TRANSFER) that orders them after earlier
 * commands, then the step's dispatch (one for every sequence and head; a polysketch attention with
 * a learned sketch adds the feature map's two, a softmax cache larger than one storage binding
 * one per sequence and key/value head), with barriers between them. The bound compute pipeline,
 * descriptor set 0 and push constants are replaced.
 *
 * A whole token of a model in one submission: the steps of several states (one per layer, each
 * with its own attention object or sharing one) may be recorded into one command buffer, with the
 * app's own commands (projections, norms, MLP) between them and the app's barriers as above
 * around each step, and submitted once. Each state owns its step scratch and its descriptor pools,
 * so steps of different states never share memory; steps of one state recorded back to back are
 * ordered by the barrier each starts with. samples/tinylm records every layer of a token this
 * way (modelStep: one command buffer, one submit and one wait per token).
 *
 * Descriptors: as pskCmdAttentionForward; without push descriptors each call allocates descriptor
 * sets from pools the state owns, freed by pskResetDecodeCommandDescriptors or destruction.
 *
 * No NaN checks (the data is on the device). Errors, with nothing recorded and the positions
 * unchanged: INVALID_ARGUMENT (NULL state, command buffer, info or buffer; strides given; a
 * misaligned offset), BUFFER_TOO_SMALL (a tensor's size; softmax: a sequence's cache is full, not
 * checked for replayable steps: see PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT).
 */
PSK_API PskResult pskCmdDecodeStep(PskDecodeState state, VkCommandBuffer commandBuffer, const PskCmdDecodeStepInfo* info);

/**
 * Frees (for reuse) the descriptor sets pskCmdDecodeStep allocated on a device without push
 * descriptors; every command buffer recorded with this state must have completed (or been reset
 * or freed). A no-op with push descriptors.
 */
PSK_API PskResult pskResetDecodeCommandDescriptors(PskDecodeState state);

#ifdef __cplusplus
}
#endif

#endif /* POLYSKETCH_POLYSKETCH_VULKAN_H */
