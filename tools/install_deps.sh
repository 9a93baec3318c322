#!/usr/bin/env bash
# Installs the Debian 12 packages polysketch builds and tests with, if any is missing.
#   libvulkan-dev          Vulkan headers and the loader (the library dlopens libvulkan.so.1)
#   glslc                  GLSL -> SPIR-V at build time (shaderc)
#   spirv-tools            spirv-val, used by the tests to validate every built shader
#   mesa-vulkan-drivers    lavapipe, the CPU Vulkan device of CI and of machines without a GPU
#   vulkan-validationlayers  the tests fail on any validation message
#   libgtest-dev           GoogleTest
#   cmake, g++, make       the build
#   pkg-config             the consume tests build an app with pkg-config --cflags --libs polysketch
#   libopenmpi-dev, openmpi-bin  the optional sequence-parallel component (polysketch_mpi) and its
#                          tests under mpirun; the library builds without them
# Optional, from PyPI into .venv-build/: glslangValidator (glslang >= 13) for the KHR
# cooperative-matrix shader variants, which Debian 12's glslc cannot compile: tools/install_build_tools.sh
# (tools/build.sh runs it).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/install_common.sh"
packages=(cmake g++ make pkg-config libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers libgtest-dev
          libopenmpi-dev openmpi-bin)
psk_apt_ensure "${packages[@]}"
