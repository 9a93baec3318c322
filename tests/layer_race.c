/*
 * The validation layer's own race, without polysketch: threads that each create an instance with
 * VK_LAYER_KHRONOS_validation (synchronization validation on, as the library's validated contexts
 * have it), a device, and buffers bound to memory, then destroy them; all threads at once, or
 * (`ordered`) with creation and destruction under the writer side of a readers-writer lock and
 * the buffers under its reader side (tests/support/layer_lock.hpp: what the tests do).
 *
 *   build/tests/layer_race [threads=16] [at-once|ordered] [cycles=300]
 *
 * Exit status 0 and one line when every thread finished. With Debian 12's layer (1.3.239) on
 * lavapipe, `16 at-once 300` died of a segmentation fault in vkDestroyBuffer inside the layer in
 * about one run of seven (docs/RELIABILITY.md, "Contexts"): the layer's process-wide map of
 * instance and device data, written by vkCreate/DestroyInstance and vkCreate/DestroyDevice and
 * read by every call, has no lock (KhronosGroup/Vulkan-ValidationLayers issue 4391). Not a test
 * (it fails only now and then, and it tests the layer); built so that it keeps compiling.
 */
#include <vulkan/vulkan.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_cycles = 300;
static int g_ordered = 0;
static pthread_rwlock_t g_order = PTHREAD_RWLOCK_INITIALIZER;

static void writer(void) { if (g_ordered) pthread_rwlock_wrlock(&g_order); }
static void reader(void) { if (g_ordered) pthread_rwlock_rdlock(&g_order); }
static void release(void) { if (g_ordered) pthread_rwlock_unlock(&g_order); }

static void check(VkResult r, const char* what) {
    if (r != VK_SUCCESS) {
        fprintf(stderr, "layer_race: %s failed (%d)\n", what, (int)r);
        exit(2);
    }
}

static void* run(void* unused) {
    (void)unused;
    const char* layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char* extensions[] = {VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME, VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    for (int c = 0; c < g_cycles; ++c) {
        VkValidationFeaturesEXT features = {VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
        features.enabledValidationFeatureCount = 1;
        features.pEnabledValidationFeatures = enables;
        VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
        app.apiVersion = VK_API_VERSION_1_2;
        VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
        ici.pNext = &features;
        ici.pApplicationInfo = &app;
        ici.enabledLayerCount = 1;
        ici.ppEnabledLayerNames = layers;
        ici.enabledExtensionCount = 2;
        ici.ppEnabledExtensionNames = extensions;

        writer();
        VkInstance instance;
        check(vkCreateInstance(&ici, NULL, &instance), "vkCreateInstance (is the validation layer installed?)");
        uint32_t count = 1;
        VkPhysicalDevice physical;
        VkResult r = vkEnumeratePhysicalDevices(instance, &count, &physical);
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) check(r, "vkEnumeratePhysicalDevices");
        if (count == 0) check(VK_ERROR_INITIALIZATION_FAILED, "vkEnumeratePhysicalDevices (no device)");
        const float priority = 1.0f;
        VkDeviceQueueCreateInfo queue = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
        queue.queueCount = 1;
        queue.pQueuePriorities = &priority;
        VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
        dci.queueCreateInfoCount = 1;
        dci.pQueueCreateInfos = &queue;
        VkDevice device;
        check(vkCreateDevice(physical, &dci, NULL, &device), "vkCreateDevice");
        release();

        reader();
        for (int b = 0; b < 50; ++b) {
            VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
            bci.size = 4096;
            bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
            VkBuffer buffer;
            check(vkCreateBuffer(device, &bci, NULL, &buffer), "vkCreateBuffer");
            VkMemoryRequirements req;
            vkGetBufferMemoryRequirements(device, buffer, &req);
            VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
            mai.allocationSize = req.size;
            uint32_t type = 0;
            while (!(req.memoryTypeBits & (1u << type))) ++type;
            mai.memoryTypeIndex = type;
            VkDeviceMemory memory;
            check(vkAllocateMemory(device, &mai, NULL, &memory), "vkAllocateMemory");
            check(vkBindBufferMemory(device, buffer, memory, 0), "vkBindBufferMemory");
            vkDestroyBuffer(device, buffer, NULL);
            vkFreeMemory(device, memory, NULL);
        }
        release();

        writer();
        vkDestroyDevice(device, NULL);
        vkDestroyInstance(instance, NULL);
        release();
    }
    return NULL;
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 16;
    if (threads < 1 || threads > 64) threads = 16;
    g_ordered = argc > 2 && strcmp(argv[2], "ordered") == 0;
    if (argc > 3) g_cycles = atoi(argv[3]);
    pthread_t pool[64];
    for (int i = 0; i < threads; ++i) pthread_create(&pool[i], NULL, run, NULL);
    for (int i = 0; i < threads; ++i) pthread_join(pool[i], NULL);
    printf("layer_race: %d threads x %d cycles, %s: no crash\n", threads, g_cycles, g_ordered ? "ordered" : "at once");
    return 0;
}
