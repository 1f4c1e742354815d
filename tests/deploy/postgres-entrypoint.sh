#!/bin/sh
# postgres-entrypoint.sh - the official postgres image's first start, for
# tests/deploy/Dockerfile.postgres: an empty $PGDATA gets a cluster whose
# superuser is $POSTGRES_USER with $POSTGRES_PASSWORD (scram-sha-256 over
# TCP), and the database $POSTGRES_DB; then the server runs in the
# foreground, listening on every interface.  A cluster already there is
# started as it is.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pw=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C >/dev/null
    rm -f "$pw"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    # The database, made over the Unix socket only, so nothing sees a half-made cluster.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$db" != postgres ]; then createdb -U "$user" "$db"; fi
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres-entrypoint: made the cluster in $PGDATA (user $user, database $db)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
