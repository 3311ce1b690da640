# The MoL Platform image: one image for `mol catalog serve`, `mol router serve` and
# `mol operator run` (the chart picks the command). Build from the repository root:
#   docker build -f deploy/images/platform.Dockerfile -t ghcr.io/mol-platform/mol-platform:0.1.0 .
# The console's third-party front-end assets (Swagger UI, ReDoc), from npm through the
# lockfile; the wheel ships them.
FROM node:20-slim AS assets
WORKDIR /src
COPY catalog/web catalog/web
COPY scripts/console-assets.sh scripts/console-assets.sh
RUN bash scripts/console-assets.sh

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY platform platform
COPY catalog catalog
COPY operator operator
COPY router router
COPY migrations migrations
COPY --from=assets /src/catalog/mol_catalog/console/static/vendor catalog/mol_catalog/console/static/vendor
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[catalog,operator,router]"

FROM python:3.11-slim
RUN groupadd --gid 10001 mol && useradd --uid 10001 --gid mol --no-create-home --shell /usr/sbin/nologin mol
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "mol-platform[catalog,operator,router]" \
    && rm -rf /wheels
# The chart mounts an emptyDir at /tmp; the root filesystem stays read-only.
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["mol"]
CMD ["--help"]
