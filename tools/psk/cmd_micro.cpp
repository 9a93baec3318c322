// psk micro: two machine constants of the performance model (docs/MODEL.md, docs/predictions.py's
// Machine) measured through Vulkan on the chosen device, in a few seconds:
//   - the workgroup barrier round (Machine.barrier): micro_barrier.comp loops over a shared load of
//     a neighbour's value, barrier, a shared store, barrier; THREADS = 64, 128, 256 invocations,
//     1 and 4 workgroups per multiprocessor;
//   - the latency of a dependent load (Machine.lat_l2, Machine.lat_hbm): micro_chase.comp, one
//     invocation following i = chain[i] through a random single cycle over 128-byte lines of a
//     4 MiB buffer (L2-resident on a GPU with tens of MiB of L2) and of the largest power of two
//     <= min(1 GiB, maxStorageBufferRange, a quarter of device-local memory) (HBM).
// Each configuration: one untimed warm-up run, then the median GPU time (timestamps around the
// dispatch only: uploads and readbacks are outside the timed span) of 5 runs. Every result is
// checked against the host's own computation (workgroup 0's and the last workgroup's values; the
// chain's index after the steps), so a loop the driver cut short (llvmpipe ends an invocation's
// loops after 65535 iterations in total) is a FAIL, not a fast number.
//
// The kernels are the library's tools-only kernels (kernels/kernel_table.hpp: MicroBarrier,
// MicroChase; shaders/interface/micro.h), run on a context of the library's own objects that psk
// links statically (psk_micro_lib, tools/CMakeLists.txt), as the shared library hides them.
#include <polysketch/polysketch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "json.hpp"
#include "kernels/kernel_dispatch.hpp"
#include "kernels/kernel_pipeline.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "vk/context.hpp"
#include "vk/memory.hpp"
#include "vk/submitter.hpp"

namespace {

using psk::cli::UsageError;

constexpr uint32_t kRuns = 5;                       // timed runs per configuration (the median is reported)
constexpr uint32_t kLineBytes = 128;                // one chain element per cache line
constexpr uint32_t kLineElements = kLineBytes / 4;  // uints per line
constexpr uint64_t kL2Bytes = uint64_t(4) << 20;    // stays in L2 on a GPU with tens of MiB of it
constexpr uint64_t kBigBytes = uint64_t(1) << 30;   // HBM: far beyond any L2
constexpr uint64_t kQuickBigBytes = uint64_t(16) << 20;
constexpr uint32_t kFallbackMultiprocessors = 132;  // the H100 / H200's SM count (docs/predictions.py, Machine.sms)
constexpr uint32_t kBarrierSeed = 12345;

const char* kUsage =
    "usage: psk micro [--quick] [--device N|NAME] [--json FILE] [--sms N]\n"
    "\n"
    "Measures two machine constants of the performance model (docs/MODEL.md) on the device with GPU\n"
    "timestamps, the median of 5 runs after one warm-up run:\n"
    "  barrier round   micro_barrier.comp: each invocation loops over a shared load of a neighbour's\n"
    "                  value, barrier(), a shared store, barrier(); 64, 128 and 256 invocations per\n"
    "                  workgroup, 1 and 4 workgroups per multiprocessor. Reports ns per iteration\n"
    "                  (the dispatch's time / iterations) and ns per barrier (half of it).\n"
    "  dependent load  micro_chase.comp: one invocation follows i = chain[i] through a random cycle\n"
    "                  over 128-byte lines (every load a new line) of a 4 MiB buffer (L2) and of the\n"
    "                  largest power of two <= min(1 GiB, maxStorageBufferRange, device-local memory / 4)\n"
    "                  (HBM). Reports ns per load.\n"
    "Every result is checked against the host's computation; exit status 1 when one differs.\n"
    "\n"
    "  --quick        few iterations and a 16 MiB big buffer (lavapipe: seconds; llvmpipe ends an\n"
    "                 invocation's loops after 65535 iterations in total)\n"
    "  --device SEL   a device index or part of its name (see psk info); default: PSK_DEVICE or the best\n"
    "  --json FILE    the results as JSON\n"
    "  --sms N        multiprocessors, where the device does not report them (VK_NV_shader_sm_builtins;\n"
    "                 default there: 132 on a GPU, the host's hardware threads on a CPU device)\n";

struct Options {
    bool quick = false;
    std::string device;
    std::string json;
    uint32_t sms = 0;
};

struct BarrierRow {
    uint32_t threads = 0, perSm = 0, groups = 0, iterations = 0;
    std::vector<double> runsMs;
    double medianMs = 0;
    bool ok = false;
    std::string note;  // why a row was skipped or failed
};

struct ChaseRow {
    std::string level;
    uint64_t bytes = 0;
    uint32_t lines = 0, iterations = 0;
    std::vector<double> runsMs;
    double medianMs = 0;
    bool ok = false;
    std::string note;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/** micro_barrier.comp's values of workgroup `group` after `iterations` rounds, computed on the host. */
std::vector<uint32_t> hostBarrierValues(uint32_t threads, uint32_t group, uint32_t iterations, uint32_t seed) {
    std::vector<uint32_t> v(threads), shared(threads);
    for (uint32_t t = 0; t < threads; ++t) v[t] = (t + 1u) * 2654435761u + seed + group * 40503u;
    shared = v;
    for (uint32_t i = 0; i < iterations; ++i) {
        for (uint32_t t = 0; t < threads; ++t) v[t] = v[t] * 1664525u + shared[t + 1 == threads ? 0 : t + 1] + i;
        shared = v;
    }
    return v;
}

constexpr VkBufferUsageFlags kStorage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                        VK_BUFFER_USAGE_TRANSFER_DST_BIT;

psk::BufferRange whole(const psk::Buffer& b) { return {b.handle(), 0, b.size()}; }

BarrierRow runBarrier(PskContext_T& ctx, psk::Submitter& submitter, uint32_t threads, uint32_t perSm, uint32_t sms,
                      uint32_t iterations) {
    BarrierRow row;
    row.threads = threads;
    row.perSm = perSm;
    row.groups = perSm * sms;
    row.iterations = iterations;
    const VkPhysicalDeviceLimits& limits = ctx.caps().limits();
    if (threads > limits.maxComputeWorkGroupInvocations || threads > limits.maxComputeWorkGroupSize[0]) {
        row.note = "skipped: more invocations than the device's workgroup limit";
        return row;
    }
    psk::kernel::MicroBarrierSpec spec;
    spec.THREADS = threads;
    const psk::KernelPipeline pipeline = psk::kernelPipeline(
        ctx.pipelines(), psk::KernelChoice::make<psk::KernelId::MicroBarrier>("", PSK_DATA_TYPE_FLOAT32, spec, "psk micro"));
    const VkDeviceSize bytes = VkDeviceSize(row.groups) * threads * 4;
    psk::Buffer result(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer readback(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::HostReadback);
    psk::kernel::MicroBarrierBindings b;
    b.RESULT = whole(result);
    const psk::kernel::MicroPush push{iterations, kBarrierSeed, 0};
    for (uint32_t run = 0; run <= kRuns; ++run) {  // run 0: the warm-up
        double ms = 0;
        submitter.run(
            [&](psk::Recorder& rec) {
                submitter.startTiming();
                psk::recordKernel(rec, pipeline, b, push, row.groups);
                submitter.stopTiming();
                rec.copy(whole(result), whole(readback), bytes);
            },
            &ms);
        if (run > 0) row.runsMs.push_back(ms);
    }
    row.medianMs = median(row.runsMs);
    // Workgroup 0 and the last one against the host's rounds.
    row.ok = true;
    const auto* got = reinterpret_cast<const uint32_t*>(readback.mapped());
    for (uint32_t group : {0u, row.groups - 1}) {
        const std::vector<uint32_t> want = hostBarrierValues(threads, group, iterations, kBarrierSeed);
        if (std::memcmp(got + size_t(group) * threads, want.data(), size_t(threads) * 4) != 0) {
            row.ok = false;
            row.note = "workgroup " + std::to_string(group) + "'s values differ from the host's " + std::to_string(iterations) +
                       " rounds (a loop cut short?)";
        }
    }
    return row;
}

ChaseRow runChase(PskContext_T& ctx, psk::Submitter& submitter, const char* level, uint64_t bytes, uint32_t iterations,
                  uint64_t seed) {
    ChaseRow row;
    row.level = level;
    row.bytes = bytes;
    row.lines = uint32_t(bytes / kLineBytes);
    row.iterations = iterations;
    const psk::KernelPipeline pipeline = psk::kernelPipeline(
        ctx.pipelines(), psk::KernelChoice::make<psk::KernelId::MicroChase>("", PSK_DATA_TYPE_FLOAT32, psk::kernel::NoSpec{}, "psk micro"));

    // One random cycle over the lines (Sattolo's shuffle): next[line] is the line after it.
    std::vector<uint32_t> next(row.lines);
    for (uint32_t i = 0; i < row.lines; ++i) next[i] = i;
    std::mt19937_64 rng(seed);
    for (uint32_t i = row.lines - 1; i > 0; --i) {
        const uint32_t j = uint32_t(std::uniform_int_distribution<uint64_t>(0, i - 1)(rng));
        std::swap(next[i], next[j]);
    }
    // The chain: the first uint of each line holds the next line's element index (the rest is never read).
    psk::Buffer chain(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::DeviceLocal);
    auto fill = [&](uint8_t* mapped) {
        auto* words = reinterpret_cast<uint32_t*>(mapped);
        for (uint32_t i = 0; i < row.lines; ++i) words[size_t(i) * kLineElements] = next[i] * kLineElements;
    };
    if (chain.mapped()) {
        fill(chain.mapped());
    } else {
        psk::Buffer staging(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::HostUpload);
        fill(staging.mapped());
        ctx.execute([&](psk::Recorder& rec) { rec.copy(whole(staging), whole(chain), bytes); });
    }
    psk::Buffer result(ctx.allocator(), 4, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer readback(ctx.allocator(), 4, kStorage, psk::MemoryUsage::HostReadback);
    psk::kernel::MicroChaseBindings b;
    b.CHAIN = whole(chain);
    b.RESULT = whole(result);

    // Each run goes on where the last one ended, so that no run finds lines an earlier one left in
    // a cache (the big buffer's cycle is far longer than all runs' steps together).
    uint32_t start = 0;
    row.ok = true;
    for (uint32_t run = 0; run <= kRuns; ++run) {  // run 0: the warm-up
        const psk::kernel::MicroPush push{iterations, 0, start};
        double ms = 0;
        submitter.run(
            [&](psk::Recorder& rec) {
                submitter.startTiming();
                psk::recordKernel(rec, pipeline, b, push, 1);
                submitter.stopTiming();
                rec.copy(whole(result), whole(readback), 4);
            },
            &ms);
        if (run > 0) row.runsMs.push_back(ms);
        uint32_t want = start / kLineElements;
        for (uint32_t s = 0; s < iterations; ++s) want = next[want];
        uint32_t got = 0;
        std::memcpy(&got, readback.mapped(), 4);
        if (got != want * kLineElements && row.ok) {
            row.ok = false;
            row.note = "run " + std::to_string(run) + " ended at element " + std::to_string(got) + ", the host's walk at " +
                       std::to_string(want * kLineElements) + " (a loop cut short?)";
        }
        start = want * kLineElements;
    }
    row.medianMs = median(row.runsMs);
    return row;
}

}  // namespace

int runMicro(int argc, char** argv) {
    Options o;
    try {
        psk::cli::ArgReader args(argc, argv);
        while (args.next()) {
            const std::string a = args.name();
            if (a == "--help" || a == "-h") {
                std::printf("%s", kUsage);
                return 0;
            } else if (a == "--quick") {
                args.flag();
                o.quick = true;
            } else if (a == "--device") {
                o.device = args.value();
            } else if (a == "--json") {
                o.json = args.value();
            } else if (a == "--sms") {
                const std::string v = args.value();
                if (!psk::cli::parseUint32(v, 1, 4096, &o.sms)) throw UsageError{"--sms needs an integer in 1..4096 (got '" + v + "')"};
            } else {
                throw UsageError{"unknown option '" + args.raw() + "'"};
            }
        }
    } catch (const UsageError& e) {
        std::fprintf(stderr, "psk micro: %s\n", e.message.c_str());
        return 2;
    }

    psk::cli::MessageSink sink;
    PskContextCreateInfo ci{};
    ci.device = o.device.empty() ? nullptr : o.device.c_str();
    ci.messageCallback = psk::cli::MessageSink::callback;
    ci.messageUserData = &sink;
    std::unique_ptr<PskContext_T> ctx;
    try {
        ctx = std::make_unique<PskContext_T>(ci);
    } catch (const psk::Error& e) {
        std::fprintf(stderr, "psk micro: no context: %s (%s)\n", e.what(), pskResultToString(e.code()));
        return 1;
    }
    const psk::DeviceCaps& caps = ctx->caps();
    const bool cpu = caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    if (caps.timestampValidBits == 0) {
        std::fprintf(stderr, "psk micro: %s has no timestamps on its compute queue: nothing to measure\n", caps.properties.deviceName);
        return 1;
    }

    uint32_t sms = caps.multiprocessorCount;
    std::string smSource = "VK_NV_shader_sm_builtins";
    if (o.sms) {
        sms = o.sms;
        smSource = "--sms";
    } else if (!sms && cpu) {
        sms = std::max(1u, std::thread::hardware_concurrency());
        smSource = "not reported: the host's hardware threads";
    } else if (!sms) {
        sms = kFallbackMultiprocessors;
        smSource = "not reported: the H100/H200's 132 assumed";
    }
    // Iterations: >= 1 ms per dispatch on a GPU; --quick stays far below llvmpipe's 65535 loop iterations.
    const uint32_t barrierIterations = o.quick ? 256 : 20000;
    uint32_t chaseSteps = o.quick ? 4096 : 100000;
    if (cpu) chaseSteps = std::min(chaseSteps, 60000u);
    const uint64_t range = caps.limits().maxStorageBufferRange;
    uint64_t bigCap = std::min<uint64_t>(o.quick ? kQuickBigBytes : kBigBytes, range);
    if (caps.deviceLocalBytes) bigCap = std::min<uint64_t>(bigCap, caps.deviceLocalBytes / 4);
    if (ctx->maxAllocationSize()) bigCap = std::min<uint64_t>(bigCap, ctx->maxAllocationSize());
    uint64_t bigBytes = kLineBytes;
    while (bigBytes * 2 <= bigCap) bigBytes *= 2;
    const uint64_t l2Bytes = std::min<uint64_t>(kL2Bytes, bigBytes);

    std::printf("psk micro: %s (%s %s)\n", caps.properties.deviceName, caps.driverName.c_str(), caps.driverInfo.c_str());
    std::printf("multiprocessors: %u (%s); GPU timestamps, median of %u runs after 1 warm-up run%s\n", sms, smSource.c_str(), kRuns,
                o.quick ? "; --quick" : "");

    std::vector<BarrierRow> barriers;
    std::vector<ChaseRow> chases;
    try {
        psk::Submitter submitter(*ctx);
        std::printf("\nbarrier round: shared load, barrier, shared store, barrier (%u iterations per invocation)\n", barrierIterations);
        std::printf("%8s %6s %11s %10s %13s %11s  %s\n", "threads", "wg/SM", "workgroups", "time (ms)", "ns/iteration", "ns/barrier",
                    "check");
        for (uint32_t threads : {64u, 128u, 256u})
            for (uint32_t perSm : {1u, 4u}) {
                BarrierRow r = runBarrier(*ctx, submitter, threads, perSm, sms, barrierIterations);
                const double ns = r.medianMs * 1e6 / r.iterations;
                if (r.runsMs.empty())
                    std::printf("%8u %6u %11u %10s %13s %11s  %s\n", r.threads, r.perSm, r.groups, "-", "-", "-", r.note.c_str());
                else
                    std::printf("%8u %6u %11u %10.3f %13.2f %11.2f  %s\n", r.threads, r.perSm, r.groups, r.medianMs, ns, ns / 2,
                                r.ok ? "ok" : ("FAIL: " + r.note).c_str());
                std::fflush(stdout);
                barriers.push_back(std::move(r));
            }

        std::printf("\ndependent load: one invocation, i = chain[i] over a random cycle of 128-byte lines (%u loads per run)\n",
                    chaseSteps);
        std::printf("%-6s %13s %10s %10s %10s  %s\n", "level", "buffer (MiB)", "lines", "time (ms)", "ns/load", "check");
        const struct {
            const char* level;
            uint64_t bytes;
        } levels[] = {{"L2", l2Bytes}, {"HBM", bigBytes}};
        uint64_t seed = 2024;
        for (const auto& l : levels) {
            ChaseRow r = runChase(*ctx, submitter, l.level, l.bytes, chaseSteps, seed++);
            std::printf("%-6s %13.1f %10u %10.3f %10.2f  %s\n", r.level.c_str(), double(r.bytes) / (1 << 20), r.lines, r.medianMs,
                        r.medianMs * 1e6 / r.iterations, r.ok ? "ok" : ("FAIL: " + r.note).c_str());
            std::fflush(stdout);
            chases.push_back(std::move(r));
        }
    } catch (const psk::Error& e) {
        std::fprintf(stderr, "psk micro: %s (%s)\n", e.what(), pskResultToString(e.code()));
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "psk micro: out of host memory\n");
        return 1;
    }

    bool ok = true;
    for (const BarrierRow& r : barriers) ok = ok && (r.ok || r.runsMs.empty());
    for (const ChaseRow& r : chases) ok = ok && r.ok;
    std::printf("\n%s\n", ok ? "micro: every check passed" : "micro: FAIL (a kernel's result differs from the host's)");

    if (!o.json.empty()) {
        using psk::json::number;
        using psk::json::quote;
        auto list = [](const std::vector<double>& v) {
            std::string s = "[";
            for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + number(v[i]);
            return s + "]";
        };
        std::string j = "{\n";
        j += "  \"tool\": \"psk micro\",\n  \"time_utc\": " + quote(psk::cli::utcNow()) + ",\n";
        j += "  \"device\": " + quote(caps.properties.deviceName) + ",\n  \"driver\": " + quote(caps.driverName + " " + caps.driverInfo) + ",\n";
        j += "  \"multiprocessors\": " + std::to_string(sms) + ",\n  \"multiprocessors_source\": " + quote(smSource) + ",\n";
        j += "  \"quick\": " + std::string(o.quick ? "true" : "false") + ",\n  \"runs\": " + std::to_string(kRuns) + ",\n";
        j += "  \"ok\": " + std::string(ok ? "true" : "false") + ",\n  \"barrier\": [";
        for (size_t i = 0; i < barriers.size(); ++i) {
            const BarrierRow& r = barriers[i];
            const double ns = r.medianMs * 1e6 / r.iterations;
            j += std::string(i ? "," : "") + "\n    {\"threads\": " + std::to_string(r.threads) + ", \"workgroups_per_sm\": " +
                 std::to_string(r.perSm) + ", \"workgroups\": " + std::to_string(r.groups) + ", \"iterations\": " +
                 std::to_string(r.iterations) + ", \"median_ms\": " + (r.runsMs.empty() ? "null" : number(r.medianMs)) +
                 ", \"ns_per_iteration\": " + (r.runsMs.empty() ? "null" : number(ns)) + ", \"ns_per_barrier\": " +
                 (r.runsMs.empty() ? "null" : number(ns / 2)) + ", \"runs_ms\": " + list(r.runsMs) + ", \"ok\": " +
                 (r.ok ? "true" : "false") + ", \"note\": " + quote(r.note) + "}";
        }
        j += "\n  ],\n  \"chase\": [";
        for (size_t i = 0; i < chases.size(); ++i) {
            const ChaseRow& r = chases[i];
            j += std::string(i ? "," : "") + "\n    {\"level\": " + quote(r.level) + ", \"bytes\": " + std::to_string(r.bytes) +
                 ", \"lines\": " + std::to_string(r.lines) + ", \"line_bytes\": " + std::to_string(kLineBytes) + ", \"loads\": " +
                 std::to_string(r.iterations) + ", \"median_ms\": " + number(r.medianMs) + ", \"ns_per_load\": " +
                 number(r.medianMs * 1e6 / r.iterations) + ", \"runs_ms\": " + list(r.runsMs) + ", \"ok\": " + (r.ok ? "true" : "false") +
                 ", \"note\": " + quote(r.note) + "}";
        }
        j += "\n  ]\n}\n";
        std::ofstream f(o.json, std::ios::binary);
        f << j;
        if (!f.flush()) {
            std::fprintf(stderr, "psk micro: cannot write %s\n", o.json.c_str());
            return 1;
        }
    }
    return ok ? 0 : 1;
}
