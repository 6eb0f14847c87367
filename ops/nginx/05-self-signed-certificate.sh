#!/bin/sh
# The nginx image runs /docker-entrypoint.d/*.sh before nginx. Without a mounted
# certificate (TLS_CERT / TLS_KEY), make a self-signed one for a local try-out; mount a
# real certificate and key at those paths for anything else.
set -eu
if [ ! -f "$TLS_CERT" ] || [ ! -f "$TLS_KEY" ]; then
  mkdir -p "$(dirname "$TLS_CERT")" "$(dirname "$TLS_KEY")"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=$SERVER_NAME" \
    -addext "subjectAltName=DNS:$SERVER_NAME" -keyout "$TLS_KEY" -out "$TLS_CERT" 2>/dev/null
  echo "$0: no certificate mounted; made a self-signed one for $SERVER_NAME (30 days)"
fi
