#include "kernels/team_kernels.hpp"

#include <cstdlib>
#include <cstring>

namespace psk {

bool teamKernelsSupported(const DeviceCaps& caps) {
    const VkSubgroupFeatureFlags needed = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    return caps.subgroupSize == kTeamLanes && (caps.subgroupOperations & needed) == needed && caps.shaderInt64 &&
           caps.minSubgroupSize == caps.maxSubgroupSize;  // no varying subgroup size: teams are whole subgroups
}

bool useTeamKernels(const DeviceCaps& caps) {
    const char* env = std::getenv("PSK_DISABLE_TEAM_KERNELS");
    if (env && *env && std::strcmp(env, "0") != 0) return false;
    return caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && teamKernelsSupported(caps);
}

}  // namespace psk
