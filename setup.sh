#!/usr/bin/env bash
# Sets fusebench up from a fresh clone in a virtual environment of its own, .venv/, so it works on a stock system
# Python too (Debian 12 and Ubuntu 24.04 refuse `pip install` outside one, PEP 668), as a plain user or as root.
#   ./setup.sh         the package and its `fusebench` command: .venv/bin/fusebench
#   ./setup.sh --dev   the same, plus pytest and ruff
# PYTHON=/path/to/python3 picks the interpreter (default: python3 on the path; 3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")"
venv=.venv
missing() { echo "setup: $*" >&2; exit 1; }

python=${PYTHON:-python3}
command -v "$python" >/dev/null || missing "no $python on the path; install Python 3.11+ (Debian/Ubuntu: apt-get install python3 python3-venv)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  missing "$("$python" -V 2>&1) is too old; fusebench needs Python 3.11+ (set PYTHON=/path/to/python3.11+)"

linux=0; [[ $(uname -s) == Linux ]] && linux=1
# On Linux the CPU backend JIT-compiles mx.compile's kernels with the system C++ compiler at run time.
(( linux )) && ! command -v c++ >/dev/null &&
  missing "no C++ compiler: mx.compile on the CPU needs one; install it (Debian/Ubuntu: apt-get install g++)"

if [[ ! -x $venv/bin/python ]]; then
  if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    missing "$python cannot create a virtual environment; install venv (Debian/Ubuntu: apt-get install python3-venv)"
  fi
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

# Debian's OpenBLAS where root can install it; fusebench's workers preload it (see bench/measure/machine/env.py).
have_system_openblas() { compgen -G "/usr/lib/*/openblas-pthread/libblas.so.3" >/dev/null; }
if (( linux )) && ! have_system_openblas && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq libopenblas0-pthread >/dev/null; } ||
    echo "setup: apt-get could not install libopenblas0-pthread" >&2
fi

# Exactly one MLX backend: Metal comes with mlx on macOS; on Linux the CPU one (runbooks/cuda.sh installs CUDA's).
extras=()
(( linux )) && extras+=(cpu)
[[ ${1:-} == --dev ]] && extras+=(dev)
spec="."
(( ${#extras[@]} )) && spec=".[$(IFS=,; echo "${extras[*]}")]"
"${pip[@]}" -e "$spec"

# Without root there is no Debian OpenBLAS: the cpu extra brought PyPI's OpenBLAS, which the workers preload
# through a shim built on first use into ~/.cache/fusebench (bench/measure/machine/blas_shim.py). Build it now, and say
# which BLAS the workers will use.
if (( linux )); then
  "$venv/bin/python" -c 'from fusebench.measure.machine.env import blas_preload_env as b; print("setup: BLAS:", b("auto")[1])' >&2
fi

echo "setup: done. fusebench is $venv/bin/fusebench; put it on your path with: source $venv/bin/activate" >&2
