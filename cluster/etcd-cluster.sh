#!/usr/bin/env bash
# Starts, stops or checks a real N-member etcd cluster on loopback, for local schedd clusters.
#
#   cluster/etcd-cluster.sh start  [--members 3] [--dir DIR] [--base-port 23790] [--tls CERTS]
#   cluster/etcd-cluster.sh status [--dir DIR]
#   cluster/etcd-cluster.sh stop   [--dir DIR]
#
# Member i (0-based) listens for clients on BASE+2i and for peers on BASE+2i+1.
# Each member keeps DIR/mI/{data,etcd.log,etcd.pid}; DIR/endpoints holds the client list.
# --tls CERTS: TLS with client certificates, clients and peers (files of scripts/dev-ca).
set -euo pipefail

cmd="${1:-}"
[[ -n "$cmd" ]] && shift
members=3
dir="${TMPDIR:-/tmp}/schedd-etcd"
base_port=23790
token="schedd-$$"
tls=""

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --members) members="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --base-port) base_port="$2"; shift 2 ;;
    --tls) tls="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$members" =~ ^[0-9]+$ && "$members" -ge 1 ]] || { echo "--members must be >= 1" >&2; exit 2; }
[[ "$base_port" =~ ^[0-9]+$ ]] || { echo "--base-port must be a number" >&2; exit 2; }

client_port() { echo $((base_port + 2 * $1)); }
peer_port() { echo $((base_port + 2 * $1 + 1)); }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

scheme() { if [[ -n "$tls" ]]; then echo https; else echo http; fi; }

healthy() {
  local certs=()
  if [[ -n "$tls" ]]; then
    certs=(--cacert "$tls/etcd-ca.pem" --cert "$tls/etcd-client.pem"
           --key "$tls/etcd-client-key.pem")
  fi
  curl -fsS --max-time 1 "${certs[@]}" "$(scheme)://127.0.0.1:$1/health" 2>/dev/null \
    | grep -q '"health":"true"'
}

start() {
  command -v etcd >/dev/null || { echo "etcd not on PATH (apt-get install etcd-server)" >&2; exit 1; }
  mkdir -p "$dir"
  if [[ -n "$tls" ]]; then
    tls="$(cd "$tls" && pwd)"
    local f
    for f in etcd-ca.pem etcd-member.pem etcd-member-key.pem etcd-client.pem etcd-client-key.pem; do
      [[ -f "$tls/$f" ]] || { echo "--tls $tls: no $f (make it with scripts/dev-ca)" >&2; exit 1; }
    done
  fi
  local s; s=$(scheme)
  local tls_args=()
  if [[ -n "$tls" ]]; then
    tls_args=(--cert-file "$tls/etcd-member.pem" --key-file "$tls/etcd-member-key.pem"
              --client-cert-auth --trusted-ca-file "$tls/etcd-ca.pem"
              --peer-cert-file "$tls/etcd-member.pem" --peer-key-file "$tls/etcd-member-key.pem"
              --peer-client-cert-auth --peer-trusted-ca-file "$tls/etcd-ca.pem")
  fi
  local initial="" i
  for ((i = 0; i < members; i++)); do
    initial+="${initial:+,}m$i=$s://127.0.0.1:$(peer_port "$i")"
  done
  local endpoints=""
  for ((i = 0; i < members; i++)); do
    local mdir="$dir/m$i" cport pport
    cport=$(client_port "$i"); pport=$(peer_port "$i")
    endpoints+="${endpoints:+,}127.0.0.1:$cport"
    mkdir -p "$mdir"
    if pid_alive "$mdir/etcd.pid"; then
      echo "m$i already running (pid $(cat "$mdir/etcd.pid"))"
      continue
    fi
    local state=new
    [[ -d "$mdir/data/member" ]] && state=existing
    nohup etcd \
      --name "m$i" \
      --data-dir "$mdir/data" \
      --listen-client-urls "$s://127.0.0.1:$cport" \
      --advertise-client-urls "$s://127.0.0.1:$cport" \
      --listen-peer-urls "$s://127.0.0.1:$pport" \
      --initial-advertise-peer-urls "$s://127.0.0.1:$pport" \
      "${tls_args[@]}" \
      --initial-cluster "$initial" \
      --initial-cluster-state "$state" \
      --initial-cluster-token "$token" \
      --max-txn-ops 4096 \
      --max-request-bytes $((8 * 1024 * 1024)) \
      --auto-compaction-mode revision \
      --auto-compaction-retention 100000 \
      --quota-backend-bytes $((4 * 1024 * 1024 * 1024)) \
      --logger zap --log-level warn \
      >>"$mdir/etcd.log" 2>&1 &
    echo $! >"$mdir/etcd.pid"
    echo "m$i started (pid $!, client 127.0.0.1:$cport, peer 127.0.0.1:$pport)"
  done
  echo "$endpoints" >"$dir/endpoints"
  echo "$members" >"$dir/members"
  echo "$base_port" >"$dir/base-port"
  echo "$tls" >"$dir/tls"
  wait_healthy 30
  echo "etcd cluster up: --etcd $endpoints"
}

wait_healthy() {
  local deadline=$((SECONDS + $1)) i
  for ((i = 0; i < members; i++)); do
    until healthy "$(client_port "$i")"; do
      if ((SECONDS > deadline)); then
        echo "m$i not healthy after $1 s; log tail:" >&2
        tail -n 20 "$dir/m$i/etcd.log" >&2 || true
        exit 1
      fi
      pid_alive "$dir/m$i/etcd.pid" || { echo "m$i exited; see $dir/m$i/etcd.log" >&2; exit 1; }
      sleep 0.2
    done
  done
}

load_layout() {
  [[ -f "$dir/members" ]] || { echo "no cluster in $dir" >&2; exit 1; }
  members=$(cat "$dir/members")
  base_port=$(cat "$dir/base-port")
  tls=$(cat "$dir/tls" 2>/dev/null || true)
}

status() {
  load_layout
  local i bad=0
  for ((i = 0; i < members; i++)); do
    local state="stopped" health="-" port
    port=$(client_port "$i")
    if pid_alive "$dir/m$i/etcd.pid"; then
      state="running pid $(cat "$dir/m$i/etcd.pid")"
      if healthy "$port"; then health=healthy; else health=unhealthy; bad=1; fi
    else
      bad=1
    fi
    echo "m$i 127.0.0.1:$port $state $health"
  done
  return "$bad"
}

stop() {
  load_layout
  local i
  for ((i = 0; i < members; i++)); do
    local pidf="$dir/m$i/etcd.pid"
    if pid_alive "$pidf"; then
      local pid; pid=$(cat "$pidf")
      kill -TERM "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
      echo "m$i stopped (pid $pid)"
    fi
    rm -f "$pidf"
  done
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
