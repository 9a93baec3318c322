// psk info: every Vulkan device the loader reports, with the capabilities the library uses.
#include <polysketch/polysketch.h>

#include <cstdio>
#include <cstring>

#include "commands.hpp"

namespace {

const char* typeName(uint32_t type) {
    static const char* names[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    return type < 5 ? names[type] : "unknown";
}

const char* yesNo(uint32_t v) { return v ? "yes" : "no"; }

}  // namespace

int runInfo(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
            std::printf("usage: psk info\n\nLists every Vulkan device in enumeration order (the index PSK_DEVICE takes).\n");
            return 0;
        }
        std::fprintf(stderr, "psk info: unknown option '%s'\n", argv[i]);
        return 2;
    }
    const uint32_t v = pskGetVersion();
    std::printf("polysketch %u.%u.%u\n", PSK_VERSION_MAJOR(v), PSK_VERSION_MINOR(v), PSK_VERSION_PATCH(v));
    uint32_t count = 0;
    PskResult r = pskEnumerateDevices(&count);
    if (r != PSK_SUCCESS) {
        std::fprintf(stderr, "psk info: %s (is a Vulkan loader and driver installed?)\n", pskResultToString(r));
        return 1;
    }
    std::printf("%u Vulkan device(s)\n", count);
    for (uint32_t i = 0; i < count; ++i) {
        PskDeviceInfo d;
        r = pskGetPhysicalDeviceInfo(i, &d);
        if (r != PSK_SUCCESS) {
            std::printf("\n[%u] %s\n", i, pskResultToString(r));
            continue;
        }
        std::printf("\n[%u] %s (%s)\n", i, d.name, typeName(d.deviceType));
        std::printf("    driver:                     %s %s\n", d.driverName, d.driverInfo);
        std::printf("    Vulkan:                     %u.%u.%u\n", d.apiVersion >> 22, (d.apiVersion >> 12) & 0x3FF,
                    d.apiVersion & 0xFFF);
        std::printf("    vendor/device id:           0x%04x / 0x%04x\n", d.vendorId, d.deviceId);
        std::printf("    subgroup size:              %u (min %u, max %u, control %s)\n", d.subgroupSize,
                    d.minSubgroupSize, d.maxSubgroupSize, yesNo(d.subgroupSizeControl));
        std::printf("    shared memory:              %u bytes\n", d.maxComputeSharedMemorySize);
        std::printf("    workgroup invocations:      %u\n", d.maxComputeWorkGroupInvocations);
        std::printf("    maxStorageBufferRange:      %u bytes\n", d.maxStorageBufferRange);
        std::printf("    maxMemoryAllocationSize:    %llu bytes\n", (unsigned long long)d.maxMemoryAllocationSize);
        std::printf("    device-local memory:        %llu MiB\n", (unsigned long long)(d.deviceLocalMemoryBytes >> 20));
        std::printf("    16-bit storage:             %s\n", yesNo(d.storageBuffer16BitAccess));
        std::printf("    float16 arithmetic:         %s\n", yesNo(d.shaderFloat16));
        std::printf("    push descriptors:           %s\n", yesNo(d.pushDescriptors));
        std::printf("    timestamp period:           %g ns\n", d.timestampPeriodNs);
        std::printf("    cooperative matrix:         NV %s, KHR %s\n", yesNo(d.cooperativeMatrixNV), yesNo(d.cooperativeMatrixKHR));
        for (uint32_t s = 0; s < d.cooperativeMatrixShapeCount; ++s)
            std::printf("      f16 x f16 -> f32 shape:   %ux%ux%u\n", d.cooperativeMatrixShapes[s][0],
                        d.cooperativeMatrixShapes[s][1], d.cooperativeMatrixShapes[s][2]);
    }
    return 0;
}
