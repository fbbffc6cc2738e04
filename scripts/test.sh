#!/usr/bin/env bash
# Run the test suite: a throwaway PostgreSQL server on loopback is started first so the
# database tests run against PostgreSQL as well as SQLite. Extra arguments go to pytest.
#
#   bash scripts/test.sh           the whole suite (the README's test command, and CI's)
#   bash scripts/test.sh --fast    the tests not marked slow: a few minutes on 2 cores, for
#                                  development (the slow ones are the real DSL compiles of
#                                  whole studies, Ray, the browser and the exhaustive funnels)
set -euo pipefail
cd "$(dirname "$0")/.."

selection=()
if [ "${1:-}" = "--fast" ]; then
  shift
  selection=(-m "not slow")
fi
if [ -z "${TSOPT_TEST_POSTGRES_URL:-}" ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  eval "$(bash .ci/postgres.sh)"
fi
export CUTE_DSL_ARCH="${CUTE_DSL_ARCH:-sm_90a}"
exec .venv/bin/python -m pytest "${selection[@]}" "$@"
