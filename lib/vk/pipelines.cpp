#include "vk/pipelines.hpp"

#include <cinttypes>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "util/error.hpp"
#include "vk/vk_result.hpp"

namespace psk {
namespace {

// The few SPIR-V opcodes, decorations and modes the workgroup size needs (SPIR-V spec, 3.x).
constexpr uint32_t kOpExecutionMode = 16, kOpConstant = 43, kOpConstantComposite = 44, kOpSpecConstant = 50,
                   kOpSpecConstantComposite = 51, kOpDecorate = 71, kOpExecutionModeId = 331;
constexpr uint32_t kDecorationSpecId = 1, kDecorationBuiltIn = 11, kBuiltInWorkgroupSize = 25;
constexpr uint32_t kModeLocalSize = 17, kModeLocalSizeId = 38;

bool isPowerOfTwo(uint32_t v) { return v && (v & (v - 1)) == 0; }

/** One statistic's value as text: true / false, an integer, or a float with 4 significant digits. */
std::string statisticValue(const VkPipelineExecutableStatisticKHR& s) {
    char text[32];
    switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
            return s.value.b32 ? "true" : "false";
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
            std::snprintf(text, sizeof(text), "%" PRId64, s.value.i64);
            return text;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
            std::snprintf(text, sizeof(text), "%" PRIu64, s.value.u64);
            return text;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
            std::snprintf(text, sizeof(text), "%.4g", s.value.f64);
            return text;
        default:
            return "?";
    }
}

/** An array of `count` structs of type `sType`, as the two-call enumerations want them. */
template <typename T>
std::vector<T> blankStructs(uint32_t count, VkStructureType sType) {
    T blank{};
    blank.sType = sType;
    return std::vector<T>(count, blank);
}

}  // namespace

std::string formatPipelineStatistics(const std::vector<ExecutableStatistics>& executables, size_t maxChars) {
    std::string text;
    for (const ExecutableStatistics& e : executables) {
        if (e.statistics.empty()) continue;
        if (!text.empty()) text += "; ";
        // A compute pipeline has one executable on most drivers; where it has several (a driver's
        // internal stages), each is named so that its numbers are not taken for another's.
        if (executables.size() > 1) text += e.name + ": ";
        for (size_t j = 0; j < e.statistics.size(); ++j) {
            if (j) text += ", ";
            text += std::string(e.statistics[j].name) + " = " + statisticValue(e.statistics[j]);
        }
    }
    // One line of the plan: no line breaks from a driver's names, and a bounded length.
    for (char& c : text)
        if (c == '\n' || c == '\r') c = ' ';
    return boundedText(text, maxChars);
}

std::string boundedText(const std::string& text, size_t maxChars) {
    if (text.size() <= maxChars) return text;
    return maxChars > 3 ? text.substr(0, maxChars - 3) + "..." : text.substr(0, maxChars);
}

WorkgroupSize shaderWorkgroupSize(const ShaderCode& code, const std::vector<uint32_t>& specConstants) {
    const uint32_t* w = code.code;
    const size_t words = code.bytes / 4;
    if (words < 5 || w[0] != 0x07230203u) return {};
    std::unordered_map<uint32_t, uint32_t> specId, scalar;
    std::unordered_map<uint32_t, std::vector<uint32_t>> composite;
    uint32_t builtinId = 0;
    uint32_t literal[3] = {0, 0, 0}, ids[3] = {0, 0, 0};
    bool haveLiteral = false, haveIds = false;
    for (size_t i = 5; i < words;) {
        const uint32_t count = w[i] >> 16, op = w[i] & 0xFFFFu;
        if (count == 0 || i + count > words) return {};
        const uint32_t* a = w + i + 1;  // operands
        const uint32_t n = count - 1;
        if (op == kOpDecorate && n >= 3 && a[1] == kDecorationSpecId) {
            specId[a[0]] = a[2];
        } else if (op == kOpDecorate && n >= 3 && a[1] == kDecorationBuiltIn && a[2] == kBuiltInWorkgroupSize) {
            builtinId = a[0];
        } else if ((op == kOpConstant || op == kOpSpecConstant) && n >= 3) {
            scalar[a[1]] = a[2];
        } else if ((op == kOpConstantComposite || op == kOpSpecConstantComposite) && n >= 2) {
            composite[a[1]] = std::vector<uint32_t>(a + 2, a + n);
        } else if (op == kOpExecutionMode && n >= 5 && a[1] == kModeLocalSize) {
            literal[0] = a[2], literal[1] = a[3], literal[2] = a[4];
            haveLiteral = true;
        } else if (op == kOpExecutionModeId && n >= 5 && a[1] == kModeLocalSizeId) {
            ids[0] = a[2], ids[1] = a[3], ids[2] = a[4];
            haveIds = true;
        }
        i += count;
    }
    auto value = [&](uint32_t id) -> uint32_t {
        const auto s = specId.find(id);
        if (s != specId.end() && s->second < specConstants.size()) return specConstants[s->second];
        const auto v = scalar.find(id);
        return v == scalar.end() ? 0u : v->second;
    };
    WorkgroupSize size;
    const auto c = builtinId ? composite.find(builtinId) : composite.end();
    if (c != composite.end() && c->second.size() == 3) {
        size = {value(c->second[0]), value(c->second[1]), value(c->second[2])};
    } else if (haveIds) {
        size = {value(ids[0]), value(ids[1]), value(ids[2])};
    } else if (haveLiteral) {
        size = {literal[0], literal[1], literal[2]};
    }
    return size;
}

Pipelines::Pipelines(const DeviceFunctions& vk, VkDevice device, const DeviceCaps& caps, ShaderReplacement replacement,
                     EmulatedProducts emulatedProducts)
    : vk_(vk),
      device_(device),
      pushDescriptors_(caps.pushDescriptors),
      subgroupSize_(caps.subgroupSize),
      minSubgroupSize_(caps.minSubgroupSize),
      maxSubgroupSize_(caps.maxSubgroupSize),
      maxWorkgroupSubgroups_(caps.maxComputeWorkgroupSubgroups),
      sizeControl_(caps.subgroupSizeControl && (caps.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT)),
      fullSubgroups_(caps.subgroupSizeControl && caps.computeFullSubgroups),
      captureStatistics_(caps.pipelineExecutableInfo && vk.vkGetPipelineExecutablePropertiesKHR &&
                         vk.vkGetPipelineExecutableStatisticsKHR),
      replacement_(std::move(replacement)),
      emulatedProducts_(emulatedProducts) {
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
    for (auto& entry : cache_) vk_.vkDestroyPipeline(device_, entry.second.pipeline, vk_.callbacks);
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
    return h * 1099511628211ull ^ k.requiredSubgroupSize;
}

bool Pipelines::supportsSubgroupSize(uint32_t size) const {
    if (size == subgroupSize_) return true;
    return sizeControl_ && isPowerOfTwo(size) && size >= minSubgroupSize_ && size <= maxSubgroupSize_;
}

bool Pipelines::pinsSubgroupSize(uint32_t size) const {
    return size != 0 && sizeControl_ && minSubgroupSize_ != maxSubgroupSize_ && supportsSubgroupSize(size);
}

VkPipeline Pipelines::get(const ShaderCode& shader, const std::vector<uint32_t>& specConstants, uint32_t required) {
    const ShaderCode* code = &shader;
    if (required && !supportsSubgroupSize(required))
        fail(PSK_ERROR_UNSUPPORTED, "shader variant ", code->name, " needs subgroups of ", required,
             " lanes; the device's subgroup size is ", subgroupSize_,
             sizeControl_ ? " and it can require sizes " : " and it cannot require another",
             sizeControl_ ? cat(minSubgroupSize_, " to ", maxSubgroupSize_) : std::string());
    Key key{code, specConstants, required};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second.pipeline;

    VkShaderModuleCreateInfo moduleInfo{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    moduleInfo.codeSize = code->bytes;
    moduleInfo.pCode = code->code;
    // The diagnostic dump and replacement (vk/shader_replacement.hpp): the built-in module and this
    // specialization's constants out; another module in, where one was made for it.
    std::optional<std::vector<uint32_t>> replaced;
    std::string replacedPath;
    if (replacement_.active()) {
        if (!replacement_.dumpDir.empty()) dumpSpecialization(replacement_.dumpDir, *code, specConstants);
        if (!replacement_.replaceDir.empty()) {
            replaced = loadReplacement(replacement_.replaceDir, specializationStem(*code, specConstants), &replacedPath);
            if (replaced) {
                moduleInfo.codeSize = replaced->size() * 4u;
                moduleInfo.pCode = replaced->data();
            }
        }
    }
    VkShaderModule module = VK_NULL_HANDLE;
    PSK_VK(vk_.vkCreateShaderModule(device_, &moduleInfo, vk_.callbacks, &module));

    std::vector<VkSpecializationMapEntry> entries(specConstants.size());
    for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * 4u, 4u};
    std::vector<uint32_t> values = specConstants;
    // The emulated backend's product arithmetic, where it is not the default (the same pipelines,
    // and the same driver caches, as before the switch existed when it is off).
    if (emulatedProducts_ != EmulatedProducts::Ieee && isEmulatedVariant(code->name)) {
        entries.push_back({PSK_EMULATED_PRODUCTS_ID, uint32_t(values.size() * 4u), 4u});
        values.push_back(static_cast<uint32_t>(emulatedProducts_));
    }
    VkSpecializationInfo spec{};
    spec.mapEntryCount = static_cast<uint32_t>(entries.size());
    spec.pMapEntries = entries.data();
    spec.dataSize = values.size() * 4u;
    spec.pData = values.data();

    VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    info.stage.pSpecializationInfo = &spec;
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT sizeInfo{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT};
    if (pinsSubgroupSize(required)) {
        // The size of the module compiled (a replacement's, where one was read).
        const WorkgroupSize wg = shaderWorkgroupSize(ShaderCode{code->name, moduleInfo.pCode, moduleInfo.codeSize}, specConstants);
        if (maxWorkgroupSubgroups_ && wg.invocations() > uint64_t(maxWorkgroupSubgroups_) * required) {
            vk_.vkDestroyShaderModule(device_, module, vk_.callbacks);
            fail(PSK_ERROR_UNSUPPORTED, "shader variant ", code->name, ": ", wg.invocations(),
                 " invocations are more than maxComputeWorkgroupSubgroups (", maxWorkgroupSubgroups_,
                 ") subgroups of ", required);
        }
        sizeInfo.requiredSubgroupSize = required;
        info.stage.pNext = &sizeInfo;
        if (fullSubgroups_ && wg.x != 0 && wg.x % required == 0)
            info.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
    }
    info.layout = layout_;
    if (captureStatistics_) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    VkPipeline pipeline = VK_NULL_HANDLE;
    const VkResult r = vk_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, vk_.callbacks, &pipeline);
    vk_.vkDestroyShaderModule(device_, module, vk_.callbacks);
    checkVk(r, "vkCreateComputePipelines");
    Entry entry{pipeline, replaced ? "SPIR-V replaced by " + replacedPath : std::string(),
                captureStatistics_ ? readStatistics(pipeline) : std::string()};
    cache_.emplace(std::move(key), std::move(entry));
    return pipeline;
}

std::string Pipelines::readStatistics(VkPipeline pipeline) const {
    // Diagnostics only: a query that fails leaves the text empty rather than failing the pipeline.
    VkPipelineInfoKHR pipelineInfo{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
    pipelineInfo.pipeline = pipeline;
    uint32_t count = 0;
    if (vk_.vkGetPipelineExecutablePropertiesKHR(device_, &pipelineInfo, &count, nullptr) != VK_SUCCESS || count == 0)
        return {};
    auto properties = blankStructs<VkPipelineExecutablePropertiesKHR>(count, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR);
    const VkResult listed = vk_.vkGetPipelineExecutablePropertiesKHR(device_, &pipelineInfo, &count, properties.data());
    if (listed != VK_SUCCESS && listed != VK_INCOMPLETE) return {};
    std::vector<ExecutableStatistics> executables(count);
    for (uint32_t i = 0; i < count; ++i) {
        executables[i].name = properties[i].name;
        VkPipelineExecutableInfoKHR executableInfo{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
        executableInfo.pipeline = pipeline;
        executableInfo.executableIndex = i;
        uint32_t statCount = 0;
        if (vk_.vkGetPipelineExecutableStatisticsKHR(device_, &executableInfo, &statCount, nullptr) != VK_SUCCESS || statCount == 0)
            continue;
        auto stats = blankStructs<VkPipelineExecutableStatisticKHR>(statCount, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR);
        const VkResult r = vk_.vkGetPipelineExecutableStatisticsKHR(device_, &executableInfo, &statCount, stats.data());
        if (r != VK_SUCCESS && r != VK_INCOMPLETE) continue;
        stats.resize(statCount);
        executables[i].statistics = std::move(stats);
    }
    return formatPipelineStatistics(executables, std::string::npos);
}

std::string Pipelines::statistics(const ShaderCode& code, const std::vector<uint32_t>& specConstants,
                                  uint32_t requiredSubgroupSize, size_t maxChars) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = cache_.find(Key{&code, specConstants, requiredSubgroupSize});
    if (it == cache_.end()) return {};
    const Entry& e = it->second;
    const std::string stats = boundedText(e.statistics, maxChars);
    if (e.replacedBy.empty()) return stats;
    return e.replacedBy + (stats.empty() ? "" : "; " + stats);
}

}  // namespace psk
