#include "kernels/coop_variants.hpp"

#include <mutex>
#include <vector>

#include "interface/coop_backends.h"
#include "kernels/shader_registry.hpp"
#include "util/error.hpp"
#include "util/storage_type.hpp"

namespace psk {

namespace {

struct BackendRow {
    const char* axis;
    CoopVariant variant;
    const char* types;  // storage types built for it
};

#define PSK_COOP_BACKEND_ROW(axis, backend, operand, defines, types, condition) \
    {#axis, {CoopBackend::backend, CoopOperand::operand}, types},
constexpr BackendRow kBackends[] = {PSK_COOP_BACKENDS(PSK_COOP_BACKEND_ROW)};
#undef PSK_COOP_BACKEND_ROW

struct KernelRow {
    KernelId id;
    const char* subs;  // "softmax=KIND_SOFTMAX polynomial=KIND_POLYNOMIAL"
};

#define PSK_COOP_KERNEL_ROW(id, name, subs) {KernelId::id, subs},
constexpr KernelRow kKernels[] = {PSK_COOP_KERNELS(PSK_COOP_KERNEL_ROW)};
#undef PSK_COOP_KERNEL_ROW

const KernelRow* kernelRow(KernelId kernel) {
    for (const KernelRow& k : kKernels)
        if (k.id == kernel) return &k;
    return nullptr;
}

/** The sub-variant names of a row's "value=DEFINE ..." list. */
std::vector<std::string> subNames(const KernelRow& k) {
    std::vector<std::string> names;
    std::string_view list(k.subs);
    while (!list.empty()) {
        const size_t space = list.find(' ');
        const std::string_view item = list.substr(0, space);
        names.emplace_back(item.substr(0, item.find('=')));
        if (space == std::string_view::npos) break;
        list = list.substr(space + 1);
    }
    if (names.empty()) names.emplace_back();
    return names;
}

bool listsType(const char* types, PskDataType type) {
    return std::string_view(types).find(dataTypeSuffix(type)) != std::string_view::npos;
}

}  // namespace

std::string_view coopAxis(CoopVariant v) {
    for (const BackendRow& b : kBackends)
        if (b.variant == v) return b.axis;
    fail(PSK_ERROR_INTERNAL, "no cooperative backend is declared for this backend and operand type");
}

bool isCoopKernel(KernelId kernel) { return kernelRow(kernel) != nullptr; }

std::string_view coopSubVariants(KernelId kernel) {
    const KernelRow* k = kernelRow(kernel);
    return k ? k->subs : "";
}

const std::string& coopAxisList(KernelId kernel) {
    static const std::vector<std::string> lists = [] {
        std::vector<std::string> out(static_cast<size_t>(KernelId::Count));  // not size_t(...): a declaration to clang
        for (const KernelRow& k : kKernels) {
            std::string& list = out[size_t(k.id)];
            for (const std::string& sub : subNames(k))
                for (const BackendRow& b : kBackends) {
                    if (!list.empty()) list += '|';
                    list += b.axis;
                    if (!sub.empty()) list += "_" + sub;
                }
        }
        return out;
    }();
    return lists[size_t(kernel)];
}

std::string coopVariantName(KernelId kernel, CoopVariant v, std::string_view sub, PskDataType type) {
    if (!isCoopKernel(kernel)) fail(PSK_ERROR_INTERNAL, kernelInfo(kernel).name, " is not a cooperative kernel");
    std::string axis(coopAxis(v));
    if (!sub.empty()) {
        axis += '_';
        axis += sub;
    }
    return kernelVariant(kernel, axis, type);
}

const ShaderCode* findCoopVariant(KernelId kernel, CoopVariant v, std::string_view sub, PskDataType type) {
    checkCoopVariantsComplete();
    return findShader(coopVariantName(kernel, v, sub, type));
}

bool coopBackendBuilt(CoopVariant v) {
    for (const BackendRow& b : kBackends) {
        if (!(b.variant == v)) continue;
        const std::string prefix = std::string(".") + b.axis;
        for (size_t i = 0; i < kShaderRegistrySize; ++i) {
            const std::string_view name = kShaderRegistry[i].name;
            const size_t at = name.find(prefix);
            if (at != std::string_view::npos && (name[at + prefix.size()] == '.' || name[at + prefix.size()] == '_')) return true;
        }
    }
    return false;
}

void checkCoopVariantsComplete() {
    static std::once_flag once;
    static std::string missing;
    std::call_once(once, [] {
        static const PskDataType types[] = {PSK_DATA_TYPE_FLOAT32, PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16};
        for (const BackendRow& b : kBackends) {
            if (!coopBackendBuilt(b.variant)) continue;
            for (const KernelRow& k : kKernels)
                for (const std::string& sub : subNames(k))
                    for (PskDataType t : types) {
                        if (!listsType(b.types, t)) continue;
                        const std::string name = coopVariantName(k.id, b.variant, sub, t);
                        if (!findShader(name) && missing.empty()) missing = name;
                    }
        }
    });
    if (!missing.empty())
        fail(PSK_ERROR_INTERNAL, "this build lacks the cooperative variant ", missing,
             " that shaders/interface/coop_backends.h declares for a backend it has");
}

}  // namespace psk
