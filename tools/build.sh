#!/usr/bin/env bash
# Configures and builds polysketch into build/ (Release with debug info). The second shader
# compiler for the KHR cooperative-matrix variants goes into .venv-build/ first
# (tools/install_build_tools.sh; without it the build has the NV variants only).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_build_tools.sh" || true
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j "$(nproc)"
