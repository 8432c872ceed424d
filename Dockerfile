# nodefence image: a virtualenv built in one stage, copied into a clean slim runtime.
# Build: docker build -t nodefence:0.1.0 .

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md LICENSE requirements.lock ./
COPY service ./service
# The tested versions of every dependency and of the build backend. `.` is the nodefence
# distribution alone: the simulated cluster (simulate, demo) is nodefence-sim, built from
# service/pyproject.toml for demos and tests, and never installed here.
RUN PIP_CONSTRAINT=/src/requirements.lock /opt/venv/bin/pip install --no-cache-dir . \
    && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PORT=8080
# ClusterLabs fence agents (fencing.driver: fence-agent) and ipmitool, which fence_ipmilan runs;
# Debian's python3 runs the agents, apart from the service's own interpreter. Their versions are
# those of the base image's Debian release (pinning them would break with its next point release).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends fence-agents ipmitool \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["nodefence"]
CMD ["serve"]
