#!/usr/bin/env bash
# Sets fusebench up from a fresh clone: an optimized BLAS where mlx's CPU backend needs one, then the package.
#   ./setup.sh         the package and its `fusebench` command
#   ./setup.sh --dev   the same, plus pytest and ruff
set -euo pipefail
cd "$(dirname "$0")"

# The mlx-cpu wheel bundles the reference BLAS; fusebench's workers preload OpenBLAS when it is installed,
# which makes fp32 matmul about 30x faster. Installing it needs root and apt; elsewhere we only say so.
have_openblas() { compgen -G "/usr/lib/*/openblas-pthread/libblas.so.3" >/dev/null; }
if [[ $(uname -s) == Linux ]] && ! have_openblas; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null && apt-get install -y -qq libopenblas0-pthread >/dev/null; }
  else
    echo "setup: no OpenBLAS found; CPU runs will use the slow reference BLAS." >&2
    echo "setup: install it with: sudo apt-get install libopenblas0-pthread   (or: pip install mkl)" >&2
  fi
fi

# One MLX backend: Metal comes with mlx on macOS; on Linux the CPU one (runbooks/cuda.sh installs the CUDA one).
extras=()
[[ $(uname -s) == Linux ]] && extras+=(cpu)
[[ ${1:-} == --dev ]] && extras+=(dev)
spec="."
(( ${#extras[@]} )) && spec=".[$(IFS=,; echo "${extras[*]}")]"
python3 -m pip install --quiet --disable-pip-version-check -e "$spec"
