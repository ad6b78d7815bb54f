#!/usr/bin/env bash
# Make sure the Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432, trust auth, database
# `test`) that the tests use are up. Starts them from the machine's Debian packages if they
# are installed but stopped; fails loudly if they cannot be reached.
set -euo pipefail

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }

if ! redis_up; then
  echo "services: Redis is not answering on 127.0.0.1:6379; starting it" >&2
  if ! command -v redis-server >/dev/null; then
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  fi
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
fi
redis_up || { echo "services: FATAL: Redis is not reachable on 127.0.0.1:6379" >&2; exit 1; }

if ! pg_up; then
  echo "services: PostgreSQL is not answering on 127.0.0.1:5432; starting it" >&2
  if [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 100); do pg_up && break; sleep 0.1; done
fi
pg_up || { echo "services: FATAL: PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -d test -qtAc "select 1" >/dev/null \
  || { echo "services: FATAL: database 'test' is not usable as user postgres (trust auth)" >&2; exit 1; }
echo "services: Redis and PostgreSQL are up"
