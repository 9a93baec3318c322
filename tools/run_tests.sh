#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with CTest. Vulkan validation layers are
# required (PSK_REQUIRE_VALIDATION=1): a test fails on any validation message.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh"
"$root/tools/build.sh"
export PSK_REQUIRE_VALIDATION=1
cd "$root/build"
# The suite, then the mutation check's quick mode (label `mutation`: a second build of the
# committed tree in a worktree plus the planted bugs, several minutes on two cores) as a step of
# its own, so that it neither stretches the suite nor competes with it for the cores. The
# conformance sweeps run as shards; their per-case tests (label `cases`, tests/CMakeLists.txt)
# are the same cases once more and stay out.
rc=0
ctest --output-on-failure -j "$(nproc)" --timeout 900 -LE '^(mutation|cases)$' || rc=1
ctest --output-on-failure --timeout 1800 -L '^mutation$' || rc=1
exit "$rc"
