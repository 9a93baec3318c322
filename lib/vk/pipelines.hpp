// Compute pipelines, created once per (shader variant, specialization constants) and cached for
// the context's lifetime. Every kernel shares one pipeline layout: up to kMaxBindings storage
// buffers in set 0 (push descriptors where the device has them) and kPushConstantBytes of push
// constants for run-time sizes and strides.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/kernel_table.hpp"
#include "vk/device_caps.hpp"
#include "vk/vulkan_functions.hpp"

namespace psk {

class Pipelines {
public:
    static constexpr uint32_t kMaxBindings = 8;
    static constexpr uint32_t kPushConstantBytes = 128;

    Pipelines(const DeviceFunctions& vk, VkDevice device, const DeviceCaps& caps);
    ~Pipelines();
    Pipelines(const Pipelines&) = delete;
    Pipelines& operator=(const Pipelines&) = delete;

    /**
     * The pipeline of a kernel choice (kernels/kernel_table.hpp): its variant with its named
     * specialization constants (32-bit each; booleans as 0/1). Throws UNSUPPORTED when the variant
     * is not built in. Thread-safe.
     */
    VkPipeline get(const KernelChoice& choice);

    VkPipelineLayout layout() const { return layout_; }
    VkDescriptorSetLayout setLayout() const { return setLayout_; }
    bool usesPushDescriptors() const { return pushDescriptors_; }
    size_t size() const;

private:
    const DeviceFunctions& vk_;
    VkDevice device_;
    bool pushDescriptors_;
    VkDescriptorSetLayout setLayout_ = VK_NULL_HANDLE;
    VkPipelineLayout layout_ = VK_NULL_HANDLE;
    /** A pipeline is its SPIR-V variant plus its specialization constants (by constant_id). */
    struct Key {
        const ShaderCode* shader;
        std::vector<uint32_t> constants;
        bool operator==(const Key& o) const { return shader == o.shader && constants == o.constants; }
    };
    struct KeyHash {
        size_t operator()(const Key& k) const;
    };
    mutable std::mutex mutex_;
    std::unordered_map<Key, VkPipeline, KeyHash> cache_;
};

}  // namespace psk
