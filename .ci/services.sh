#!/usr/bin/env bash
# Start PostgreSQL and Redis on 127.0.0.1 (installing them with apt-get when missing) and print
# the URLs the tests read: SUBAGENTS_TEST_POSTGRES_URL and SUBAGENTS_TEST_REDIS_URL.
set -euo pipefail

log() { echo "[services] $*" >&2; }

need_apt=()
command -v pg_ctlcluster >/dev/null 2>&1 || need_apt+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# PostgreSQL: the first cluster, a test role and database
version=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h | grep -q .; then
  pg_createcluster "$version" main >/dev/null
fi
cluster=$(pg_lsclusters -h | head -1 | awk '{print $1" "$2}')
pg_ctlcluster $cluster start >/dev/null 2>&1 || true
port=$(pg_lsclusters -h | head -1 | awk '{print $3}')
for _ in $(seq 1 50); do
  su postgres -c "psql -p $port -qAtc 'select 1'" >/dev/null 2>&1 && break
  sleep 0.2
done
su postgres -c "psql -p $port -qAtc \"select 1 from pg_roles where rolname='subagents'\"" | grep -q 1 \
  || su postgres -c "psql -p $port -qc \"create role subagents login password 'subagents'\"" >/dev/null
su postgres -c "psql -p $port -qAtc \"select 1 from pg_database where datname='subagents_test'\"" | grep -q 1 \
  || su postgres -c "psql -p $port -qc 'create database subagents_test owner subagents'" >/dev/null
log "PostgreSQL $version on 127.0.0.1:$port"

# Redis: a throwaway instance on its own port
redis_port=6390
if ! redis-cli -p $redis_port ping >/dev/null 2>&1; then
  redis-server --port $redis_port --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >/dev/null
  for _ in $(seq 1 50); do
    redis-cli -p $redis_port ping >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
log "Redis on 127.0.0.1:$redis_port"

echo "export SUBAGENTS_TEST_POSTGRES_URL=postgresql+asyncpg://subagents:subagents@127.0.0.1:$port/subagents_test"
echo "export SUBAGENTS_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/0"
