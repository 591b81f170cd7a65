# sseproxy as a sidecar. The same steps CI exercises: install from pyproject, run `sseproxy`,
# on the Python CI tests (3.11, pyproject's target).
FROM python:3.11-slim

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
# healthz on the port the proxy listens on: SSEPROXY_LISTEN's, whatever `docker run -e` set.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD python -c "import os, urllib.request; port = os.environ.get('SSEPROXY_LISTEN', ':8790').rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/_sseproxy/healthz', timeout=2)"
ENTRYPOINT ["sseproxy"]
