#!/bin/sh
# check.sh - the OpenAPI checks tests/run.sh runs after the integration
# suites: Redocly's lint of SPEC, the response validator's self-check, then
# every answer in LOG (the suites wrote it: resp_log in
# tests/integration/lib.sh) against SPEC.  Prints "ok - ..." / "not ok - ..."
# lines; exits 1 if any is not ok.
#
# usage: tests/api/check.sh SPEC LOG
# Needs node and tests/api/node_modules (make deps: npm ci from the lock file).
set -u
usage="usage: tests/api/check.sh SPEC LOG"
spec=${1:?$usage}
log=${2:?$usage}
dir=$(cd "$(dirname "$0")" && pwd)

if ! command -v node >/dev/null 2>&1; then
    echo "not ok - api: node is installed (run 'make deps')"
    exit 1
fi
for m in @redocly/openapi-core ajv ajv-formats yaml; do
    if [ ! -f "$dir/node_modules/$m/package.json" ]; then
        echo "not ok - api: $m is installed in tests/api/node_modules (run 'make deps': npm ci there)"
        exit 1
    fi
done
rc=0
node "$dir/lint_openapi.mjs" "$spec" || rc=1
node "$dir/validate_responses.mjs" --self-check "$spec" || rc=1
node "$dir/validate_responses.mjs" "$spec" "$log" || rc=1
exit $rc
