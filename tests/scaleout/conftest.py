"""Fixtures of the scale-out suite: the network, PostgreSQL (and PgBouncer), three hosts.

The whole suite runs twice: straight to PostgreSQL, and with the statement pools through
PgBouncer in transaction mode (LISTEN direct). Everything is torn down at the end, also when a
test fails; a crashed earlier run's leftovers in the same slot are removed first.
"""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.scaleout.network import Topology, claim_slot, sweep_abandoned_slots, usable
from tests.scaleout.servers import Host, PgBouncer, Postgres, host_env

HOST_NAMES = ["a", "b", "c"]
DBNAME = "dte_scaleout"


def clean_slot(slot: int) -> None:
    """A crashed run's namespaces, links and servers in this slot."""
    Topology(slot, HOST_NAMES).teardown()
    PgBouncer.kill_leftover(Path(f"/tmp/dte-scaleout-{slot}/pgbouncer"))
    Postgres.stop_leftover(Path(f"/tmp/dte-scaleout-{slot}"))


@pytest.fixture(scope="session")
def topology():
    reason = usable()
    if reason:
        pytest.skip(reason)
    slot, lock = claim_slot()
    sweep_abandoned_slots(slot, clean_slot)
    net = Topology(slot, HOST_NAMES)
    try:
        net.build()
        yield net
    finally:
        net.teardown()
        os.close(lock)


@pytest.fixture(scope="session")
def workdir(topology):
    path = Path(f"/tmp/dte-scaleout-{topology.slot}")
    PgBouncer.kill_leftover(path / "pgbouncer")
    yield path


@pytest.fixture(scope="session")
def postgres(topology, workdir):
    server = Postgres(workdir, topology.database_address)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        # The hosts' logs stay for a look after a failure; the next run clears them.
        shutil.rmtree(server.pgdata, ignore_errors=True)


@dataclass
class Cluster:
    mode: str
    hosts: dict[str, Host]
    database_url: str  # direct, for the test's own reads
    topology: Topology

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def connect(self):
        return psycopg.connect(self.database_url, autocommit=True, row_factory=dict_row)

    def ensure_running(self) -> None:
        """Restart any host a previous test stopped; wait until all serve."""
        for host in self.hosts.values():
            if not host.running():
                host.start()
        for host in self.hosts.values():
            host.wait_ready()


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
def cluster(request, topology, postgres, workdir):
    mode = request.param
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DBNAME))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
    direct = postgres.url(DBNAME)
    if mode == "pgbouncer" and shutil.which("pgbouncer") is None:
        pytest.skip("PgBouncer is not installed (make test installs Debian's pgbouncer)")
    bouncer = PgBouncer(workdir / "pgbouncer", postgres) if mode == "pgbouncer" else None
    logdir = workdir / f"logs-{mode}"
    logdir.mkdir(exist_ok=True)
    hosts: dict[str, Host] = {}
    try:
        if bouncer is not None:
            bouncer.start(DBNAME)
        env = host_env(
            database_url=bouncer.url(DBNAME) if bouncer else direct,
            listen_url=direct,
            pooler="pgbouncer" if bouncer else "",
            datadir=workdir / "data",
            trusted_hosts=[h.address for h in topology.hosts],
        )
        hosts = {links.name: Host(links, env, logdir) for links in topology.hosts}
        # One host first: it applies the schema; the others then boot side by side.
        hosts["a"].start().wait_ready()
        cluster = Cluster(mode, hosts, direct, topology)
        cluster.ensure_running()
        yield cluster
    finally:
        for host in hosts.values():
            host.kill()
        for host in topology.hosts:
            topology.restore_database_link(host)
        if bouncer is not None:
            bouncer.stop()


@pytest.fixture
def hosts(cluster):
    """The cluster with every host serving (a test may have stopped one)."""
    cluster.ensure_running()
    return cluster


def pytest_terminal_summary(terminalreporter):
    from tests.scaleout import measured

    if measured.RESULTS:
        terminalreporter.section("scale-out measurements")
        for mode, what, text in measured.RESULTS:
            terminalreporter.write_line(f"[{mode}] {what}: {text}")
