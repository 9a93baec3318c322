#!/usr/bin/env bash
# Installs what samples/tinylm/train/ needs to train the tinylm sample models:
#   .venv-train/ (python3 -m venv) with torch, numpy, safetensors from PyPI.
# Idempotent: an existing venv with everything importable is left as it is.
#
# About torch: PyPI's Linux x86_64 torch wheel is the CUDA build, and its shared libraries are
# linked against the CUDA runtime libraries that come as separate PyPI packages (nvidia-*). PyPI
# has no CPU-only Linux wheel (that one lives on download.pytorch.org, not reachable here), and
# `import torch` fails without the nvidia-* packages even on a machine with no GPU, so this is the
# plain `pip install torch` with all of its dependencies (a few GB on disk). Training runs on the CPU.
#
# The KJV text for the byte-level LM comes from the Debian package bible-kjv-text, which holds it
# compressed in its own format (/usr/lib/bible.data); its reader, /usr/bin/bible from the package
# bible-kjv, prints it (`bible -f gen1:1-rev22:21`: one verse per line, 4.4 MB). Both are
# installed here with apt-get when missing; --no-apt skips that.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
with_apt=1
for a in "$@"; do
  case "$a" in
    --no-apt) with_apt=0 ;;
    *) echo "install_train_deps.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
packages=(python3 python3-venv)
if [ "$with_apt" -eq 1 ]; then packages+=(bible-kjv-text bible-kjv); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv="$root/.venv-train"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
# Keep the venv out of git without touching the repository's .gitignore.
printf '*\n' > "$venv/.gitignore"
if ! "$venv/bin/python" -c "import torch, numpy, safetensors" >/dev/null 2>&1; then
  echo "installing torch, numpy, safetensors from PyPI into $venv (large download)"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q torch numpy safetensors
fi
"$venv/bin/python" -c "import torch, numpy, safetensors; print('torch', torch.__version__, 'numpy', numpy.__version__, 'safetensors', safetensors.__version__, 'in', '$venv')"
