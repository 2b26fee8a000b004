"""A highly available PostgreSQL for the HA suite: one etcd member and two PostgreSQL 15 nodes
managed by Patroni (a primary and a streaming replica), each node in a network namespace of its
own on the suite's database bridge, and PgBouncer following the primary.

Everything runs from Debian's packages (`patroni`, `etcd-server`, `postgresql-15`, `pgbouncer`;
`make test` installs them). PostgreSQL and Patroni run as a non-root system user. Every process
started here is stopped by `stop()`, and a crashed run's leftovers in the same slot are found by
their pid files and killed first.
"""

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import requests

from tests.helpers import ROOT, wait_for
from tests.scaleout.network import HostLinks
from tests.scaleout.servers import service_user

PG_PORT, REST_PORT, ETCD_PORT, BOUNCER_PORT = 5432, 8008, 2379, 6432
#: Debian's PostgreSQL 15 (the machine's own packages), which Patroni drives.
PG15_BIN = Path("/usr/lib/postgresql/15/bin")
#: Debian's patroni runs on Debian's Python, which has its dependencies (python3-etcd, ...).
DEBIAN_PYTHON = "/usr/bin/python3"
#: Patroni's cadence (bootstrap DCS settings): the leader key lives TTL_S; a member loops every
#: LOOP_WAIT_S. loop_wait + 2 * retry_timeout <= ttl, as Patroni's documentation asks.
TTL_S, LOOP_WAIT_S, RETRY_TIMEOUT_S = 10, 1, 4


def usable() -> str | None:
    """Why the HA suite cannot run here, or None."""
    if os.geteuid() != 0:
        return "the HA suite needs root (network namespaces)"
    missing = [
        what
        for what, path in (
            ("patroni", shutil.which("patroni")),
            ("etcd", shutil.which("etcd")),
            ("PostgreSQL 15", (PG15_BIN / "postgres").exists() or None),
            ("pgbouncer", shutil.which("pgbouncer")),
        )
        if not path
    ]
    if missing:
        return f"the HA suite needs {', '.join(missing)} (make test installs them)"
    return None


def _kill_pidfile(pidfile: Path, comm: str) -> None:
    try:
        pid = int(pidfile.read_text().split()[0])
        if comm in Path(f"/proc/{pid}/cmdline").read_text():
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


class Etcd:
    """One etcd member on the database bridge (Patroni's DCS, v2 API as Debian's patroni uses)."""

    def __init__(self, workdir: Path, address: str):
        self.workdir, self.address = workdir, address
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def kill_leftover(workdir: Path) -> None:
        _kill_pidfile(workdir / "etcd.pid", "etcd")

    def start(self) -> None:
        self.kill_leftover(self.workdir)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        client, peer = f"http://{self.address}:{ETCD_PORT}", f"http://{self.address}:2380"
        with open(self.workdir / "etcd.log", "wb") as log:
            self.proc = subprocess.Popen(
                [
                    "etcd",
                    "--name=e1",
                    f"--data-dir={self.workdir / 'data'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=e1={peer}",
                    "--enable-v2=true",
                    "--unsafe-no-fsync",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (self.workdir / "etcd.pid").write_text(str(self.proc.pid))

        def healthy():
            assert self.proc.poll() is None, (self.workdir / "etcd.log").read_text()[-3000:]
            try:
                return requests.get(f"{client}/health", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(healthy, 30, interval=0.1, message="etcd to serve")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class Node:
    """One PostgreSQL node under Patroni, in its own network namespace."""

    def __init__(
        self, links: HostLinks, workdir: Path, etcd: Etcd, *, synchronous: bool, on_role_change: str
    ):
        self.links, self.name = links, links.name
        self.address = links.back_address
        self.workdir = workdir
        self.user = service_user()
        self.etcd, self.synchronous, self.on_role_change = etcd, synchronous, on_role_change
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @staticmethod
    def kill_leftover(workdir: Path) -> None:
        _kill_pidfile(workdir / "patroni.pid", "patroni")
        pid_file = workdir / "data" / "postmaster.pid"
        _kill_pidfile(pid_file, "postgres")

    def config(self) -> dict:
        return {
            "scope": "dte",
            "name": self.name,
            "log": {"level": "INFO", "dir": str(self.workdir / "log")},
            "restapi": {
                "listen": f"{self.address}:{REST_PORT}",
                "connect_address": f"{self.address}:{REST_PORT}",
            },
            "etcd": {"host": f"{self.etcd.address}:{ETCD_PORT}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_S,
                    "loop_wait": LOOP_WAIT_S,
                    "retry_timeout": RETRY_TIMEOUT_S,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "max_connections": 300,
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_log_hints": "on",
                            # Durability as production has it: an acknowledged commit is flushed
                            # (and, in synchronous mode, on the replica too).
                            "fsync": "on",
                            "synchronous_commit": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"username": "postgres"}],
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 10.213.0.0/16 trust",
                    "host all all 10.213.0.0/16 trust",
                ],
            },
            "postgresql": {
                "listen": f"{self.address}:{PG_PORT}",
                "connect_address": f"{self.address}:{PG_PORT}",
                "data_dir": str(self.workdir / "data"),
                "bin_dir": str(PG15_BIN),
                "pgpass": str(self.workdir / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "ha"},
                    "replication": {"username": "replicator", "password": "ha"},
                    "rewind": {"username": "postgres", "password": "ha"},
                },
                "parameters": {"unix_socket_directories": str(self.workdir)},
                "callbacks": {"on_role_change": self.on_role_change},
            },
        }

    def start(self) -> "Node":
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        if self.starts == 1:
            self.kill_leftover(self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)
            (self.workdir / "log").mkdir(parents=True)
            uid = pwd.getpwnam(self.user).pw_uid
            for path in (self.workdir, self.workdir / "log"):
                os.chown(path, uid, -1)
            self.workdir.chmod(0o700)
            config = self.workdir / "patroni.yml"
            config.write_text(json.dumps(self.config(), indent=1))  # JSON is YAML
            os.chown(config, uid, -1)
        with open(self.workdir / f"patroni-{self.starts}.out", "wb") as out:
            self.proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.links.namespace,
                    "runuser",
                    "-u",
                    self.user,
                    "--",
                    DEBIAN_PYTHON,
                    "/usr/bin/patroni",
                    str(self.workdir / "patroni.yml"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (self.workdir / "patroni.pid").write_text(str(self.proc.pid))
        return self

    def rest(self, path: str = "/patroni") -> dict | None:
        try:
            response = requests.get(f"http://{self.address}:{REST_PORT}{path}", timeout=2)
            return response.json()
        except (requests.RequestException, ValueError):
            return None

    def role(self) -> str | None:
        state = self.rest()
        return state and state.get("role")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{self.address}:{PG_PORT}/{dbname}?connect_timeout=2"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.workdir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_postgres(self) -> None:
        """SIGKILL the node's postmaster (a crashed primary): Patroni is left running."""
        pid = self.postmaster_pid()
        assert pid is not None, f"{self.name} runs no PostgreSQL"
        os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.kill_leftover(self.workdir)


class Bouncer:
    """PgBouncer (transaction mode) on the database bridge, pointed at the primary by the nodes'
    on_role_change callback (tests/ha/follow_primary.py), as Patroni's documentation suggests for
    a pooler without a virtual IP."""

    def __init__(self, workdir: Path, address: str, dbname: str):
        self.workdir, self.address, self.dbname = workdir, address, dbname
        self.user = service_user()
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def kill_leftover(workdir: Path) -> None:
        _kill_pidfile(workdir / "pgbouncer.pid", "pgbouncer")

    @property
    def ini(self) -> Path:
        return self.workdir / "pgbouncer.ini"

    def write_config(self, primary: str) -> None:
        write_bouncer_config(self.ini, primary)

    def start(self, primary: str) -> None:
        self.kill_leftover(self.workdir)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        os.chown(self.workdir, pwd.getpwnam(self.user).pw_uid, -1)
        (self.workdir / "userlist.txt").write_text('"postgres" ""\n')
        (self.workdir / "settings.json").write_text(
            json.dumps(
                {
                    "listen": self.address,
                    "port": BOUNCER_PORT,
                    "dbname": self.dbname,
                    "dir": str(self.workdir),
                }
            )
        )
        self.write_config(primary)
        self.proc = subprocess.Popen(
            ["runuser", "-u", self.user, "--", "pgbouncer", str(self.ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def accepting():
            assert self.proc.poll() is None, (self.workdir / "pgbouncer.log").read_text()
            try:
                with psycopg.connect(self.url(), connect_timeout=2, prepare_threshold=None) as c:
                    return c.execute("SELECT NOT pg_is_in_recovery()").fetchone()[0]
            except psycopg.OperationalError:
                return None

        wait_for(accepting, 30, interval=0.2, message="PgBouncer to reach the primary")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.kill_leftover(self.workdir)

    def url(self) -> str:
        return f"postgresql://postgres@{self.address}:{BOUNCER_PORT}/{self.dbname}"


def write_bouncer_config(ini: Path, primary: str) -> None:
    """PgBouncer's configuration with its one database at `primary` (written atomically)."""
    settings = json.loads((ini.parent / "settings.json").read_text())
    text = f"""[databases]
{settings["dbname"]} = host={primary} port={PG_PORT} dbname={settings["dbname"]}
[pgbouncer]
listen_addr = {settings["listen"]}
listen_port = {settings["port"]}
unix_socket_dir =
auth_type = trust
auth_file = {settings["dir"]}/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
server_reset_query =
server_connect_timeout = 2
server_login_retry = 1
ignore_startup_parameters = extra_float_digits,options
logfile = {settings["dir"]}/pgbouncer.log
pidfile = {settings["dir"]}/pgbouncer.pid
"""
    tmp = ini.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(ini)


class HaPostgres:
    """The etcd member, the two Patroni nodes and (optionally) PgBouncer, as one thing."""

    def __init__(
        self,
        workdir: Path,
        etcd_address: str,
        nodes: list[HostLinks],
        *,
        synchronous: bool,
        dbname: str,
    ):
        self.workdir = workdir
        self.dbname = dbname
        self.synchronous = synchronous
        self.etcd = Etcd(workdir / "etcd", etcd_address)
        self.bouncer = Bouncer(workdir / "bouncer", etcd_address, dbname)
        script = ROOT / "tests/ha/follow_primary.py"
        self.nodes = {
            links.name: Node(
                links,
                workdir / links.name,
                self.etcd,
                synchronous=synchronous,
                on_role_change=f"{DEBIAN_PYTHON} {script} {self.bouncer.ini} {links.back_address}",
            )
            for links in nodes
        }

    @staticmethod
    def kill_leftovers(workdir: Path, names: list[str]) -> None:
        Bouncer.kill_leftover(workdir / "bouncer")
        for name in names:
            Node.kill_leftover(workdir / name)
        Etcd.kill_leftover(workdir / "etcd")

    def start(self) -> None:
        self.etcd.start()
        first, *rest = self.nodes.values()
        first.start()
        wait_for(
            lambda: first.role() in ("master", "primary"),
            90,
            interval=0.2,
            message=f"{first.name} to bootstrap as the primary",
        )
        for node in rest:
            node.start()
        self.wait_streaming()
        with psycopg.connect(first.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.bouncer.start(first.address)

    def wait_streaming(self, timeout: float = 90) -> None:
        """Until the cluster has a primary and every other node streams from it (as the
        primary's pg_stat_replication says)."""

        def settled():
            primary = self.primary()
            if primary is None:
                return False
            try:
                with psycopg.connect(primary.url(), autocommit=True) as conn:
                    streaming = conn.execute(
                        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                    ).fetchone()[0]
            except psycopg.OperationalError:
                return False
            if streaming != len(self.nodes) - 1:
                return False
            # In synchronous mode Patroni switches over only to a synchronous standby.
            return not self.synchronous or any(m["role"] == "sync_standby" for m in self.members())

        wait_for(settled, timeout, interval=0.2, message="a primary and a streaming replica")

    def members(self) -> list[dict]:
        for node in self.nodes.values():
            state = node.rest("/cluster")
            if state and "members" in state:
                return state["members"]
        return []

    def primary(self) -> "Node | None":
        for node in self.nodes.values():
            if node.role() in ("master", "primary"):
                return node
        return None

    def replica(self) -> "Node":
        primary = self.primary()
        return next(n for n in self.nodes.values() if n is not primary)

    def multi_host_url(self, dbname: str | None = None) -> str:
        hosts = ",".join(f"{n.address}:{PG_PORT}" for n in self.nodes.values())
        return (
            f"postgresql://postgres@{hosts}/{dbname or self.dbname}"
            "?target_session_attrs=read-write&connect_timeout=2"
        )

    def patronictl(self, *args: str, timeout: float = 120) -> str:
        config = next(iter(self.nodes.values())).workdir / "patroni.yml"
        done = subprocess.run(
            [DEBIAN_PYTHON, "/usr/bin/patronictl", "-c", str(config), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def switchover(self) -> tuple[str, str]:
        """A planned switchover to the replica: (old primary, new primary)."""
        old, new = self.primary().name, self.replica().name
        said = self.patronictl("switchover", "dte", "--leader", old, "--candidate", new, "--force")
        assert "Successfully switched over" in said, said
        return old, new

    def set_synchronous(self, on: bool) -> None:
        """Patroni's synchronous_mode, changed in the DCS for the whole cluster."""
        self.patronictl(
            "edit-config", "dte", "--force", "--set", f"synchronous_mode={str(on).lower()}"
        )
        self.synchronous = on

    def stop(self) -> None:
        self.bouncer.stop()
        for node in self.nodes.values():
            node.stop()
        self.etcd.stop()


def wait_primary_elsewhere(ha: HaPostgres, old: str, timeout: float = 120) -> tuple[str, float]:
    """Until a node other than `old` is the primary and accepts writes: (its name, when)."""

    def promoted():
        node = ha.primary()
        if node is None or node.name == old:
            return None
        try:
            with psycopg.connect(node.url(ha.dbname), autocommit=True) as conn:
                if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                    return node.name
        except psycopg.OperationalError:
            return None
        return None

    name = wait_for(promoted, timeout, interval=0.05, message="a new primary")
    return name, time.monotonic()
