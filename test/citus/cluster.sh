#!/usr/bin/env bash
# A 3-node Citus cluster of its own for stepkey's Citus tests, kill test and bench: a coordinator on
# $PORT and workers on $PORT+1 and $PORT+2, data under $DIR. Each node has max_prepared_transactions
# (two-phase commits across nodes), citus.shard_count = 8, a 2PC recovery every 3 s and
# connections between nodes that prefer SSL without requiring it.
#   cluster.sh up DIR PORT          initdb (once) and start the three nodes
#   cluster.sh down DIR             stop each node by the PID in its postmaster.pid, remove DIR
#   cluster.sh restart DIR NODE     stop one node (w1 | w2 | coord) by PID, start it again
# Needs Citus installed into PostgreSQL 15 (../shared/citus/install.sh). Run as root or postgres.
set -euo pipefail
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?usage: cluster.sh up DIR PORT | down DIR | restart DIR NODE}
DIR=${2:?the data folder of the cluster}
aspg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }

start_node() { # name
  aspg "$BIN/pg_ctl -D $DIR/$1 -l $DIR/$1.log -w -t 120 start >/dev/null"
}

stop_node() { # name: SIGINT (fast shutdown) to the postmaster's PID, then wait until it is gone
  local pidfile=$DIR/$1/postmaster.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(head -1 "$pidfile")
  kill -INT "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

up() {
  local port=${1:?the coordinator port} i=0
  mkdir -p "$DIR"; chown postgres:postgres "$DIR" 2>/dev/null || true
  for name in coord w1 w2; do
    local p=$((port + i)); i=$((i + 1))
    if [ ! -f "$DIR/$name/PG_VERSION" ]; then
      aspg "$BIN/initdb -D $DIR/$name -U postgres --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >/dev/null"
      cat >> "$DIR/$name/postgresql.conf" <<CONF
shared_preload_libraries = 'citus'
listen_addresses = '127.0.0.1'
port = $p
unix_socket_directories = '$DIR'
max_connections = 300
shared_buffers = 64MB
fsync = off
synchronous_commit = off
full_page_writes = off
max_prepared_transactions = 300
citus.shard_count = 8
citus.recover_2pc_interval = '3s'
citus.log_remote_commands = off
# A node's first CREATE EXTENSION citus turns ssl on by a reload that lands a moment later; until
# then a node refuses the default sslmode=require, so connections between nodes only prefer it.
citus.node_conninfo = 'sslmode=prefer'
CONF
      printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' > "$DIR/$name/pg_hba.conf"
      chown postgres:postgres "$DIR/$name/pg_hba.conf"
    fi
    start_node "$name"
  done
}

case "$cmd" in
  up) up "${3:-}" ;;
  down) for name in coord w1 w2; do stop_node "$name"; done; rm -rf "$DIR" ;;
  restart) stop_node "${3:?w1 | w2 | coord}"; start_node "$3" ;;
  *) echo "usage: cluster.sh up DIR PORT | down DIR | restart DIR NODE" >&2; exit 2 ;;
esac
