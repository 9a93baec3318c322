#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with CTest. Vulkan validation layers are
# required (PSK_REQUIRE_VALIDATION=1): a test fails on any validation message.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh"
"$root/tools/build.sh"
export PSK_REQUIRE_VALIDATION=1
cd "$root/build"
ctest --output-on-failure -j "$(nproc)" --timeout 900
