#!/usr/bin/env bash
# The main job: install what is missing, build, list the devices, run the demo on the best device
# present (falls back to lavapipe, the CPU Vulkan driver), then the sample model: tinylm, a byte-level
# language model trained with polysketch attention, generating text on the GPU from a C app
# (samples/tinylm). Extra arguments go to psk demo.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh"
"$root/tools/build.sh"
"$root/build/tools/psk" info
echo
"$root/build/tools/psk" demo "$@"
echo
model="$root/samples/tinylm/models/bytes_polysketch.safetensors"
"$root/build/samples/tinylm/tinylm" generate "$model" --prompt "And God said" --tokens 200 --temperature 0.8 --top-k 40 --seed 1
