#!/usr/bin/env bash
# Unpacks Mesa's RADV driver from Debian 12's backports (bookworm-backports, Mesa 25.0) into .radv/
# (gitignored), without installing it: the system's Vulkan drivers (lavapipe, which the tests run
# on) stay as they are. Only `psk compile` uses it (tools/psk/cmd_compile.cpp): RADV's null device
# (RADV_FORCE_FAMILY, no GPU behind it) compiles every kernel of a plan with AMD's compiler and
# reports registers, spills and instruction counts; Mesa 25.0's RADV has VK_KHR_cooperative_matrix
# on RDNA3 (navi31, navi33), which Debian 12's own Mesa 22.3 lacks, so the cooperative kernels
# compile there too (docs/MODEL.md, "The kernels through AMD's compiler").
#
#   tools/install_radv_null.sh            # then:
#   source .radv/env && RADV_FORCE_FAMILY=navi31 build/tools/psk compile PLAN
#
# Needs apt-get and dpkg-deb (Debian 12) and access to deb.debian.org; no root: the package lists
# and the .debs go to .radv/ only. Idempotent: an existing .radv/ with the driver is kept.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.radv"
lib="$dest/root/usr/lib/x86_64-linux-gnu"
if [ -f "$lib/libvulkan_radeon.so" ] && [ -f "$dest/env" ]; then
    echo "install_radv_null.sh: $dest already has RADV ($(cat "$dest/version" 2>/dev/null || echo unknown)); source $dest/env"
    exit 0
fi
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || { echo "install_radv_null.sh: needs apt-get and dpkg-deb (Debian)" >&2; exit 1; }

mkdir -p "$dest/apt/lists/partial" "$dest/apt/archives/partial" "$dest/debs"
echo "deb http://deb.debian.org/debian bookworm-backports main" > "$dest/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$dest/apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
          -o "Dir::State::Lists=$dest/apt/lists" -o "Dir::Cache::Archives=$dest/apt/archives"
          -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
apt-get "${apt_opts[@]}" -q update
# The driver and the libdrm it was built against (newer than Debian 12's); the rest of its
# dependencies (LLVM 15, libelf, zlib, ...) are Debian 12's own.
(cd "$dest/debs" && apt-get "${apt_opts[@]}" -q download mesa-vulkan-drivers/bookworm-backports libdrm2/bookworm-backports \
                                                           libdrm-amdgpu1/bookworm-backports)
for deb in "$dest"/debs/*.deb; do dpkg-deb -x "$deb" "$dest/root"; done
[ -f "$lib/libvulkan_radeon.so" ] || { echo "install_radv_null.sh: no libvulkan_radeon.so in the package" >&2; exit 1; }
cat > "$dest/radeon_icd.json" <<JSON
{
    "ICD": {
        "api_version": "1.3.0",
        "library_path": "$lib/libvulkan_radeon.so"
    },
    "file_format_version": "1.0.0"
}
JSON
dpkg-deb -f "$dest"/debs/mesa-vulkan-drivers_*.deb Version > "$dest/version"
cat > "$dest/env" <<ENV
# RADV from Debian 12's backports (Mesa $(cat "$dest/version")), for psk compile on its null device:
#   source .radv/env && RADV_FORCE_FAMILY=navi31 build/tools/psk compile PLAN
export VK_ICD_FILENAMES="$dest/radeon_icd.json"
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
echo "install_radv_null.sh: RADV $(cat "$dest/version") in $dest; use it with: source $dest/env && RADV_FORCE_FAMILY=navi31 build/tools/psk compile PLAN"
