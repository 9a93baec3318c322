// Compute pipelines, created once per (shader variant, specialization constants, required
// subgroup size) and cached for the context's lifetime. Every kernel shares one pipeline layout: up to kMaxBindings storage
// buffers in set 0 (push descriptors where the device has them) and kPushConstantBytes of push
// constants for run-time sizes and strides.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vk/device_caps.hpp"
#include "vk/emulated_products.hpp"
#include "vk/shader_code.hpp"
#include "vk/shader_replacement.hpp"
#include "vk/vulkan_functions.hpp"

namespace psk {

/** A compute shader's local workgroup size (x, y, z), or all zeros when it cannot be read. */
struct WorkgroupSize {
    uint32_t x = 0, y = 0, z = 0;
    uint32_t invocations() const { return x * y * z; }
};

/**
 * The workgroup size of a SPIR-V compute module once specialized with `specConstants` (value i
 * for constant_id i, as Pipelines::get passes them): the WorkgroupSize built-in where the module
 * has one (glslang's local_size_x_id), else LocalSize / LocalSizeId.
 */
WorkgroupSize shaderWorkgroupSize(const ShaderCode& code, const std::vector<uint32_t>& specConstants);

/** One executable of a pipeline (VK_KHR_pipeline_executable_properties) and its statistics. */
struct ExecutableStatistics {
    std::string name;
    std::vector<VkPipelineExecutableStatisticKHR> statistics;
};

/**
 * The statistics of a pipeline's executables as one line of at most `maxChars` characters:
 * "Name = value, ..." (BOOL32 true / false, INT64 and UINT64 in full, FLOAT64 with 4 significant
 * digits), each executable after its name and "; " where there are several, line breaks in a
 * driver's names made spaces, and "..." at the end of a line cut short. Empty without statistics.
 */
std::string formatPipelineStatistics(const std::vector<ExecutableStatistics>& executables, size_t maxChars);

/** `text` cut to at most `maxChars` characters, ending in "..." where it was cut (maxChars > 3). */
std::string boundedText(const std::string& text, size_t maxChars);

class Pipelines {
public:
    static constexpr uint32_t kMaxBindings = 8;
    static constexpr uint32_t kPushConstantBytes = 128;

    /**
     * `replacement`: the diagnostic SPIR-V dump and replacement (vk/shader_replacement.hpp).
     * `emulatedProducts`: the arithmetic of the emulated backend's products (vk/emulated_products.hpp),
     * set as constant PSK_EMULATED_PRODUCTS_ID on every emulated variant when it is not the default.
     */
    Pipelines(const DeviceFunctions& vk, VkDevice device, const DeviceCaps& caps, ShaderReplacement replacement = {},
              EmulatedProducts emulatedProducts = EmulatedProducts::Ieee);
    ~Pipelines();
    Pipelines(const Pipelines&) = delete;
    Pipelines& operator=(const Pipelines&) = delete;

    /**
     * The pipeline of SPIR-V `code` with its specialization constants (value i for constant_id i,
     * 32-bit each) and, when `requiredSubgroupSize` is not 0, that subgroup size: where the
     * device's subgroup size can vary (min != max) and it has subgroupSizeControl for compute, the
     * size is pinned with VkPipelineShaderStageRequiredSubgroupSizeCreateInfo, plus
     * REQUIRE_FULL_SUBGROUPS where computeFullSubgroups is enabled and the workgroup's x size is a
     * multiple of it; where the size cannot vary it must be the device's. Throws UNSUPPORTED when
     * the device cannot run it with that subgroup size (see supportsSubgroupSize). With shader
     * replacement on, a new pipeline's specialization is dumped and its module taken from the
     * replacement directory where a file for it exists (PSK_ERROR_BAD_FILE for one that is not
     * SPIR-V). Thread-safe.
     * Kernels are asked for by their choice (kernels/kernel_pipeline.hpp), which names the code.
     */
    VkPipeline get(const ShaderCode& code, const std::vector<uint32_t>& specConstants, uint32_t requiredSubgroupSize);

    /**
     * The compiler's statistics of the pipeline get() made for these arguments, one line as
     * "Name = value, ..." (VK_KHR_pipeline_executable_properties: registers, spills, memory,
     * instructions, whatever the driver reports; several executables each after their name), at
     * most `maxChars` (then ending in "..."). Empty when the device does not capture them
     * (DeviceCaps::pipelineExecutableInfo, PSK_PIPELINE_STATISTICS=1), the driver reported none,
     * or no such pipeline was created: a lookup, it creates nothing. A pipeline whose module was
     * replaced (PSK_SHADER_REPLACE) says so first: "SPIR-V replaced by <file>". Thread-safe.
     */
    static constexpr size_t kMaxStatisticsChars = 300;
    std::string statistics(const ShaderCode& code, const std::vector<uint32_t>& specConstants,
                           uint32_t requiredSubgroupSize, size_t maxChars = kMaxStatisticsChars) const;
    /** True when pipelines are created with their statistics captured. */
    bool capturesStatistics() const { return captureStatistics_; }

    /**
     * True when a kernel that assumes subgroups of `size` lanes can run here: `size` is the
     * device's subgroup size (the default of every pipeline), or the size can be pinned (subgroup
     * size control for compute, `size` a power of two in [minSubgroupSize, maxSubgroupSize]).
     * The plans check this before setting KernelChoice::requiredSubgroupSize.
     */
    bool supportsSubgroupSize(uint32_t size) const;
    /** True when `size` would be pinned on pipeline creation (not the device's fixed size). */
    bool pinsSubgroupSize(uint32_t size) const;

    VkPipelineLayout layout() const { return layout_; }
    VkDescriptorSetLayout setLayout() const { return setLayout_; }
    bool usesPushDescriptors() const { return pushDescriptors_; }
    EmulatedProducts emulatedProducts() const { return emulatedProducts_; }
    size_t size() const;

private:
    const DeviceFunctions& vk_;
    VkDevice device_;
    bool pushDescriptors_;
    // Subgroup size control as enabled on the device (device_caps.hpp).
    uint32_t subgroupSize_, minSubgroupSize_, maxSubgroupSize_, maxWorkgroupSubgroups_;
    bool sizeControl_, fullSubgroups_;
    bool captureStatistics_;  // DeviceCaps::pipelineExecutableInfo, enabled on the device
    ShaderReplacement replacement_;
    EmulatedProducts emulatedProducts_;
    VkDescriptorSetLayout setLayout_ = VK_NULL_HANDLE;
    VkPipelineLayout layout_ = VK_NULL_HANDLE;
    /** A pipeline is its SPIR-V variant, its specialization constants (by constant_id) and its
     *  required subgroup size (0: any). */
    struct Key {
        const ShaderCode* shader;
        std::vector<uint32_t> constants;
        uint32_t requiredSubgroupSize = 0;
        bool operator==(const Key& o) const {
            return shader == o.shader && constants == o.constants && requiredSubgroupSize == o.requiredSubgroupSize;
        }
    };
    struct KeyHash {
        size_t operator()(const Key& k) const;
    };
    /** A cached pipeline and its statistics text (empty unless captured). */
    struct Entry {
        VkPipeline pipeline = VK_NULL_HANDLE;
        std::string replacedBy;  // "SPIR-V replaced by <file>" where the module was replaced
        std::string statistics;  // the compiler's, whole
    };
    /** The statistics text of `pipeline`, read right after its creation. */
    std::string readStatistics(VkPipeline pipeline) const;
    mutable std::mutex mutex_;
    std::unordered_map<Key, Entry, KeyHash> cache_;
};

}  // namespace psk
