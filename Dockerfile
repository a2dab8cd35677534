# One image for the three daemons: `gpufleet exporter|plugin|autoscaler` (the chart passes
# the subcommand as the container's first argument).
#   docker build -t ghcr.io/gpufleet/gpufleet:0.1.0 .
# The base is pinned by tag; pin it by digest in a release pipeline that can resolve one.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# --- build: the wheel, then a virtualenv with the pinned dependencies and the wheel only.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpufleet ./gpufleet
RUN python -m pip wheel --no-deps --wheel-dir /wheels .
COPY docker/requirements.txt /tmp/requirements.txt
# Installed through /opt/venv/bin/python, so the console script's shebang (and so the
# plugin's argv[0], which NVIDIA's config-manager matches) is /opt/venv/bin/python.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/python -m pip install --no-deps -r /tmp/requirements.txt \
 && /opt/venv/bin/python -m pip install --no-deps /wheels/*.whl \
 && /opt/venv/bin/python -m pip check

# --- runtime: the virtualenv on a clean base, no compiler, no source, no wheel.
FROM ${PYTHON_IMAGE}
COPY --from=build /opt/venv /opt/venv
# NVIDIA's device-plugin chart names its binary (README, "Compatible with NVIDIA's
# k8s-device-plugin"); the file is executable in git.
COPY docker/nvidia-device-plugin /opt/venv/bin/nvidia-device-plugin
RUN groupadd --gid 65532 gpufleet \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpufleet
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Non-root by default; the chart runs the exporter (with pod attribution) and the plugin
# as uid 0 without capabilities, for the kubelet's root-owned sockets.
USER 65532:65532
EXPOSE 9400 9401 9402
ENTRYPOINT ["/opt/venv/bin/gpufleet"]
# With no arguments, or options alone, it runs the exporter: dcgm-exporter's image does,
# and its chart passes options (or none) to whatever image it is given.
CMD ["exporter"]
