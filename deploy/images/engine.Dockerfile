# The engine image: vLLM's own image plus mol-platform without extras, which brings the
# catalog resolver plugin (entry point group vllm.general_plugins). Build from the
# repository root:
#   docker build -f deploy/images/engine.Dockerfile -t ghcr.io/mol-platform/vllm-mol:0.32.0 .
# For a CPU-only cluster (kind, k3d) pass the CPU image:
#   docker build -f deploy/images/engine.Dockerfile \
#     --build-arg VLLM_IMAGE=public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0 \
#     -t ghcr.io/mol-platform/vllm-mol-cpu:0.32.0 .
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
COPY pyproject.toml README.md /tmp/mol-platform/
COPY platform /tmp/mol-platform/platform
COPY catalog /tmp/mol-platform/catalog
COPY operator /tmp/mol-platform/operator
COPY router /tmp/mol-platform/router
COPY migrations /tmp/mol-platform/migrations
# No extras: the plugin needs only pydantic, httpx and prometheus-client, which vLLM has.
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/mol-platform \
    && python3 -m pip install --no-cache-dir "pydantic-settings>=2.6,<3" "typer>=0.15,<1" \
    && rm -rf /tmp/mol-platform
ENV VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
