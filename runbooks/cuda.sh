#!/usr/bin/env bash
# The GPU run book: on a Linux machine with an NVIDIA GPU, install fusebench on MLX's CUDA backend (and only that
# backend), then measure what the two ollama PRs claim, at full size, and write the results and reports.
#
#   runbooks/cuda.sh              install, check, measure (pr18809-gpu and pr15587 at full size, bf16)
#   runbooks/cuda.sh --dry-run    everything up to the GPU: install plan, experiment matrices, memory estimates
#   CUDA=12 runbooks/cuda.sh      the CUDA 12 wheel instead of CUDA 13
#
# Why the uninstall: the mlx-cpu and mlx-cuda wheels both ship mlx/lib/libmlx.so (and some 300 other identical
# paths), so with both installed whichever came last wins. fusebench's `cpu` and `cudaNN` extras are alternatives;
# this script removes mlx-cpu first and then checks that the backend really is CUDA before measuring anything.
set -euo pipefail
cd "$(dirname "$0")/.."

dry_run=0
[[ ${1:-} == --dry-run ]] && dry_run=1
cuda=${CUDA:-13}
say() { echo "== $*"; }
run() { echo "+ $*"; (( dry_run )) || "$@"; }

say "install fusebench with mlx[cuda${cuda}] (and no mlx-cpu)"
run python3 -m pip uninstall -y -q mlx-cpu
run python3 -m pip install -q -e ".[cuda${cuda}]"
if (( ! dry_run )); then
  python3 -c 'import mlx.core as mx, sys; ok = mx.cuda.is_available(); print("mlx", mx.__version__, "cuda:", ok); sys.exit(0 if ok else 1)' ||
    { echo "cuda.sh: mlx does not see a CUDA device; stopping before any measurement" >&2; exit 1; }
fi

stamp=$(date +%Y%m%d-%H%M%S)
say "what will run, and which kernels really run (fused SDPA or the fallback) at every Gemma 4 attention shape"
run fusebench env
for prompt in 128 2048; do
  run fusebench kernels --dtype bfloat16 --prompt-tokens "$prompt" --out "results/kernels-cuda-pp${prompt}-${stamp}.jsonl"
done

for experiment in pr18809-gpu pr15587; do
  say "experiments/${experiment}.yaml"
  if (( dry_run )); then
    fusebench run "experiments/${experiment}.yaml" --dry-run
  else
    fusebench run "experiments/${experiment}.yaml" --out "results/${experiment}-cuda-${stamp}.jsonl"
    fusebench report "results/${experiment}-cuda-${stamp}.jsonl" --out "reports/${experiment}-cuda" \
      $([[ $experiment == pr15587 ]] && echo --reference pr15587)
  fi
done
say "done: results/*-cuda-${stamp}.jsonl and their reports in reports/"
