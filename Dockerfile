# One image for every Tidal service; pick the service at start-up:
#   docker run tidal:0.1.0 run placement
# (topology, scoring, placement, oversell, remediation, bridge)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
# A regular (non-editable) install: the image runs from site-packages, so the
# source tree is not needed at run time and the root filesystem can be
# mounted read-only. The tracing extra lets a deployment export spans over
# OTLP by setting OTEL_EXPORTER_OTLP_ENDPOINT (off otherwise).
RUN pip install --no-cache-dir '.[tracing,gpu]' \
    && rm -rf /src

# Numeric UID/GID so Kubernetes can verify `runAsNonRoot` without a passwd
# lookup. The topology node agent overrides this with UID 0 (see compose.yaml
# and k8s/base/topology-daemonset.yaml): it writes root-owned cgroup files.
RUN groupadd --system --gid 10001 tidal \
    && useradd --system --uid 10001 --gid tidal --no-create-home --home-dir /nonexistent tidal
USER 10001:10001
WORKDIR /tmp

# /healthz, /readyz and /metrics
EXPOSE 8080

ENTRYPOINT ["tidal"]
CMD ["--help"]
