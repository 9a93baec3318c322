/*
 * app_device: polysketch recorded into an application's own Vulkan command buffer.
 *
 * The app creates its own VkInstance and VkDevice (linking the Vulkan loader), enables what
 * pskGetVulkanDeviceRequirements lists, and adopts them into a polysketch context. One command
 * buffer of the app: copy q/k/v from a staging buffer into its device buffer, barrier,
 * pskCmdAttentionForward, barrier, copy the output into a readback buffer, barrier to the host.
 * The output is checked against a plain C loop: causal polynomial attention of degree 2,
 *   w_ij = (q_i . k_j)^2 for j <= i,  O_i = (sum_j w_ij v_j) / (1 + sum_j w_ij).
 *
 *   app_device              run on the first Vulkan device
 *   app_device --validate   require the validation layer on the app's instance; any message fails
 */
#include <polysketch/polysketch_vulkan.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 96  /* tokens */
#define D 16  /* head dim = value dim, one head, batch 1 */
#define MAX_RELATIVE_ERROR 1e-4

static unsigned validationMessages = 0;

static VKAPI_ATTR VkBool32 VKAPI_CALL onValidation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    (void)severity;
    (void)types;
    (void)user;
    ++validationMessages;
    fprintf(stderr, "app_device: validation: %s\n", data->pMessage);
    return VK_FALSE;
}

static void onMessage(PskMessageSeverity severity, PskResult result, const char* message, void* userData) {
    (void)userData;
    if (severity == PSK_MESSAGE_SEVERITY_ERROR) fprintf(stderr, "app_device: polysketch %s: %s\n", pskResultToString(result), message);
}

#define CHECK_VK(call)                                                               \
    do {                                                                             \
        VkResult r_ = (call);                                                        \
        if (r_ != VK_SUCCESS) {                                                      \
            fprintf(stderr, "app_device: %s failed (VkResult %d)\n", #call, (int)r_); \
            return 1;                                                                \
        }                                                                            \
    } while (0)
#define CHECK_PSK(call)                                                                            \
    do {                                                                                           \
        PskResult r_ = (call);                                                                     \
        if (r_ != PSK_SUCCESS) {                                                                   \
            fprintf(stderr, "app_device: %s failed: %s\n", #call, pskResultToString(r_));          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

typedef struct AppBuffer {
    VkBuffer buffer;
    VkDeviceMemory memory;
    void* mapped; /* host-visible buffers only */
} AppBuffer;

static int createBuffer(VkPhysicalDevice pd, VkDevice device, VkDeviceSize size, VkBufferUsageFlags usage,
                        VkMemoryPropertyFlags properties, AppBuffer* out) {
    VkBufferCreateInfo bi;
    VkMemoryRequirements req;
    VkPhysicalDeviceMemoryProperties mem;
    VkMemoryAllocateInfo ai;
    uint32_t type;
    memset(&bi, 0, sizeof bi);
    bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bi.size = size;
    bi.usage = usage;
    CHECK_VK(vkCreateBuffer(device, &bi, NULL, &out->buffer));
    vkGetBufferMemoryRequirements(device, out->buffer, &req);
    vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (type = 0; type < mem.memoryTypeCount; ++type)
        if ((req.memoryTypeBits & (1u << type)) && (mem.memoryTypes[type].propertyFlags & properties) == properties) break;
    if (type == mem.memoryTypeCount) { /* e.g. no DEVICE_LOCAL type on some CPU drivers: any allowed type */
        for (type = 0; type < mem.memoryTypeCount && !(req.memoryTypeBits & (1u << type)); ++type) {
        }
        if (properties & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) return 1;
    }
    memset(&ai, 0, sizeof ai);
    ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = type;
    CHECK_VK(vkAllocateMemory(device, &ai, NULL, &out->memory));
    CHECK_VK(vkBindBufferMemory(device, out->buffer, out->memory, 0));
    out->mapped = NULL;
    if (properties & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) CHECK_VK(vkMapMemory(device, out->memory, 0, VK_WHOLE_SIZE, 0, &out->mapped));
    return 0;
}

static void destroyBuffer(VkDevice device, AppBuffer* b) {
    vkDestroyBuffer(device, b->buffer, NULL);
    vkFreeMemory(device, b->memory, NULL);
}

static void barrier(VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags srcAccess, VkPipelineStageFlags dst,
                    VkAccessFlags dstAccess) {
    VkMemoryBarrier b;
    memset(&b, 0, sizeof b);
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = srcAccess;
    b.dstAccessMask = dstAccess;
    vkCmdPipelineBarrier(cmd, src, dst, 0, 1, &b, 0, NULL, 0, NULL);
}

static VkDeviceSize alignUp(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

static float q[N * D], k[N * D], v[N * D], out[N * D];

int main(int argc, char** argv) {
    const int validate = argc > 1 && strcmp(argv[1], "--validate") == 0;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* debugExt = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app;
    VkInstanceCreateInfo ii;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    VkPhysicalDevice pd = VK_NULL_HANDLE;
    VkPhysicalDeviceProperties props;
    PskVulkanDeviceRequirements req;
    VkPhysicalDevice16BitStorageFeatures storage16;
    VkPhysicalDeviceFeatures core;
    VkPhysicalDeviceShaderFloat16Int8Features float16;
    VkDeviceQueueCreateInfo qi;
    VkDeviceCreateInfo di;
    VkDevice device;
    VkQueue queue;
    float priority = 1.0f;
    uint32_t count = 1, i, j, d;
    PskExternalVulkan external;
    PskContextCreateInfo contextInfo;
    PskContext context;
    PskAttentionCreateInfo attentionInfo;
    PskAttention attention;
    uint64_t workspaceBytes = 0;
    const VkDeviceSize tensorBytes = sizeof(float) * N * D;
    VkDeviceSize align, offQ, offK, offV, offOut, offWork, total;
    AppBuffer staging, tensors, readback;
    VkCommandPoolCreateInfo pi;
    VkCommandPool pool;
    VkCommandBufferAllocateInfo cai;
    VkCommandBuffer cmd;
    VkCommandBufferBeginInfo begin;
    VkBufferCopy copies[3], back;
    PskCmdForwardInfo fwd;
    VkFenceCreateInfo fi;
    VkFence fence;
    VkSubmitInfo submit;
    double maxErr = 0.0, maxRef = 0.0;
    unsigned seed = 12345u;

    /* 1. The app's instance (with the validation layer when asked) and device. */
    memset(&app, 0, sizeof app);
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "app_device";
    app.apiVersion = VK_API_VERSION_1_1;
    memset(&ii, 0, sizeof ii);
    ii.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ii.pApplicationInfo = &app;
    if (validate) {
        ii.enabledLayerCount = 1;
        ii.ppEnabledLayerNames = &layer;
        ii.enabledExtensionCount = 1;
        ii.ppEnabledExtensionNames = &debugExt;
    }
    CHECK_VK(vkCreateInstance(&ii, NULL, &instance));
    if (validate) {
        VkDebugUtilsMessengerCreateInfoEXT m;
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT");
        memset(&m, 0, sizeof m);
        m.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
        m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
        m.pfnUserCallback = onValidation;
        CHECK_VK(create(instance, &m, NULL, &messenger));
    }
    vkEnumeratePhysicalDevices(instance, &count, &pd);
    if (!pd) {
        fprintf(stderr, "app_device: no Vulkan device\n");
        return 1;
    }
    vkGetPhysicalDeviceProperties(pd, &props);
    /* What polysketch would like; the device supports a subset, which we enable and report. */
    CHECK_PSK(pskGetVulkanDeviceRequirements(vkGetInstanceProcAddr, instance, app.apiVersion, pd,
                                             PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT | PSK_DEVICE_CAPABILITY_FLOAT16_ARITHMETIC_BIT |
                                                 PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT | PSK_DEVICE_CAPABILITY_INT64_BIT,
                                             &req));
    if (req.computeQueueFamily == ~0u) {
        fprintf(stderr, "app_device: no compute queue\n");
        return 1;
    }
    memset(&storage16, 0, sizeof storage16);
    storage16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    storage16.storageBuffer16BitAccess = req.storageBuffer16BitAccess;
    memset(&float16, 0, sizeof float16);
    float16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    float16.shaderFloat16 = req.shaderFloat16;
    if (req.shaderFloat16) storage16.pNext = &float16;
    memset(&core, 0, sizeof core);
    core.shaderInt64 = req.shaderInt64;
    memset(&qi, 0, sizeof qi);
    qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qi.queueFamilyIndex = req.computeQueueFamily;
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
    CHECK_VK(vkCreateDevice(pd, &di, NULL, &device));
    vkGetDeviceQueue(device, req.computeQueueFamily, 0, &queue);
    printf("device: %s, capabilities enabled for polysketch: 0x%x\n", props.deviceName, (unsigned)req.supportedCapabilities);

    /* 2. A polysketch context on the app's objects, and one attention layer. */
    memset(&external, 0, sizeof external);
    external.getInstanceProcAddr = vkGetInstanceProcAddr;
    external.instance = instance;
    external.instanceApiVersion = app.apiVersion;
    external.physicalDevice = pd;
    external.device = device;
    external.queueFamilyIndex = req.computeQueueFamily;
    external.queue = queue;
    external.enabledCapabilities = req.supportedCapabilities;
    memset(&contextInfo, 0, sizeof contextInfo);
    contextInfo.externalVulkan = &external;
    contextInfo.messageCallback = onMessage;
    CHECK_PSK(pskCreateContext(&contextInfo, &context));
    memset(&attentionInfo, 0, sizeof attentionInfo);
    attentionInfo.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
    attentionInfo.flags = PSK_ATTENTION_CAUSAL_BIT;
    attentionInfo.degree = 2;
    attentionInfo.headDim = D;
    CHECK_PSK(pskIsAttentionSupported(context, &attentionInfo));
    CHECK_PSK(pskCreateAttention(context, &attentionInfo, &attention));
    CHECK_PSK(pskGetWorkspaceSize(attention, 1, N, &workspaceBytes));

    /* 3. The app's buffers: staging (q, k, v), one device buffer for every tensor, readback. */
    for (i = 0; i < N * D; ++i) {
        seed = seed * 1664525u + 1013904223u;
        q[i] = (float)((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
        seed = seed * 1664525u + 1013904223u;
        k[i] = (float)((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
    }
    align = props.limits.minStorageBufferOffsetAlignment;
    offQ = 0;
    offK = alignUp(offQ + tensorBytes, align);
    offV = alignUp(offK + tensorBytes, align);
    offOut = alignUp(offV + tensorBytes, align);
    offWork = alignUp(offOut + tensorBytes, align);
    total = offWork + (workspaceBytes ? workspaceBytes : 4);
    if (createBuffer(pd, device, 3 * tensorBytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, &staging) ||
        createBuffer(pd, device, total,
                     VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                     VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, &tensors) ||
        createBuffer(pd, device, tensorBytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, &readback))
        return 1;
    memcpy(staging.mapped, q, tensorBytes);
    memcpy((char*)staging.mapped + tensorBytes, k, tensorBytes);
    memcpy((char*)staging.mapped + 2 * tensorBytes, v, tensorBytes);

    /* 4. One command buffer: upload, barrier, attention, barrier, download, barrier to the host. */
    memset(&pi, 0, sizeof pi);
    pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pi.queueFamilyIndex = req.computeQueueFamily;
    CHECK_VK(vkCreateCommandPool(device, &pi, NULL, &pool));
    memset(&cai, 0, sizeof cai);
    cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    cai.commandPool = pool;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    CHECK_VK(vkAllocateCommandBuffers(device, &cai, &cmd));
    memset(&begin, 0, sizeof begin);
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    CHECK_VK(vkBeginCommandBuffer(cmd, &begin));
    for (i = 0; i < 3; ++i) {
        copies[i].srcOffset = i * tensorBytes;
        copies[i].size = tensorBytes;
    }
    copies[0].dstOffset = offQ;
    copies[1].dstOffset = offK;
    copies[2].dstOffset = offV;
    vkCmdCopyBuffer(cmd, staging.buffer, tensors.buffer, 3, copies);
    /* The contract of pskCmdAttentionForward: q/k/v writes visible to compute-shader reads. */
    barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    memset(&fwd, 0, sizeof fwd);
    fwd.batchSize = 1;
    fwd.seqLen = N;
    fwd.q.buffer = fwd.k.buffer = fwd.v.buffer = fwd.out.buffer = tensors.buffer;
    fwd.q.offset = offQ;
    fwd.k.offset = offK;
    fwd.v.offset = offV;
    fwd.out.offset = offOut;
    fwd.q.size = fwd.k.size = fwd.v.size = fwd.out.size = tensorBytes;
    fwd.workspace = workspaceBytes ? tensors.buffer : VK_NULL_HANDLE;
    fwd.workspaceOffset = offWork;
    fwd.workspaceSize = workspaceBytes;
    CHECK_PSK(pskCmdAttentionForward(attention, cmd, &fwd));
    /* The library adds no barrier after its last dispatch: the app orders its read of out. */
    barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_READ_BIT);
    back.srcOffset = offOut;
    back.dstOffset = 0;
    back.size = tensorBytes;
    vkCmdCopyBuffer(cmd, tensors.buffer, readback.buffer, 1, &back);
    barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    CHECK_VK(vkEndCommandBuffer(cmd));

    memset(&fi, 0, sizeof fi);
    fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    CHECK_VK(vkCreateFence(device, &fi, NULL, &fence));
    memset(&submit, 0, sizeof submit);
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd;
    /* No polysketch call runs now, so the app may submit to the queue it shares with the context. */
    CHECK_VK(vkQueueSubmit(queue, 1, &submit, fence));
    CHECK_VK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
    memcpy(out, readback.mapped, tensorBytes);

    /* 5. The plain C loop. */
    for (i = 0; i < N; ++i) {
        double num[D], den = 1.0;
        for (d = 0; d < D; ++d) num[d] = 0.0;
        for (j = 0; j <= i; ++j) {
            double s = 0.0, w;
            for (d = 0; d < D; ++d) s += (double)q[i * D + d] * k[j * D + d];
            w = s * s;
            den += w;
            for (d = 0; d < D; ++d) num[d] += w * v[j * D + d];
        }
        for (d = 0; d < D; ++d) {
            const double want = num[d] / den;
            if (fabs(want) > maxRef) maxRef = fabs(want);
            if (fabs(out[i * D + d] - want) > maxErr) maxErr = fabs(out[i * D + d] - want);
        }
    }
    printf("max relative error %.3g (limit %.0e), %u validation message(s)\n", maxErr / maxRef, MAX_RELATIVE_ERROR,
           validationMessages);

    /* 6. Teardown: polysketch first (it never destroys the app's device), then the app's objects. */
    pskDestroyAttention(attention);
    pskDestroyContext(context);
    vkDestroyFence(device, fence, NULL);
    vkDestroyCommandPool(device, pool, NULL);
    destroyBuffer(device, &staging);
    destroyBuffer(device, &tensors);
    destroyBuffer(device, &readback);
    vkDestroyDevice(device, NULL);
    if (messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT");
        destroy(instance, messenger, NULL);
    }
    vkDestroyInstance(instance, NULL);
    return (maxErr / maxRef <= MAX_RELATIVE_ERROR && validationMessages == 0) ? 0 : 1;
}
