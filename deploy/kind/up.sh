#!/usr/bin/env bash
# A local Kubernetes cluster running MoL Platform on CPUs: kind (or k3d), the chart,
# the CPU engine image (vLLM's CPU build, the resolver plugin and the demo model baked
# in), the demo adapters, the Macaron-style example on CPUs
# (deploy/examples/macaron-cpu.yaml) and one smoke request. Needs Docker, kind (or
# k3d), kubectl and helm on PATH.
#
#   deploy/kind/up.sh            # create the cluster, build images, install, smoke test
#   deploy/kind/up.sh --down     # delete the cluster
set -euo pipefail

CLUSTER="${MOL_KIND_CLUSTER:-mol}"
NS="${MOL_NAMESPACE:-mol-system}"
TOOL="${MOL_KIND_TOOL:-kind}"      # kind | k3d
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
EXAMPLE="$ROOT/deploy/examples/macaron-cpu.yaml"
PLATFORM_IMAGE="ghcr.io/mol-platform/mol-platform:dev"
# The image the example names (spec.engine.image), built here and loaded into the cluster.
ENGINE_IMAGE="ghcr.io/mol-platform/vllm-mol-cpu:0.32.0"
CPU_VLLM="${MOL_VLLM_CPU_IMAGE:-public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0}"

need() { command -v "$1" >/dev/null || { echo "missing $1: install it first ($2)" >&2; exit 1; }; }
need docker "https://docs.docker.com/get-docker/"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
need helm "https://helm.sh/docs/intro/install/"
need "$TOOL" "https://kind.sigs.k8s.io/ or https://k3d.io/"

if [[ "${1:-}" == "--down" ]]; then
  if [[ "$TOOL" == kind ]]; then kind delete cluster --name "$CLUSTER"; else k3d cluster delete "$CLUSTER"; fi
  exit 0
fi

step() { printf '\n==> %s\n' "$*"; }

step "cluster $CLUSTER ($TOOL)"
if [[ "$TOOL" == kind ]]; then
  kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
else
  k3d cluster list "$CLUSTER" >/dev/null 2>&1 || k3d cluster create "$CLUSTER" --wait
fi

step "images (platform, CPU engine with the demo model)"
docker build -f "$ROOT/deploy/images/platform.Dockerfile" -t "$PLATFORM_IMAGE" "$ROOT"
docker build -f "$ROOT/deploy/images/engine.Dockerfile" --build-arg "VLLM_IMAGE=$CPU_VLLM" \
  -t "$ENGINE_IMAGE" "$ROOT"
if [[ "$TOOL" == kind ]]; then
  kind load docker-image --name "$CLUSTER" "$PLATFORM_IMAGE" "$ENGINE_IMAGE"
else
  k3d image import -c "$CLUSTER" "$PLATFORM_IMAGE" "$ENGINE_IMAGE"
fi

step "helm install mol-platform into $NS"
helm upgrade --install mol "$ROOT/charts/mol-platform" --namespace "$NS" --create-namespace \
  --set image.repository="${PLATFORM_IMAGE%:*}" --set image.tag="${PLATFORM_IMAGE##*:}" \
  --set image.pullPolicy=Never \
  --set engine.resources.requests.cpu=1 --set engine.resources.requests.memory=4Gi \
  --wait --timeout 10m

step "demo adapters into the catalog (the chart's NOTES, steps 1 and 2)"
tmp="$(mktemp -d)"
kubectl -n "$NS" port-forward svc/mol-mol-platform-catalog 18080:8080 >/dev/null 2>&1 &
pf=$!; trap 'kill $pf 2>/dev/null; rm -rf "$tmp"' EXIT
sleep 3
export MOL_CATALOG_URL=http://127.0.0.1:18080
MOL_CATALOG_TOKEN="$(kubectl -n "$NS" get secret mol-mol-platform-admin-token -o jsonpath='{.data.token}' | base64 -d)"
export MOL_CATALOG_TOKEN
# The engine image has the demo builder's few dependencies (numpy, safetensors,
# tokenizers); the platform image has the catalog client. Both run as this user.
as_me=(--rm --user "$(id -u):$(id -g)" -e HOME=/tmp -v "$tmp:/out" -w /out)
docker run "${as_me[@]}" --entrypoint sh "$ENGINE_IMAGE" -c '
    mol demo build -o demo && mol demo build -o demo-candidate --seed 1'
docker run "${as_me[@]}" --network host -e MOL_CATALOG_URL -e MOL_CATALOG_TOKEN \
  --entrypoint sh "$PLATFORM_IMAGE" -c '
    mol catalog base register demo/tiny-llama --name tiny-llama &&
    for e in chat agent coding ui router; do
      mol catalog publish demo/adapters/$e --name demo/$e --alias stable; done &&
    mol catalog publish demo-candidate/adapters/coding --name demo/coding --alias candidate'

step "the Macaron-style example on CPUs"
kubectl apply -f "$EXAMPLE"
kubectl wait --for=condition=Ready mold/macaron --timeout=15m

step "smoke request"
kubectl port-forward svc/macaron-router 18000:80 >/dev/null 2>&1 &
pf2=$!; trap 'kill $pf $pf2 2>/dev/null; rm -rf "$tmp"' EXIT
sleep 3
curl -sf http://127.0.0.1:18000/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model": "auto", "router": "coding", "max_tokens": 8,
       "messages": [{"role": "user", "content": "hello"}]}'
echo
echo "MoL Platform runs in $TOOL cluster $CLUSTER; delete it with: $0 --down"
