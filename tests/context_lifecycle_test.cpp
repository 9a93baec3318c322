// Contexts created and destroyed many times in one process, as test binaries and applications that
// open a context per job do: without and with the validation layer, and from 8 threads at once.
// Every cycle creates a context and an attention, runs one small causal forward and destroys them:
// a softmax attention on the one-row FP32 kernel (one pipeline, the staging buffers), every 25th
// cycle a polysketch one (five kernels, a workspace) and every 25th, 12 cycles later, a softmax one
// on the default FP32 kernel (FlashAttention-2). The last two kinds' pipelines take lavapipe some
// 170-250 ms each to compile, too long for every cycle: with the FlashAttention-2 kernel in every
// softmax cycle the loops took 110-240 s each, a third of the whole suite. The checks:
//  - no cycle fails, and every forward gives the first one's output bit for bit;
//  - device memory: the library's count of live VkDeviceMemory objects (lib/vk/memory.hpp) is back
//    to zero after every cycle, so a cycle that leaves one allocation behind fails (a test below
//    shows the check catching exactly one);
//  - host resources (Linux): resident memory, threads, open file descriptors and loaded libraries
//    after the loop against after a warm-up. A GPU driver that leaks descriptors or fails to
//    unload makes context creation fail after some dozens of cycles; these numbers say which.
// And context creation's errors: a driver that is installed but fails to start (a test driver,
// tests/support/failing_icd.c) or a process out of file descriptors is not PSK_ERROR_NO_DEVICE, and
// the message quotes the loader. Before, both came back as NO_DEVICE ("no Vulkan driver is
// installed", "install libvulkan1") with the reason dropped; block_scan_test's last 7 cases once
// failed on an H200 with such a bare NO_DEVICE.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <polysketch/polysketch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#include "support/handles.hpp"
#include "support/layer_lock.hpp"
#include "support/test_context.hpp"
#include "support/scoped_env.hpp"
#include "vk/context.hpp"
#include "vk/memory.hpp"

namespace {

using psk::test::ScopedEnv;
using psk::test::Attention;
using psk::test::Context;
using psk::test::LayerLock;

// Cycle counts. lavapipe, 2 cores, RelWithDebInfo: a one-row softmax cycle alone takes about 28 ms
// without the validation layer; a polysketch or FlashAttention-2 cycle about 200 ms. The loops of
// 500 (20 of each of the two slow kinds) are measured in the test's output line; that keeps each
// test under a minute, so both loops run the full 500.
constexpr int kCycles = 500;
constexpr int kSlowKindEvery = 25;  // a polysketch cycle at 0 modulo this, a FlashAttention-2 one at half of it
constexpr int kWarmUp = 20;  // cycles before the first host-memory reading (allocator arenas, caches)
constexpr int kThreads = 8;
constexpr int kCyclesPerThread = 40;

// Host memory growth allowed from after the warm-up to the end of a loop (480 cycles), measured on
// lavapipe (Debian 12, 2 cores, RelWithDebInfo, free heap pages returned with malloc_trim first):
//  - heap in use (glibc's mallinfo2, every arena): +0.07 MiB without the layer (valgrind finds
//    nothing left at exit), +1.97 MiB with it: Debian 12's validation layer 1.3.239 leaks about
//    4 KiB per command pool under synchronization validation (valgrind: inside the layer, under
//    vkAllocateCommandBuffers and vkCmdDispatch; KhronosGroup/Vulkan-ValidationLayers issue
//    6033). Bound 4 MiB: a leak of about 9 KiB or more per cycle fails.
//  - resident memory (VmRSS): +2.1 to +3.1 MiB without the layer, +2.4 to +4.4 MiB with it, mostly
//    heap fragmentation from lavapipe's shader compiler (the heap in use does not grow). Bound 16
//    MiB: on lavapipe device memory is host memory, so one leaked context or memory block (64 MiB),
//    or a pipeline (some hundred KiB) per cycle, is far above it.
constexpr double kMaxRssGrowthMiB = 16.0;
constexpr double kMaxHeapGrowthMiB = 4.0;
// Threads, file descriptors and libraries must come back to what they were; a little slack for a
// helper a driver starts once (none seen on lavapipe).
constexpr long kSlack = 2;

struct Log {
    std::mutex mutex;
    std::vector<std::string> validation, errors, info;
    static void callback(PskMessageSeverity severity, PskResult result, const char* message, void* user) {
        auto* log = static_cast<Log*>(user);
        std::lock_guard<std::mutex> lock(log->mutex);
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) log->validation.emplace_back(message);
        if (severity == PSK_MESSAGE_SEVERITY_ERROR) log->errors.push_back(std::string(pskResultToString(result)) + ": " + message);
        if (severity == PSK_MESSAGE_SEVERITY_INFO) log->info.emplace_back(message);
    }
    std::string firstError() {
        std::lock_guard<std::mutex> lock(mutex);
        return errors.empty() ? std::string("(no ERROR message)") : errors.front();
    }
};

/** The flags the test support uses: the layer required in CI (PSK_REQUIRE_VALIDATION=1), else wanted. */
PskContextCreateFlags validationFlags() {
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    return require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
}

/** PSK_VALIDATION=1 turns the layer on for every context: off while the no-validation loops run. */
struct WithoutValidationEnv {
    ScopedEnv env{"PSK_VALIDATION", nullptr};
};

/** A small causal problem: 2 query heads on 1 key/value head, 64 rows (2 polysketch blocks). */
struct Problem {
    static constexpr uint32_t kHeads = 2, kKvHeads = 1, kN = 64, kH = 16, kDv = 16;
    std::vector<float> q = psk::test::randomNormal(size_t(kHeads) * kN * kH, 11);
    std::vector<float> k = psk::test::randomNormal(size_t(kKvHeads) * kN * kH, 12);
    std::vector<float> v = psk::test::randomNormal(size_t(kKvHeads) * kN * kDv, 13);
};

struct CycleOutcome {
    std::string failure;  // empty on success
    std::vector<float> out;
    uint64_t liveAllocationsDuring = 0;
    size_t validationMessages = 0;
};

/**
 * Create a context, an attention and run one forward; destroy both. Never throws and uses no gtest
 * assertion (it runs on several threads).
 */
CycleOutcome runCycle(PskContextCreateFlags flags, const Problem& p, PskAttentionKind kind, LayerLock layer = {}) {
    CycleOutcome outcome;
    Log log;
    PskContextCreateInfo ci{};
    ci.flags = flags;
    ci.messageCallback = &Log::callback;
    ci.messageUserData = &log;
    PskResult r;
    psk::test::LockedContext context = psk::test::createLockedContext(ci, layer, &r);
    if (r != PSK_SUCCESS) {
        outcome.failure = std::string("pskCreateContext: ") + log.firstError();
        return outcome;
    }
    {
        // Released before the context is destroyed (declared after it).
        const auto held = layer.shared();
        PskAttentionCreateInfo ai{};
        ai.kind = kind;
        ai.flags = PSK_ATTENTION_CAUSAL_BIT;
        if (kind == PSK_ATTENTION_KIND_POLYSKETCH) {
            ai.degree = 4;
            ai.scale = 1.0f / std::sqrt(float(Problem::kH));
            ai.sketchSize = 16;
            ai.blockSize = 32;
            ai.seed = 7;
        }
        ai.numQueryHeads = Problem::kHeads;
        ai.numKeyValueHeads = Problem::kKvHeads;
        ai.headDim = Problem::kH;
        ai.valueDim = Problem::kDv;
        PskAttention rawAttention = nullptr;
        r = pskCreateAttention(context.get(), &ai, &rawAttention);
        if (r != PSK_SUCCESS) {
            outcome.failure = std::string("pskCreateAttention: ") + log.firstError();
            return outcome;
        }
        Attention attention(rawAttention);
        outcome.out.assign(size_t(Problem::kHeads) * Problem::kN * Problem::kDv, NAN);
        PskForwardHostInfo f{};
        f.seqLen = Problem::kN;
        f.q = p.q.data();
        f.k = p.k.data();
        f.v = p.v.data();
        f.out = outcome.out.data();
        f.qBytes = p.q.size() * sizeof(float);
        f.kBytes = p.k.size() * sizeof(float);
        f.vBytes = p.v.size() * sizeof(float);
        f.outBytes = outcome.out.size() * sizeof(float);
        r = pskAttentionForwardHost(attention.get(), &f);
        if (r != PSK_SUCCESS) {
            outcome.failure = std::string("pskAttentionForwardHost: ") + log.firstError();
            return outcome;
        }
        outcome.liveAllocationsDuring = psk::liveDeviceMemoryAllocations();
    }
    context.reset();
    std::lock_guard<std::mutex> lock(log.mutex);
    outcome.validationMessages = log.validation.size();
    if (!log.validation.empty()) outcome.failure = "validation message: " + log.validation.front();
    if (!log.errors.empty()) outcome.failure = "ERROR message: " + log.errors.front();
    return outcome;
}

/** What this process holds; -1 where it cannot be read (not Linux; heapKiB: not glibc 2.33+). */
struct Resources {
    long rssKiB = -1, heapKiB = -1, threads = -1, fds = -1, libraries = -1;
};

Resources resources() {
    Resources r;
#if defined(__linux__)
#if defined(__GLIBC__)
    // Free heap pages back to the system first, so that the reading is memory in use rather than
    // what fragmentation keeps (lavapipe's shader compiler leaves some behind).
    malloc_trim(0);
#if __GLIBC_PREREQ(2, 33)
    // Bytes malloc has handed out and not taken back, in every arena: what a leak grows.
    const struct mallinfo2 heap = mallinfo2();
    r.heapKiB = long((heap.uordblks + heap.hblkhd) / 1024);
#endif
#endif
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        while (std::fgets(line, sizeof(line), f)) {
            if (std::strncmp(line, "VmRSS:", 6) == 0) r.rssKiB = std::atol(line + 6);
            if (std::strncmp(line, "Threads:", 8) == 0) r.threads = std::atol(line + 8);
        }
        std::fclose(f);
    }
    if (DIR* d = opendir("/proc/self/fd")) {
        long n = 0;
        while (readdir(d)) ++n;
        closedir(d);
        r.fds = n - 3;  // ".", ".." and the directory's own descriptor
    }
    long libraries = 0;
    dl_iterate_phdr(
        [](dl_phdr_info*, size_t, void* count) {
            ++*static_cast<long*>(count);
            return 0;
        },
        &libraries);
    r.libraries = libraries;
#endif
    return r;
}

std::string describe(const Resources& r) {
    char text[200];
    std::snprintf(text, sizeof(text), "RSS %.1f MiB, heap in use %.2f MiB, %ld threads, %ld fds, %ld libraries", r.rssKiB / 1024.0,
                  r.heapKiB / 1024.0, r.threads, r.fds, r.libraries);
    return text;
}

/** Live device memory: VkDeviceMemory objects, and the buffers' ranges carved from them. */
struct DeviceMemory {
    uint64_t allocations = psk::liveDeviceMemoryAllocations();
    uint64_t ranges = psk::liveSuballocations();
};

/** Fails the test when live device memory is not back at `baseline` (with how much is left). */
void expectDeviceMemoryReleased(const DeviceMemory& baseline, const std::string& when) {
    const DeviceMemory now;
    EXPECT_TRUE(now.allocations == baseline.allocations && now.ranges == baseline.ranges)
        << when << ": " << int64_t(now.allocations - baseline.allocations) << " VkDeviceMemory allocation(s) ("
        << psk::liveDeviceMemoryBytes() << " bytes live in all) and " << int64_t(now.ranges - baseline.ranges)
        << " buffer allocation(s) left behind";
}

/** Threads, descriptors and libraries back to the warm-up's; resident memory within its bound. */
void expectNoGrowth(const Resources& before, const Resources& after, bool checkRss) {
    std::printf("[ lifecycle ] after warm-up: %s\n[ lifecycle ] at the end:    %s\n", describe(before).c_str(), describe(after).c_str());
    if (before.threads < 0) {
        std::printf("[ lifecycle ] host resources not checked (no /proc/self)\n");
        return;
    }
    EXPECT_LE(after.threads, before.threads + kSlack) << "threads left running";
    EXPECT_LE(after.fds, before.fds + kSlack) << "file descriptors left open";
    EXPECT_LE(after.libraries, before.libraries + kSlack) << "libraries left loaded";
    if (checkRss) {
        const double growthMiB = (after.rssKiB - before.rssKiB) / 1024.0;
        const double heapMiB = (after.heapKiB - before.heapKiB) / 1024.0;
        std::printf("[ lifecycle ] RSS growth %.2f MiB (bound %.0f), heap in use %+.2f MiB (bound %.0f)\n", growthMiB,
                    kMaxRssGrowthMiB, heapMiB, kMaxHeapGrowthMiB);
        EXPECT_LE(growthMiB, kMaxRssGrowthMiB) << "resident memory grew";
        if (before.heapKiB >= 0) {
            EXPECT_LE(heapMiB, kMaxHeapGrowthMiB) << "heap in use grew";
        }
    }
}

/** The single-threaded loop: kCycles cycles, every check after every cycle. */
void runLoop(PskContextCreateFlags flags) {
    const Problem problem;
    const DeviceMemory baseline;
    enum Kind { kSoftmaxRows, kPolysketch, kSoftmaxFlash };
    std::vector<float> first[3];  // the first output of each kind
    Resources afterWarmUp;
    const auto start = std::chrono::steady_clock::now();
    for (int cycle = 0; cycle < kCycles; ++cycle) {
        const int slot = cycle % kSlowKindEvery;
        const Kind kind = slot == 0 ? kPolysketch : slot == kSlowKindEvery / 2 ? kSoftmaxFlash : kSoftmaxRows;
        const ScopedEnv fp32Kernel("PSK_FP32_BASELINE", kind == kSoftmaxRows ? "rows" : "flash");
        const CycleOutcome o = runCycle(flags, problem, kind == kPolysketch ? PSK_ATTENTION_KIND_POLYSKETCH : PSK_ATTENTION_KIND_SOFTMAX);
        ASSERT_EQ(o.failure, "") << "cycle " << cycle;
        ASSERT_GT(o.liveAllocationsDuring, baseline.allocations) << "cycle " << cycle << ": the forward allocated no device memory?";
        expectDeviceMemoryReleased(baseline, "after cycle " + std::to_string(cycle));
        if (::testing::Test::HasFailure()) return;
        std::vector<float>& want = first[kind];
        if (want.empty()) {
            want = o.out;
            for (float x : want) ASSERT_TRUE(std::isfinite(x)) << "cycle " << cycle << ": output not finite";
        } else {
            ASSERT_EQ(std::memcmp(o.out.data(), want.data(), want.size() * sizeof(float)), 0)
                << "cycle " << cycle << ": output differs from the first one of its kind";
        }
        if (cycle + 1 == kWarmUp) afterWarmUp = resources();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ lifecycle ] %d cycles in %.1f s (%.1f ms each)\n", kCycles, seconds, 1000 * seconds / kCycles);
    expectNoGrowth(afterWarmUp, resources(), true);
}

TEST(ContextLifecycle, FiveHundredCyclesWithoutValidation) {
    WithoutValidationEnv noLayer;
    runLoop(0);
}

TEST(ContextLifecycle, FiveHundredCyclesWithValidation) { runLoop(validationFlags()); }

/** 8 threads of 40 cycles each at once; every forward must match the single-threaded one. */
void runEightThreads(PskContextCreateFlags flags, LayerLock layer) {
    const Problem problem;
    const DeviceMemory baseline;
    // Softmax on the one-row kernel, as most cycles of the loops above (set before any thread starts).
    const ScopedEnv fp32Kernel("PSK_FP32_BASELINE", "rows");
    // One cycle of each kind first: the outputs every thread must reproduce, and the warm-up.
    const CycleOutcome reference[2] = {runCycle(flags, problem, PSK_ATTENTION_KIND_SOFTMAX),
                                       runCycle(flags, problem, PSK_ATTENTION_KIND_POLYSKETCH)};
    ASSERT_EQ(reference[0].failure, "");
    ASSERT_EQ(reference[1].failure, "");
    const Resources before = resources();

    std::vector<std::string> failures(kThreads);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < kThreads; ++t)
        pool.emplace_back([&, t] {
            ++ready;
            while (!go.load()) std::this_thread::yield();
            for (int cycle = 0; cycle < kCyclesPerThread && failures[t].empty(); ++cycle) {
                const bool polysketch = cycle == 0;
                const CycleOutcome o =
                    runCycle(flags, problem, polysketch ? PSK_ATTENTION_KIND_POLYSKETCH : PSK_ATTENTION_KIND_SOFTMAX, layer);
                const std::vector<float>& want = reference[polysketch].out;
                if (!o.failure.empty())
                    failures[t] = "cycle " + std::to_string(cycle) + ": " + o.failure;
                else if (std::memcmp(o.out.data(), want.data(), want.size() * sizeof(float)) != 0)
                    failures[t] = "cycle " + std::to_string(cycle) + ": output differs from the single-threaded one";
            }
        });
    while (ready.load() < kThreads) std::this_thread::yield();
    go = true;
    for (std::thread& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ lifecycle ] %d threads x %d cycles in %.1f s\n", kThreads, kCyclesPerThread, seconds);

    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
    expectDeviceMemoryReleased(baseline, "after every thread");
    // Resident memory is not compared here: each thread's malloc arena keeps what it used.
    expectNoGrowth(before, resources(), false);
}

// The library's own concurrency: contexts created, used and destroyed at once on 8 threads.
TEST(ContextLifecycle, EightThreadsAtOnceWithoutValidation) {
    WithoutValidationEnv noLayer;
    runEightThreads(0, LayerLock{});
}

// With the layer: creation and destruction one thread at a time (support/layer_lock.hpp says
// why), the forwards and everything between at once.
TEST(ContextLifecycle, EightThreadsAtOnceWithValidation) {
    std::shared_mutex layerMaps;
    runEightThreads(validationFlags(), LayerLock{&layerMaps});
}

// The device-memory check is able to fail: one allocation left alive is reported as such (a block
// lives as long as its context; a buffer's range until it is released).
TEST(ContextLifecycle, LeakCheckSeesOneAllocation) {
    const DeviceMemory baseline;
    {
        WithoutValidationEnv noLayer;
        Log log;
        PskContextCreateInfo ci{};
        ci.messageCallback = &Log::callback;
        ci.messageUserData = &log;
        PskContext raw = nullptr;
        ASSERT_EQ(pskCreateContext(&ci, &raw), PSK_SUCCESS) << log.firstError();
        Context context(raw);
        EXPECT_EQ(psk::liveDeviceMemoryAllocations(), baseline.allocations) << "a new context holds no device memory yet";
        psk::Buffer buffer(context->allocator(), 256, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, psk::MemoryUsage::DeviceLocal);
        EXPECT_EQ(psk::liveDeviceMemoryAllocations(), baseline.allocations + 1);
        EXPECT_EQ(psk::liveSuballocations(), baseline.ranges + 1);
        EXPECT_NONFATAL_FAILURE(expectDeviceMemoryReleased(baseline, "with one block alive"), "1 VkDeviceMemory allocation(s)");
        // The buffer released, its block stays with the allocator (reused) until the context goes.
        buffer.reset();
        EXPECT_EQ(psk::liveSuballocations(), baseline.ranges);
        EXPECT_NONFATAL_FAILURE(expectDeviceMemoryReleased(baseline, "with the context alive"), "1 VkDeviceMemory allocation(s)");
    }
    expectDeviceMemoryReleased(baseline, "after the context");
}

// -----------------------------------------------------------------------------------------------
// Context creation's errors say what failed
// -----------------------------------------------------------------------------------------------

struct CreateResult {
    PskResult code;
    std::string message;
    std::vector<std::string> info;
};

CreateResult tryCreate(const char* device = nullptr) {
    Log log;
    PskContextCreateInfo ci{};
    ci.device = device;
    ci.messageCallback = &Log::callback;
    ci.messageUserData = &log;
    PskContext raw = nullptr;
    const PskResult code = pskCreateContext(&ci, &raw);
    pskDestroyContext(raw);
    std::lock_guard<std::mutex> lock(log.mutex);
    return {code, log.errors.empty() ? std::string() : log.errors.front(), log.info};
}

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

#if defined(PSK_FAILING_ICD_MANIFEST)

// The only driver fails in its vkCreateInstance: the loader skips it and returns
// VK_ERROR_INCOMPATIBLE_DRIVER, which used to become NO_DEVICE "no Vulkan driver is installed".
TEST(ContextCreation, DriverThatFailsToStartIsNotNoDevice) {
    WithoutValidationEnv noLayer;
    ScopedEnv files("VK_DRIVER_FILES", PSK_FAILING_ICD_MANIFEST);
    ScopedEnv legacy("VK_ICD_FILENAMES", PSK_FAILING_ICD_MANIFEST);
    ScopedEnv add("VK_ADD_DRIVER_FILES", nullptr);
    ScopedEnv device("PSK_DEVICE", nullptr);
    // VK_ERROR_INITIALIZATION_FAILED, VK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_DEVICE_LOST. Loaders
    // from 1.3.2xx on quote the driver's code, and then the result is its PskResult.
    for (const char* driverResult : {"-3", "-2", "-4"}) {
        SCOPED_TRACE(std::string("the driver's vkCreateInstance returns ") + driverResult);
        ScopedEnv result("PSK_FAILING_ICD_RESULT", driverResult);
        const CreateResult r = tryCreate();
        EXPECT_NE(r.code, PSK_ERROR_NO_DEVICE) << r.message;
        EXPECT_TRUE(r.code == PSK_ERROR_VULKAN || r.code == PSK_ERROR_OUT_OF_DEVICE_MEMORY || r.code == PSK_ERROR_DEVICE_LOST)
            << pskResultToString(r.code) << ": " << r.message;
        EXPECT_TRUE(has(r.message, "vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER (-9)")) << r.message;
        EXPECT_TRUE(has(r.message, "installed but did not start")) << r.message;
        EXPECT_TRUE(has(r.message, "the Vulkan loader said:") && has(r.message, "ICD")) << r.message;
    }
}

// A manifest whose library is not there is no driver: that stays NO_DEVICE, with the loader's reason.
TEST(ContextCreation, MissingDriverIsNoDeviceWithTheLoadersReason) {
    WithoutValidationEnv noLayer;
    ScopedEnv files("VK_DRIVER_FILES", PSK_MISSING_ICD_MANIFEST);
    ScopedEnv legacy("VK_ICD_FILENAMES", PSK_MISSING_ICD_MANIFEST);
    ScopedEnv add("VK_ADD_DRIVER_FILES", nullptr);
    ScopedEnv device("PSK_DEVICE", nullptr);
    const CreateResult r = tryCreate();
    EXPECT_EQ(r.code, PSK_ERROR_NO_DEVICE) << r.message;
    EXPECT_TRUE(has(r.message, "No such file or directory")) << r.message;
}

// One driver fails, another starts (as an NVIDIA driver that fails next to lavapipe): the context
// is created on the other one, the skipped driver is reported as INFO, and a selector naming a
// device the failed driver would have had is a driver failure, not NO_DEVICE.
TEST(ContextCreation, SkippedDriverIsReportedAndExplainsAMissingDevice) {
    WithoutValidationEnv noLayer;
    ScopedEnv add("VK_ADD_DRIVER_FILES", PSK_FAILING_ICD_MANIFEST);
    ScopedEnv result("PSK_FAILING_ICD_RESULT", "-3");
    ScopedEnv device("PSK_DEVICE", nullptr);
    const CreateResult ok = tryCreate();
    ASSERT_EQ(ok.code, PSK_SUCCESS) << ok.message;
    bool reported = false;
    for (const std::string& m : ok.info) reported |= has(m, "the Vulkan loader:") && has(m, "ICD");
    EXPECT_TRUE(reported) << "no INFO message about the skipped driver";

    const CreateResult missing = tryCreate("no-such-gpu");
    EXPECT_EQ(missing.code, PSK_ERROR_VULKAN) << missing.message;
    EXPECT_TRUE(has(missing.message, "no Vulkan device name contains \"no-such-gpu\"")) << missing.message;
    EXPECT_TRUE(has(missing.message, "devices present: [0]")) << missing.message;
    EXPECT_TRUE(has(missing.message, "installed but did not start")) << missing.message;
}

#endif  // PSK_FAILING_ICD_MANIFEST

#if defined(__linux__)

// A process out of file descriptors (a leak elsewhere, or a driver's) cannot load Vulkan at all:
// that is not NO_DEVICE ("install libvulkan1"), and the message says so.
TEST(ContextCreation, OutOfFileDescriptorsIsNotNoDevice) {
    WithoutValidationEnv noLayer;
    rlimit saved{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
    // A low soft limit (restored below) so that filling it is quick whatever the hard limit is.
    rlimit low = saved;
    low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, rlim_t(resources().fds + 64));
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    std::vector<int> fds;
    for (;;) {
        const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) break;
        fds.push_back(fd);
    }
    const CreateResult r = tryCreate();
    for (int fd : fds) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved);
    EXPECT_NE(r.code, PSK_ERROR_NO_DEVICE) << r.message;
    EXPECT_NE(r.code, PSK_SUCCESS);
    EXPECT_TRUE(has(r.message, "Too many open files")) << r.message;
    // And with descriptors back, contexts work again.
    const CreateResult after = tryCreate();
    EXPECT_EQ(after.code, PSK_SUCCESS) << after.message;
}

#endif  // __linux__

}  // namespace

// ---- Memory types ----

namespace {
VkPhysicalDeviceMemoryProperties memoryTypes(std::initializer_list<VkMemoryPropertyFlags> flags) {
    VkPhysicalDeviceMemoryProperties p{};
    for (VkMemoryPropertyFlags f : flags) p.memoryTypes[p.memoryTypeCount++].propertyFlags = f;
    return p;
}
constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
constexpr VkMemoryPropertyFlags kCached = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
}  // namespace

// A discrete GPU's list (as NVIDIA's drivers give it: device-local, host memory, host cached, then
// the BAR: device-local and host-visible): staging stays in host memory, readback in cached host
// memory, and what kernels read straight from a mapping (HostWriteDeviceRead) goes to the BAR, or
// to host memory once the BAR is full or where there is none. On unified memory (lavapipe: every
// type both) each usage finds one.
TEST(MemoryTypes, KernelReadInputsGoToDeviceLocalHostVisibleMemory) {
    const auto gpu = memoryTypes({kLocal, kHost, kHost | kCached, kLocal | kHost});
    EXPECT_EQ(psk::chooseMemoryType(gpu, ~0u, psk::MemoryUsage::DeviceLocal), 0u);
    EXPECT_EQ(psk::chooseMemoryType(gpu, ~0u, psk::MemoryUsage::HostUpload), 1u);
    EXPECT_EQ(psk::chooseMemoryType(gpu, ~0u, psk::MemoryUsage::HostReadback), 2u);
    EXPECT_EQ(psk::chooseMemoryType(gpu, ~0u, psk::MemoryUsage::HostWriteDeviceRead), 3u);
    EXPECT_EQ(psk::chooseMemoryType(gpu, ~0u, psk::MemoryUsage::HostWriteDeviceRead, true), 1u);
    EXPECT_EQ(psk::chooseMemoryType(gpu, ~0u & ~(1u << 3), psk::MemoryUsage::HostWriteDeviceRead), 1u);  // the buffer may not live there
    const auto noBar = memoryTypes({kLocal, kHost, kHost | kCached});
    EXPECT_EQ(psk::chooseMemoryType(noBar, ~0u, psk::MemoryUsage::HostWriteDeviceRead), 1u);
    const auto unified = memoryTypes({kLocal | kHost, kLocal | kHost | kCached});
    EXPECT_EQ(psk::chooseMemoryType(unified, ~0u, psk::MemoryUsage::HostWriteDeviceRead), 0u);
    EXPECT_EQ(psk::chooseMemoryType(unified, ~0u, psk::MemoryUsage::HostWriteDeviceRead, true), 0u);
    EXPECT_EQ(psk::chooseMemoryType(memoryTypes({kLocal}), ~0u, psk::MemoryUsage::HostWriteDeviceRead), ~0u);
}
