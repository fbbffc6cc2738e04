#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on loopback for the database tests.
#
#   eval "$(bash .ci/postgres.sh)"     # exports TSOPT_TEST_POSTGRES_URL
#
# Installs Debian's postgresql if missing, creates a fresh cluster in
# $TSOPT_PG_DATA (default /tmp/tsopt-pg-<port>) owned by the postgres user,
# starts it on 127.0.0.1:$TSOPT_PG_PORT (default 5432), and creates the role
# tsopt (password tsopt, CREATEDB: the tests make one database per test) and the
# database tsopt_test. Running it again reuses a server it already started.
# Only the export line goes to stdout; progress goes to stderr.
set -euo pipefail

PORT="${TSOPT_PG_PORT:-5432}"
DATA="${TSOPT_PG_DATA:-/tmp/tsopt-pg-$PORT}"
log() { echo "postgres.sh: $*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  log "installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-install-recommends postgresql >&2
fi
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"

# The server refuses to run as root: run it as postgres when we are root, else as ourselves.
if [ "$(id -u)" -eq 0 ]; then
  OWNER=postgres
  as_owner() { runuser -u postgres -- "$@"; }
else
  OWNER="$(id -un)"
  as_owner() { "$@"; }
fi

if as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  log "reusing the server already running from $DATA"
else
  if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" 2>/dev/null; then
    log "another server already listens on 127.0.0.1:$PORT; set TSOPT_PG_PORT to a free port"
    exit 1
  fi
  rm -rf "$DATA"
  mkdir -p "$DATA"
  chown "$OWNER" "$DATA"
  chmod 700 "$DATA"
  as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C >/dev/null
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$DATA -c fsync=off" \
    start >/dev/null
  log "server started on 127.0.0.1:$PORT (data and log in $DATA)"
fi

psql_admin() { as_owner "$BIN/psql" -h "$DATA" -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
if [ -z "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = 'tsopt'")" ]; then
  psql_admin -c "CREATE ROLE tsopt LOGIN PASSWORD 'tsopt' CREATEDB"
fi
if [ -z "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'tsopt_test'")" ]; then
  psql_admin -c "CREATE DATABASE tsopt_test OWNER tsopt"
fi

echo "export TSOPT_TEST_POSTGRES_URL=postgresql+psycopg2://tsopt:tsopt@127.0.0.1:$PORT/tsopt_test"
