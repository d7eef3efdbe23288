#!/usr/bin/env bash
# Starts a PgBouncer in `pool_mode = transaction` on a free loopback port in
# front of the PostgreSQL server at 127.0.0.1:PG_PORT, and prints its port.
#
#   scripts/pgbouncer.sh PG_PORT DIR [ADMIN_PASSWORD]
#
# PGBOUNCER_MAX_DB_CONNECTIONS (default 60) caps the server connections of
# each database, whatever the number of clients and roles.
# Every database name is passed through to the server (`* =`). Clients log
# in with SCRAM: `postgres` with ADMIN_PASSWORD (default `toolgate`), any
# other role with its own password, which PgBouncer looks up in pg_shadow
# as `postgres` (`auth_query`), so tenant roles provisioned later need no
# change here. The server must let `postgres` in from loopback without a
# password (trust), as the CI server does. Stop it with
# `kill "$(cat DIR/pgbouncer.pid)"`. docs/database.md explains the settings.
set -euo pipefail
pg_port="$1"
dir="$2"
admin_password="${3:-toolgate}"
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || {
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get install -y -q pgbouncer >/dev/null \
    || { $sudo_cmd apt-get update -q >/dev/null && $sudo_cmd apt-get install -y -q pgbouncer >/dev/null; }
  # Debian starts its own instance on 6432; this script runs its own.
  $sudo_cmd service pgbouncer stop >/dev/null 2>&1 || true
}
bin="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
mkdir -p "${dir}"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
printf '"postgres" "%s"\n' "${admin_password}" >"${dir}/userlist.txt"
cat >"${dir}/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=${pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
pool_mode = transaction
auth_type = scram-sha-256
auth_file = ${dir}/userlist.txt
auth_user = postgres
auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename = \$1
admin_users = postgres
; Clients: every sidecar of a fleet holds a few. Servers: a pool per
; database and role, capped per database well under max_connections.
max_client_conn = 5000
default_pool_size = 20
max_db_connections = ${PGBOUNCER_MAX_DB_CONNECTIONS:-60}
server_idle_timeout = 10
; sqlx sets this one at login; nothing else may pass silently.
ignore_startup_parameters = extra_float_digits
logfile = ${dir}/pgbouncer.log
pidfile = ${dir}/pgbouncer.pid
INI
# PgBouncer refuses to run as root.
if [ "$(id -u)" -eq 0 ]; then
  chown -R postgres "${dir}"
  runuser -u postgres -- "${bin}" -d "${dir}/pgbouncer.ini"
else
  "${bin}" -d "${dir}/pgbouncer.ini"
fi
for _ in $(seq 50); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}), 0.2)" 2>/dev/null && break
  sleep 0.1
done
echo "${port}"
