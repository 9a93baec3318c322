#include "vk/pipelines.hpp"

#include "util/error.hpp"
#include "kernels/shader_registry.hpp"

namespace psk {

const ShaderCode* findShader(std::string_view name) {
    for (size_t i = 0; i < kShaderRegistrySize; ++i)
        if (name == kShaderRegistry[i].name) return &kShaderRegistry[i];
    return nullptr;
}

Pipelines::Pipelines(const DeviceFunctions& vk, VkDevice device, const DeviceCaps& caps)
    : vk_(vk), device_(device), pushDescriptors_(caps.pushDescriptors) {
    VkDescriptorSetLayoutBinding bindings[kMaxBindings];
    for (uint32_t i = 0; i < kMaxBindings; ++i) {
        bindings[i] = VkDescriptorSetLayoutBinding{};
        bindings[i].binding = i;
        bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        bindings[i].descriptorCount = 1;
        bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo setInfo{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    if (pushDescriptors_) setInfo.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
    setInfo.bindingCount = kMaxBindings;
    setInfo.pBindings = bindings;
    PSK_VK(vk_.vkCreateDescriptorSetLayout(device_, &setInfo, vk_.callbacks, &setLayout_));

    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
    VkPipelineLayoutCreateInfo layoutInfo{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    layoutInfo.setLayoutCount = 1;
    layoutInfo.pSetLayouts = &setLayout_;
    layoutInfo.pushConstantRangeCount = 1;
    layoutInfo.pPushConstantRanges = &range;
    const VkResult r = vk_.vkCreatePipelineLayout(device_, &layoutInfo, vk_.callbacks, &layout_);
    if (r != VK_SUCCESS) {
        vk_.vkDestroyDescriptorSetLayout(device_, setLayout_, vk_.callbacks);
        checkVk(r, "vkCreatePipelineLayout");
    }
}

Pipelines::~Pipelines() {
    for (auto& entry : cache_) vk_.vkDestroyPipeline(device_, entry.second, vk_.callbacks);
    vk_.vkDestroyPipelineLayout(device_, layout_, vk_.callbacks);
    vk_.vkDestroyDescriptorSetLayout(device_, setLayout_, vk_.callbacks);
}

size_t Pipelines::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_.size();
}

size_t Pipelines::KeyHash::operator()(const Key& k) const {
    size_t h = std::hash<const void*>()(k.shader);
    for (uint32_t v : k.constants) h = h * 1099511628211ull ^ v;
    return h;
}

VkPipeline Pipelines::get(const KernelChoice& choice) {
    const ShaderCode* code = findShader(choice.variant);
    if (!code) fail(PSK_ERROR_UNSUPPORTED, "shader variant ", choice.variant, " is not built into this library");
    const std::vector<uint32_t>& specConstants = choice.constants.values;
    Key key{code, specConstants};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;

    VkShaderModuleCreateInfo moduleInfo{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    moduleInfo.codeSize = code->bytes;
    moduleInfo.pCode = code->code;
    VkShaderModule module = VK_NULL_HANDLE;
    PSK_VK(vk_.vkCreateShaderModule(device_, &moduleInfo, vk_.callbacks, &module));

    std::vector<VkSpecializationMapEntry> entries(specConstants.size());
    for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * 4u, 4u};
    VkSpecializationInfo spec{};
    spec.mapEntryCount = static_cast<uint32_t>(entries.size());
    spec.pMapEntries = entries.data();
    spec.dataSize = specConstants.size() * 4u;
    spec.pData = specConstants.data();

    VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    info.stage.pSpecializationInfo = &spec;
    info.layout = layout_;
    VkPipeline pipeline = VK_NULL_HANDLE;
    const VkResult r = vk_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, vk_.callbacks, &pipeline);
    vk_.vkDestroyShaderModule(device_, module, vk_.callbacks);
    checkVk(r, "vkCreateComputePipelines");
    cache_.emplace(std::move(key), pipeline);
    return pipeline;
}

}  // namespace psk
