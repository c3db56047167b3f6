# kafka-sow: one image for every workload (`sow process`, `sow query-service`, `sow serve`).
# Build: docker build -t kafka-sow:0.1.0 .   Chart: helm/kafka-sow (image.repository/tag).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/kafka-sow
COPY pyproject.toml README.md ./
COPY processor ./processor
COPY topologies ./topologies
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /var/lib/kafka-sow --create-home sow

USER 10001
WORKDIR /var/lib/kafka-sow
# Defaults for a container; the chart sets these (and the rest) explicitly.
ENV SOW_STATE_DIR=/var/lib/kafka-sow/state \
    SOW_TOPOLOGY=/opt/kafka-sow/topologies \
    SOW_GRPC_ADDRESS=0.0.0.0:50051 \
    SOW_METRICS_ADDRESS=0.0.0.0:9464
EXPOSE 50051 9464
ENTRYPOINT ["sow"]
CMD ["--help"]
