# Shared set-up for scripts/serve and scripts/test (sourced, not run).
# - a virtualenv with the pinned requirements (reinstalled when they change): the runtime
#   set for serve, the dev set (tests, lint, benchmark) for test and bench;
# - the npm packages of package-lock.json (the SignalR browser build the demo page loads);
# - PostgreSQL and Redis: DATABASE_URL / REDIS_URL when set; else the local default ports
#   when something answers there; else private servers started here and stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
LOCAL=${MESSENGER_LOCAL_DIR:-$ROOT/.local}
mkdir -p "$LOCAL"
STOP_HOOKS=()

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }

stop_services() {
  local hook
  for hook in "${STOP_HOOKS[@]+"${STOP_HOOKS[@]}"}"; do eval "$hook" || true; done
  STOP_HOOKS=()
}

ensure_venv() {  # ensure_venv runtime|dev: serve needs the runtime only; test and bench dev
  ensure_venv_at .venv "$(command -v python3.11 || command -v python3)" "${1:-dev}"
}

ensure_venv_at() {  # ensure_venv_at DIR PYTHON runtime|dev: a virtualenv of PYTHON in DIR
  local venv=$1 py=$2 profile=$3 want req stamp
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  case "$profile" in
    runtime) req=requirements.txt ;;
    dev) req=requirements-dev.txt ;;  # includes requirements.txt and bench/requirements.txt
    *) log "ensure_venv: unknown profile $profile"; return 1 ;;
  esac
  want=$(requirements_hash "$profile")
  stamp=$venv/.requirements-$profile.sha256
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing the pinned $profile requirements ($req) into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$want" >"$stamp"
    # The dev set holds the runtime set: a later serve has nothing to install.
    [ "$profile" = dev ] && requirements_hash runtime >"$venv/.requirements-runtime.sha256"
  fi
  return 0
}

find_python() {  # find_python 3.12: that interpreter (pyenv's newest, else on PATH), or fail
  local candidate
  # pyenv's shims are on PATH even for a version that is not selected: they fail to run.
  for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python 2>/dev/null | sort -V | tac) \
    "$(command -v "python$1" || true)"; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  log "Python $1 not found (under pyenv, or on PATH as python$1): install it, e.g. pyenv install $1"
  return 1
}

requirements_hash() {  # requirements_hash runtime|dev
  if [ "$1" = runtime ]; then
    sha256sum requirements.txt | cut -d' ' -f1
  else
    cat requirements.txt requirements-dev.txt bench/requirements.txt | sha256sum | cut -d' ' -f1
  fi
}

ensure_node_modules() {  # @microsoft/signalr: the demo page's browser build, the tests' client
  local want stamp=node_modules/.package-lock.sha256
  command -v npm >/dev/null || apt_install nodejs npm
  want=$(sha256sum package-lock.json | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing npm packages from package-lock.json"
    npm ci --omit=dev --no-audit --no-fund --loglevel=error >/dev/null
    echo "$want" >"$stamp"
  fi
}

ensure_chromium() {  # the browser tests drive Debian's Chromium through Playwright
  [ -x /usr/bin/chromium ] || apt_install chromium
}

ensure_promtool() {  # tests/unit/test_alert_rules.py checks ops/prometheus/*.yml with it
  command -v promtool >/dev/null || apt_install --no-install-recommends prometheus
}

ensure_nginx() {  # serve --hubs N balances with it; tests/e2e/test_proxy.py runs ops/nginx/
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || apt_install --no-install-recommends nginx
}

ensure_podman() {  # scripts/container-smoke builds and runs the images with podman
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || [ -x /usr/sbin/runc ] || missing+=(runc)
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
  ensure_podman_config
}

# What podman needs on this kind of machine: default ulimits within the machine's hard
# limits (podman's own defaults are refused), and runc (crun refuses its hybrid cgroups).
# Written only where the machine's containers.conf does not say so already: the file
# itself when there is none, else a drop-in beside it (the operator's file stays as it is).
ensure_podman_config() {
  local conf=/etc/containers/containers.conf dropins=/etc/containers/containers.conf.d
  local files=("$conf" "$dropins"/*.conf) target nofile nproc
  if grep -qs '^[[:space:]]*default_ulimits[[:space:]]*=' "${files[@]}" &&
    grep -qs '^[[:space:]]*runtime[[:space:]]*=[[:space:]]*"runc"' "${files[@]}"; then
    return 0
  fi
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  { [ "$nproc" = unlimited ] || (( nproc > 32768 )); } && nproc=32768
  target=$conf
  [ -e "$conf" ] && target=$dropins/50-messenger-realtime.conf
  if [ "$(id -u)" != 0 ]; then
    log "podman needs $target (default_ulimits, runtime = runc): write it as root"
    return 1
  fi
  mkdir -p "$(dirname "$target")"
  cat >"$target" <<EOF
# Written by the messenger realtime project's scripts (lib.sh, ensure_podman_config):
# podman's default ulimits exceed this machine's hard limits, and crun refuses its hybrid
# cgroups.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
EOF
  log "wrote $target for podman: default_ulimits nofile=$nofile nproc=$nproc, runtime runc"
}

run_logged() {  # run_logged LOG CMD...: CMD's output to LOG; on failure its end, and where
  local log_file=$1
  shift
  if ! "$@" >"$log_file" 2>&1; then
    log "failed: $* (the end of its output below; all of it: $log_file)"
    tail -n 25 "$log_file" >&2
    return 1
  fi
}

port_open() {  # host port
  python3 -c 'import socket,sys; s=socket.socket(); s.settimeout(0.5); sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))' "$1" "$2"
}

port_listening() {  # port_listening PORT: something listens there (any address); read from
  # /proc/net, never by connecting: a probe to a loopback port in the ephemeral range that
  # nobody listens on yet may connect to itself and keep the server from binding it.
  python3 - "$1" <<'EOF'
import sys
port = "%04X" % int(sys.argv[1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = [line.split() for line in open(table).read().splitlines()[1:]]
    except OSError:
        continue
    if any(row[1].rsplit(":", 1)[1] == port and row[3] == "0A" for row in rows):  # LISTEN
        sys.exit(0)
sys.exit(1)
EOF
}

wait_listening() {  # wait_listening PID PORT: until PID listens on PORT (1: it ended first)
  local pid=$1 port=$2 deadline=$((SECONDS + 120))
  until port_listening "$port"; do
    if ! kill -0 "$pid" 2>/dev/null || (( SECONDS > deadline )); then
      return 1
    fi
    sleep 0.2  # a start-up of a few seconds: polled, then "serving on"
  done
}

as_postgres() {  # initdb/pg_ctl refuse to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

apt_install() {
  [ "$(id -u)" = 0 ] || { log "missing $*; install it (needs root)"; return 1; }
  log "installing $* from Debian's packages"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
  if [ -n "${DATABASE_URL:-}" ]; then return; fi
  local default_port=${LOCAL_PG_PORT:-5432}
  if port_open 127.0.0.1 "$default_port"; then
    export DATABASE_URL=postgres://postgres@127.0.0.1:$default_port/messenger
    return
  fi
  local bindir port=${PRIVATE_PG_PORT:-54329} dir="$LOCAL/postgres"
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  if [ -z "$bindir" ]; then apt_install postgresql; bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1); fi
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$LOCAL"; then
    dir=/tmp/messenger-realtime-postgres  # the postgres user cannot reach $LOCAL
  fi
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    log "initdb for a private PostgreSQL in $dir"
    as_postgres "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust >/dev/null
  fi
  log "starting a private PostgreSQL on 127.0.0.1:$port"
  as_postgres "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null
  STOP_HOOKS+=("as_postgres '$bindir/pg_ctl' -D '$dir/data' -m fast -w stop >/dev/null")
  export DATABASE_URL=postgres://postgres@127.0.0.1:$port/messenger
}

ensure_redis() {
  if [ -n "${REDIS_URL:-}" ]; then return; fi
  local default_port=${LOCAL_REDIS_PORT:-6379}
  if port_open 127.0.0.1 "$default_port"; then
    export REDIS_URL=redis://127.0.0.1:$default_port/0
    return
  fi
  local port=${PRIVATE_REDIS_PORT:-63799}
  command -v redis-server >/dev/null || apt_install redis-server
  log "starting a private redis-server on 127.0.0.1:$port"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize yes \
    --pidfile "$LOCAL/redis.pid" --logfile "$LOCAL/redis.log" --dir "$LOCAL"
  STOP_HOOKS+=("redis-cli -p $port shutdown nosave >/dev/null 2>&1")
  export REDIS_URL=redis://127.0.0.1:$port/0
}

ensure_services() {
  trap stop_services EXIT
  ensure_postgres
  ensure_redis
}
