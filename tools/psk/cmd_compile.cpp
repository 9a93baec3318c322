// psk compile: every kernel a plan names, compiled by a device's driver, and the driver's own
// statistics of each (registers, spills, shared memory, instructions: VK_KHR_pipeline_executable_
// properties), without running anything and without device memory.
//
// The plan is the text `psk info --plan` prints, or a GPU check's plan.txt: each kernel line
// "<variant> (<implementation>) NAME=VALUE ...: <reason>" and each "# self-test: <variant> NAME=VALUE
// ...: <verdict>" line (the kernels the library tried and may have turned off) is compiled with
// exactly those specialization constants, the cooperative kernels with the subgroup size their
// tiling assumes (THREADS / (SG_M SG_N) lanes). --backend khr|nv rewrites the cooperative variants
// of a plan made on another device (".emu_", ".khr_", ".nv_") to the device's backend, so a plan
// printed on lavapipe with the GPU tilings emulated (PSK_COOPMAT_EMULATION=gpu-tiles), or an
// NVIDIA run's plan, compiles as the same tiles would on this device.
//
// What it is for: a driver that compiles but has no GPU behind it still tells what its compiler
// makes of the kernels. Mesa's RADV has such a device (RADV_FORCE_FAMILY=navi31: an AMD RDNA3 GPU,
// with VK_KHR_cooperative_matrix from Mesa 24.1 on), so on a machine without a GPU every kernel
// can be held to AMD's compiler: that it compiles at all, its registers (occupancy), spills,
// scratch and instruction counts, and the compiler's own latency / throughput estimates; these go
// into the performance model before the kernels ever run there (docs/MODEL.md, "The kernels
// through AMD's compiler"). On a GPU, the same lines as the plan's "# stats:" (PSK_PIPELINE_STATISTICS).
//
// Exit status 1 when a kernel fails to compile (a defect to fix: the library would fail the same
// pipeline on that device), 2 on a bad command line or plan.
#include <polysketch/polysketch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "kernels/kernel_table.hpp"
#include "kernels/shader_registry.hpp"
#include "tool_context.hpp"
#include "util/error.hpp"
#include "vk/context.hpp"

namespace {

using psk::cli::UsageError;

struct Options {
    std::string plan = "-";
    std::string device;
    std::string backend;  // "", "khr", "nv"
    uint32_t subgroupSize = 0;
};

void usage(FILE* out) {
    std::fprintf(out,
                 "usage: psk compile [PLAN_FILE | -] [--device N|NAME] [--backend khr|nv] [--subgroup-size S]\n"
                 "\n"
                 "Compiles every kernel named in a plan (the text of 'psk info --plan', or a GPU check's\n"
                 "plan.txt; '-' or no file: standard input) on the device with exactly its specialization\n"
                 "constants, and prints the driver's statistics of each (registers, spills, shared memory,\n"
                 "instructions). Runs nothing and allocates no device memory, so it works on a driver without\n"
                 "a GPU behind it, e.g. Mesa's RADV null device: RADV_FORCE_FAMILY=navi31 (AMD RDNA3).\n"
                 "\n"
                 "  --backend khr|nv   compile the plan's cooperative variants (.emu_, .khr_, .nv_) as this\n"
                 "                     backend's (a plan made on lavapipe with PSK_COOPMAT_EMULATION=gpu-tiles,\n"
                 "                     or on another GPU)\n"
                 "  --subgroup-size S  pin S lanes for the kernels whose tiling does not fix it (the cooperative\n"
                 "                     kernels take THREADS / (SG_M SG_N), their tiling's)\n"
                 "\n"
                 "One line per kernel: OK or FAILED, the variant, its constants, the driver's statistics.\n"
                 "Exit status 1 when a kernel did not compile.\n");
}

/** One kernel of the plan: its variant and constants as printed, and where the line came from. */
struct PlanKernel {
    std::string variant;
    std::vector<std::pair<std::string, uint32_t>> constants;
    std::string source;  // "plan" or "self-test"
    size_t line = 0;
};

bool isNumber(const std::string& s) {
    if (s.empty() || s.size() > 10) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return std::strtoull(s.c_str(), nullptr, 10) <= 0xFFFFFFFFull;
}

/**
 * The kernel a plan line names, or false for a line that names none (headers, reasons, "# stats:").
 * A kernel line is "<variant> (<implementation>) NAME=VALUE ...: reason", or "# self-test: <variant>
 * NAME=VALUE ...: verdict"; the constants end at the first ':'. Throws UsageError for a kernel line
 * whose constants cannot be read.
 */
bool parsePlanLine(const std::string& raw, size_t lineNo, PlanKernel* out) {
    std::string text = raw;
    std::string source = "plan";
    const std::string selfTest = "# self-test: ";
    if (text.rfind(selfTest, 0) == 0) {
        text = text.substr(selfTest.size());
        source = "self-test";
    }
    const size_t colon = text.find(':');
    std::istringstream words(text.substr(0, colon));
    std::string variant, second;
    if (!(words >> variant) || variant.find('.') == std::string::npos || variant.find('=') != std::string::npos) return false;
    if (source == "plan") {
        if (!(words >> second) || second.size() < 3 || second.front() != '(' || second.back() != ')') return false;
    }
    PlanKernel k;
    k.variant = variant;
    k.source = source;
    k.line = lineNo;
    std::string word;
    while (words >> word) {
        const size_t eq = word.find('=');
        if (eq == std::string::npos || !isNumber(word.substr(eq + 1)))
            throw UsageError{"line " + std::to_string(lineNo) + ": \"" + word + "\" is not NAME=VALUE"};
        k.constants.emplace_back(word.substr(0, eq), uint32_t(std::strtoul(word.c_str() + eq + 1, nullptr, 10)));
    }
    *out = std::move(k);
    return true;
}

/** kernel name -> its specialization constants' fields (constant_id, name), by the interface table. */
const std::vector<psk::kernel::SpecField>* specFieldsOf(psk::KernelId id) {
    switch (id) {
#define PSK_SPEC_FIELDS_OF(Id, SpecT, PushT, BindingsT) \
    case psk::KernelId::Id:                             \
        return &psk::kernel::specFields(static_cast<const psk::kernel::SpecT*>(nullptr));
        PSK_KERNEL_INTERFACES(PSK_SPEC_FIELDS_OF)
#undef PSK_SPEC_FIELDS_OF
        default:
            return nullptr;
    }
}

/** The interface's default values of kernel id's constants, by constant_id. */
std::vector<uint32_t> defaultsOf(psk::KernelId id) {
    switch (id) {
#define PSK_SPEC_DEFAULTS_OF(Id, SpecT, PushT, BindingsT) \
    case psk::KernelId::Id:                               \
        return psk::kernel::SpecConstants::of(psk::kernel::SpecT{}).values;
        PSK_KERNEL_INTERFACES(PSK_SPEC_DEFAULTS_OF)
#undef PSK_SPEC_DEFAULTS_OF
        default:
            return {};
    }
}

/** The kernel whose registry prefix the variant carries ("sketch_features_coopmat.khr_f16_random.f16"). */
psk::KernelId kernelOfVariant(const std::string& variant) {
    const std::string prefix = variant.substr(0, variant.find('.'));
    for (uint32_t i = 0; i < uint32_t(psk::KernelId::Count); ++i)
        if (prefix == psk::kernelInfo(psk::KernelId(i)).name) return psk::KernelId(i);
    return psk::KernelId::Count;
}

/** The variant with its cooperative backend replaced (".emu_x" / ".khr_x" / ".nv_x" -> ".<backend>_x"). */
std::string withBackend(const std::string& variant, const std::string& backend) {
    if (backend.empty()) return variant;
    for (const char* from : {".emu_", ".khr_", ".nv_"}) {
        const size_t at = variant.find(from);
        if (at != std::string::npos) return variant.substr(0, at) + "." + backend + "_" + variant.substr(at + std::strlen(from));
    }
    return variant;
}

/**
 * Why the device cannot compile the variant at all (its cooperative backend, bfloat16 matrices,
 * 16-bit storage or arithmetic missing), or "" when it can: such a variant is skipped, not failed,
 * as the library never creates it there.
 */
std::string missingCapability(const std::string& variant, const psk::DeviceCaps& caps) {
    if (variant.find(".khr_") != std::string::npos && !caps.cooperativeMatrixKHR) return "no VK_KHR_cooperative_matrix";
    if (variant.find(".nv_") != std::string::npos && !caps.cooperativeMatrixNV) return "no VK_NV_cooperative_matrix";
    if ((variant.find(".khr_bf16") != std::string::npos) && !caps.shaderBFloat16CooperativeMatrix)
        return "no bfloat16 cooperative matrices (VK_KHR_shader_bfloat16)";
    const bool sixteenBit = variant.size() > 4 && (variant.compare(variant.size() - 4, 4, ".f16") == 0 ||
                                                   variant.compare(variant.size() - 5, 5, ".bf16") == 0);
    if (sixteenBit && !caps.storageBuffer16BitAccess) return "no 16-bit storage buffers";
    if ((variant.find(".khr_") != std::string::npos || variant.find(".nv_") != std::string::npos) && !caps.shaderFloat16)
        return "no float16 arithmetic";
    return "";
}

uint32_t constantOr(const PlanKernel& k, const char* name, uint32_t fallback) {
    for (const auto& c : k.constants)
        if (c.first == name) return c.second;
    return fallback;
}

}  // namespace

int runCompile(int argc, char** argv) {
    Options o;
    std::vector<PlanKernel> kernels;
    try {
        psk::cli::ArgReader args(argc, argv);
        bool planGiven = false;
        while (args.next()) {
            const std::string& n = args.name();
            if (n == "--help" || n == "-h") {
                usage(stdout);
                return 0;
            } else if (n == "--device") {
                o.device = args.value();
            } else if (n == "--backend") {
                o.backend = args.value();
                if (o.backend != "khr" && o.backend != "nv") throw UsageError{"--backend takes khr or nv"};
            } else if (n == "--subgroup-size") {
                const std::string v = args.value();
                if (!isNumber(v) || std::strtoul(v.c_str(), nullptr, 10) == 0) throw UsageError{"--subgroup-size takes a positive number"};
                o.subgroupSize = uint32_t(std::strtoul(v.c_str(), nullptr, 10));
            } else if (n.rfind("--", 0) == 0 || planGiven) {
                throw UsageError{"unknown argument " + args.raw()};
            } else {
                o.plan = n;
                planGiven = true;
            }
        }
        std::ifstream file;
        if (o.plan != "-") {
            file.open(o.plan);
            if (!file) throw UsageError{"cannot read " + o.plan};
        }
        std::istream& in = o.plan == "-" ? std::cin : file;
        std::string line;
        size_t lineNo = 0;
        while (std::getline(in, line)) {
            ++lineNo;
            PlanKernel k;
            // A --backend rewrite first, so that a plan's emulated variant is looked up as the device's.
            std::string rewritten = line;
            if (!o.backend.empty()) {
                std::istringstream first(line.rfind("# self-test: ", 0) == 0 ? line.substr(13) : line);
                std::string variant;
                if (first >> variant) {
                    const size_t at = line.find(variant);
                    rewritten = line.substr(0, at) + withBackend(variant, o.backend) + line.substr(at + variant.size());
                }
            }
            if (parsePlanLine(rewritten, lineNo, &k)) kernels.push_back(std::move(k));
        }
        if (kernels.empty()) throw UsageError{"the plan names no kernel of this build (" + o.plan + ")"};
    } catch (const UsageError& e) {
        std::fprintf(stderr, "psk compile: %s\n", e.message.c_str());
        return 2;
    }

    // The statistics are captured only when asked for (lib/vk/context.cpp): ask.
    setenv("PSK_PIPELINE_STATISTICS", "1", 1);
    psk::cli::MessageSink sink;
    std::unique_ptr<PskContext_T> ctx = psk::cli::makeToolContext(o.device, sink, "compile");
    if (!ctx) return 1;
    const psk::DeviceCaps& caps = ctx->caps();
    std::printf("device: %s (%s %s)\n", caps.properties.deviceName, caps.driverName.c_str(), caps.driverInfo.c_str());
    if (!ctx->pipelines().capturesStatistics())
        std::printf("# the driver reports no statistics (VK_KHR_pipeline_executable_properties): compiled or not only\n");

    int failed = 0, skipped = 0;
    for (const PlanKernel& k : kernels) {
        const psk::KernelId id = kernelOfVariant(k.variant);
        const std::vector<psk::kernel::SpecField>* fields = id == psk::KernelId::Count ? nullptr : specFieldsOf(id);
        std::string constants;
        for (const auto& c : k.constants) constants += " " + c.first + "=" + std::to_string(c.second);
        const std::string where = k.source == "self-test" ? " [self-test line " + std::to_string(k.line) + "]" : "";
        if (!fields) {
            std::printf("SKIPPED %s%s%s: no interface row for this kernel\n", k.variant.c_str(), constants.c_str(), where.c_str());
            ++skipped;
            continue;
        }
        // Values by constant_id: the plan's, the interface's defaults for any it does not name.
        std::vector<uint32_t> values = defaultsOf(id);
        std::vector<bool> set(fields->size(), false);
        std::string unknown;
        for (const auto& c : k.constants) {
            bool found = false;
            for (const psk::kernel::SpecField& f : *fields)
                if (c.first == f.name) {
                    values.at(f.id) = c.second;
                    set.at(f.id) = true;
                    found = true;
                }
            if (!found) unknown += " " + c.first;
        }
        if (!unknown.empty()) {
            std::printf("FAILED %s%s%s: constants not in its interface:%s\n", k.variant.c_str(), constants.c_str(), where.c_str(),
                        unknown.c_str());
            ++failed;
            continue;
        }
        std::string defaulted;
        for (size_t i = 0; i < fields->size(); ++i)
            if (!set[i]) defaulted += std::string(" ") + (*fields)[i].name;
        const psk::ShaderCode* code = psk::findShader(k.variant);
        if (!code) {
            std::printf("SKIPPED %s%s%s: not in this build\n", k.variant.c_str(), constants.c_str(), where.c_str());
            ++skipped;
            continue;
        }
        const std::string missing = missingCapability(k.variant, caps);
        if (!missing.empty()) {
            std::printf("SKIPPED %s%s%s: %s on this device\n", k.variant.c_str(), constants.c_str(), where.c_str(), missing.c_str());
            ++skipped;
            continue;
        }
        // The cooperative kernels' subgroups: THREADS / (SG_M SG_N) lanes as planned, or --subgroup-size's,
        // or (a plan made on a device whose subgroups this one cannot have, e.g. lavapipe's 8 lanes)
        // 32 lanes where this device can pin them; THREADS follows.
        const uint32_t sgM = constantOr(k, "SG_M", 0), sgN = constantOr(k, "SG_N", 1), threads = constantOr(k, "THREADS", 0);
        const bool cooperative = psk::kernelInfo(id).impl == psk::KernelImpl::Cooperative;
        uint32_t required = o.subgroupSize;
        std::string note;
        if (cooperative && sgM && threads && threads % (sgM * sgN) == 0) {
            uint32_t lanes = threads / (sgM * sgN);
            if (o.subgroupSize) lanes = o.subgroupSize;
            else if (!ctx->pipelines().supportsSubgroupSize(lanes))
                lanes = ctx->pipelines().supportsSubgroupSize(32) ? 32 : caps.subgroupSize;
            if (lanes * sgM * sgN != threads) {
                for (const psk::kernel::SpecField& f : *fields)
                    if (std::strcmp(f.name, "THREADS") == 0) values.at(f.id) = lanes * sgM * sgN;
                note = " THREADS=" + std::to_string(lanes * sgM * sgN) + " (for " + std::to_string(lanes) + "-lane subgroups)";
            }
            required = lanes;
        }
        try {
            ctx->pipelines().get(*code, values, required);
            const std::string stats = ctx->pipelines().statistics(*code, values, required, std::string::npos);
            const std::string pinned = required ? " subgroup=" + std::to_string(required) : "";
            const std::string defaults = defaulted.empty() ? "" : " (defaults:" + defaulted + ")";
            std::printf("OK %s%s%s%s%s%s: %s\n", k.variant.c_str(), constants.c_str(), note.c_str(), pinned.c_str(), defaults.c_str(), where.c_str(),
                        stats.empty() ? "(no statistics)" : stats.c_str());
        } catch (const psk::Error& e) {
            std::printf("FAILED %s%s%s: %s (%s)\n", k.variant.c_str(), constants.c_str(), where.c_str(), e.what(),
                        pskResultToString(e.code()));
            ++failed;
        }
        std::fflush(stdout);
    }
    std::printf("%zu kernel(s), %d failed, %d skipped\n", kernels.size(), failed, skipped);
    std::fflush(stdout);
    // A device without memory has no GPU behind it (RADV's null device): its driver crashes in the
    // context's vkDeviceWaitIdle (Mesa 22.3 - 25.0). Nothing was submitted to it, and the process
    // ends here: its context is left to the exit.
    if (caps.deviceLocalBytes == 0) (void)ctx.release();
    return failed ? 1 : 0;
}
