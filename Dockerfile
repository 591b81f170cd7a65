# sseproxy as a sidecar. The same steps CI exercises: install from pyproject, run `sseproxy`.
FROM python:3.12-slim

RUN useradd --create-home --uid 10001 sseproxy
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config ./config
COPY sseproxy ./sseproxy
RUN pip install --no-cache-dir . && rm -rf /app/build

USER sseproxy
# Inside a container the proxy must listen beyond loopback for the app container to reach it;
# keep the published port private to the pod / host.
ENV SSEPROXY_LISTEN=0.0.0.0:8790 \
    SSEPROXY_ALLOW_REMOTE=true \
    SSEPROXY_LOG_FORMAT=json \
    SSEPROXY_SHUTDOWN_GRACE=8
# `docker stop` sends SIGTERM, then SIGKILL after 10 s. The proxy cuts in-flight streams 8 s
# after SIGTERM and writes their records, leaving 2 s to exit before the kill; raise the grace
# only together with `docker stop -t` / compose's `stop_grace_period`.
STOPSIGNAL SIGTERM
EXPOSE 8790
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8790/_sseproxy/healthz', timeout=2)"
ENTRYPOINT ["sseproxy"]
