#!/usr/bin/env bash
# Installs what samples/tinylm/train/ needs to train the tinylm sample models:
#   .venv-train/ (python3 -m venv) with torch, numpy, safetensors from PyPI.
# Idempotent: an existing venv with everything importable is left as it is.
#
# About torch: PyPI's Linux x86_64 torch wheel is the CUDA build, and its shared libraries are
# linked against the CUDA runtime libraries that come as separate PyPI packages (nvidia-*). PyPI
# has no CPU-only Linux wheel (that one lives on download.pytorch.org, not reachable here), and
# `import torch` fails without the nvidia-* packages even on a machine with no GPU, so this is the
# plain `pip install torch` with all of its dependencies (a few GB on disk). The same venv trains on a
# GPU: train.py and sweep.py use CUDA when torch sees a device (this is the CUDA build), else the CPU.
#
# The KJV text for the byte-level LM comes from the Debian package bible-kjv-text, which holds it
# compressed in its own format (/usr/lib/bible.data); its reader, /usr/bin/bible from the package
# bible-kjv, prints it (`bible -f gen1:1-rev22:21`: one verse per line, 4.4 MB). Both are
# installed here with apt-get when missing; --no-apt skips that.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/install_common.sh"
root="$(cd "$(dirname "$0")/.." && pwd)"
with_apt=1
for a in "$@"; do
  case "$a" in
    --no-apt) with_apt=0 ;;
    *) echo "install_train_deps.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

packages=(python3 python3-venv)
if [ "$with_apt" -eq 1 ]; then packages+=(bible-kjv-text bible-kjv); fi
psk_apt_ensure "${packages[@]}"

venv="$root/.venv-train"
psk_venv "$venv"
psk_pip_ensure "$venv" "torch, numpy, safetensors" torch numpy safetensors
"$venv/bin/python" -c "import torch, numpy, safetensors; print('torch', torch.__version__, 'numpy', numpy.__version__, 'safetensors', safetensors.__version__, 'in', '$venv')"
