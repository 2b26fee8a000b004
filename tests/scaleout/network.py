"""Three hosts in network namespaces, built and torn down by the suite itself.

Two private bridges inside this machine, on a test subnet nothing else uses (slot N of a few, so
suites running at once in several checkouts never share one; a slot is held by a lock file):
- `dteN-front` 10.213.2N.1/24: where clients (this test process) reach the hosts' HTTP servers;
- `dteN-back` 10.213.2N+1.1/24: the database network, where PostgreSQL and PgBouncer listen.
Each host is a namespace with one veth on each bridge, so its link to PostgreSQL can be cut while
its clients still reach it. Only addresses created here are ever used. Every command is bounded
in time; leftovers of a crashed run in the same slot are removed first.
"""

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SLOTS = 8
LOCK_DIR = Path("/tmp/dte-scaleout-locks")


@dataclass(frozen=True)
class HostLinks:
    slot: int
    name: str  # also the host name
    index: int

    @property
    def namespace(self) -> str:
        return f"dte{self.slot}-{self.name}"

    @property
    def address(self) -> str:
        """The host's client-facing address."""
        return f"10.213.{2 * self.slot}.{10 + self.index}"

    @property
    def back_address(self) -> str:
        return f"10.213.{2 * self.slot + 1}.{10 + self.index}"

    @property
    def front_link(self) -> str:
        return f"dte{self.slot}-{self.name}-fr"

    @property
    def back_link(self) -> str:
        """The bridge-side end of the host's database link (down = cable pulled)."""
        return f"dte{self.slot}-{self.name}-db"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def usable() -> str | None:
    """Why the suite cannot run here, or None."""
    if os.geteuid() != 0:
        return "the scale-out suite needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "the scale-out suite needs iproute2's `ip`"
    return None


def claim_slot() -> tuple[int, int]:
    """Lock a free slot: (slot, the lock's file descriptor, held until the end of the run)."""
    LOCK_DIR.mkdir(exist_ok=True)
    for slot in range(SLOTS):
        fd = os.open(LOCK_DIR / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, fd
        except BlockingIOError:
            os.close(fd)
    raise RuntimeError(f"all {SLOTS} scale-out slots are in use")


def sweep_abandoned_slots(held: int, clean) -> None:
    """`clean(slot)` every slot no running suite holds (its leftovers are a crashed run's),
    holding that slot's lock meanwhile so no new run can start building in it."""
    for slot in range(SLOTS):
        if slot == held:
            continue
        with open(LOCK_DIR / f"slot-{slot}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            clean(slot)


class Topology:
    def __init__(self, slot: int, names: list[str]):
        self.slot = slot
        self.prefix = f"dte{slot}-"
        self.front_bridge, self.back_bridge = f"dte{slot}-front", f"dte{slot}-back"
        self.front_net, self.back_net = f"10.213.{2 * slot}", f"10.213.{2 * slot + 1}"
        #: Where PostgreSQL and PgBouncer listen: the database bridge's own address.
        self.database_address = f"{self.back_net}.1"
        self.hosts = [HostLinks(slot, name, i + 1) for i, name in enumerate(names)]

    def teardown(self) -> None:
        """Remove every process, namespace and link of this slot (also a crashed run's)."""
        listed = ip("netns", "list", check=False).stdout.split()
        for namespace in [w for w in listed if w.startswith(self.prefix)]:
            for pid in ip("netns", "pids", namespace, check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            ip("netns", "delete", namespace, check=False)
        for line in ip("-o", "link", "show", check=False).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(self.prefix):
                ip("link", "delete", name, check=False)

    def build(self) -> None:
        self.teardown()
        for bridge, net in ((self.front_bridge, self.front_net), (self.back_bridge, self.back_net)):
            ip("link", "add", bridge, "type", "bridge")
            ip("addr", "add", f"{net}.1/24", "dev", bridge)
            ip("link", "set", bridge, "up")
        for host in self.hosts:
            ip("netns", "add", host.namespace)
            ip("-n", host.namespace, "link", "set", "lo", "up")
            for bridge, outer, inner, address in (
                (self.front_bridge, host.front_link, "front", host.address),
                (self.back_bridge, host.back_link, "db", host.back_address),
            ):
                ip("link", "add", outer, "type", "veth", "peer", "name", f"{outer}-i")
                ip("link", "set", f"{outer}-i", "netns", host.namespace)
                ip("-n", host.namespace, "link", "set", f"{outer}-i", "name", inner)
                ip("-n", host.namespace, "addr", "add", f"{address}/24", "dev", inner)
                ip("-n", host.namespace, "link", "set", inner, "up")
                ip("link", "set", outer, "master", bridge)
                ip("link", "set", outer, "up")

    def cut_database_link(self, host: HostLinks) -> None:
        ip("link", "set", host.back_link, "down")

    def restore_database_link(self, host: HostLinks) -> None:
        ip("link", "set", host.back_link, "up")
