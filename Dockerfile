# syntax=docker/dockerfile:1
# The inference-capacity operator image.
#
#   docker build -t inference-capacity:dev .
#   docker run --rm inference-capacity:dev --help
#
# Pin the base by digest in release builds:
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest> .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: install the package and its dependencies into a self-contained virtualenv ---------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Only what `pip install .` needs (see .dockerignore): metadata first, then the source.
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN pip install . \
    && inference-capacity --help >/dev/null \
    && python -m compileall -q /opt/venv

# --- runtime: slim Python, the virtualenv, a non-root user ------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="inference-capacity" \
      org.opencontainers.image.description="Kopf operator that sizes vLLM fleets from a GPU memory ledger" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/inference-capacity/inference-capacity"
# uid/gid 65532 ("nonroot", as in distroless) with a passwd entry, so getpass/pwd work.
RUN groupadd --system --gid 65532 nonroot \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/venv /opt/venv
# The Deployment mounts /tmp (read-only root filesystem): caches and scratch files go there.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /tmp
USER 65532:65532
# 8080: Kopf liveness (/healthz); 9090: Prometheus metrics (/metrics).
EXPOSE 8080 9090
ENTRYPOINT ["inference-capacity", "run"]
