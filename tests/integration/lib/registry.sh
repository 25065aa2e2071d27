# Starts a real registry (Debian docker-registry, Distribution 2.8) on
# 127.0.0.1 (or REG_ADDR, e.g. a test cluster's bridge address that its
# nodes reach) with a free port and storage in a temp dir. Sourced (bash).
#   registry_start DIR [htpasswd-file]  -> sets REG_PORT, REG_PID; returns 1 if it did not come up
#   registry_start DIR token REALM SERVICE CERT.pem   (bearer tokens, see tokenserver.py)
#   registry_stop
# The caller removes DIR.
registry_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

registry_start() {
  local dir=$1 htpasswd=${2:-} port auth=""
  port=$(registry_free_port) || return 1
  mkdir -p "$dir/storage"
  if [ "$htpasswd" = token ]; then
    auth="auth:
  token:
    realm: $3
    service: $4
    issuer: skiff-test
    rootcertbundle: $5"
  elif [ -n "$htpasswd" ]; then
    auth="auth:
  htpasswd:
    realm: skiff-test
    path: $htpasswd"
  fi
  cat >"$dir/config.yml" <<EOC
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: ${REG_ADDR:-127.0.0.1}:$port
$auth
EOC
  /usr/bin/docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 400); do  # up to 20 s on a loaded machine
    if curl -s -o /dev/null "http://${REG_ADDR:-127.0.0.1}:$port/v2/"; then
      REG_PORT=$port; REG_PID=$pid
      REG_PIDS="${REG_PIDS:-} $pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "registry did not start; log:" >&2; cat "$dir/log" >&2
  return 1
}

registry_stop() {
  local p
  for p in ${REG_PIDS:-}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  REG_PIDS=""
}
