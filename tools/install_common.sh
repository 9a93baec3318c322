# shellcheck shell=bash
# What the tools/install_*.sh scripts share; each sources it (bash, under set -euo pipefail):
#   psk_as_root CMD...              CMD as root: directly when root, else through sudo
#   psk_apt_install PACKAGE...      apt-get update, then install the packages quietly (no recommends)
#   psk_apt_ensure PACKAGE...       installs those of the packages dpkg does not list as installed;
#                                   nothing at all (no output, no apt-get) when every one is
#   psk_venv DIR [PYTHON]           a venv in DIR (made with PYTHON, /usr/bin/python3 by default)
#                                   unless DIR has one, kept out of git by its own .gitignore
#   psk_pip_ensure VENV MODULES PACKAGE...
#                                   unless VENV's python can `import MODULES`, upgrades pip and
#                                   pip-installs the packages; returns pip's status

psk_as_root() {
  if [ "$(id -u)" -ne 0 ]; then
    sudo "$@"
  else
    "$@"
  fi
}

psk_apt_install() {
  echo "installing: $*"
  export DEBIAN_FRONTEND=noninteractive
  psk_as_root apt-get update -qq &&
    psk_as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

psk_apt_ensure() {
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -ne 0 ]; then
    psk_apt_install "${missing[@]}"
  fi
}

psk_venv() {
  local venv="$1" python="${2:-/usr/bin/python3}"
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || return
  fi
  # Keep the venv out of git without touching the repository's .gitignore.
  printf '*\n' > "$venv/.gitignore"
}

psk_pip_ensure() {
  local venv="$1" modules="$2"
  shift 2
  if "$venv/bin/python" -c "import $modules" >/dev/null 2>&1; then
    return 0
  fi
  local names
  names="$(printf '%s, ' "$@")"
  echo "installing ${names%, } from PyPI into $venv (large download)"
  "$venv/bin/python" -m pip install -q --upgrade pip || exit
  "$venv/bin/python" -m pip install -q "$@"
}
