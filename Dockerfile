# Images of the stack (compose.yaml), from exact base versions:
#   docker build .                 -> the app: Daphne by default; the worker and the call
#                                     reaper by command (python manage.py dispatch_realtime /
#                                     reap_calls --every 5)
#   docker build --target proxy .  -> nginx in front of the Daphne processes (every address
#                                     MESSENGER_UPSTREAM resolves to, sticky by the hub's
#                                     `id`), with the static files
# Plain Dockerfile syntax (no `# syntax=` line): a builder needs no frontend image, so it
# builds offline too. CI builds both images with podman and runs them against PostgreSQL
# and Redis (scripts/container-smoke; where no registry answers, on stand-ins for the base
# images built from Debian's packages: docs/development.md, "The container smoke").

# The SignalR browser build the demo page loads, from npm (package-lock.json); no node at
# run time.
FROM node:20.19.0-bookworm-slim AS web-assets
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11.13-slim-bookworm AS app
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_STATIC_ROOT=/app/static
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
    && useradd --system --uid 10001 --home-dir /app app
COPY manage.py ./
COPY project ./project
COPY messenger_realtime ./messenger_realtime
COPY templates ./templates
COPY --from=web-assets /build/node_modules/@microsoft/signalr/dist/browser \
     ./node_modules/@microsoft/signalr/dist/browser
# collectstatic reads settings, which need secrets to load: throwaway values, this step only.
RUN DJANGO_SECRET_KEY=collectstatic-only JWT_SIGNING_KEY=collectstatic-only-00000000000000000 \
    MEDIA_JWT_SIGNING_KEY=collectstatic-only-00000000000000000 \
    TURN_SHARED_SECRET=collectstatic-only-00000000000000000 \
    python manage.py collectstatic --noinput -v0
USER app
EXPOSE 8000
# Daphne's liveness by default; the worker's and the reaper's containers set their own
# (compose.yaml) or HEALTHCHECK_URL (the worker: http://127.0.0.1:9108/health/live).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('HEALTHCHECK_URL', 'http://127.0.0.1:8000/health/live'), timeout=3)"]
# WebSocket limits: MAX_MESSAGE_SIZE (32768) + 1 KiB; change both together (docs/hub.md).
CMD ["daphne", "--proxy-headers", "-b", "0.0.0.0", "-p", "8000", \
     "--websocket-max-frame-size", "33792", "--websocket-max-message-size", "33792", \
     "project.asgi:application"]

# The reverse proxy: TLS, the hub's WebSocket upgrade, static files, /metrics kept internal.
FROM nginx:1.28.0-bookworm AS proxy
# The image's own conf.d/default.conf (its welcome page, `listen 80; server_name
# localhost`) goes: read before ours, it would answer plain HTTP instead of the redirect
# to HTTPS, and nginx would warn of a conflicting server name.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssl curl \
    && rm -rf /var/lib/apt/lists/* \
    && rm /etc/nginx/conf.d/default.conf
COPY ops/nginx/messenger.conf.template /etc/nginx/templates/messenger.conf.template
# What every proxy in front of the hub shares (scripts/serve --hubs N includes it too).
COPY ops/nginx/messenger /etc/nginx/messenger
COPY ops/nginx/05-self-signed-certificate.sh ops/nginx/10-public-https-port.envsh \
     /docker-entrypoint.d/
COPY --from=app /app/static /srv/static
# PUBLIC_HTTPS_PORT: the HTTPS port clients reach, which the redirect from plain HTTP
# names; unset, PROXY_HTTPS_PORT's (10-public-https-port.envsh). Set it where publishing
# maps the port elsewhere (compose.yaml: 8443 -> 443).
ENV MESSENGER_UPSTREAM=web:8000 PROXY_HTTP_PORT=80 PROXY_HTTPS_PORT=443 \
    SERVER_NAME=localhost TLS_CERT=/etc/nginx/tls/tls.crt TLS_KEY=/etc/nginx/tls/tls.key \
    STATIC_ROOT=/srv/static ACCESS_LOG=/dev/stdout
# Through TLS to Daphne's liveness, with the public host name (ALLOWED_HOSTS).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsk -o /dev/null -H "Host: $SERVER_NAME" "https://127.0.0.1:$PROXY_HTTPS_PORT/health/live"

# The default target (the last stage): the app.
FROM app
