#!/usr/bin/env bash
# Installs what the demo and the tests need, only what is missing:
#   Debian packages (MariaDB server, PostgreSQL, JDBC drivers, Java 17, Prometheus for
#   promtool and the alert tests) through apt-get,
#   and a virtual environment .venv with the project and its pip dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
[ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1 || missing+=(mariadb-server)
command -v mariadb-binlog >/dev/null 2>&1 || missing+=(mariadb-client)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
[ -f /usr/share/java/mariadb-java-client.jar ] || missing+=(libmariadb-java)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # promtool, and prometheus for the alert tests

if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    # the package starts a prometheus service where it can (systemd): the tests start their
    # own prometheus process, nothing of the package's should run
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || $SUDO invoke-rc.d prometheus stop >/dev/null 2>&1 || true
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.cdc-installed
want=$(cat pyproject.toml requirements.lock | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing pip packages into .venv (versions from requirements.lock)"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # the lock pins every package CI tested; scripts/lock.sh regenerates it
  .venv/bin/pip install -q -c requirements.lock -e '.[merger,test]'
  echo "$want" > "$stamp"
fi

# the JVM class-data archive: the merger's Spark starts ~2 s faster (built once per
# Java and Spark installation, ~30 s; `cdc spark-archive` builds it again)
if ! .venv/bin/python -c "from merger.spark.archive import archive_path as a; p = a(); raise SystemExit(p is None or not p.is_file())" 2>/dev/null; then
  echo "bootstrap: building the Spark class-data archive (about 30 s, once)"
  if ! out=$(.venv/bin/cdc spark-archive 2>&1); then
    echo "bootstrap: warning: no Spark class-data archive; the merger starts without it (slower):"
    echo "$out" | tail -3
  fi
fi
