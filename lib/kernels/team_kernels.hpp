// Lane-team kernels: variants of the polysketch block states and output written for devices whose
// "GPU" is a CPU running 8-wide SIMD (lavapipe / llvmpipe with AVX2, SwiftShader).
//
// Why a separate variant: a CPU Vulkan driver turns every storage- or shared-memory access of an
// invocation into a loop over the SIMD lanes (about the same cost whatever the access width, so
// 8 floats as one u64vec4 beat two vec4s) and every barrier() into a coroutine switch, while
// register arithmetic and subgroupShuffle are real SIMD instructions (a shuffle is one vpermd with
// AVX2). The generic kernels stage operands in shared memory behind barriers and read the same Z
// row or key row in every invocation, which is what a GPU wants and a CPU driver's worst case. The
// team kernels treat a subgroup of 8 lanes as one SIMD register: each lane loads only operands no
// other lane loads (its own value columns, its own rows' sketches) and shares its rows' values
// with subgroupShuffle(x, r) (r a constant lane), so a load feeds the team's 16 rows (two per
// lane) and no barrier is needed. Not subgroupBroadcast: on llvmpipe 22.3 it costs about as much
// as 60 SIMD multiply-adds, the shuffle nearly nothing. Measured on llvmpipe (2-core Zen 5, AVX2
// code), a 4096 x 528 x 64 product: ~2-3 GFLOP/s in the one-row-per-invocation, shared-memory
// style; 15.5 GFLOP/s as 8-row teams with subgroupBroadcast; 18-21 with subgroupShuffle; 28-31
// with 16-row teams; 32-38 with 16-row teams and 8-float loads. More values per lane (4 keys per
// lane in the output's local tiles, say) measured slower: the extra live registers spill.
#pragma once

#include "vk/device_caps.hpp"

namespace psk {

/** Lanes per team: the subgroup size the team kernels are written for. */
constexpr uint32_t kTeamLanes = 8;

/** Rows (features, for the states) per workgroup of a team kernel: 8 teams x 16 rows, two per lane. */
constexpr uint32_t kTeamWorkgroupRows = 8 * 2 * kTeamLanes;

/** The device can run the team kernels: 8-lane subgroups with basic, shuffle and arithmetic operations in compute shaders, and shaderInt64 enabled (8-float loads as u64vec4). */
bool teamKernelsSupported(const DeviceCaps& caps);

/**
 * The forward uses the team kernels: supported, the device is a CPU (VK_PHYSICAL_DEVICE_TYPE_CPU;
 * GPUs keep the shared-memory kernels), and the environment variable PSK_DISABLE_TEAM_KERNELS is
 * unset or "0" (tests set it to run the generic kernels on lavapipe too).
 */
bool useTeamKernels(const DeviceCaps& caps);

/** Why useTeamKernels(caps) is false, in a few words (for `psk info --plan`). */
const char* teamKernelsUnusedReason(const DeviceCaps& caps);

}  // namespace psk
