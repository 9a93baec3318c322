#include "kernels/team_kernels.hpp"

#include <cstdlib>
#include <cstring>

namespace psk {

bool teamKernelsSupported(const DeviceCaps& caps) {
    const VkSubgroupFeatureFlags needed = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    return caps.subgroupSize == kTeamLanes && (caps.subgroupOperations & needed) == needed && caps.shaderInt64 &&
           caps.minSubgroupSize == caps.maxSubgroupSize;  // no varying subgroup size: teams are whole subgroups
}

namespace {

bool disabledByEnvironment() {
    const char* env = std::getenv("PSK_DISABLE_TEAM_KERNELS");
    return env && *env && std::strcmp(env, "0") != 0;
}

}  // namespace

bool useTeamKernels(const DeviceCaps& caps) {
    return !disabledByEnvironment() && caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && teamKernelsSupported(caps);
}

const char* teamKernelsUnusedReason(const DeviceCaps& caps) {
    if (disabledByEnvironment()) return "PSK_DISABLE_TEAM_KERNELS is set";
    if (caps.properties.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU) return "a GPU (team kernels are for CPU drivers)";
    if (!teamKernelsSupported(caps)) return "the device lacks 8-lane subgroups with shuffle and arithmetic, or shaderInt64";
    return "team kernels are in use";
}

}  // namespace psk
