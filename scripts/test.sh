#!/usr/bin/env bash
# Run the whole test suite: a throwaway PostgreSQL server on loopback is started first so
# the database tests run against PostgreSQL as well as SQLite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TSOPT_TEST_POSTGRES_URL:-}" ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  eval "$(bash .ci/postgres.sh)"
fi
export CUTE_DSL_ARCH="${CUTE_DSL_ARCH:-sm_90a}"
exec .venv/bin/python -m pytest "$@"
