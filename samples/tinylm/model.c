/*
 * model.c: the tinylm network on the app's own Vulkan device (see model.h and MODEL.md).
 *
 * The app owns everything Vulkan: instance, device, queue, buffers, its four compute pipelines
 * (the shaders folder's .comp files, SPIR-V embedded at build time), one command buffer and a fence. polysketch
 * adopts the device (PskExternalVulkan) and records only the attention into the app's command
 * buffers: pskCmdAttentionForward over a prompt (continuing each layer's decode state, so that it
 * leaves the prompt's state ready to decode: state passing), pskCmdDecodeStep per generated token.
 *
 * Buffers are bound whole; the shaders take element offsets as push constants, so a handful of
 * descriptor sets (cached by their four buffers) serve every dispatch. The qkv rows are
 * [q | pad | k | pad | v | pad]: each segment starts at a byte offset aligned to
 * minStorageBufferOffsetAlignment, so the attention takes q, k and v straight from the projection's
 * output with PskVulkanTensor offsets and strides (BNHD: head j of token i at column j*h).
 */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tinylm_spirv.h" /* generated: tinylm_spv_embed, _layernorm, _matmul, _rope */

#define MAX_DESCRIPTOR_SETS 256

enum { PIPE_EMBED, PIPE_LAYERNORM, PIPE_MATMUL, PIPE_ROPE, PIPE_COUNT };
#define PROFILE_ATTENTION PIPE_COUNT /* the library's recorded calls */
static const char* const kProfileNames[PIPE_COUNT + 1] = {"embedding", "layernorm", "matmul", "rope", "attention (polysketch library)"};

/* matmul.comp flags */
#define MM_TRANSPOSE_B 1u
#define MM_GELU 2u
#define MM_ACCUMULATE 4u

typedef struct Buf {
    VkBuffer buffer;
    VkDeviceMemory memory;
    VkDeviceSize size;
    void* mapped; /* host-visible buffers only */
} Buf;

typedef struct CachedSet {
    VkBuffer buffers[4];
    VkDescriptorSet set;
} CachedSet;

struct Gpu {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    PFN_vkDestroyDebugUtilsMessengerEXT destroyMessenger;
    VkPhysicalDevice pd;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    char driverInfo[512];
    VkDevice device;
    uint32_t family;
    VkQueue queue;
    PskContext psk;
    char lastError[2048]; /* the library's last error message (its callback) */
    uint32_t validationMessages;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkDescriptorSetLayout setLayout;
    VkPipelineLayout pipelineLayout;
    VkPipeline pipes[PIPE_COUNT];
    VkDescriptorPool descriptorPool;
    CachedSet sets[MAX_DESCRIPTOR_SETS];
    uint32_t setCount;
    Buf dummy; /* bound to the bindings a shader does not use */
    /* TINYLM_PROFILE=1: a timestamp after every dispatch, GPU time summed per kind of work. */
    VkQueryPool queries;
    uint32_t queryCount, queryLabels[4096];
    double profileMs[PIPE_COUNT + 1];
    uint64_t profileCalls[PIPE_COUNT + 1];
};

typedef struct LayerOffsets { /* element offsets in the weight buffer */
    uint32_t ln1s, ln1b, wqkv, wo, ln2s, ln2b, w1, w2, qkScale, qkBias;
} LayerOffsets;

struct Model {
    Gpu* gpu;
    ModelConfig c;
    char* path;
    Buf weights;
    uint32_t tokEmb, lnfScale, lnfBias;
    LayerOffsets* layers;
    PskAttention* attention;
    PskDecodeState* states;
    uint32_t position;      /* tokens the current sequence has consumed */
    VkCommandBuffer stepCmd; /* a decode step recorded once, submitted for every token (modelStep) */
    int stepRecorded;        /* stepCmd holds a step of the current buffers, table and states */
    uint32_t ropePosWord;   /* while recording the replayed step: the tokens word with the position; else ~0u */
    uint32_t stateCapacity; /* softmax: the KV cache's tokens; 0: no states yet */
    /* Activations for up to rowsCap tokens. */
    uint32_t rowsCap, logitRowsCap, tablePositions;
    uint32_t seg, ld; /* qkv: segment stride and row stride, in floats */
    Buf x, a, qkv, o, hid, logits, workspace, tokens, readback, table;
    uint64_t workspaceBytes;
};

static int fail(StError* err, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return TINYLM_EXIT_FAILED;
}

static int failBad(StError* err, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return TINYLM_EXIT_BAD_INPUT;
}

#define VK_TRY(call)                                                                     \
    do {                                                                                 \
        VkResult r_ = (call);                                                            \
        if (r_ != VK_SUCCESS) return fail(err, "%s failed (VkResult %d)", #call, (int)r_); \
    } while (0)

/* A polysketch call: the library's message names the problem. */
static int pskFail(Gpu* gpu, StError* err, PskResult r, const char* call) {
    const int code = r == PSK_ERROR_BAD_FILE ? TINYLM_EXIT_BAD_INPUT : TINYLM_EXIT_FAILED;
    snprintf(err->text, sizeof err->text, "%s failed: %s: %s", call, pskResultToString(r),
             gpu->lastError[0] ? gpu->lastError : "(no message)");
    return code;
}

#define PSK_TRY(gpu, call)                                          \
    do {                                                            \
        PskResult r_;                                               \
        (gpu)->lastError[0] = '\0';                                 \
        r_ = (call);                                                \
        if (r_ != PSK_SUCCESS) return pskFail((gpu), err, r_, #call); \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Device
 * ------------------------------------------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL onValidation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    Gpu* gpu = (Gpu*)user;
    (void)severity;
    (void)types;
    ++gpu->validationMessages;
    fprintf(stderr, "tinylm: validation: %s\n", data->pMessage);
    return VK_FALSE;
}

static void onMessage(PskMessageSeverity severity, PskResult result, const char* message, void* userData) {
    Gpu* gpu = (Gpu*)userData;
    (void)result;
    if (severity == PSK_MESSAGE_SEVERITY_ERROR) snprintf(gpu->lastError, sizeof gpu->lastError, "%s", message);
}

static int layerHasExtension(const char* layer, const char* extension) {
    uint32_t count = 0, i;
    VkExtensionProperties* props;
    int found = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &count, NULL) != VK_SUCCESS || !count) return 0;
    props = (VkExtensionProperties*)calloc(count, sizeof *props);
    if (!props) return 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &count, props) == VK_SUCCESS)
        for (i = 0; i < count; ++i)
            if (strcmp(props[i].extensionName, extension) == 0) found = 1;
    free(props);
    return found;
}

static int layerPresent(const char* layer) {
    uint32_t count = 0, i;
    VkLayerProperties* props;
    int found = 0;
    if (vkEnumerateInstanceLayerProperties(&count, NULL) != VK_SUCCESS || !count) return 0;
    props = (VkLayerProperties*)calloc(count, sizeof *props);
    if (!props) return 0;
    if (vkEnumerateInstanceLayerProperties(&count, props) == VK_SUCCESS)
        for (i = 0; i < count; ++i)
            if (strcmp(props[i].layerName, layer) == 0) found = 1;
    free(props);
    return found;
}

/* A primary command buffer from the app's pool. */
static int allocCommandBuffer(Gpu* gpu, VkCommandBuffer* out, StError* err) {
    VkCommandBufferAllocateInfo cbi;
    memset(&cbi, 0, sizeof cbi);
    cbi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    cbi.commandPool = gpu->pool;
    cbi.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cbi.commandBufferCount = 1;
    VK_TRY(vkAllocateCommandBuffers(gpu->device, &cbi, out));
    return 0;
}

static int createBuf(Gpu* gpu, VkDeviceSize size, VkBufferUsageFlags usage, int hostVisible, Buf* out, StError* err) {
    VkBufferCreateInfo bi;
    VkMemoryRequirements req;
    VkMemoryAllocateInfo ai;
    const VkMemoryPropertyFlags want = hostVisible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                                   : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    uint32_t type;
    memset(out, 0, sizeof *out);
    if (size == 0) size = 16;
    memset(&bi, 0, sizeof bi);
    bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bi.size = size;
    bi.usage = usage;
    VK_TRY(vkCreateBuffer(gpu->device, &bi, NULL, &out->buffer));
    vkGetBufferMemoryRequirements(gpu->device, out->buffer, &req);
    for (type = 0; type < gpu->mem.memoryTypeCount; ++type)
        if ((req.memoryTypeBits & (1u << type)) && (gpu->mem.memoryTypes[type].propertyFlags & want) == want) break;
    if (type == gpu->mem.memoryTypeCount) {
        if (hostVisible) return fail(err, "no host-visible, coherent memory type for a buffer of %llu bytes", (unsigned long long)size);
        for (type = 0; type < gpu->mem.memoryTypeCount && !(req.memoryTypeBits & (1u << type)); ++type) {
        }
    }
    memset(&ai, 0, sizeof ai);
    ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = type;
    VK_TRY(vkAllocateMemory(gpu->device, &ai, NULL, &out->memory));
    VK_TRY(vkBindBufferMemory(gpu->device, out->buffer, out->memory, 0));
    out->size = size;
    if (hostVisible) VK_TRY(vkMapMemory(gpu->device, out->memory, 0, VK_WHOLE_SIZE, 0, &out->mapped));
    return 0;
}

static void destroyBuf(Gpu* gpu, Buf* b) {
    if (b->buffer) vkDestroyBuffer(gpu->device, b->buffer, NULL);
    if (b->memory) vkFreeMemory(gpu->device, b->memory, NULL);
    memset(b, 0, sizeof *b);
}

static int createPipeline(Gpu* gpu, const uint32_t* code, size_t bytes, VkPipeline* out, StError* err) {
    VkShaderModuleCreateInfo si;
    VkShaderModule module;
    VkComputePipelineCreateInfo pi;
    VkResult r;
    memset(&si, 0, sizeof si);
    si.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    si.codeSize = bytes;
    si.pCode = code;
    VK_TRY(vkCreateShaderModule(gpu->device, &si, NULL, &module));
    memset(&pi, 0, sizeof pi);
    pi.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    pi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    pi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    pi.stage.module = module;
    pi.stage.pName = "main";
    pi.layout = gpu->pipelineLayout;
    r = vkCreateComputePipelines(gpu->device, VK_NULL_HANDLE, 1, &pi, NULL, out);
    vkDestroyShaderModule(gpu->device, module, NULL);
    if (r != VK_SUCCESS) return fail(err, "vkCreateComputePipelines failed (VkResult %d)", (int)r);
    return 0;
}

static uint32_t deviceRank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
        default: return 0;
    }
}

int gpuCreate(const GpuOptions* options, Gpu** out, StError* err) {
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* instanceExtensions[2];
    uint32_t instanceExtensionCount = 0;
    VkApplicationInfo app;
    VkInstanceCreateInfo ii;
    VkValidationFeaturesEXT features;
    const VkValidationFeatureEnableEXT syncValidation = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkPhysicalDevice devices[16];
    uint32_t deviceCount = 16, i, chosen = ~0u;
    PskVulkanDeviceRequirements req;
    VkPhysicalDevice16BitStorageFeatures storage16;
    VkPhysicalDeviceShaderFloat16Int8Features float16;
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT sizeControl;
    VkPhysicalDeviceFeatures core;
    VkDeviceQueueCreateInfo qi;
    VkDeviceCreateInfo di;
    float priority = 1.0f;
    PskExternalVulkan external;
    PskContextCreateInfo contextInfo;
    VkCommandPoolCreateInfo poolInfo;
    VkFenceCreateInfo fi;
    VkDescriptorSetLayoutBinding bindings[4];
    VkDescriptorSetLayoutCreateInfo sli;
    VkPushConstantRange push;
    VkPipelineLayoutCreateInfo pli;
    VkDescriptorPoolSize poolSize;
    VkDescriptorPoolCreateInfo dpi;
    void** chainTail;
    int rc;
    Gpu* gpu = (Gpu*)calloc(1, sizeof(Gpu));
    if (!gpu) return fail(err, "out of memory");
    *out = gpu;

    /* 1. The app's instance, with the validation layer (and synchronization validation) when asked. */
    memset(&app, 0, sizeof app);
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "tinylm";
    app.apiVersion = VK_API_VERSION_1_1;
    memset(&ii, 0, sizeof ii);
    ii.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ii.pApplicationInfo = &app;
    if (options->validate) {
        if (!layerPresent(layer)) return fail(err, "--validate: the layer %s is not installed", layer);
        ii.enabledLayerCount = 1;
        ii.ppEnabledLayerNames = &layer;
        instanceExtensions[instanceExtensionCount++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        {
            const char* sync = getenv("PSK_VALIDATION_SYNC"); /* as the library's tests: 0 turns it off */
            if (!(sync && strcmp(sync, "0") == 0) && layerHasExtension(layer, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
                instanceExtensions[instanceExtensionCount++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
                memset(&features, 0, sizeof features);
                features.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
                features.enabledValidationFeatureCount = 1;
                features.pEnabledValidationFeatures = &syncValidation;
                ii.pNext = &features;
            }
        }
        ii.enabledExtensionCount = instanceExtensionCount;
        ii.ppEnabledExtensionNames = instanceExtensions;
    }
    VK_TRY(vkCreateInstance(&ii, NULL, &gpu->instance));
    if (options->validate) {
        VkDebugUtilsMessengerCreateInfoEXT m;
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(gpu->instance, "vkCreateDebugUtilsMessengerEXT");
        gpu->destroyMessenger =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(gpu->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (!create || !gpu->destroyMessenger) return fail(err, "--validate: no VK_EXT_debug_utils");
        memset(&m, 0, sizeof m);
        m.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
        m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
        m.pfnUserCallback = onValidation;
        m.pUserData = gpu;
        VK_TRY(create(gpu->instance, &m, NULL, &gpu->messenger));
    }

    /* 2. The device: --device N, else the best type (discrete, integrated, virtual, CPU). */
    if (vkEnumeratePhysicalDevices(gpu->instance, &deviceCount, devices) < 0 || deviceCount == 0)
        return fail(err, "no Vulkan device");
    if (options->device) {
        char* end;
        const unsigned long index = strtoul(options->device, &end, 10);
        if (*options->device == '\0' || *end != '\0')
            return failBad(err, "--device %s: expected a device index (0 .. %u)", options->device, deviceCount - 1);
        if (index >= deviceCount)
            return failBad(err, "--device %lu: there are %u Vulkan devices (0 .. %u)", index, deviceCount, deviceCount - 1);
        chosen = (uint32_t)index;
    } else {
        uint32_t best = 0;
        for (i = 0; i < deviceCount; ++i) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(devices[i], &p);
            if (chosen == ~0u || deviceRank(p.deviceType) > best) {
                chosen = i;
                best = deviceRank(p.deviceType);
            }
        }
    }
    gpu->pd = devices[chosen];
    vkGetPhysicalDeviceProperties(gpu->pd, &gpu->props);
    vkGetPhysicalDeviceMemoryProperties(gpu->pd, &gpu->mem);

    /* What polysketch can use on this device; the app enables exactly that. Cooperative matrices
     * only matter for float16/bfloat16 attention (tinylm runs float32), and their feature structs
     * are newer than some distributions' Vulkan headers: not requested. */
    gpu->lastError[0] = '\0';
    rc = pskGetVulkanDeviceRequirements(vkGetInstanceProcAddr, gpu->instance, app.apiVersion, gpu->pd,
                                        PSK_DEVICE_CAPABILITY_ALL & ~(PskDeviceCapabilityFlags)PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT,
                                        &req);
    if (rc != PSK_SUCCESS) return fail(err, "pskGetVulkanDeviceRequirements failed: %s", pskResultToString((PskResult)rc));
    if (req.computeQueueFamily == ~0u) return fail(err, "the device has no compute queue");
    gpu->family = req.computeQueueFamily;
    memset(&storage16, 0, sizeof storage16);
    storage16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    storage16.storageBuffer16BitAccess = req.storageBuffer16BitAccess;
    chainTail = &storage16.pNext;
    memset(&float16, 0, sizeof float16);
    float16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    float16.shaderFloat16 = req.shaderFloat16;
    if (req.shaderFloat16) {
        *chainTail = &float16;
        chainTail = &float16.pNext;
    }
    memset(&sizeControl, 0, sizeof sizeControl);
    sizeControl.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
    sizeControl.subgroupSizeControl = req.subgroupSizeControl;
    sizeControl.computeFullSubgroups = req.computeFullSubgroups;
    if (req.subgroupSizeControl || req.computeFullSubgroups) {
        *chainTail = &sizeControl;
        chainTail = &sizeControl.pNext;
    }
    memset(&core, 0, sizeof core);
    core.shaderInt64 = req.shaderInt64;
    memset(&qi, 0, sizeof qi);
    qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qi.queueFamilyIndex = gpu->family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    memset(&di, 0, sizeof di);
    di.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    di.pNext = &storage16;
    di.pEnabledFeatures = &core;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    di.enabledExtensionCount = req.extensionCount;
    di.ppEnabledExtensionNames = req.extensionNames;
    VK_TRY(vkCreateDevice(gpu->pd, &di, NULL, &gpu->device));
    vkGetDeviceQueue(gpu->device, gpu->family, 0, &gpu->queue);

    /* 3. polysketch on the app's objects. */
    memset(&external, 0, sizeof external);
    external.getInstanceProcAddr = vkGetInstanceProcAddr;
    external.instance = gpu->instance;
    external.instanceApiVersion = app.apiVersion;
    external.physicalDevice = gpu->pd;
    external.device = gpu->device;
    external.queueFamilyIndex = gpu->family;
    external.queue = gpu->queue;
    external.enabledCapabilities = req.supportedCapabilities;
    memset(&contextInfo, 0, sizeof contextInfo);
    contextInfo.externalVulkan = &external;
    contextInfo.messageCallback = onMessage;
    contextInfo.messageUserData = gpu;
    PSK_TRY(gpu, pskCreateContext(&contextInfo, &gpu->psk));
    {
        PskDeviceInfo info;
        if (pskGetDeviceInfo(gpu->psk, &info) == PSK_SUCCESS)
            snprintf(gpu->driverInfo, sizeof gpu->driverInfo, "%s %s", info.driverName, info.driverInfo);
    }

    /* 4. The app's own compute objects. */
    memset(&poolInfo, 0, sizeof poolInfo);
    poolInfo.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    poolInfo.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    poolInfo.queueFamilyIndex = gpu->family;
    VK_TRY(vkCreateCommandPool(gpu->device, &poolInfo, NULL, &gpu->pool));
    if ((rc = allocCommandBuffer(gpu, &gpu->cmd, err))) return rc;
    memset(&fi, 0, sizeof fi);
    fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    VK_TRY(vkCreateFence(gpu->device, &fi, NULL, &gpu->fence));
    memset(bindings, 0, sizeof bindings);
    for (i = 0; i < 4; ++i) {
        bindings[i].binding = i;
        bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        bindings[i].descriptorCount = 1;
        bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    memset(&sli, 0, sizeof sli);
    sli.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    sli.bindingCount = 4;
    sli.pBindings = bindings;
    VK_TRY(vkCreateDescriptorSetLayout(gpu->device, &sli, NULL, &gpu->setLayout));
    push.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    push.offset = 0;
    push.size = 64;
    memset(&pli, 0, sizeof pli);
    pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &gpu->setLayout;
    pli.pushConstantRangeCount = 1;
    pli.pPushConstantRanges = &push;
    VK_TRY(vkCreatePipelineLayout(gpu->device, &pli, NULL, &gpu->pipelineLayout));
    poolSize.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    poolSize.descriptorCount = 4 * MAX_DESCRIPTOR_SETS;
    memset(&dpi, 0, sizeof dpi);
    dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    dpi.maxSets = MAX_DESCRIPTOR_SETS;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &poolSize;
    VK_TRY(vkCreateDescriptorPool(gpu->device, &dpi, NULL, &gpu->descriptorPool));
    if ((rc = createPipeline(gpu, tinylm_spv_embed, sizeof tinylm_spv_embed, &gpu->pipes[PIPE_EMBED], err)) ||
        (rc = createPipeline(gpu, tinylm_spv_layernorm, sizeof tinylm_spv_layernorm, &gpu->pipes[PIPE_LAYERNORM], err)) ||
        (rc = createPipeline(gpu, tinylm_spv_matmul, sizeof tinylm_spv_matmul, &gpu->pipes[PIPE_MATMUL], err)) ||
        (rc = createPipeline(gpu, tinylm_spv_rope, sizeof tinylm_spv_rope, &gpu->pipes[PIPE_ROPE], err)))
        return rc;
    {
        const char* profile = getenv("TINYLM_PROFILE");
        if (profile && *profile && strcmp(profile, "0") != 0) {
            VkQueryPoolCreateInfo qpi;
            memset(&qpi, 0, sizeof qpi);
            qpi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
            qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
            qpi.queryCount = 4096;
            VK_TRY(vkCreateQueryPool(gpu->device, &qpi, NULL, &gpu->queries));
        }
    }
    return createBuf(gpu, 16, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, 0, &gpu->dummy, err);
}

/* Prints the GPU time per kind of work (TINYLM_PROFILE=1). */
void gpuPrintProfile(const Gpu* gpu) {
    int i;
    double total = 0;
    if (!gpu->queries) return;
    for (i = 0; i <= PIPE_COUNT; ++i) total += gpu->profileMs[i];
    printf("GPU time by kind (TINYLM_PROFILE): total %.1f ms\n", total);
    for (i = 0; i <= PIPE_COUNT; ++i)
        if (gpu->profileCalls[i])
            printf("  %-32s %10.2f ms %5.1f%% %8llu dispatches\n", kProfileNames[i], gpu->profileMs[i],
                   total > 0 ? 100 * gpu->profileMs[i] / total : 0.0, (unsigned long long)gpu->profileCalls[i]);
}

static void profileMark(Gpu* gpu, uint32_t label) {
    if (!gpu->queries || gpu->queryCount >= 4096) return;
    vkCmdWriteTimestamp(gpu->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, gpu->queries, gpu->queryCount);
    gpu->queryLabels[gpu->queryCount++] = label;
}

void gpuDestroy(Gpu* gpu) {
    uint32_t i;
    if (!gpu) return;
    if (gpu->device) {
        vkDeviceWaitIdle(gpu->device);
        pskDestroyContext(gpu->psk); /* first: it never destroys the app's device */
        destroyBuf(gpu, &gpu->dummy);
        for (i = 0; i < PIPE_COUNT; ++i)
            if (gpu->pipes[i]) vkDestroyPipeline(gpu->device, gpu->pipes[i], NULL);
        if (gpu->descriptorPool) vkDestroyDescriptorPool(gpu->device, gpu->descriptorPool, NULL);
        if (gpu->pipelineLayout) vkDestroyPipelineLayout(gpu->device, gpu->pipelineLayout, NULL);
        if (gpu->setLayout) vkDestroyDescriptorSetLayout(gpu->device, gpu->setLayout, NULL);
        if (gpu->fence) vkDestroyFence(gpu->device, gpu->fence, NULL);
        if (gpu->queries) vkDestroyQueryPool(gpu->device, gpu->queries, NULL);
        if (gpu->pool) vkDestroyCommandPool(gpu->device, gpu->pool, NULL);
        vkDestroyDevice(gpu->device, NULL);
    }
    if (gpu->messenger) gpu->destroyMessenger(gpu->instance, gpu->messenger, NULL);
    if (gpu->instance) vkDestroyInstance(gpu->instance, NULL);
    free(gpu);
}

uint32_t gpuValidationMessages(const Gpu* gpu) { return gpu->validationMessages; }
const char* gpuDeviceName(const Gpu* gpu) { return gpu->props.deviceName; }
const char* gpuDriverInfo(const Gpu* gpu) { return gpu->driverInfo; }

/* ---------------------------------------------------------------------------------------------
 * Recording helpers
 * ------------------------------------------------------------------------------------------- */

static int beginCommands(Gpu* gpu, StError* err) {
    VkCommandBufferBeginInfo begin;
    VK_TRY(vkResetCommandBuffer(gpu->cmd, 0));
    memset(&begin, 0, sizeof begin);
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VK_TRY(vkBeginCommandBuffer(gpu->cmd, &begin));
    if (gpu->queries) {
        vkCmdResetQueryPool(gpu->cmd, gpu->queries, 0, 4096);
        gpu->queryCount = 0;
        profileMark(gpu, 0);
    }
    return 0;
}

/* Ends, submits and waits; then frees what the library allocated for the recorded calls. */
/* Submits an ended command buffer and waits for it. No polysketch call runs meanwhile: the app
 * may submit to the queue it shares with the context. */
static int submitCommands(Gpu* gpu, VkCommandBuffer cmd, StError* err) {
    VkSubmitInfo submit;
    memset(&submit, 0, sizeof submit);
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd;
    VK_TRY(vkQueueSubmit(gpu->queue, 1, &submit, gpu->fence));
    VK_TRY(vkWaitForFences(gpu->device, 1, &gpu->fence, VK_TRUE, UINT64_MAX));
    VK_TRY(vkResetFences(gpu->device, 1, &gpu->fence));
    return 0;
}

static int submitAndWait(Model* m, StError* err) {
    Gpu* gpu = m->gpu;
    uint32_t l;
    int rc;
    VK_TRY(vkEndCommandBuffer(gpu->cmd));
    if ((rc = submitCommands(gpu, gpu->cmd, err))) return rc;
    if (gpu->queries && gpu->queryCount > 1) {
        uint64_t stamps[4096];
        uint32_t q;
        VK_TRY(vkGetQueryPoolResults(gpu->device, gpu->queries, 0, gpu->queryCount, sizeof stamps, stamps, sizeof(uint64_t),
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
        for (q = 1; q < gpu->queryCount; ++q) {
            gpu->profileMs[gpu->queryLabels[q]] += 1e-6 * gpu->props.limits.timestampPeriod * (double)(stamps[q] - stamps[q - 1]);
            ++gpu->profileCalls[gpu->queryLabels[q]];
        }
    }
    /* Without push descriptors the recorded calls allocated descriptor sets: free them (no-ops otherwise);
     * the replayed step's sets go with them, so it is recorded again. */
    m->stepRecorded = 0;
    if (m->attention)
        for (l = 0; l < m->c.nLayers; ++l) {
            if (m->attention[l]) pskResetCommandDescriptors(m->attention[l]);
            if (m->states && m->states[l]) pskResetDecodeCommandDescriptors(m->states[l]);
        }
    return 0;
}

/* Every write so far (compute or transfer) before every later read or write. */
static void barrier(VkCommandBuffer cmd) {
    VkMemoryBarrier b;
    memset(&b, 0, sizeof b);
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                      VK_ACCESS_TRANSFER_WRITE_BIT;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &b, 0, NULL, 0, NULL);
}

static void barrierToHost(VkCommandBuffer cmd) {
    VkMemoryBarrier b;
    memset(&b, 0, sizeof b);
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, NULL, 0, NULL);
}

/* The descriptor set binding these four buffers (whole), made once and cached. */
static int descriptorSet(Gpu* gpu, const VkBuffer buffers[4], VkDescriptorSet* out, StError* err) {
    uint32_t i, s;
    VkDescriptorSetAllocateInfo ai;
    VkDescriptorBufferInfo infos[4];
    VkWriteDescriptorSet writes[4];
    CachedSet* c;
    for (s = 0; s < gpu->setCount; ++s)
        if (memcmp(gpu->sets[s].buffers, buffers, sizeof(VkBuffer) * 4) == 0) {
            *out = gpu->sets[s].set;
            return 0;
        }
    if (gpu->setCount == MAX_DESCRIPTOR_SETS) return fail(err, "out of descriptor sets (internal limit %d)", MAX_DESCRIPTOR_SETS);
    c = &gpu->sets[gpu->setCount];
    memset(&ai, 0, sizeof ai);
    ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    ai.descriptorPool = gpu->descriptorPool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &gpu->setLayout;
    VK_TRY(vkAllocateDescriptorSets(gpu->device, &ai, &c->set));
    memset(writes, 0, sizeof writes);
    for (i = 0; i < 4; ++i) {
        infos[i].buffer = buffers[i];
        infos[i].offset = 0;
        infos[i].range = VK_WHOLE_SIZE;
        writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        writes[i].dstSet = c->set;
        writes[i].dstBinding = i;
        writes[i].descriptorCount = 1;
        writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo = &infos[i];
    }
    vkUpdateDescriptorSets(gpu->device, 4, writes, 0, NULL);
    memcpy(c->buffers, buffers, sizeof(VkBuffer) * 4);
    ++gpu->setCount;
    *out = c->set;
    return 0;
}

static void forgetDescriptorSets(Gpu* gpu) {
    vkResetDescriptorPool(gpu->device, gpu->descriptorPool, 0);
    gpu->setCount = 0;
}

/* Binds the pipeline, its buffers and push constants (the library's calls replace all three, so
 * every dispatch binds its own), dispatches, and adds the barrier for what comes next. */
static int dispatch(Gpu* gpu, int pipe, const Buf* b0, const Buf* b1, const Buf* b2, const void* push, uint32_t pushBytes,
                    uint32_t gx, uint32_t gy, StError* err) {
    VkBuffer buffers[4];
    VkDescriptorSet set;
    int rc;
    buffers[0] = b0 ? b0->buffer : gpu->dummy.buffer;
    buffers[1] = b1 ? b1->buffer : gpu->dummy.buffer;
    buffers[2] = b2 ? b2->buffer : gpu->dummy.buffer;
    buffers[3] = gpu->dummy.buffer;
    if ((rc = descriptorSet(gpu, buffers, &set, err))) return rc;
    vkCmdBindPipeline(gpu->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, gpu->pipes[pipe]);
    vkCmdBindDescriptorSets(gpu->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, gpu->pipelineLayout, 0, 1, &set, 0, NULL);
    vkCmdPushConstants(gpu->cmd, gpu->pipelineLayout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pushBytes, push);
    vkCmdDispatch(gpu->cmd, gx, gy, 1);
    profileMark(gpu, (uint32_t)pipe);
    barrier(gpu->cmd);
    return 0;
}

/* A 1-D grid of `groups` workgroups folded into x and y (at most 65535 per dimension). */
static void fold(uint32_t groups, uint32_t* gx, uint32_t* gy) {
    *gx = groups < 65535u ? (groups ? groups : 1u) : 65535u;
    *gy = (groups + *gx - 1) / *gx;
    if (!*gy) *gy = 1;
}

static int recEmbed(Model* m, uint32_t n, StError* err) {
    uint32_t push[5], gx, gy;
    push[0] = n;
    push[1] = m->c.dModel;
    push[2] = 0;
    push[3] = m->tokEmb;
    push[4] = 0;
    fold((n * m->c.dModel + 63) / 64, &gx, &gy);
    return dispatch(m->gpu, PIPE_EMBED, &m->tokens, &m->weights, &m->x, push, sizeof push, gx, gy, err);
}

static int recLayerNorm(Model* m, const Buf* in, uint32_t inOff, uint32_t inStride, const Buf* out, uint32_t outOff,
                        uint32_t outStride, uint32_t tokens, uint32_t dim, uint32_t heads, uint32_t headStride,
                        uint32_t scaleOff, uint32_t biasOff, StError* err) {
    uint32_t push[10], gx, gy;
    push[0] = tokens * heads;
    push[1] = dim;
    push[2] = heads;
    push[3] = headStride;
    push[4] = inOff;
    push[5] = inStride;
    push[6] = outOff;
    push[7] = outStride;
    push[8] = scaleOff;
    push[9] = biasOff;
    fold((tokens * heads + 63) / 64, &gx, &gy);
    return dispatch(m->gpu, PIPE_LAYERNORM, in, out, &m->weights, push, sizeof push, gx, gy, err);
}

/* C[M, N] (=, += or gelu) A[M, K] @ W, W in the weight buffer at wOff ([K, N], or [N, K] transposed). */
static int recMatmul(Model* m, const Buf* a, uint32_t aOff, uint32_t lda, uint32_t wOff, uint32_t ldw, const Buf* c,
                     uint32_t cOff, uint32_t ldc, uint32_t M, uint32_t N, uint32_t K, uint32_t flags, uint32_t segLen,
                     uint32_t segStride, StError* err) {
    uint32_t push[12];
    push[0] = M;
    push[1] = N;
    push[2] = K;
    push[3] = aOff;
    push[4] = lda;
    push[5] = wOff;
    push[6] = ldw;
    push[7] = cOff;
    push[8] = ldc;
    push[9] = flags;
    push[10] = segLen ? segLen : N;
    push[11] = segLen ? segStride : N;
    /* 16 x 4 invocations of 4 x 4 outputs: 64 columns and 16 rows per workgroup */
    return dispatch(m->gpu, PIPE_MATMUL, a, &m->weights, c, push, sizeof push, (N + 63) / 64, (M + 15) / 16, err);
}

static int recRope(Model* m, uint32_t n, uint32_t pos0, StError* err) {
    uint32_t push[9], gx, gy;
    const uint32_t half = m->c.headDim / 2;
    push[0] = n;
    push[1] = m->c.nHeads;
    push[2] = half;
    push[3] = pos0;
    push[4] = 0;
    push[5] = m->ld;
    push[6] = m->seg;
    push[7] = m->tablePositions * half;
    push[8] = m->ropePosWord;
    fold((n * m->c.nHeads * half + 63) / 64, &gx, &gy);
    return dispatch(m->gpu, PIPE_ROPE, &m->qkv, &m->table, &m->tokens, push, sizeof push, gx, gy, err);
}

/* LN1, the qkv projection, RoPE (and, polynomial, the app's q/k LayerNorm) for n tokens at pos0. */
static int recPreAttention(Model* m, uint32_t l, uint32_t n, uint32_t pos0, StError* err) {
    const ModelConfig* c = &m->c;
    const LayerOffsets* w = &m->layers[l];
    const uint32_t D = c->dModel;
    int rc;
    if ((rc = recLayerNorm(m, &m->x, 0, D, &m->a, 0, D, n, D, 1, 0, w->ln1s, w->ln1b, err)) ||
        (rc = recMatmul(m, &m->a, 0, D, w->wqkv, 3 * D, &m->qkv, 0, m->ld, n, 3 * D, D, 0, D, m->seg, err)) ||
        (rc = recRope(m, n, pos0, err)))
        return rc;
    if (c->attention == ATTENTION_POLYNOMIAL) { /* the library's POLYNOMIAL kind has no q/k LayerNorm */
        if ((rc = recLayerNorm(m, &m->qkv, 0, m->ld, &m->qkv, 0, m->ld, n, c->headDim, c->nHeads, c->headDim, w->qkScale,
                               w->qkBias, err)) ||
            (rc = recLayerNorm(m, &m->qkv, m->seg, m->ld, &m->qkv, m->seg, m->ld, n, c->headDim, c->nHeads, c->headDim,
                               w->qkScale, w->qkBias, err)))
            return rc;
    }
    return 0;
}

/* x += o @ wo; x += gelu(LN2(x) @ w1) @ w2. */
static int recPostAttention(Model* m, uint32_t l, uint32_t n, StError* err) {
    const LayerOffsets* w = &m->layers[l];
    const uint32_t D = m->c.dModel;
    int rc;
    if ((rc = recMatmul(m, &m->o, 0, D, w->wo, D, &m->x, 0, D, n, D, D, MM_ACCUMULATE, 0, 0, err)) ||
        (rc = recLayerNorm(m, &m->x, 0, D, &m->a, 0, D, n, D, 1, 0, w->ln2s, w->ln2b, err)) ||
        (rc = recMatmul(m, &m->a, 0, D, w->w1, 4 * D, &m->hid, 0, 4 * D, n, 4 * D, D, MM_GELU, 0, 0, err)) ||
        (rc = recMatmul(m, &m->hid, 0, 4 * D, w->w2, D, &m->x, 0, D, n, D, 4 * D, MM_ACCUMULATE, 0, 0, err)))
        return rc;
    return 0;
}

/* q, k, v as the attention reads them from the qkv rows: BNHD with the qkv row as token stride. */
static void qkvTensors(Model* m, uint32_t n, PskTensorStrides* strides, PskVulkanTensor* q, PskVulkanTensor* k,
                       PskVulkanTensor* v) {
    const VkDeviceSize rowBytes = (VkDeviceSize)m->ld * 4;
    strides->batch = (uint64_t)n * m->ld;
    strides->head = m->c.headDim;
    strides->token = m->ld;
    q->buffer = k->buffer = v->buffer = m->qkv.buffer;
    q->offset = 0;
    k->offset = (VkDeviceSize)m->seg * 4;
    v->offset = (VkDeviceSize)m->seg * 8;
    q->size = n * rowBytes;
    k->size = n * rowBytes - k->offset;
    v->size = n * rowBytes - v->offset;
    q->strides = k->strides = v->strides = strides;
}

/* The attention of layer l over n prompt tokens (pskCmdAttentionForward); withState: the forward
 * continues the layer's decode state and leaves the final state there. */
static int recForwardAttention(Model* m, uint32_t l, uint32_t n, int withState, StError* err) {
    PskCmdForwardInfo f;
    PskTensorStrides strides;
    memset(&f, 0, sizeof f);
    f.batchSize = 1;
    f.seqLen = n;
    qkvTensors(m, n, &strides, &f.q, &f.k, &f.v);
    f.out.buffer = m->o.buffer;
    f.out.offset = 0;
    f.out.size = (VkDeviceSize)n * m->c.dModel * 4;
    f.workspace = m->workspaceBytes ? m->workspace.buffer : VK_NULL_HANDLE;
    f.workspaceOffset = 0;
    f.workspaceSize = m->workspaceBytes;
    if (withState) { /* state passing: continue the layer's decode state, leave the final state there */
        f.state = m->states[l];
        f.stateFirstSequence = 0;
    }
    PSK_TRY(m->gpu, pskCmdAttentionForward(m->attention[l], m->gpu->cmd, &f));
    profileMark(m->gpu, PROFILE_ATTENTION);
    barrier(m->gpu->cmd);
    return 0;
}

/* One decode step of layer l: the token's q, k, v are row 0 of qkv (dense segments). */
static int recStepAttention(Model* m, uint32_t l, StError* err) {
    PskCmdDecodeStepInfo s;
    const VkDeviceSize bytes = (VkDeviceSize)m->c.dModel * 4;
    memset(&s, 0, sizeof s);
    s.q.buffer = s.k.buffer = s.v.buffer = m->qkv.buffer;
    s.q.offset = 0;
    s.k.offset = (VkDeviceSize)m->seg * 4;
    s.v.offset = (VkDeviceSize)m->seg * 8;
    s.q.size = s.k.size = s.v.size = bytes;
    s.out.buffer = m->o.buffer;
    s.out.offset = 0;
    s.out.size = bytes;
    PSK_TRY(m->gpu, pskCmdDecodeStep(m->states[l], m->gpu->cmd, &s));
    profileMark(m->gpu, PROFILE_ATTENTION);
    barrier(m->gpu->cmd);
    return 0;
}

/* LN_f(x[row0 .. row0 + rows)) @ tok_emb^T into logits, copied to the readback buffer. */
static int recLogits(Model* m, uint32_t row0, uint32_t rows, StError* err) {
    const uint32_t D = m->c.dModel, V = m->c.vocab;
    VkBufferCopy copy;
    int rc;
    if ((rc = recLayerNorm(m, &m->x, row0 * D, D, &m->a, 0, D, rows, D, 1, 0, m->lnfScale, m->lnfBias, err)) ||
        (rc = recMatmul(m, &m->a, 0, D, m->tokEmb, D, &m->logits, 0, V, rows, V, D, MM_TRANSPOSE_B, 0, 0, err)))
        return rc;
    copy.srcOffset = 0;
    copy.dstOffset = 0;
    copy.size = (VkDeviceSize)rows * V * 4;
    vkCmdCopyBuffer(m->gpu->cmd, m->logits.buffer, m->readback.buffer, 1, &copy);
    barrierToHost(m->gpu->cmd);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Buffers for a number of tokens
 * ------------------------------------------------------------------------------------------- */

static int upload(Model* m, Buf* dst, const void* data, VkDeviceSize bytes, StError* err) {
    Buf staging;
    VkBufferCopy copy;
    int rc;
    if ((rc = createBuf(m->gpu, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 1, &staging, err))) return rc;
    memcpy(staging.mapped, data, (size_t)bytes);
    if ((rc = beginCommands(m->gpu, err))) {
        destroyBuf(m->gpu, &staging);
        return rc;
    }
    copy.srcOffset = 0;
    copy.dstOffset = 0;
    copy.size = bytes;
    vkCmdCopyBuffer(m->gpu->cmd, staging.buffer, dst->buffer, 1, &copy);
    barrier(m->gpu->cmd);
    rc = submitAndWait(m, err);
    destroyBuf(m->gpu, &staging);
    return rc;
}

/* The RoPE table for positions 0 .. positions-1: cos then sin, [positions, h/2] each, computed in
 * float64 (theta_c = i * base^(-2c/h)) and rounded to float32 (MODEL.md). */
static int buildTable(Model* m, uint32_t positions, StError* err) {
    const uint32_t half = m->c.headDim / 2;
    const size_t count = (size_t)positions * half;
    float* host;
    double* inv;
    uint32_t i, c;
    int rc;
    if ((uint64_t)count * 8 > m->gpu->props.limits.maxStorageBufferRange)
        return fail(err, "%u positions: the RoPE table exceeds the device's maxStorageBufferRange", positions);
    host = (float*)malloc(count * 2 * sizeof(float));
    inv = (double*)malloc(half * sizeof(double));
    if (!host || !inv) {
        free(host);
        free(inv);
        return fail(err, "out of memory");
    }
    for (c = 0; c < half; ++c) inv[c] = pow(m->c.ropeBase, -2.0 * c / m->c.headDim);
    for (i = 0; i < positions; ++i)
        for (c = 0; c < half; ++c) {
            const double theta = (double)i * inv[c];
            host[(size_t)i * half + c] = (float)cos(theta);
            host[count + (size_t)i * half + c] = (float)sin(theta);
        }
    destroyBuf(m->gpu, &m->table);
    forgetDescriptorSets(m->gpu);
    rc = createBuf(m->gpu, count * 8, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0, &m->table, err);
    if (!rc) rc = upload(m, &m->table, host, count * 8, err);
    free(host);
    free(inv);
    if (!rc) m->tablePositions = positions;
    return rc;
}

/* Activation buffers for `rows` tokens in one call, `logitRows` rows of logits, RoPE positions. */
static int reserve(Model* m, uint32_t rows, uint32_t logitRows, uint32_t positions, StError* err) {
    Gpu* gpu = m->gpu;
    const uint32_t D = m->c.dModel, V = m->c.vocab;
    const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    const uint64_t range = gpu->props.limits.maxStorageBufferRange;
    int rc;
    /* The RoPE table grows by half at least, so a long generation does not rebuild it per token. */
    if (positions > m->tablePositions) {
        m->stepRecorded = 0; /* the recorded step binds the old table */
        if ((rc = buildTable(m, positions > m->tablePositions + m->tablePositions / 2 ? positions : m->tablePositions + m->tablePositions / 2,
                             err)))
            return rc;
    }
    if (rows > m->rowsCap) {
        uint32_t l;
        uint64_t ws = 0;
        if ((uint64_t)rows * 4 * D * 4 > range || (uint64_t)rows * m->ld * 4 > range)
            return fail(err, "%u tokens in one call: the activations exceed the device's maxStorageBufferRange (%llu bytes)",
                        rows, (unsigned long long)range);
        for (l = 0; l < m->c.nLayers; ++l) {
            uint64_t bytes = 0;
            PSK_TRY(gpu, pskGetWorkspaceSize(m->attention[l], 1, rows, &bytes));
            if (bytes > ws) ws = bytes;
            if (modelCanDecode(m)) { /* a forward continuing a decode state may need more */
                PSK_TRY(gpu, pskGetStateWorkspaceSize(m->attention[l], 1, rows, &bytes));
                if (bytes > ws) ws = bytes;
            }
        }
        destroyBuf(gpu, &m->x);
        destroyBuf(gpu, &m->a);
        destroyBuf(gpu, &m->qkv);
        destroyBuf(gpu, &m->o);
        destroyBuf(gpu, &m->hid);
        destroyBuf(gpu, &m->workspace);
        destroyBuf(gpu, &m->tokens);
        forgetDescriptorSets(gpu);
        m->stepRecorded = 0;
        m->rowsCap = 0;
        if ((rc = createBuf(gpu, (VkDeviceSize)rows * D * 4, storage, 0, &m->x, err)) ||
            (rc = createBuf(gpu, (VkDeviceSize)rows * D * 4, storage, 0, &m->a, err)) ||
            (rc = createBuf(gpu, (VkDeviceSize)rows * m->ld * 4, storage, 0, &m->qkv, err)) ||
            (rc = createBuf(gpu, (VkDeviceSize)rows * D * 4, storage, 0, &m->o, err)) ||
            (rc = createBuf(gpu, (VkDeviceSize)rows * 4 * D * 4, storage, 0, &m->hid, err)) ||
            (rc = createBuf(gpu, ws ? ws : 16, storage, 0, &m->workspace, err)) ||
            /* + 1 word: the position a replayed step's RoPE reads (modelStep) */
            (rc = createBuf(gpu, (VkDeviceSize)(rows + 1) * 4, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, 1, &m->tokens, err)))
            return rc;
        m->workspaceBytes = ws;
        m->rowsCap = rows;
    }
    if (logitRows > m->logitRowsCap || m->readback.size < (VkDeviceSize)m->rowsCap * m->ld * 4) {
        const uint32_t lr = logitRows > m->logitRowsCap ? logitRows : m->logitRowsCap;
        VkDeviceSize rb = (VkDeviceSize)lr * V * 4;
        if ((VkDeviceSize)m->rowsCap * m->ld * 4 > rb) rb = (VkDeviceSize)m->rowsCap * m->ld * 4;
        if ((uint64_t)lr * V * 4 > range)
            return fail(err, "%u rows of logits exceed the device's maxStorageBufferRange", lr);
        destroyBuf(gpu, &m->logits);
        destroyBuf(gpu, &m->readback);
        forgetDescriptorSets(gpu);
        m->stepRecorded = 0;
        m->logitRowsCap = 0;
        if ((rc = createBuf(gpu, (VkDeviceSize)lr * V * 4, storage, 0, &m->logits, err)) ||
            (rc = createBuf(gpu, rb, VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1, &m->readback, err)))
            return rc;
        m->logitRowsCap = lr;
    }
    return 0;
}

static int setTokens(Model* m, const uint32_t* tokens, uint32_t n, StError* err) {
    uint32_t i;
    for (i = 0; i < n; ++i)
        if (tokens[i] >= m->c.vocab) return failBad(err, "token %u at position %u is outside the vocabulary (%u)", tokens[i], i, m->c.vocab);
    memcpy(m->tokens.mapped, tokens, (size_t)n * 4);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Forward, prefill, step
 * ------------------------------------------------------------------------------------------- */

int modelForward(Model* m, const uint32_t* tokens, uint32_t n, uint32_t row0, uint32_t rows, float* logits, StError* err) {
    uint32_t l;
    int rc;
    if (n == 0 || rows == 0 || row0 + rows > n) return fail(err, "modelForward: bad rows");
    if ((rc = reserve(m, n, rows, n, err)) || (rc = setTokens(m, tokens, n, err)) || (rc = beginCommands(m->gpu, err)) ||
        (rc = recEmbed(m, n, err)))
        return rc;
    for (l = 0; l < m->c.nLayers; ++l)
        if ((rc = recPreAttention(m, l, n, 0, err)) || (rc = recForwardAttention(m, l, n, 0, err)) ||
            (rc = recPostAttention(m, l, n, err)))
            return rc;
    if ((rc = recLogits(m, row0, rows, err)) || (rc = submitAndWait(m, err))) return rc;
    memcpy(logits, m->readback.mapped, (size_t)rows * m->c.vocab * 4);
    return 0;
}

static int resetStates(Model* m, uint32_t capacity, StError* err) {
    uint32_t l;
    PskDecodeStateCreateInfo info;
    if (!modelCanDecode(m))
        return fail(err, "a polynomial model cannot decode step by step (the library's decode states are polysketch and softmax)");
    if (m->states && m->stateCapacity && (m->c.attention != ATTENTION_SOFTMAX || m->stateCapacity >= capacity)) {
        for (l = 0; l < m->c.nLayers; ++l) PSK_TRY(m->gpu, pskResetDecodeSequence(m->states[l], 0));
        m->position = 0;
        return 0;
    }
    for (l = 0; l < m->c.nLayers; ++l) {
        pskDestroyDecodeState(m->states[l]);
        m->states[l] = NULL;
    }
    memset(&info, 0, sizeof info);
    info.batchSize = 1;
    info.capacity = m->c.attention == ATTENTION_SOFTMAX ? capacity : 0;
    /* Steps recorded once and submitted for every token (modelStep): positions on the device. */
    info.flags = PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT;
    m->stepRecorded = 0;
    for (l = 0; l < m->c.nLayers; ++l) PSK_TRY(m->gpu, pskCreateDecodeState(m->attention[l], &info, &m->states[l]));
    m->stateCapacity = capacity ? capacity : 1;
    m->position = 0;
    return 0;
}

/* The token's commands (embedding, every layer's projections, RoPE, decode step and MLP, the
 * logits and their readback) recorded once into m->stepCmd and submitted for every token: the host
 * writes the token and its position into the mapped tokens buffer, nothing is recorded, no
 * descriptor is written (the decode states were created with replayable steps). Recorded again
 * when a buffer, the RoPE table or the states change. TINYLM_PROFILE records every token instead
 * (its timestamps are per recording), and so does TINYLM_RECORD_EACH_STEP=1 (the comparison). */
static int recordStep(Model* m, StError* err) {
    Gpu* gpu = m->gpu;
    VkCommandBuffer oneTime = gpu->cmd;
    VkCommandBufferBeginInfo begin;
    uint32_t l;
    int rc = 0;
    if (!m->stepCmd && (rc = allocCommandBuffer(gpu, &m->stepCmd, err))) return rc;
    /* The recorded decode steps of the states' earlier recording are gone with it. */
    for (l = 0; l < m->c.nLayers; ++l) PSK_TRY(gpu, pskResetDecodeCommandDescriptors(m->states[l]));
    VK_TRY(vkResetCommandBuffer(m->stepCmd, 0));
    memset(&begin, 0, sizeof begin);
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    VK_TRY(vkBeginCommandBuffer(m->stepCmd, &begin));
    gpu->cmd = m->stepCmd; /* the rec* helpers record into gpu->cmd */
    m->ropePosWord = m->rowsCap;
    rc = recEmbed(m, 1, err);
    for (l = 0; l < m->c.nLayers && !rc; ++l)
        if ((rc = recPreAttention(m, l, 1, 0, err)) || (rc = recStepAttention(m, l, err)) || (rc = recPostAttention(m, l, 1, err)))
            break;
    if (!rc) rc = recLogits(m, 0, 1, err);
    m->ropePosWord = ~0u;
    gpu->cmd = oneTime;
    if (rc) return rc;
    VK_TRY(vkEndCommandBuffer(m->stepCmd));
    m->stepRecorded = 1;
    return 0;
}

int modelStep(Model* m, uint32_t token, float* logits, StError* err) {
    Gpu* gpu = m->gpu;
    uint32_t l;
    int rc;
    if (!m->stateCapacity) return fail(err, "modelStep before modelPrefill");
    if (m->c.attention == ATTENTION_SOFTMAX && m->position >= m->stateCapacity)
        return fail(err, "the softmax KV cache is full (%u tokens)", m->stateCapacity);
    if ((rc = reserve(m, 1, 1, m->position + 1, err)) || (rc = setTokens(m, &token, 1, err))) return rc;
    if (!gpu->queries && !(getenv("TINYLM_RECORD_EACH_STEP") && strcmp(getenv("TINYLM_RECORD_EACH_STEP"), "1") == 0)) {
        ((uint32_t*)m->tokens.mapped)[m->rowsCap] = m->position;
        if ((!m->stepRecorded && (rc = recordStep(m, err))) || (rc = submitCommands(gpu, m->stepCmd, err))) return rc;
        memcpy(logits, m->readback.mapped, (size_t)m->c.vocab * 4);
        ++m->position;
        return 0;
    }
    if ((rc = beginCommands(gpu, err)) || (rc = recEmbed(m, 1, err))) return rc;
    for (l = 0; l < m->c.nLayers; ++l)
        if ((rc = recPreAttention(m, l, 1, m->position, err)) || (rc = recStepAttention(m, l, err)) ||
            (rc = recPostAttention(m, l, 1, err)))
            return rc;
    if ((rc = recLogits(m, 0, 1, err)) || (rc = submitAndWait(m, err))) return rc;
    memcpy(logits, m->readback.mapped, (size_t)m->c.vocab * 4);
    ++m->position;
    return 0;
}



int modelPrefill(Model* m, const uint32_t* tokens, uint32_t n, uint32_t capacity, int stepByStep, float* logits,
                 StError* err) {
    int rc;
    uint32_t l;
    if (n == 0) return fail(err, "an empty prompt");
    if (capacity < n) capacity = n;
    if ((rc = resetStates(m, capacity, err))) return rc;
    if (stepByStep) {
        uint32_t i;
        for (i = 0; i < n; ++i)
            if ((rc = modelStep(m, tokens[i], logits, err))) return rc;
        return 0;
    }
    /* One command buffer: per layer, the prompt's attention continues the (empty) decode state
     * and leaves the prompt's final state in it, ready for pskCmdDecodeStep. */
    if ((rc = reserve(m, n, 1, capacity, err)) || (rc = setTokens(m, tokens, n, err)) || (rc = beginCommands(m->gpu, err)) ||
        (rc = recEmbed(m, n, err)))
        return rc;
    for (l = 0; l < m->c.nLayers; ++l)
        if ((rc = recPreAttention(m, l, n, 0, err)) || (rc = recForwardAttention(m, l, n, 1, err)) ||
            (rc = recPostAttention(m, l, n, err)))
            return rc;
    if ((rc = recLogits(m, n - 1, 1, err)) || (rc = submitAndWait(m, err))) return rc;
    memcpy(logits, m->readback.mapped, (size_t)m->c.vocab * 4);
    m->position = n;
    return 0;
}

uint32_t modelPosition(const Model* m) { return m->position; }
const ModelConfig* modelConfig(const Model* m) { return &m->c; }
int modelCanDecode(const Model* m) { return m->c.attention != ATTENTION_POLYNOMIAL; }

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

static int metaString(const StFile* f, const char* key, const char** out, StError* err) {
    *out = stMeta(f, key);
    if (!*out) return failBad(err, "\"%s\": __metadata__ lacks \"%s\" (MODEL.md)", f->path, key);
    return 0;
}

static int metaUint(const StFile* f, const char* key, uint32_t min, uint32_t max, uint32_t* out, StError* err) {
    const char* s;
    const char* p;
    uint64_t v = 0;
    int rc;
    if ((rc = metaString(f, key, &s, err))) return rc;
    for (p = s; *p; ++p) {
        if (*p < '0' || *p > '9' || v > 0xFFFFFFFFull) break;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (!*s || *p || v < min || v > max)
        return failBad(err, "\"%s\": __metadata__ \"%s\" is \"%s\", expected an integer from %u to %u", f->path, key, s, min, max);
    *out = (uint32_t)v;
    return 0;
}

static int metaDouble(const StFile* f, const char* key, double* out, StError* err) {
    const char* s;
    char* end;
    int rc;
    if ((rc = metaString(f, key, &s, err))) return rc;
    *out = strtod(s, &end);
    if (!*s || *end || !(*out > 0) || *out > 1e30)
        return failBad(err, "\"%s\": __metadata__ \"%s\" is \"%s\", expected a positive decimal number", f->path, key, s);
    return 0;
}

int modelReadConfig(const StFile* f, ModelConfig* c, StError* err) {
    const char* s;
    double d;
    int rc;
    memset(c, 0, sizeof *c);
    if ((rc = metaString(f, "format", &s, err))) return rc;
    if (strcmp(s, "polysketch-tinylm") != 0)
        return failBad(err, "\"%s\": __metadata__ \"format\" is \"%s\", expected \"polysketch-tinylm\"", f->path, s);
    if ((rc = metaString(f, "format_version", &s, err))) return rc;
    if (strcmp(s, "1") != 0)
        return failBad(err, "\"%s\": __metadata__ \"format_version\" is \"%s\"; this app reads version 1", f->path, s);
    if ((rc = metaUint(f, "vocab_size", 1, 1u << 24, &c->vocab, err)) ||
        (rc = metaUint(f, "d_model", 16, 65536, &c->dModel, err)) || (rc = metaUint(f, "n_layers", 1, 1024, &c->nLayers, err)) ||
        (rc = metaUint(f, "n_heads", 1, 4096, &c->nHeads, err)) || (rc = metaDouble(f, "rope_base", &c->ropeBase, err)))
        return rc;
    if (c->dModel % c->nHeads)
        return failBad(err, "\"%s\": d_model %u is not a multiple of n_heads %u", f->path, c->dModel, c->nHeads);
    c->headDim = c->dModel / c->nHeads;
    if (c->headDim < 16 || c->headDim > 256 || c->headDim % 2)
        return failBad(err, "\"%s\": head dim d_model / n_heads = %u; the library needs an even head dim from 16 to 256", f->path,
                       c->headDim);
    if ((rc = metaString(f, "attention", &s, err))) return rc;
    if (strcmp(s, "softmax") == 0)
        c->attention = ATTENTION_SOFTMAX;
    else if (strcmp(s, "polynomial") == 0)
        c->attention = ATTENTION_POLYNOMIAL;
    else if (strcmp(s, "polysketch") == 0)
        c->attention = ATTENTION_POLYSKETCH;
    else
        return failBad(err, "\"%s\": __metadata__ \"attention\" is \"%s\", expected softmax, polynomial or polysketch", f->path, s);
    if ((rc = metaDouble(f, "scale", &d, err))) return rc;
    c->scale = (float)d;
    if (c->attention != ATTENTION_SOFTMAX && (rc = metaUint(f, "degree", 2, 8, &c->degree, err))) return rc;
    if (c->attention == ATTENTION_POLYSKETCH) {
        if ((rc = metaString(f, "sketch", &s, err))) return rc;
        if (strcmp(s, "learned") == 0)
            c->learnedSketch = 1;
        else if (strcmp(s, "random") != 0)
            return failBad(err, "\"%s\": __metadata__ \"sketch\" is \"%s\", expected learned or random", f->path, s);
        if ((rc = metaUint(f, "sketch_size", 8, 128, &c->sketchSize, err)) ||
            (rc = metaUint(f, "block_size", 16, 1024, &c->blockSize, err)))
            return rc;
        if ((rc = metaString(f, "local_exact", &s, err))) return rc;
        if (strcmp(s, "0") != 0 && strcmp(s, "1") != 0)
            return failBad(err, "\"%s\": __metadata__ \"local_exact\" is \"%s\", expected 0 or 1", f->path, s);
        c->localExact = s[0] == '1';
    }
    s = stMeta(f, "task");
    snprintf(c->task, sizeof c->task, "%s", s ? s : "");
    s = stMeta(f, "train_context");
    c->trainContext = s ? (uint32_t)strtoul(s, NULL, 10) : 0;
    return 0;
}

/* Reads tensor `name` (F32, exactly `shape`, finite) into host[*used ..], its offset into *offset. */
static int loadTensor(StFile* f, const char* name, uint32_t ndim, uint64_t d0, uint64_t d1, float* host, uint32_t* used,
                      uint32_t* offset, StError* err) {
    const StTensor* t = stFind(f, name);
    uint64_t i, count;
    char want[64], have[128];
    if (!t) return failBad(err, "\"%s\": missing tensor \"%s\" (MODEL.md)", f->path, name);
    if (ndim == 1)
        snprintf(want, sizeof want, "[%llu]", (unsigned long long)d0);
    else
        snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)d0, (unsigned long long)d1);
    if (t->dtype != ST_F32) return failBad(err, "\"%s\": tensor \"%s\" has dtype %s, expected F32", f->path, name, t->dtypeName);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        uint32_t d;
        size_t len = 0;
        have[len++] = '[';
        for (d = 0; d < t->ndim && len < sizeof have - 24; ++d)
            len += (size_t)snprintf(have + len, sizeof have - len, d ? ", %llu" : "%llu", (unsigned long long)t->shape[d]);
        snprintf(have + len, sizeof have - len, "]");
        return failBad(err, "\"%s\": tensor \"%s\" has shape %s, expected %s", f->path, name, have, want);
    }
    count = stElements(t);
    if (stRead(f, t, host + *used, err)) return TINYLM_EXIT_BAD_INPUT;
    for (i = 0; i < count; ++i)
        if (!isfinite(host[*used + i]))
            return failBad(err, "\"%s\": tensor \"%s\" holds a non-finite value at element %llu", f->path, name,
                           (unsigned long long)i);
    *offset = *used;
    *used += (uint32_t)count;
    return 0;
}

static int createAttention(Model* m, uint32_t l, StError* err) {
    const ModelConfig* c = &m->c;
    PskAttentionCreateInfo info;
    char prefix[64] = "";
    PskResult r;
    memset(&info, 0, sizeof info);
    info.kind = c->attention == ATTENTION_SOFTMAX      ? PSK_ATTENTION_KIND_SOFTMAX
                : c->attention == ATTENTION_POLYNOMIAL ? PSK_ATTENTION_KIND_POLYNOMIAL
                                                       : PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.degree = c->degree;
    info.scale = c->scale;
    info.numQueryHeads = c->nHeads;
    info.numKeyValueHeads = c->nHeads;
    info.headDim = c->headDim;
    info.valueDim = c->headDim;
    info.dataType = PSK_DATA_TYPE_FLOAT32;
    info.layout = PSK_LAYOUT_BNHD;
    if (c->attention == ATTENTION_POLYSKETCH) {
        if (c->localExact) info.flags |= PSK_ATTENTION_LOCAL_EXACT_BIT;
        info.sketchSize = c->sketchSize;
        info.blockSize = c->blockSize;
        info.sketchSource = c->learnedSketch ? PSK_SKETCH_SOURCE_LEARNED_FILE : PSK_SKETCH_SOURCE_FILE;
        snprintf(prefix, sizeof prefix, "layers.%u.attn.", l);
        info.sketchFile = m->path;
        info.qkNormFile = m->path;
        info.tensorPrefix = prefix;
    }
    m->gpu->lastError[0] = '\0';
    r = pskCreateAttention(m->gpu->psk, &info, &m->attention[l]);
    if (r != PSK_SUCCESS) {
        /* The library's message names the tensor without the prefix and not the file: add both. */
        snprintf(err->text, sizeof err->text, "\"%s\": the attention of layer %u (tensors \"%s*\"): %s: %s", m->path, l,
                 c->attention == ATTENTION_POLYSKETCH ? prefix : "", pskResultToString(r),
                 m->gpu->lastError[0] ? m->gpu->lastError : "(no message)");
        return r == PSK_ERROR_BAD_FILE ? TINYLM_EXIT_BAD_INPUT : TINYLM_EXIT_FAILED;
    }
    return 0;
}

int modelLoad(Gpu* gpu, const char* path, Model** out, StError* err) {
    StFile f;
    Model* m;
    ModelConfig* c;
    uint64_t total;
    uint32_t used = 0, l, D;
    float* host = NULL;
    char name[128];
    int rc;
    *out = NULL;
    if (stOpen(path, &f, err)) {
        stClose(&f);
        return TINYLM_EXIT_BAD_INPUT;
    }
    m = (Model*)calloc(1, sizeof(Model));
    if (!m) {
        stClose(&f);
        return fail(err, "out of memory");
    }
    m->ropePosWord = ~0u;
    *out = m;
    m->gpu = gpu;
    m->path = (char*)malloc(strlen(path) + 1);
    if (m->path) strcpy(m->path, path);
    c = &m->c;
    if ((rc = modelReadConfig(&f, c, err))) goto done;
    D = c->dModel;
    /* Every tensor the app uses, in one host array and then one device buffer. */
    total = (uint64_t)c->vocab * D + 2ull * D +
            (uint64_t)c->nLayers * (4ull * D + 3ull * D * D + (uint64_t)D * D + 8ull * D * D + 2ull * c->headDim);
    if (total * 4 > gpu->props.limits.maxStorageBufferRange || total > 0xFFFFFFFFull) {
        rc = failBad(err, "\"%s\": %llu weights exceed what one storage buffer of this device can hold", path, (unsigned long long)total);
        goto done;
    }
    host = (float*)malloc((size_t)total * 4);
    m->layers = (LayerOffsets*)calloc(c->nLayers, sizeof(LayerOffsets));
    m->attention = (PskAttention*)calloc(c->nLayers, sizeof(PskAttention));
    m->states = (PskDecodeState*)calloc(c->nLayers, sizeof(PskDecodeState));
    if (!host || !m->layers || !m->attention || !m->states) {
        rc = fail(err, "out of memory");
        goto done;
    }
    if ((rc = loadTensor(&f, "tok_emb", 2, c->vocab, D, host, &used, &m->tokEmb, err)) ||
        (rc = loadTensor(&f, "ln_f.scale", 1, D, 0, host, &used, &m->lnfScale, err)) ||
        (rc = loadTensor(&f, "ln_f.bias", 1, D, 0, host, &used, &m->lnfBias, err)))
        goto done;
    for (l = 0; l < c->nLayers; ++l) {
        LayerOffsets* w = &m->layers[l];
#define LOAD(suffix, nd, a, b, field)                                                      \
    snprintf(name, sizeof name, "layers.%u.%s", l, suffix);                                \
    if ((rc = loadTensor(&f, name, nd, a, b, host, &used, &w->field, err))) goto done;
        LOAD("ln1.scale", 1, D, 0, ln1s)
        LOAD("ln1.bias", 1, D, 0, ln1b)
        LOAD("attn.wqkv", 2, D, 3 * D, wqkv)
        LOAD("attn.wo", 2, D, D, wo)
        LOAD("ln2.scale", 1, D, 0, ln2s)
        LOAD("ln2.bias", 1, D, 0, ln2b)
        LOAD("mlp.w1", 2, D, 4 * D, w1)
        LOAD("mlp.w2", 2, 4 * D, D, w2)
        if (c->attention != ATTENTION_SOFTMAX) { /* polysketch: the library reads them too */
            LOAD("attn.ln.scale", 1, c->headDim, 0, qkScale)
            LOAD("attn.ln.bias", 1, c->headDim, 0, qkBias)
        }
#undef LOAD
    }
    /* qkv rows: q, k, v segments at aligned byte offsets (the attention binds them by offset). */
    {
        const uint32_t align = (uint32_t)gpu->props.limits.minStorageBufferOffsetAlignment;
        const uint32_t segBytes = (D * 4 + align - 1) / align * align;
        m->seg = segBytes / 4;
        m->ld = 3 * m->seg;
        if (segBytes % 4) {
            rc = fail(err, "minStorageBufferOffsetAlignment %u is not a multiple of 4", align);
            goto done;
        }
    }
    if ((rc = createBuf(gpu, (VkDeviceSize)used * 4, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0,
                        &m->weights, err)) ||
        (rc = upload(m, &m->weights, host, (VkDeviceSize)used * 4, err)))
        goto done;
    for (l = 0; l < c->nLayers; ++l)
        if ((rc = createAttention(m, l, err))) goto done;
done:
    free(host);
    stClose(&f);
    return rc;
}

void modelDestroy(Model* m) {
    uint32_t l;
    Gpu* gpu;
    if (!m) return;
    gpu = m->gpu;
    vkDeviceWaitIdle(gpu->device);
    if (m->states)
        for (l = 0; l < m->c.nLayers; ++l) pskDestroyDecodeState(m->states[l]);
    if (m->attention)
        for (l = 0; l < m->c.nLayers; ++l) pskDestroyAttention(m->attention[l]);
    destroyBuf(gpu, &m->weights);
    destroyBuf(gpu, &m->x);
    destroyBuf(gpu, &m->a);
    destroyBuf(gpu, &m->qkv);
    destroyBuf(gpu, &m->o);
    destroyBuf(gpu, &m->hid);
    destroyBuf(gpu, &m->logits);
    destroyBuf(gpu, &m->workspace);
    destroyBuf(gpu, &m->tokens);
    destroyBuf(gpu, &m->readback);
    destroyBuf(gpu, &m->table);
    forgetDescriptorSets(gpu);
    if (m->stepCmd) vkFreeCommandBuffers(gpu->device, gpu->pool, 1, &m->stepCmd);
    free(m->states);
    free(m->attention);
    free(m->layers);
    free(m->path);
    free(m);
}
