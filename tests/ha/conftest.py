"""Fixtures of the HA suite: the network (three service hosts and two database nodes, each in a
network namespace of its own), etcd and two Patroni-managed PostgreSQL 15 nodes, PgBouncer
following the primary, and the service's three hosts connected with a multi-host URL.

Everything is torn down at the end, also when a test fails; a crashed earlier run's leftovers in
the same slot are removed first.
"""

import os
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.ha.cluster import HaPostgres, usable
from tests.scaleout.network import Topology, claim_slot, sweep_abandoned_slots
from tests.scaleout.servers import Host, host_env

SERVICE_HOSTS = ["a", "b", "c"]
DATABASE_NODES = ["p1", "p2"]
DBNAME = "dte_ha"
#: Longer than the failover window (Patroni's TTL + a loop or two), so a run in flight keeps its
#: lease while there is no primary; the database retry budget of a request is about as long.
HA_SETTINGS = {
    "LEASE_TTL_S": "30",
    "LEASE_RENEW_INTERVAL_S": "2",
    "REAPER_INTERVAL_S": "1",
    "DB_RETRY_BUDGET_S": "25",
    "SANDBOX_READY_DELAY_S": "2",
    "CLEANUP_INTERVAL_S": "5",
}


def workdir_of(slot: int) -> Path:
    return Path(f"/tmp/dte-ha-{slot}")


def clean_slot(slot: int) -> None:
    HaPostgres.kill_leftovers(workdir_of(slot), DATABASE_NODES)
    Topology(slot, SERVICE_HOSTS + DATABASE_NODES).teardown()


@pytest.fixture(scope="session")
def ha_topology():
    reason = usable()
    if reason:
        pytest.skip(reason)
    slot, lock = claim_slot()
    sweep_abandoned_slots(slot, clean_slot)
    clean_slot(slot)
    net = Topology(slot, SERVICE_HOSTS + DATABASE_NODES)
    try:
        net.build()
        yield net
    finally:
        HaPostgres.kill_leftovers(workdir_of(slot), DATABASE_NODES)
        net.teardown()
        os.close(lock)


@pytest.fixture(scope="session")
def ha_postgres(ha_topology):
    workdir = workdir_of(ha_topology.slot)
    workdir.mkdir(exist_ok=True)
    workdir.chmod(0o755)
    nodes = [h for h in ha_topology.hosts if h.name in DATABASE_NODES]
    ha = HaPostgres(workdir, ha_topology.database_address, nodes, synchronous=True, dbname=DBNAME)
    try:
        ha.start()
        yield ha
    finally:
        ha.stop()


@dataclass
class Service:
    mode: str
    hosts: dict[str, Host]
    ha: HaPostgres

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def connect(self):
        """A direct connection to whichever node is the primary now (the test's own reads)."""
        return psycopg.connect(self.ha.multi_host_url(), autocommit=True, row_factory=dict_row)

    def ensure_running(self) -> None:
        for host in self.hosts.values():
            if not host.running():
                host.start()
        for host in self.hosts.values():
            host.wait_ready()


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
def service(request, ha_topology, ha_postgres):
    """The three hosts: every connection by the multi-host URL, or the statement pools through
    PgBouncer (which follows the primary) with LISTEN by the multi-host URL."""
    mode = request.param
    ha_postgres.wait_streaming()
    direct = ha_postgres.multi_host_url()
    workdir = workdir_of(ha_topology.slot)
    logdir = workdir / f"logs-{mode}"
    logdir.mkdir(exist_ok=True)
    env = host_env(
        database_url=ha_postgres.bouncer.url() if mode == "pgbouncer" else direct,
        listen_url=direct,
        pooler="pgbouncer" if mode == "pgbouncer" else "",
        datadir=workdir / "data",
        trusted_hosts=[h.address for h in ha_topology.hosts],
    )
    env.update(HA_SETTINGS)
    links = [h for h in ha_topology.hosts if h.name in SERVICE_HOSTS]
    hosts = {link.name: Host(link, env, logdir) for link in links}
    try:
        hosts["a"].start().wait_ready(120)  # applies the schema first
        service = Service(mode, hosts, ha_postgres)
        service.ensure_running()
        yield service
    finally:
        for host in hosts.values():
            host.kill()


def pytest_terminal_summary(terminalreporter):
    from tests.scaleout import measured

    if measured.RESULTS:
        terminalreporter.section("HA measurements")
        for mode, what, text in measured.RESULTS:
            terminalreporter.write_line(f"[{mode}] {what}: {text}")
