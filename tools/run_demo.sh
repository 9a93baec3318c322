#!/usr/bin/env bash
# The main job: install what is missing, build, list the devices, and run the demo on the best
# device present (falls back to lavapipe, the CPU Vulkan driver). Extra arguments go to psk demo.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh"
"$root/tools/build.sh"
"$root/build/tools/psk" info
echo
"$root/build/tools/psk" demo "$@"
