#!/usr/bin/env bash
# Installs what jtmini needs on a fresh Debian machine (as root) and the package itself, editable.
#   bash tools/setup.sh          # runtime: Open MPI, a C++ compiler, numpy, jinja2, mpi4py, tqdm, MNIST
#   bash tools/setup.sh --test   # also the test-only tools: pytest, PyTorch CPU (an oracle only)
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mpicc >/dev/null || need_apt+=(openmpi-bin libopenmpi-dev)
command -v g++ >/dev/null || need_apt+=(g++)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip python3-dev)
# Python's headers: jtmini compiles its graph walks against them (without, it walks in Python)
python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

pip_install() {
  # Debian's own Python refuses system-wide installs (PEP 668); this machine is the user's to set up.
  python3 -m pip install -q --disable-pip-version-check "$@" 2>/dev/null \
    || python3 -m pip install -q --disable-pip-version-check --break-system-packages "$@"
}

extras="."
[ "${1:-}" = "--test" ] && extras=".[test]"
pip_install -e "$extras"
# Intel's MKL on an Intel CPU: its products are 15-35% faster there than numpy's OpenBLAS (README,
# "Dependencies"); only its sequential layer is used, so not its OpenMP or TBB packages.
if [ "$(uname -m)" = x86_64 ] && grep -q GenuineIntel /proc/cpuinfo; then
  pip_install --no-deps "mkl>=2024,<2026"
fi
# MNIST's four original files, shipped inside this package (no network needed).
pip_install --no-deps jittor-offline==0.0.7
[ "${1:-}" = "--test" ] && pip_install torch==2.13.0
echo "jtmini is set up: $(python3 -c 'import jtmini; print(jtmini.__version__)')"
