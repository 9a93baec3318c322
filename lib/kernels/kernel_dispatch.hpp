// One dispatch of a kernel with its interface checked: the buffers by name (the kernel's bindings
// struct, kernel_interface.hpp) with the access its binding list declares, the push constants as
// the struct its bindings belong to (a push block of another kernel does not compile), and the
// pipeline's own kernel checked to have that interface (a team or cooperative variant shares its
// generic kernel's).
#pragma once

#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "vk/recorder.hpp"

namespace psk {

/** A kernel choice's pipeline (kernelPipeline) with the kernel it runs. */
struct KernelPipeline {
    VkPipeline pipeline = VK_NULL_HANDLE;
    KernelId kernel = KernelId::Count;
    operator VkPipeline() const { return pipeline; }  // NOLINT: the positional Recorder::dispatch takes it as it is
    explicit operator bool() const { return pipeline != VK_NULL_HANDLE; }
};

/** Every binding of `bindings` set, each with its declared access (a read for Bound::unwritten). */
template <typename Bindings>
void bindingAccesses(const Bindings& bindings, KernelId kernel, Access (&out)[Bindings::kCount]) {
    for (uint32_t i = 0; i < Bindings::kCount; ++i) {
        const kernel::Bound& b = bindings.*Bindings::kFields[i];
        if (b.range.buffer == VK_NULL_HANDLE)
            fail(PSK_ERROR_INTERNAL, kernelInfo(kernel).name, ": binding ", i, " (", Bindings::kNames[i], ") is not set");
        const bool write = Bindings::kAccess[i] != kernel::BindingAccess::read && !b.unwritten;
        out[i] = Access{b.range, write};
    }
}

/** One dispatch of `pipeline` with `bindings` and `push` (groups as Recorder::dispatch). */
template <typename Bindings>
void recordKernel(Recorder& recorder, const KernelPipeline& pipeline, const Bindings& bindings, const typename Bindings::Push& push,
                  uint32_t groupsX, uint32_t groupsY = 1, uint32_t groupsZ = 1) {
    static_assert(Bindings::kCount <= Pipelines::kMaxBindings, "more bindings than the shared pipeline layout has");
    static_assert(sizeof(typename Bindings::Push) <= Pipelines::kPushConstantBytes, "push block larger than the pipeline layout's range");
    const KernelInterfaceNames names = kernelInterfaceNames(pipeline.kernel);
    if (!names.bindings || std::string_view(names.bindings) != Bindings::kName)
        fail(PSK_ERROR_INTERNAL, "kernel ", pipeline.kernel == KernelId::Count ? "(none)" : kernelInfo(pipeline.kernel).name,
             " recorded with ", Bindings::kName);
    Access accesses[Bindings::kCount];
    bindingAccesses(bindings, pipeline.kernel, accesses);
    recorder.dispatch(pipeline.pipeline, accesses, Bindings::kCount, &push, sizeof(push), groupsX, groupsY, groupsZ);
}

}  // namespace psk
