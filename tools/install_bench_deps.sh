#!/usr/bin/env bash
# Installs the optional extras of `psk bench`. Nothing here is needed to build or test polysketch
# (tools/install_deps.sh is): without them `psk bench --plot` and `--peer torch` report that they
# are unavailable and everything else works.
#
#   python3-matplotlib (Debian)  --plot: tools/bench_plot.py runs under the system /usr/bin/python3
#   .venv-bench/ (PyPI torch)    --peer torch: tools/torch_peer.py runs under .venv-bench/bin/python
#
# About torch: PyPI's Linux x86_64 torch wheel is the CUDA build, and its shared libraries are
# linked against the CUDA runtime libraries that come as separate PyPI packages (cuda-toolkit,
# nvidia-cudnn-*, nvidia-nccl-*, ...). `import torch` fails without them even on a machine with no
# GPU, so the venv gets the plain `pip install torch` with all of its dependencies (about 4 GB on
# disk). The CUDA libraries are only loaded, never used: the peer runs on the CPU.
#
# Options: --no-torch skips the venv (plot only).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/install_common.sh"
root="$(cd "$(dirname "$0")/.." && pwd)"
with_torch=1
for a in "$@"; do
  case "$a" in
    --no-torch) with_torch=0 ;;
    *) echo "install_bench_deps.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

psk_apt_ensure python3 python3-matplotlib python3-venv

if [ "$with_torch" -eq 1 ]; then
  venv="$root/.venv-bench"
  psk_venv "$venv"
  if ! psk_pip_ensure "$venv" torch torch; then
    echo "install_bench_deps.sh: torch could not be installed; psk bench --peer torch will report it unavailable" >&2
    exit 0
  fi
  "$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'in', '$venv')"
fi
/usr/bin/python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)"
