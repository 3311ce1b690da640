#!/usr/bin/env bash
# The GPU check (docs/benchmarks.md, "GPU check"): one command, at most 8 minutes in all.
#
#   bench/gpu/run.sh [--out DIR]            one NVIDIA GPU; vLLM's CUDA build in a cached
#                                           venv (bench/gpu/venv.sh; MOL_GPU_VENV to reuse one)
#   bench/gpu/run.sh --dry-run [--out DIR]  the same steps on vLLM's CPU build and the tiny
#                                           demo model (scripts/engine-venv.sh): not figures
#
# Writes DIR/gpu-check.json (after every step), DIR/gpu-check.md and DIR/logs/ (catalog,
# engine, router); DIR defaults to bench/gpu/out/ (git-ignored). Without a GPU and
# without --dry-run it stops at once with exit code 2. MOL_GPU_SMI names the nvidia-smi
# to ask (the tests point it at a missing or a fake one); MOL_GPU_CHECK_BUDGET_S lowers
# the 480 s limit.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LIMIT=480
BUDGET="${MOL_GPU_CHECK_BUDGET_S:-$LIMIT}"
SMI="${MOL_GPU_SMI:-nvidia-smi}"
DRY_RUN=0
OUT="$ROOT/bench/gpu/out"

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY_RUN=1; shift ;;
    --out) [[ $# -ge 2 ]] || { echo "gpu check: --out needs a folder" >&2; exit 2; }
           OUT="$2"; shift 2 ;;
    --out=*) OUT="${1#--out=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if ! [[ "$BUDGET" =~ ^[0-9]+$ ]] || (( BUDGET < 1 || BUDGET > LIMIT )); then
  echo "gpu check: MOL_GPU_CHECK_BUDGET_S must be whole seconds in 1..$LIMIT, got '$BUDGET'" >&2
  exit 2
fi
START=$SECONDS

no_gpu() {
  echo "gpu check: no NVIDIA GPU here ($1)." >&2
  echo "gpu check: run it on a machine with one NVIDIA GPU, or walk the same steps on" >&2
  echo "gpu check: vLLM's CPU build with: bench/gpu/run.sh --dry-run [--out DIR]" >&2
  exit 2
}

if (( DRY_RUN )); then
  PY="${MOL_GPU_CHECK_PYTHON:-$ROOT/.venv/bin/python}"
  [[ -x "$PY" ]] || { echo "gpu check: no dev venv at $ROOT/.venv: run make venv" >&2; exit 1; }
  ENGINE_VENV="${MOL_ENGINE_VENV:-$(bash "$ROOT/scripts/engine-venv.sh")}"
  FLAGS=(--dry-run)
else
  command -v "$SMI" >/dev/null 2>&1 || no_gpu "'$SMI' is not installed"
  if ! listed="$(timeout 10 "$SMI" -L 2>&1)"; then
    no_gpu "'$SMI -L' failed: $(head -c 200 <<<"$listed")"
  fi
  grep -q '^GPU [0-9]' <<<"$listed" || no_gpu "'$SMI -L' lists no GPU"
  ENGINE_VENV="$(bash "$ROOT/bench/gpu/venv.sh")"
  PY="$ENGINE_VENV/bin/python"  # the same venv runs the catalog, the router and the check
  FLAGS=(--gpu-smi "$SMI")
fi

LEFT=$(( BUDGET - (SECONDS - START) ))
if (( LEFT < 60 )); then
  echo "gpu check: preparing the venv took $(( SECONDS - START )) s of the ${BUDGET} s;" \
       "it is cached now: run again" >&2
  exit 1
fi
cd "$ROOT"
# TERM at the limit: the check stops its engine, catalog and router and keeps its figures.
exec timeout --kill-after=30 "$LEFT" "$PY" "$ROOT/bench/gpu/check.py" "${FLAGS[@]}" \
  --out "$OUT" --engine-venv "$ENGINE_VENV"
