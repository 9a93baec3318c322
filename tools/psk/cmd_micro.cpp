// psk micro: machine constants of the performance model (docs/MODEL.md, docs/predictions.py's
// Machine) measured through Vulkan on the chosen device, in a few seconds:
//   - the workgroup barrier round (Machine.barrier): micro_barrier.comp loops over a shared load of
//     a neighbour's value, barrier, a shared store, barrier; THREADS = 64, 128, 256 invocations,
//     1 and 4 workgroups per multiprocessor;
//   - the latency of a dependent load (Machine.lat_l2, Machine.lat_hbm): micro_chase.comp, one
//     invocation following i = chain[i] through a random single cycle over 128-byte lines of a
//     4 MiB buffer (L2-resident on a GPU with tens of MiB of L2) and of the largest power of two
//     <= min(1 GiB, maxStorageBufferRange, a quarter of device-local memory) (HBM);
//   - the cost of a dependent dispatch (Machine.launch): micro_chase.comp dispatched 256 times in
//     one command buffer, one workgroup and one load each, a barrier between each pair;
//   - how many loads an invocation keeps in flight (the model's latency chains assume a staging
//     round's loads overlap, and that loads issued before a barrier stay in flight across it):
//     micro_inflight.comp, 8 chains of the same cycles per workgroup, the loop over the loads over a
//     literal count (unrolled when compiled), a specialization constant (the kernels' staging loops:
//     the driver must unroll them) and a push constant (a loop no compiler can unroll: the rolled
//     reference); and a round of dependent integer work alone, under the loads, and between two
//     barriers with the loads issued before the first (the kernels' prefetch of the next tile);
//   - the cost of staging 16-bit operands in shared memory 2 bytes or 16 bytes per store:
//     micro_shared_store.comp stores a 64 x 64 tile of float16 operands per workgroup and round in
//     the cooperative kernels' layout (rows of 64 padded by 8), a 16-byte chunk of 8 operands as
//     eight 16-bit stores (the kernels' put_chunk before the packed operand pool) or as one
//     16-byte store (and, to tell the store count from the layout's bank conflicts, as eight 16-bit
//     stores with each warp's 64 bytes contiguous), then a barrier, one word read back, a barrier; THREADS = 128 and 256, 1 and 4
//     workgroups per multiprocessor. The barrier round above (two barriers with a shared load and
//     store) is in every round: the baseline to subtract before comparing the stores with a model
//     of the shared-memory data path. Needs shaderFloat16 (skipped without it);
//   - cooperative-matrix products (Machine.tc_vk, and the model's charge for a fragment load):
//     micro_coopmat.comp, 4 subgroups per workgroup, 4 accumulators each, a product per
//     accumulator and step with its operands in registers (the product rate alone), or loaded
//     from shared memory before each product (the feature map's pattern), A once per step and B
//     per product (the output's and the block states'), or from a uvec4 array (the packed pools);
//     1 and 4 workgroups per multiprocessor, on the path the library's kernels take on the device
//     (KHR or NV, its shape); on a CPU device the emulated backend checks the harness alone.
// Each configuration: one untimed warm-up run, then the median GPU time (timestamps around the
// dispatch only: uploads and readbacks are outside the timed span) of 5 runs. Every result is
// checked against the host's own computation (workgroup 0's and the last workgroup's values; the
// chain's index after the steps), so a loop the driver cut short (llvmpipe ends an invocation's
// loops after 65535 iterations in total) is a FAIL, not a fast number.
//
// The kernels are the library's tools-only kernels (kernels/kernel_table.hpp: MicroBarrier,
// MicroChase, MicroInflight, MicroSharedStore, MicroCoopMat; shaders/interface/micro.h), run on a context of the library's own
// objects that psk links statically (psk_micro_lib, tools/CMakeLists.txt), as the shared library
// hides them.
#include <polysketch/polysketch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "forward/coopmat_selection.hpp"
#include "json.hpp"
#include "kernels/kernel_dispatch.hpp"
#include "kernels/kernel_pipeline.hpp"
#include "kernels/kernel_table.hpp"
#include "tool_context.hpp"
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
constexpr uint32_t kSharedStoreSeed = 67890;
constexpr uint32_t kTileChunks = 64 * 8;                  // micro_shared_store.comp: 16-byte chunks per 64 x 64 tile
constexpr uint32_t kTileSharedBytes = 2 * 64 * 72 * 2;    // its two pools (16-bit and uvec4), 64 rows of 72 halves each
constexpr uint32_t kCoopSeed = 424242;
constexpr uint32_t kCoopSubgroups = 4;                    // micro_coopmat.comp: subgroups per workgroup
constexpr uint32_t kCoopAccumulators = PSK_MICRO_COOPMAT_WN;  // ... accumulators per subgroup
constexpr uint32_t kCoopTiles = PSK_MICRO_COOPMAT_TILES;      // ... A and B tiles in shared memory

const char* kUsage =
    "usage: psk micro [--quick] [--device N|NAME] [--json FILE] [--sms N]\n"
    "\n"
    "Measures machine constants of the performance model (docs/MODEL.md) on the device with GPU\n"
    "timestamps, the median of 5 runs after one warm-up run:\n"
    "  barrier round   micro_barrier.comp: each invocation loops over a shared load of a neighbour's\n"
    "                  value, barrier(), a shared store, barrier(); 64, 128 and 256 invocations per\n"
    "                  workgroup, 1 and 4 workgroups per multiprocessor. Reports ns per iteration\n"
    "                  (the dispatch's time / iterations) and ns per barrier (half of it).\n"
    "  dependent load  micro_chase.comp: one invocation follows i = chain[i] through a random cycle\n"
    "                  over 128-byte lines (every load a new line) of a 4 MiB buffer (L2) and of the\n"
    "                  largest power of two <= min(1 GiB, maxStorageBufferRange, device-local memory / 4)\n"
    "                  (HBM). Reports ns per load.\n"
    "  loads in flight micro_inflight.comp: one workgroup of 128 invocations per multiprocessor follows 8\n"
    "                  chains of the same cycles (L2 and HBM), one load per chain and round, with the\n"
    "                  loops over the loads written over a literal count, a specialization constant\n"
    "                  and a push constant; and 32 dependent integer steps per round alone, under the\n"
    "                  loads, and between two barriers with and without the loads issued before them.\n"
    "                  Reports ns per round, each form's time over the literal loads', and the share\n"
    "                  of the loads' latency hidden under the work, without and across the barriers.\n"
    "  shared stores   micro_shared_store.comp: each workgroup stores a 64 x 64 tile of float16 operands\n"
    "                  (rows of 64 padded by 8) per iteration, each 16-byte chunk of 8 operands as eight\n"
    "                  16-bit stores or as one 16-byte store, then barrier(), one word read back,\n"
    "                  barrier(); 128 and 256 invocations, 1 and 4 workgroups per multiprocessor. A\n"
    "                  third form stores 16 bits at a time with each warp's 64 bytes contiguous (no\n"
    "                  bank conflicts): the store count's cost apart from the layout's conflicts.\n"
    "                  Reports ns per iteration and the ratio 16-bit / 16-byte; an iteration includes\n"
    "                  the barrier round's two barriers, load and store (the baseline to subtract).\n"
    "                  Skipped without shaderFloat16.\n"
    "  coop products   micro_coopmat.comp: 4 subgroups per workgroup, 4 float32 accumulators each, one\n"
    "                  cooperative product per accumulator and step, its operands (16-bit) in registers\n"
    "                  ('registers'), loaded from shared memory right before it ('reload': two fragment\n"
    "                  loads), A once per step and B per product ('reuse A': 1.25 loads), or as 'reload'\n"
    "                  from a uvec4 array ('packed'); 1 and 4 workgroups per multiprocessor. Reports\n"
    "                  TFLOP/s over the device and ns per product and multiprocessor. Runs the path\n"
    "                  the library's kernels take (PSK_DISABLE_COOPMAT applies); on a CPU device the\n"
    "                  emulated backend (a check of the harness, not a rate); skipped on a GPU without.\n"
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

// A row of a kernel that loops over workgroup rounds (micro_barrier.comp, micro_shared_store.comp).
struct RoundRow {
    uint32_t threads = 0, perSm = 0, groups = 0, iterations = 0;
    uint32_t form = 0;  // shared stores: 0 eight 16-bit stores per chunk (the kernels' layout), 1 one 16-byte store, 2 eight contiguous ones
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

/** micro_shared_store.comp's word k of chunk c stored by an invocation whose value is v (chunk_hash, chunk_word). */
uint32_t sharedStoreWord(uint32_t v, uint32_t c, uint32_t k) {
    uint32_t h = v ^ (c * 0x9E3779B9u);
    h ^= h >> 15;
    return 0x3C003C00u | ((h + k * 0x01F30217u) & 0x03FF03FFu);
}

/**
 * micro_shared_store.comp's values of workgroup `group` after `iterations` rounds, computed on the
 * host (either store width: the halves are normal numbers, so the float16 round trip keeps their
 * bits). In round i invocation t reads word i % 4 of chunk t + 1, which invocation (t + 1) % threads
 * built from its value of that round.
 */
std::vector<uint32_t> hostSharedStoreValues(uint32_t threads, uint32_t group, uint32_t iterations, uint32_t seed) {
    std::vector<uint32_t> v(threads), word(threads);
    for (uint32_t t = 0; t < threads; ++t) v[t] = (t + 1u) * 2654435761u + seed + group * 40503u;
    for (uint32_t i = 0; i < iterations; ++i) {
        for (uint32_t t = 0; t < threads; ++t) {
            const uint32_t c = t + 1 == kTileChunks ? 0 : t + 1;
            word[t] = sharedStoreWord(v[c % threads], c, i & 3u);
        }
        for (uint32_t t = 0; t < threads; ++t) v[t] = v[t] * 1664525u + word[t] + i;
    }
    return v;
}

constexpr VkBufferUsageFlags kStorage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                        VK_BUFFER_USAGE_TRANSFER_DST_BIT;

psk::BufferRange whole(const psk::Buffer& b) { return {b.handle(), 0, b.size()}; }

/**
 * One untimed warm-up dispatch of `groups` workgroups and kRuns timed ones (GPU timestamps around
 * the dispatch alone), each followed by a copy of `result` into `readback`: the timed runs' ms.
 * `before(run, rec)`, where given, prepares each run (host writes, commands before the timed span).
 */
template <typename Bindings>
std::vector<double> timedRuns(psk::Submitter& submitter, const psk::KernelPipeline& pipeline, const Bindings& b,
                              const psk::kernel::MicroPush& push, uint32_t groups, const psk::Buffer& result, const psk::Buffer& readback,
                              const std::function<void(uint32_t, psk::Recorder&)>& before = {}) {
    std::vector<double> runsMs;
    for (uint32_t run = 0; run <= kRuns; ++run) {  // run 0: the warm-up
        double ms = 0;
        submitter.run(
            [&](psk::Recorder& rec) {
                if (before) before(run, rec);
                submitter.startTiming();
                psk::recordKernel(rec, pipeline, b, push, groups);
                submitter.stopTiming();
                rec.copy(whole(result), whole(readback), result.size());
            },
            &ms);
        if (run > 0) runsMs.push_back(ms);
    }
    return runsMs;
}

/**
 * Runs a round kernel (bindings: one uint per invocation) over row.groups workgroups of row.threads
 * invocations: one warm-up and kRuns timed runs; row.ok when workgroup 0's and the last one's
 * values are hostValues(threads, group, iterations, seed).
 */
template <psk::KernelId Id, typename HostValues>
void runRounds(PskContext_T& ctx, psk::Submitter& submitter, const typename psk::KernelInterface<Id>::Spec& spec, uint32_t seed,
               HostValues hostValues, RoundRow& row) {
    const psk::KernelPipeline pipeline =
        psk::kernelPipeline(ctx.pipelines(), psk::KernelChoice::make<Id>("", PSK_DATA_TYPE_FLOAT32, spec, "psk micro"));
    const VkDeviceSize bytes = VkDeviceSize(row.groups) * row.threads * 4;
    psk::Buffer result(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer readback(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::HostReadback);
    typename psk::KernelInterface<Id>::Bindings b;
    b.RESULT = whole(result);
    row.runsMs = timedRuns(submitter, pipeline, b, psk::kernel::MicroPush{row.iterations, seed, 0}, row.groups, result, readback);
    row.medianMs = median(row.runsMs);
    // Workgroup 0 and the last one against the host's rounds.
    row.ok = true;
    const auto* got = reinterpret_cast<const uint32_t*>(readback.mapped());
    for (uint32_t group : {0u, row.groups - 1}) {
        const std::vector<uint32_t> want = hostValues(row.threads, group, row.iterations, seed);
        if (std::memcmp(got + size_t(group) * row.threads, want.data(), size_t(row.threads) * 4) != 0) {
            row.ok = false;
            row.note = "workgroup " + std::to_string(group) + "'s values differ from the host's " + std::to_string(row.iterations) +
                       " rounds (a loop cut short?)";
        }
    }
}

/** A row of threads x perSm workgroups per multiprocessor; its note says why it is skipped where the
 *  device's workgroup limits rule it out (a note left empty: runnable). */
RoundRow newRoundRow(const PskContext_T& ctx, uint32_t threads, uint32_t perSm, uint32_t sms, uint32_t iterations) {
    RoundRow row;
    row.threads = threads;
    row.perSm = perSm;
    row.groups = perSm * sms;
    row.iterations = iterations;
    const VkPhysicalDeviceLimits& limits = ctx.caps().limits();
    if (threads > limits.maxComputeWorkGroupInvocations || threads > limits.maxComputeWorkGroupSize[0])
        row.note = "skipped: more invocations than the device's workgroup limit";
    return row;
}

RoundRow runBarrier(PskContext_T& ctx, psk::Submitter& submitter, uint32_t threads, uint32_t perSm, uint32_t sms,
                    uint32_t iterations) {
    RoundRow row = newRoundRow(ctx, threads, perSm, sms, iterations);
    if (!row.note.empty()) return row;
    psk::kernel::MicroBarrierSpec spec;
    spec.THREADS = threads;
    runRounds<psk::KernelId::MicroBarrier>(ctx, submitter, spec, kBarrierSeed, hostBarrierValues, row);
    return row;
}

RoundRow runSharedStore(PskContext_T& ctx, psk::Submitter& submitter, uint32_t threads, uint32_t perSm, uint32_t form, uint32_t sms,
                        uint32_t iterations) {
    RoundRow row = newRoundRow(ctx, threads, perSm, sms, iterations);
    row.form = form;
    if (!ctx.caps().shaderFloat16) row.note = "skipped: no shaderFloat16 (float16_t in shared memory)";
    if (ctx.caps().limits().maxComputeSharedMemorySize < kTileSharedBytes)
        row.note = "skipped: less shared memory than the kernel's " + std::to_string(kTileSharedBytes) + " bytes";
    if (!row.note.empty()) return row;
    if (kTileChunks % threads != 0) psk::fail(PSK_ERROR_INTERNAL, "psk micro: THREADS must divide the tile's 512 chunks");
    psk::kernel::MicroSharedStoreSpec spec;
    spec.THREADS = threads;
    spec.PACKED = form;
    runRounds<psk::KernelId::MicroSharedStore>(ctx, submitter, spec, kSharedStoreSeed, hostSharedStoreValues, row);
    return row;
}

/**
 * A random single cycle over the 128-byte lines of `bytes` (Sattolo's shuffle) in a device buffer
 * as micro_chase.comp and micro_inflight.comp read it: the first uint of each line holds the next
 * line's element index (the rest is never read). One per level, shared by both kernels' rows.
 */
struct ChainLevel {
    std::string level;
    uint64_t bytes = 0;
    uint32_t lines = 0;
    std::vector<uint32_t> next;   // next[line]: the line after it
    std::vector<uint32_t> order;  // order[p]: the line p steps after line 0
    psk::Buffer buffer;
};

ChainLevel makeChainLevel(PskContext_T& ctx, const char* level, uint64_t bytes, uint64_t seed) {
    ChainLevel c;
    c.level = level;
    c.bytes = bytes;
    c.lines = uint32_t(bytes / kLineBytes);
    c.next.resize(c.lines);
    for (uint32_t i = 0; i < c.lines; ++i) c.next[i] = i;
    std::mt19937_64 rng(seed);
    for (uint32_t i = c.lines - 1; i > 0; --i) {
        const uint32_t j = uint32_t(std::uniform_int_distribution<uint64_t>(0, i - 1)(rng));
        std::swap(c.next[i], c.next[j]);
    }
    c.order.resize(c.lines);
    uint32_t line = 0;
    for (uint32_t p = 0; p < c.lines; ++p, line = c.next[line]) c.order[p] = line;
    c.buffer = psk::Buffer(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::DeviceLocal);
    auto fill = [&](uint8_t* mapped) {
        auto* words = reinterpret_cast<uint32_t*>(mapped);
        for (uint32_t i = 0; i < c.lines; ++i) words[size_t(i) * kLineElements] = c.next[i] * kLineElements;
    };
    if (c.buffer.mapped()) {
        fill(c.buffer.mapped());
    } else {
        psk::Buffer staging(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::HostUpload);
        fill(staging.mapped());
        ctx.execute([&](psk::Recorder& rec) { rec.copy(whole(staging), whole(c.buffer), bytes); });
    }
    return c;
}

/**
 * micro_chase.comp on `chain`: `iterations` dependent loads per dispatch, `dispatches` dispatches
 * per run in one command buffer. One dispatch: the dependent-load latency. Several (one load
 * each): the model's launch constant (Machine.launch), since every dispatch writes the same result
 * word and the recorder puts a barrier between each pair, as between a forward's or a decode
 * step's dependent stages (checked); the row's time over the count is one dependent dispatch
 * (launch, drain and barrier, plus one L2 load: ~0.15 us on an H200). row.iterations is the loads
 * of one dispatch, or the dispatch count when there are several.
 */
ChaseRow runChase(PskContext_T& ctx, psk::Submitter& submitter, const ChainLevel& chain, uint32_t iterations, uint32_t dispatches = 1) {
    ChaseRow row;
    row.level = chain.level;
    row.bytes = chain.bytes;
    row.lines = chain.lines;
    row.iterations = dispatches > 1 ? dispatches : iterations;
    const psk::KernelPipeline pipeline = psk::kernelPipeline(
        ctx.pipelines(), psk::KernelChoice::make<psk::KernelId::MicroChase>("", PSK_DATA_TYPE_FLOAT32, psk::kernel::NoSpec{}, "psk micro"));
    psk::Buffer result(ctx.allocator(), 4, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer readback(ctx.allocator(), 4, kStorage, psk::MemoryUsage::HostReadback);
    psk::kernel::MicroChaseBindings b;
    b.CHAIN = whole(chain.buffer);
    b.RESULT = whole(result);

    // Each run goes on where the last one ended, so that no run finds lines an earlier one left in
    // a cache (the big buffer's cycle is far longer than all runs' steps together). The dispatches
    // of a run all start there, so the run ends where one dispatch's walk does.
    uint32_t start = 0;
    row.ok = true;
    for (uint32_t run = 0; run <= kRuns; ++run) {  // run 0: the warm-up
        const psk::kernel::MicroPush push{iterations, 0, start};
        double ms = 0;
        uint32_t barriers = 0;
        submitter.run(
            [&](psk::Recorder& rec) {
                submitter.startTiming();
                for (uint32_t d = 0; d < dispatches; ++d) psk::recordKernel(rec, pipeline, b, push, 1);
                submitter.stopTiming();
                barriers = rec.barrierCount();
                rec.copy(whole(result), whole(readback), 4);
            },
            &ms);
        if (run > 0) row.runsMs.push_back(ms);
        uint32_t want = start / kLineElements;
        for (uint32_t s = 0; s < iterations; ++s) want = chain.next[want];
        uint32_t got = 0;
        std::memcpy(&got, readback.mapped(), 4);
        if (got != want * kLineElements && row.ok) {
            row.ok = false;
            row.note = "run " + std::to_string(run) + " ended at element " + std::to_string(got) + ", the host's walk at " +
                       std::to_string(want * kLineElements) + " (a loop cut short?)";
        }
        if (row.ok && barriers + 1 < dispatches) {
            row.ok = false;
            row.note = std::to_string(barriers) + " barriers recorded between " + std::to_string(dispatches) + " dispatches";
        }
        start = want * kLineElements;
    }
    row.medianMs = median(row.runsMs);
    return row;
}

/** A row of micro_inflight.comp: one form of a round on one level's cycle. */
struct InflightRow {
    std::string level;
    uint32_t form = 0, groups = 0, threads = 0, rounds = 0;
    std::vector<double> runsMs;
    double medianMs = 0;
    bool ok = false;
    std::string note;
};

const char* const kInflightFormNames[] = {"literal", "spec", "runtime", "work", "loads+work", "work+barriers", "loads+barriers"};
static_assert(sizeof(kInflightFormNames) / sizeof(kInflightFormNames[0]) == PSK_MICRO_INFLIGHT_FORMS, "a name per form");
constexpr uint32_t kInflightThreads = 128;  // 4 warps of 32: the barrier has warps to wait for
constexpr uint32_t kInflightSeed = 97531;

bool inflightLoads(uint32_t form) { return form != PSK_MICRO_INFLIGHT_WORK && form != PSK_MICRO_INFLIGHT_WORK_BARRIERS; }
bool inflightWorks(uint32_t form) {
    return form == PSK_MICRO_INFLIGHT_WORK || form == PSK_MICRO_INFLIGHT_LOADS_WORK || form == PSK_MICRO_INFLIGHT_WORK_BARRIERS ||
           form == PSK_MICRO_INFLIGHT_LOADS_BARRIERS;
}

/** micro_inflight.comp's work(x) (INFLIGHT_WORK_STEPS xor-shift-multiply steps). */
uint32_t inflightWork(uint32_t x) {
    for (uint32_t s = 0; s < INFLIGHT_WORK_STEPS; ++s) x = (x ^ (x >> 13)) * 0x5BD1E995u;
    return x;
}

/**
 * Runs one form over `sms` workgroups (one per multiprocessor) of kInflightThreads invocations,
 * INFLIGHT_CHAINS chains each, started evenly spaced along the cycle (no chain reaches a line
 * another touched in the same run while lines >= chains x rounds): one warm-up and kRuns timed runs,
 * each going on where the last ended (so that no run finds the lines of an earlier one in a cache).
 * The last run is checked: every chain's end, and x of every invocation of workgroup 0 and the last.
 */
InflightRow runInflight(PskContext_T& ctx, psk::Submitter& submitter, const ChainLevel& chain, uint32_t form, uint32_t sms,
                        uint32_t rounds) {
    InflightRow row;
    row.level = chain.level;
    row.form = form;
    row.groups = sms;
    row.threads = kInflightThreads;
    row.rounds = rounds;  // 128 invocations: every Vulkan device's workgroup holds them
    psk::kernel::MicroInflightSpec spec;
    spec.THREADS = row.threads;
    spec.LOADS = INFLIGHT_CHAINS;
    spec.FORM = form;
    const psk::KernelPipeline pipeline = psk::kernelPipeline(
        ctx.pipelines(), psk::KernelChoice::make<psk::KernelId::MicroInflight>("", PSK_DATA_TYPE_FLOAT32, spec, "psk micro"));

    const uint32_t chains = row.groups * INFLIGHT_CHAINS;
    const uint32_t spacing = std::max(1u, chain.lines / chains);
    std::vector<uint32_t> position(chains);  // each chain's position along the cycle (order[])
    for (uint32_t c = 0; c < chains; ++c) position[c] = uint32_t((uint64_t(c) * spacing) % chain.lines);
    const VkDeviceSize startBytes = VkDeviceSize(chains) * 4;
    const VkDeviceSize resultBytes = VkDeviceSize(row.groups) * row.threads * 4 + startBytes;
    psk::Buffer starts(ctx.allocator(), startBytes, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer upload(ctx.allocator(), startBytes, kStorage, psk::MemoryUsage::HostUpload);
    psk::Buffer result(ctx.allocator(), resultBytes, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer readback(ctx.allocator(), resultBytes, kStorage, psk::MemoryUsage::HostReadback);
    psk::kernel::MicroInflightBindings b;
    b.CHAIN = whole(chain.buffer);
    b.STARTS = whole(starts);
    b.RESULT = whole(result);
    const psk::kernel::MicroPush push{rounds, kInflightSeed, INFLIGHT_CHAINS};  // start: the run-time form's loads per round
    const VkDeviceSize endsOffset = resultBytes - startBytes;
    const bool moves = inflightLoads(form);
    row.runsMs = timedRuns(submitter, pipeline, b, push, row.groups, result, readback, [&](uint32_t run, psk::Recorder& rec) {
        // Where this run's chains start, from the host (which knows the cycle): each submission's
        // input comes from the host, never from an earlier submission's writes.
        if (run > 0 && moves)
            for (uint32_t& p : position) p = uint32_t((uint64_t(p) + rounds) % chain.lines);
        auto* words = reinterpret_cast<uint32_t*>(upload.mapped());
        for (uint32_t c = 0; c < chains; ++c) words[c] = chain.order[position[c]] * kLineElements;
        rec.copy(whole(upload), whole(starts), startBytes);  // outside the timed span
    });
    row.medianMs = median(row.runsMs);

    // The last run, which started at `position`.
    row.ok = true;
    const auto* got = reinterpret_cast<const uint32_t*>(readback.mapped());
    auto element = [&](uint32_t c, uint32_t step) {  // chain c's element index `step` loads into the last run
        return chain.order[(uint64_t(position[c]) + step) % chain.lines] * kLineElements;
    };
    for (uint32_t c = 0; c < chains && row.ok; ++c) {
        const uint32_t want = element(c, moves ? rounds : 0);
        if (got[endsOffset / 4 + c] != want) {
            row.ok = false;
            row.note = "chain " + std::to_string(c) + " ended at element " + std::to_string(got[endsOffset / 4 + c]) + ", the host's at " +
                       std::to_string(want) + " (a loop cut short?)";
        }
    }
    for (uint32_t group : {0u, row.groups - 1}) {
        if (!row.ok) break;
        std::vector<uint32_t> loaded;  // round i's loads at [i * INFLIGHT_CHAINS ...]: the same for every invocation
        if (moves)
            for (uint32_t i = 0; i < rounds; ++i)
                for (uint32_t k = 0; k < INFLIGHT_CHAINS; ++k) loaded.push_back(element(group * INFLIGHT_CHAINS + k, i + 1));
        for (uint32_t t = 0; t < row.threads && row.ok; ++t) {
            uint32_t x = (t + 1u) * 2654435761u + kInflightSeed + group * 40503u;
            for (uint32_t i = 0; i < rounds; ++i) {
                if (inflightWorks(form)) x = inflightWork(x);
                if (moves)
                    for (uint32_t k = 0; k < INFLIGHT_CHAINS; ++k) x = x * 31u + loaded[size_t(i) * INFLIGHT_CHAINS + k];
                else
                    x = x * 31u + i;
            }
            if (got[size_t(group) * row.threads + t] != x) {
                row.ok = false;
                row.note = "workgroup " + std::to_string(group) + ", invocation " + std::to_string(t) +
                           ": x differs from the host's " + std::to_string(rounds) + " rounds (a loop cut short?)";
            }
        }
    }
    return row;
}

/**
 * What a level's rows say: the specialized and run-time loops' time over the literal's, and the
 * share of the loads' latency hidden under the work without and with the two barriers
 * (1: the round takes the longer of the two; 0: their sum; below 0: longer than the sum).
 * NaN where a row is missing or failed.
 */
struct InflightSummary {
    double specOverLiteral = NAN, runtimeOverLiteral = NAN, hiddenUnderWork = NAN, hiddenAcrossBarriers = NAN;
};

InflightSummary summarizeInflight(const std::vector<InflightRow>& rows, const std::string& level) {
    double t[PSK_MICRO_INFLIGHT_FORMS];
    for (double& v : t) v = 0;
    for (const InflightRow& r : rows)
        if (r.level == level && r.ok && r.medianMs > 0) t[r.form] = r.medianMs;
    InflightSummary s;
    const double literal = t[PSK_MICRO_INFLIGHT_LITERAL];
    if (literal > 0 && t[PSK_MICRO_INFLIGHT_SPEC_COUNT] > 0) s.specOverLiteral = t[PSK_MICRO_INFLIGHT_SPEC_COUNT] / literal;
    if (literal > 0 && t[PSK_MICRO_INFLIGHT_RUNTIME] > 0) s.runtimeOverLiteral = t[PSK_MICRO_INFLIGHT_RUNTIME] / literal;
    auto hidden = [&](double work, double both) {
        return literal > 0 && work > 0 && both > 0 ? (literal + work - both) / std::min(literal, work) : double(NAN);
    };
    s.hiddenUnderWork = hidden(t[PSK_MICRO_INFLIGHT_WORK], t[PSK_MICRO_INFLIGHT_LOADS_WORK]);
    s.hiddenAcrossBarriers = hidden(t[PSK_MICRO_INFLIGHT_WORK_BARRIERS], t[PSK_MICRO_INFLIGHT_LOADS_BARRIERS]);
    return s;
}

/** A row of micro_coopmat.comp: a form of operand loads at perSm workgroups per multiprocessor. */
struct CoopRow {
    uint32_t form = 0, perSm = 0, groups = 0, threads = 0, iterations = 0;
    std::vector<double> runsMs;
    double medianMs = 0;
    bool ok = false;
    std::string note;
};

/** The cooperative path psk micro measures: the variant's axis and shape, or why there is none. */
struct CoopPath {
    std::string axis;  // "khr_f16", "nv_f16", "emu_f16"; empty: skipped (note)
    uint32_t m = 16, n = 16, k = 16;
    std::string note;
};

const char* const kCoopFormNames[] = {"registers", "reload", "reuse A", "packed"};
const double kCoopLoadsPerProduct[] = {0.0, 2.0, 1.25, 2.0};

CoopPath coopPath(const PskContext_T& ctx) {
    const psk::DeviceCaps& caps = ctx.caps();
    const psk::CoopMatChoice choice = psk::selectCoopMatForDevice(caps).float16;
    CoopPath p;
    if (choice.path == psk::CoopMatPath::KHR || choice.path == psk::CoopMatPath::NV) {
        p.axis = choice.path == psk::CoopMatPath::KHR ? "khr_f16" : "nv_f16";
        p.m = choice.shape.m;
        p.n = choice.shape.n;
        p.k = choice.shape.k;
        p.note = choice.reason;
    } else if (caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
        p.axis = "emu_f16";
        p.note = "emulated backend (a CPU device): checks the harness; its times are not a rate";
        if (16u * 16u > 64u * caps.subgroupSize) {
            p.axis.clear();
            p.note = "skipped: the emulated backend needs subgroups of 4 or more invocations";
        }
    } else {
        p.note = "skipped: no cooperative-matrix path on this device (" + choice.reason + ")";
    }
    if (!p.axis.empty() && !psk::findShader(psk::kernelVariant(psk::KernelId::MicroCoopMat, p.axis, PSK_DATA_TYPE_FLOAT32))) {
        p.note = "skipped: micro_coopmat." + p.axis + " is not built into this psk (no compiler for it)";
        p.axis.clear();
    }
    return p;
}

/** Element j of micro_coopmat.comp's operand pool (A's elements, then B's; see operand_value there). */
int coopOperand(const CoopPath& p, uint32_t seed, uint32_t j) {
    const uint32_t lda = kCoopTiles * p.k + 8, ldb = kCoopTiles * p.n + 8, aOps = p.m * lda;
    const bool isB = j >= aOps;
    const uint32_t e = isB ? j - aOps : j, ld = isB ? ldb : lda, width = isB ? p.n : p.k;
    const uint32_t row = e / ld, col = e % ld;
    if (col >= kCoopTiles * width) return 0;
    uint32_t h = ((isB ? 1u : 0u) * 977u + (col / width) * 131u + row * 17u + col % width) * 2654435761u + seed;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    return int(h % 3u) - 1;
}

/**
 * micro_coopmat.comp's accumulators of one subgroup after `iterations` steps of `form`: M x N
 * row-major per accumulator w. Step i adds A tile ta times B tile tb, which depend on i % 4 alone.
 */
std::vector<float> hostCoopAccumulators(const CoopPath& p, uint32_t form, uint32_t iterations, uint32_t seed) {
    const uint32_t lda = kCoopTiles * p.k + 8, ldb = kCoopTiles * p.n + 8, aOps = p.m * lda;
    std::vector<float> out(size_t(kCoopAccumulators) * p.m * p.n);
    for (uint32_t w = 0; w < kCoopAccumulators; ++w) {
        std::vector<int64_t> sum(size_t(p.m) * p.n, 0);
        for (uint32_t c = 0; c < kCoopTiles; ++c) {
            const int64_t count = iterations / kCoopTiles + (c < iterations % kCoopTiles ? 1 : 0);
            uint32_t ta = 0, tb = w;  // registers: A tile 0, B tile w at every step
            if (form == PSK_MICRO_COOPMAT_REUSE_A) {
                ta = c;
                tb = (c + 2 * w) % kCoopTiles;
            } else if (form != PSK_MICRO_COOPMAT_REGISTERS) {
                ta = (c + w) % kCoopTiles;
                tb = (c + 2 * w) % kCoopTiles;
            }
            for (uint32_t r = 0; r < p.m; ++r)
                for (uint32_t col = 0; col < p.n; ++col) {
                    int64_t dot = 0;
                    for (uint32_t k = 0; k < p.k; ++k)
                        dot += int64_t(coopOperand(p, seed, r * lda + ta * p.k + k)) * coopOperand(p, seed, aOps + k * ldb + tb * p.n + col);
                    sum[size_t(r) * p.n + col] += count * dot;
                }
        }
        for (size_t e = 0; e < sum.size(); ++e) out[size_t(w) * p.m * p.n + e] = float(sum[e]);
    }
    return out;
}

CoopRow runCoopMat(PskContext_T& ctx, psk::Submitter& submitter, const CoopPath& path, uint32_t form, uint32_t perSm, uint32_t sms,
                   uint32_t iterations) {
    const psk::DeviceCaps& caps = ctx.caps();
    CoopRow row;
    row.form = form;
    row.perSm = perSm;
    row.groups = perSm * sms;
    row.iterations = iterations;
    row.threads = kCoopSubgroups * caps.subgroupSize;
    if (path.axis.empty()) {
        row.note = path.note;
        return row;
    }
    if (row.threads > caps.limits().maxComputeWorkGroupInvocations || row.threads > caps.limits().maxComputeWorkGroupSize[0]) {
        row.note = "skipped: more invocations than the device's workgroup limit";
        return row;
    }
    psk::kernel::MicroCoopMatSpec spec;
    spec.THREADS = row.threads;
    spec.CM_M = path.m;
    spec.CM_N = path.n;
    spec.CM_K = path.k;
    spec.SUBGROUPS = kCoopSubgroups;
    spec.FORM = form;
    psk::KernelChoice choice = psk::KernelChoice::make<psk::KernelId::MicroCoopMat>(path.axis, PSK_DATA_TYPE_FLOAT32, spec, "psk micro");
    // The kernel assumes SUBGROUPS subgroups of the device's size: pinned where the size can vary.
    choice.requiredSubgroupSize = caps.minSubgroupSize != caps.maxSubgroupSize ? caps.subgroupSize : 0;
    const psk::KernelPipeline pipeline = psk::kernelPipeline(ctx.pipelines(), choice);
    const size_t perSubgroup = size_t(kCoopAccumulators) * path.m * path.n;  // floats
    const VkDeviceSize bytes = VkDeviceSize(row.groups) * kCoopSubgroups * perSubgroup * 4;
    psk::Buffer result(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::DeviceLocal);
    psk::Buffer readback(ctx.allocator(), bytes, kStorage, psk::MemoryUsage::HostReadback);
    psk::kernel::MicroBarrierBindings b;
    b.RESULT = whole(result);
    row.runsMs = timedRuns(submitter, pipeline, b, psk::kernel::MicroPush{iterations, kCoopSeed, 0}, row.groups, result, readback);
    row.medianMs = median(row.runsMs);
    // Every subgroup of workgroup 0 and of the last one against the host's sums (exact integers).
    const std::vector<float> want = hostCoopAccumulators(path, form, iterations, kCoopSeed);
    const auto* got = reinterpret_cast<const float*>(readback.mapped());
    row.ok = true;
    for (uint32_t group : {0u, row.groups - 1})
        for (uint32_t sg = 0; sg < kCoopSubgroups && row.ok; ++sg)
            if (std::memcmp(got + (size_t(group) * kCoopSubgroups + sg) * perSubgroup, want.data(), perSubgroup * 4) != 0) {
                row.ok = false;
                row.note = "workgroup " + std::to_string(group) + ", subgroup " + std::to_string(sg) +
                           ": the accumulators differ from the host's exact sums over " + std::to_string(iterations) + " steps";
            }
    return row;
}

/** FLOP per second over the device, and ns per product and multiprocessor, of a timed row. */
double coopTflops(const CoopRow& r, const CoopPath& p) {
    const double products = double(r.groups) * kCoopSubgroups * kCoopAccumulators * r.iterations;
    return r.medianMs > 0 ? products * 2.0 * p.m * p.n * p.k / (r.medianMs * 1e-3) / 1e12 : 0;
}
double coopNsPerProductPerSm(const CoopRow& r) {
    const double perSm = double(r.perSm) * kCoopSubgroups * kCoopAccumulators * r.iterations;
    return r.medianMs * 1e6 / perSm;
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
    std::unique_ptr<PskContext_T> ctx = psk::cli::makeToolContext(o.device, sink, "micro");
    if (!ctx) return 1;
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
    const uint32_t sharedStoreIterations = barrierIterations;
    // On a CPU device the emulated products check the harness only (~1000 of llvmpipe's 65535 loop
    // iterations per step, and seconds per row): the quick count there whatever the mode.
    const uint32_t coopIterations = o.quick || cpu ? 8 : 20000;
    // Loads in flight: ~1-10 ms per row on a GPU; on a CPU device (seconds per row, 17 of llvmpipe's
    // loop iterations per round in the run-time form) the quick count.
    const uint32_t inflightRounds = o.quick || cpu ? 64 : 4000;
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

    std::vector<RoundRow> barriers;
    std::vector<ChaseRow> chases;
    std::vector<ChaseRow> dispatchRows;  // dependent dispatches (runChase with a dispatch count): iterations = the count
    std::vector<RoundRow> sharedStores;
    std::vector<CoopRow> coops;
    std::vector<InflightRow> inflights;
    const CoopPath coop = coopPath(*ctx);
    try {
        psk::Submitter submitter(*ctx);
        std::printf("\nbarrier round: shared load, barrier, shared store, barrier (%u iterations per invocation)\n", barrierIterations);
        std::printf("%8s %6s %11s %10s %13s %11s  %s\n", "threads", "wg/SM", "workgroups", "time (ms)", "ns/iteration", "ns/barrier",
                    "check");
        for (uint32_t threads : {64u, 128u, 256u})
            for (uint32_t perSm : {1u, 4u}) {
                RoundRow r = runBarrier(*ctx, submitter, threads, perSm, sms, barrierIterations);
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
        std::vector<ChainLevel> levels;
        levels.push_back(makeChainLevel(*ctx, "L2", l2Bytes, 2024));
        levels.push_back(makeChainLevel(*ctx, "HBM", bigBytes, 2025));
        for (const ChainLevel& l : levels) {
            ChaseRow r = runChase(*ctx, submitter, l, chaseSteps);
            std::printf("%-6s %13.1f %10u %10.3f %10.2f  %s\n", r.level.c_str(), double(r.bytes) / (1 << 20), r.lines, r.medianMs,
                        r.medianMs * 1e6 / r.iterations, r.ok ? "ok" : ("FAIL: " + r.note).c_str());
            std::fflush(stdout);
            chases.push_back(std::move(r));
        }

        const uint32_t dispatchCount = o.quick ? 16 : 256;
        std::printf("\ndependent dispatches: %u dispatches of one workgroup and one L2 load each in one command buffer, a "
                    "barrier between each\n",
                    dispatchCount);
        std::printf("%10s %10s %14s  %s\n", "dispatches", "time (ms)", "us/dispatch", "check");
        {
            ChaseRow r = runChase(*ctx, submitter, levels[0], 1, dispatchCount);
            std::printf("%10u %10.3f %14.2f  %s\n", r.iterations, r.medianMs, r.medianMs * 1e3 / r.iterations,
                        r.ok ? "ok" : ("FAIL: " + r.note).c_str());
            std::fflush(stdout);
            dispatchRows.push_back(std::move(r));
        }

        std::printf(
            "\nloads in flight: one workgroup of %u invocations per multiprocessor, %u chains per workgroup (a load is one "
            "line for the whole subgroup), %u rounds of one load per chain; the loops over a literal count ('literal'), a "
            "specialization constant ('spec'), a push constant ('runtime'); %u dependent integer steps ('work'), alone or under "
            "the literal loads, without and with a barrier before and after them ('+barriers')\n",
            kInflightThreads, INFLIGHT_CHAINS, inflightRounds, INFLIGHT_WORK_STEPS);
        std::printf("%-6s %15s %11s %10s %10s %11s  %s\n", "level", "form", "workgroups", "time (ms)", "ns/round", "x literal", "check");
        for (const ChainLevel& l : levels) {
            const size_t first = inflights.size();  // this level's literal row
            for (uint32_t form = 0; form < PSK_MICRO_INFLIGHT_FORMS; ++form) {
                InflightRow r = runInflight(*ctx, submitter, l, form, sms, inflightRounds);
                std::string ratio = form == PSK_MICRO_INFLIGHT_LITERAL && r.ok ? "1.00" : "-";
                if (r.ok && inflights.size() > first && inflights[first].ok && inflights[first].medianMs > 0) {
                    char buf[32];
                    std::snprintf(buf, sizeof buf, "%.2f", r.medianMs / inflights[first].medianMs);
                    ratio = buf;
                }
                if (r.runsMs.empty())
                    std::printf("%-6s %15s %11u %10s %10s %11s  %s\n", r.level.c_str(), kInflightFormNames[form], r.groups, "-", "-", "-",
                                r.note.c_str());
                else
                    std::printf("%-6s %15s %11u %10.3f %10.1f %11s  %s\n", r.level.c_str(), kInflightFormNames[form], r.groups, r.medianMs,
                                r.medianMs * 1e6 / r.rounds, ratio.c_str(), r.ok ? "ok" : ("FAIL: " + r.note).c_str());
                std::fflush(stdout);
                inflights.push_back(std::move(r));
            }
            const InflightSummary sum = summarizeInflight(inflights, l.level);
            std::printf("%-6s loops over a specialization constant %.2fx the literal's (1: unrolled by the driver; ~%u: each load "
                        "waits for the one before), over a push constant %.2fx; loads hidden under the work %.0f%%, across two "
                        "barriers %.0f%% (100: the round takes the longer of the two; 0: their sum)\n",
                        l.level.c_str(), sum.specOverLiteral, INFLIGHT_CHAINS, sum.runtimeOverLiteral, 100 * sum.hiddenUnderWork,
                        100 * sum.hiddenAcrossBarriers);
        }

        std::printf(
            "\nshared stores: a 64 x 64 tile of 16-bit operands per workgroup and iteration, eight 16-bit stores or one 16-byte "
            "store per 16 bytes, barrier, one read back, barrier (%u iterations per invocation; the barrier round is the baseline; "
            "'16-bit contig.': the same 16-bit stores with each warp's 64 bytes contiguous, no bank conflicts)\n",
            sharedStoreIterations);
        std::printf("%8s %6s %15s %11s %10s %13s %14s  %s\n", "threads", "wg/SM", "stores", "workgroups", "time (ms)", "ns/iteration",
                    "16-bit/packed", "check");
        const char* const formNames[] = {"16-bit", "128-bit", "16-bit contig."};
        for (uint32_t threads : {128u, 256u})
            for (uint32_t perSm : {1u, 4u}) {
                const size_t first = sharedStores.size();  // this pair's 16-bit row
                for (uint32_t form : {0u, 1u, 2u}) {
                    RoundRow r = runSharedStore(*ctx, submitter, threads, perSm, form, sms, sharedStoreIterations);
                    const double ns = r.medianMs * 1e6 / r.iterations;
                    // On the packed row: the 16-bit row's time over its own.
                    std::string ratio;
                    if (form == 1 && !r.runsMs.empty() && sharedStores.size() > first && !sharedStores[first].runsMs.empty() &&
                        r.medianMs > 0) {
                        char buf[32];
                        std::snprintf(buf, sizeof buf, "%.2f", sharedStores[first].medianMs / r.medianMs);
                        ratio = buf;
                    }
                    if (r.runsMs.empty())
                        std::printf("%8u %6u %15s %11u %10s %13s %14s  %s\n", r.threads, r.perSm, formNames[form], r.groups, "-", "-", "-",
                                    r.note.c_str());
                    else
                        std::printf("%8u %6u %15s %11u %10.3f %13.2f %14s  %s\n", r.threads, r.perSm, formNames[form], r.groups, r.medianMs,
                                    ns, ratio.c_str(), r.ok ? "ok" : ("FAIL: " + r.note).c_str());
                    std::fflush(stdout);
                    sharedStores.push_back(std::move(r));
                }
            }

        std::printf(
            "\ncooperative products: %s %ux%ux%u (%s); %u subgroups x 4 accumulators per workgroup, %u steps of one product "
            "per accumulator, operands 'registers' (loaded once), 'reload' (A and B from shared memory per product), 'reuse A' "
            "(A per step, B per product), 'packed' (reload from a uvec4 array)\n",
            coop.axis.empty() ? "-" : coop.axis.c_str(), coop.m, coop.n, coop.k, coop.note.c_str(), kCoopSubgroups, coopIterations);
        std::printf("%10s %6s %11s %10s %14s %9s %16s  %s\n", "operands", "wg/SM", "workgroups", "time (ms)", "loads/product", "TFLOP/s",
                    "ns/product/SM", "check");
        for (uint32_t form : {PSK_MICRO_COOPMAT_REGISTERS, PSK_MICRO_COOPMAT_RELOAD, PSK_MICRO_COOPMAT_REUSE_A, PSK_MICRO_COOPMAT_PACKED})
            for (uint32_t perSm : {1u, 4u}) {
                CoopRow r = runCoopMat(*ctx, submitter, coop, form, perSm, sms, coopIterations);
                if (r.runsMs.empty())
                    std::printf("%10s %6u %11u %10s %14.2f %9s %16s  %s\n", kCoopFormNames[form], r.perSm, r.groups, "-",
                                kCoopLoadsPerProduct[form], "-", "-", r.note.c_str());
                else
                    std::printf("%10s %6u %11u %10.3f %14.2f %9.1f %16.4f  %s\n", kCoopFormNames[form], r.perSm, r.groups, r.medianMs,
                                kCoopLoadsPerProduct[form], coopTflops(r, coop), coopNsPerProductPerSm(r),
                                r.ok ? "ok" : ("FAIL: " + r.note).c_str());
                std::fflush(stdout);
                coops.push_back(std::move(r));
            }
    } catch (const psk::Error& e) {
        std::fprintf(stderr, "psk micro: %s (%s)\n", e.what(), pskResultToString(e.code()));
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "psk micro: out of host memory\n");
        return 1;
    }

    bool ok = true;
    for (const RoundRow& r : barriers) ok = ok && (r.ok || r.runsMs.empty());
    for (const ChaseRow& r : chases) ok = ok && r.ok;
    for (const ChaseRow& r : dispatchRows) ok = ok && r.ok;
    for (const RoundRow& r : sharedStores) ok = ok && (r.ok || r.runsMs.empty());
    for (const CoopRow& r : coops) ok = ok && (r.ok || r.runsMs.empty());
    for (const InflightRow& r : inflights) ok = ok && (r.ok || r.runsMs.empty());
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
            const RoundRow& r = barriers[i];
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
        j += "\n  ],\n  \"dispatches\": [";
        for (size_t i = 0; i < dispatchRows.size(); ++i) {
            const ChaseRow& r = dispatchRows[i];
            j += std::string(i ? "," : "") + "\n    {\"dispatches\": " + std::to_string(r.iterations) + ", \"median_ms\": " +
                 number(r.medianMs) + ", \"us_per_dispatch\": " + number(r.medianMs * 1e3 / r.iterations) + ", \"runs_ms\": " +
                 list(r.runsMs) + ", \"ok\": " + (r.ok ? "true" : "false") + ", \"note\": " + quote(r.note) + "}";
        }
        j += "\n  ],\n  \"inflight\": {\"threads\": " + std::to_string(kInflightThreads) + ", \"chains\": " +
             std::to_string(INFLIGHT_CHAINS) + ", \"work_steps\": " + std::to_string(INFLIGHT_WORK_STEPS) + ", \"rows\": [";
        for (size_t i = 0; i < inflights.size(); ++i) {
            const InflightRow& r = inflights[i];
            const bool timed = !r.runsMs.empty();
            j += std::string(i ? "," : "") + "\n    {\"level\": " + quote(r.level) + ", \"form\": " + quote(kInflightFormNames[r.form]) +
                 ", \"workgroups\": " + std::to_string(r.groups) + ", \"rounds\": " + std::to_string(r.rounds) + ", \"median_ms\": " +
                 (timed ? number(r.medianMs) : "null") + ", \"ns_per_round\": " + (timed ? number(r.medianMs * 1e6 / r.rounds) : "null") +
                 ", \"runs_ms\": " + list(r.runsMs) + ", \"ok\": " + (r.ok ? "true" : "false") + ", \"note\": " + quote(r.note) + "}";
        }
        j += "\n  ], \"summary\": [";
        {
            bool firstLevel = true;
            for (const std::string level : {"L2", "HBM"}) {
                const InflightSummary sum = summarizeInflight(inflights, level);
                auto value = [&](double v) { return std::isnan(v) ? std::string("null") : number(v); };
                j += std::string(firstLevel ? "" : ",") + "\n    {\"level\": " + quote(level) + ", \"spec_over_literal\": " +
                     value(sum.specOverLiteral) + ", \"runtime_over_literal\": " + value(sum.runtimeOverLiteral) +
                     ", \"hidden_under_work\": " + value(sum.hiddenUnderWork) + ", \"hidden_across_barriers\": " +
                     value(sum.hiddenAcrossBarriers) + "}";
                firstLevel = false;
            }
        }
        j += "\n  ]},\n  \"shared_store\": [";
        for (size_t i = 0; i < sharedStores.size(); ++i) {
            const RoundRow& r = sharedStores[i];
            j += std::string(i ? "," : "") + "\n    {\"threads\": " + std::to_string(r.threads) + ", \"workgroups_per_sm\": " +
                 std::to_string(r.perSm) + ", \"packed\": " + (r.form == 1 ? "true" : "false") + ", \"form\": " +
                 quote(r.form == 0 ? "16-bit" : r.form == 1 ? "128-bit" : "16-bit-contiguous") + ", \"workgroups\": " +
                 std::to_string(r.groups) + ", \"iterations\": " + std::to_string(r.iterations) + ", \"median_ms\": " +
                 (r.runsMs.empty() ? "null" : number(r.medianMs)) + ", \"ns_per_iteration\": " +
                 (r.runsMs.empty() ? "null" : number(r.medianMs * 1e6 / r.iterations)) + ", \"runs_ms\": " + list(r.runsMs) +
                 ", \"ok\": " + (r.ok ? "true" : "false") + ", \"note\": " + quote(r.note) + "}";
        }
        j += "\n  ],\n  \"coopmat\": {\"variant\": " + quote(coop.axis.empty() ? "" : "micro_coopmat." + coop.axis + ".f32") +
             ", \"m\": " + std::to_string(coop.m) + ", \"n\": " + std::to_string(coop.n) + ", \"k\": " + std::to_string(coop.k) +
             ", \"subgroups\": " + std::to_string(kCoopSubgroups) + ", \"accumulators\": 4, \"note\": " + quote(coop.note) + ", \"rows\": [";
        for (size_t i = 0; i < coops.size(); ++i) {
            const CoopRow& r = coops[i];
            const bool timed = !r.runsMs.empty();
            j += std::string(i ? "," : "") + "\n    {\"operands\": " + quote(kCoopFormNames[r.form]) + ", \"loads_per_product\": " +
                 number(kCoopLoadsPerProduct[r.form]) + ", \"threads\": " + std::to_string(r.threads) + ", \"workgroups_per_sm\": " +
                 std::to_string(r.perSm) + ", \"workgroups\": " + std::to_string(r.groups) + ", \"steps\": " +
                 std::to_string(r.iterations) + ", \"median_ms\": " + (timed ? number(r.medianMs) : "null") + ", \"tflops\": " +
                 (timed ? number(coopTflops(r, coop)) : "null") + ", \"ns_per_product_per_sm\": " +
                 (timed ? number(coopNsPerProductPerSm(r)) : "null") + ", \"runs_ms\": " + list(r.runsMs) + ", \"ok\": " +
                 (r.ok ? "true" : "false") + ", \"note\": " + quote(r.note) + "}";
        }
        j += "\n  ]}\n}\n";
        std::ofstream f(o.json, std::ios::binary);
        f << j;
        if (!f.flush()) {
            std::fprintf(stderr, "psk micro: cannot write %s\n", o.json.c_str());
            return 1;
        }
    }
    return ok ? 0 : 1;
}
