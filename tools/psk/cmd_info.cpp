// psk info: every Vulkan device the loader reports, with the capabilities the library uses; with
// --plan, the kernels one attention configuration runs on a device and why (pskGetAttentionPlan).
#include <polysketch/polysketch.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"

namespace {

const char* typeName(uint32_t type) {
    static const char* names[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    return type < 5 ? names[type] : "unknown";
}

const char* yesNo(uint32_t v) { return v ? "yes" : "no"; }

/** A VkComponentTypeKHR value (PskCooperativeMatrixProperty) as a short name. */
std::string componentName(uint32_t type) {
    static const char* names[] = {"f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"};
    if (type < 11) return names[type];
    if (type == 1000141000u) return "bf16";
    return "type " + std::to_string(type);
}

const char* scopeName(uint32_t scope) {
    switch (scope) {
        case 1:
            return "device";
        case 2:
            return "workgroup";
        case 3:
            return "subgroup";
        case 5:
            return "queue family";
        default:
            return "unknown scope";
    }
}

const char* kUsage =
    "usage: psk info\n"
    "       psk info --plan [--kind softmax|poly|polysketch] [--dtype f32|f16|bf16] [--causal | --full]\n"
    "                [--degree P] [--sketch-size R] [--block-size B] [--local-exact] [--head-dim H]\n"
    "                [--value-dim DV] [--heads HQ] [--kv-heads HKV] [--learned FILE | --sketch FILE]\n"
    "                [--device N|NAME]\n"
    "\n"
    "Without --plan: lists every Vulkan device in enumeration order (the index PSK_DEVICE takes).\n"
    "With --plan: creates the attention on the device (default: the best one, or PSK_DEVICE) and\n"
    "prints the kernels a forward call runs, one per line: the shader variant, whether it is the\n"
    "generic, lane-team or cooperative-matrix implementation, its specialization constants and the\n"
    "reason it was chosen. Defaults: polysketch, f32, causal, p = 4, r = 32, b = 256, h = dv = 64,\n"
    "1 head.\n";

struct PlanOptions {
    PskAttentionCreateInfo info{};
    std::string device, learned, sketch;
};

int printPlan(const PlanOptions& o) {
    psk::cli::MessageSink sink;
    PskContextCreateInfo ci{};
    ci.device = o.device.empty() ? nullptr : o.device.c_str();
    ci.messageCallback = psk::cli::MessageSink::callback;
    ci.messageUserData = &sink;
    PskContext ctx = nullptr;
    PskResult r = pskCreateContext(&ci, &ctx);
    if (r != PSK_SUCCESS) {
        std::fprintf(stderr, "psk info: cannot create a context: %s\n", sink.describe(r).c_str());
        return 1;
    }
    PskAttentionCreateInfo info = o.info;
    if (!o.learned.empty()) {
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = o.learned.c_str();
    } else if (!o.sketch.empty()) {
        info.sketchSource = PSK_SKETCH_SOURCE_FILE;
        info.sketchFile = o.sketch.c_str();
    }
    PskAttention attn = nullptr;
    r = pskCreateAttention(ctx, &info, &attn);
    size_t size = 0;
    if (r == PSK_SUCCESS) r = pskGetAttentionPlan(attn, nullptr, &size);
    std::vector<char> text(size + 1, 0);
    if (r == PSK_SUCCESS) r = pskGetAttentionPlan(attn, text.data(), &size);
    if (r != PSK_SUCCESS) {
        std::fprintf(stderr, "psk info: %s\n", sink.describe(r).c_str());
        pskDestroyAttention(attn);
        pskDestroyContext(ctx);
        return 1;
    }
    PskDeviceInfo d{};
    if (pskGetDeviceInfo(ctx, &d) == PSK_SUCCESS) std::printf("device: %s (%s)\n", d.name, typeName(d.deviceType));
    std::printf("%s", text.data());
    pskDestroyAttention(attn);
    pskDestroyContext(ctx);
    return 0;
}

}  // namespace

int runInfo(int argc, char** argv) {
    bool plan = false;
    PlanOptions o;
    PskAttentionCreateInfo& ai = o.info;
    ai.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    ai.flags = PSK_ATTENTION_CAUSAL_BIT;
    ai.headDim = 64;
    ai.sketchSource = PSK_SKETCH_SOURCE_SEED;
    try {
        psk::cli::ArgReader args(argc, argv);
        while (args.next()) {
            const std::string a = args.name();
            auto number = [&](uint32_t lo, uint32_t hi) {
                const std::string v = args.value();
                uint32_t x = 0;
                if (!psk::cli::parseUint32(v, lo, hi, &x)) throw psk::cli::UsageError{a + " needs an integer (got '" + v + "')"};
                return x;
            };
            if (a == "--help" || a == "-h") {
                std::printf("%s", kUsage);
                return 0;
            } else if (a == "--plan") {
                args.flag();
                plan = true;
            } else if (a == "--kind") {
                const std::string v = args.value();
                if (!psk::cli::parseKind(v, &ai.kind)) throw psk::cli::UsageError{"--kind takes softmax, poly or polysketch"};
            } else if (a == "--dtype") {
                const std::string v = args.value();
                if (!psk::cli::parseDataType(v, &ai.dataType)) throw psk::cli::UsageError{"--dtype takes f32, f16 or bf16"};
            } else if (a == "--causal") {
                args.flag();
                ai.flags |= PSK_ATTENTION_CAUSAL_BIT;
            } else if (a == "--full") {
                args.flag();
                ai.flags &= ~uint32_t(PSK_ATTENTION_CAUSAL_BIT);
            } else if (a == "--local-exact") {
                args.flag();
                ai.flags |= PSK_ATTENTION_LOCAL_EXACT_BIT;
            } else if (a == "--degree") {
                ai.degree = number(2, 8);
            } else if (a == "--sketch-size") {
                ai.sketchSize = number(1, 1024);
            } else if (a == "--block-size") {
                ai.blockSize = number(1, 1u << 20);
            } else if (a == "--head-dim") {
                ai.headDim = number(1, 4096);
            } else if (a == "--value-dim") {
                ai.valueDim = number(1, 4096);
            } else if (a == "--heads") {
                ai.numQueryHeads = number(1, 1u << 16);
            } else if (a == "--kv-heads") {
                ai.numKeyValueHeads = number(1, 1u << 16);
            } else if (a == "--learned") {
                o.learned = args.value();
            } else if (a == "--sketch") {
                o.sketch = args.value();
            } else if (a == "--device") {
                o.device = args.value();
            } else {
                throw psk::cli::UsageError{"unknown option '" + args.raw() + "'"};
            }
        }
        if (!plan && argc > 0) throw psk::cli::UsageError{"configuration options need --plan"};
    } catch (const psk::cli::UsageError& e) {
        std::fprintf(stderr, "psk info: %s\n", e.message.c_str());
        return 2;
    }
    if (plan) return printPlan(o);
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
        std::printf("    vulkanMemoryModel:          %s%s\n", yesNo(d.vulkanMemoryModel),
                    d.cooperativeMatrixNV || d.cooperativeMatrixKHR ? "" : " (enabled only with cooperative matrices)");
        std::printf("    bfloat16 matrices:          %s\n", yesNo(d.bfloat16CooperativeMatrix));
        // Every enumerated configuration: M x N x K, A x B + C -> result, scope.
        for (uint32_t s = 0; s < d.cooperativeMatrixPropertyCount; ++s) {
            const PskCooperativeMatrixProperty& p = d.cooperativeMatrixProperties[s];
            const std::string shape = std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k);
            std::printf("      %-3s %-10s %s x %s + %s -> %s, %s%s\n", p.extension ? "KHR" : "NV", shape.c_str(),
                        componentName(p.aType).c_str(), componentName(p.bType).c_str(), componentName(p.cType).c_str(),
                        componentName(p.resultType).c_str(), scopeName(p.scope), p.saturatingAccumulation ? ", saturating" : "");
        }
        if (d.cooperativeMatrixPropertyTotal > d.cooperativeMatrixPropertyCount)
            std::printf("      ... and %u more\n", d.cooperativeMatrixPropertyTotal - d.cooperativeMatrixPropertyCount);
    }
    return 0;
}
