"""Local process groups on this host (seed 001): start one, tell whether it still runs, stop it.

A group is identified by its leader's pid, pgid and start time (and the boot), so a reused pid is
never mistaken for it. Nothing here touches storage: engine/cleanup/task_runtimes.py records
groups as `task_runtimes` rows.
"""

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import gevent

#: After SIGKILL, how long a group may take to disappear before the stop counts as unconfirmed.
KILL_CONFIRM_S = 2.0
PROCESS_POLL_S = 0.05
HOST = socket.gethostname()


class Liveness(StrEnum):
    ALIVE = "alive"
    #: Only ever said of a local process group on this host, pid and start time both checked.
    DEAD = "dead"
    #: Remote, another host, or no handle: never pruned.
    UNKNOWN = "unknown"


class StopUnconfirmed(Exception):
    """A process group could not be confirmed stopped (retryable)."""


@dataclass(frozen=True)
class ProcessIdentity:
    """Enough to find a process group again and to tell it from a reused pid."""

    host: str
    boot_id: str
    pid: int
    pgid: int
    #: The leader's start time in clock ticks since boot (/proc/<pid>/stat field 22).
    start_ticks: int

    @classmethod
    def of_row(cls, row: dict) -> "ProcessIdentity | None":
        if row.get("liveness") != "process" or None in (
            row.get("pid"),
            row.get("pgid"),
            row.get("start_ticks"),
            row.get("boot_id"),
        ):
            return None
        return cls(row["host"], row["boot_id"], row["pid"], row["pgid"], row["start_ticks"])


@dataclass(frozen=True)
class _Stat:
    state: str
    pgrp: int
    start_ticks: int


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot of this host (a pid and start time mean nothing across a reboot)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return _Stat(state=fields[0], pgrp=int(fields[2]), start_ticks=int(fields[19]))


def _running(stat: _Stat | None) -> bool:
    return stat is not None and stat.state not in ("Z", "X", "x")


def group_members(pgid: int, *, started_since: int = 0) -> list[int]:
    """Live (non-zombie) processes of group `pgid` started at or after `started_since`."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if _running(stat) and stat.pgrp == pgid and stat.start_ticks >= started_since:
            members.append(int(entry.name))
    return members


def process_liveness(
    host: str, boot: str | None, pid: int | None, start_ticks: int | None
) -> Liveness:
    """Whether one recorded process (not a group) still runs here."""
    if host != HOST or None in (boot, pid, start_ticks):
        return Liveness.UNKNOWN
    if boot != boot_id():
        return Liveness.DEAD
    stat = _stat(pid)
    return Liveness.ALIVE if _running(stat) and stat.start_ticks == start_ticks else Liveness.DEAD


def group_liveness(identity: ProcessIdentity) -> Liveness:
    """Whether a recorded process group still has a member on this host.

    The kernel never hands out a pid equal to a live group's id, so a process that now holds the
    leader's pid with another start time proves our group ended first (pid reuse). With the
    leader gone, members that started no earlier than it are our group's survivors.
    """
    if identity.host != HOST:
        return Liveness.UNKNOWN
    if identity.boot_id != boot_id():
        return Liveness.DEAD
    leader = _stat(identity.pid)
    if leader is not None and leader.start_ticks != identity.start_ticks:
        return Liveness.DEAD
    if _running(leader):
        return Liveness.ALIVE
    if group_members(identity.pgid, started_since=identity.start_ticks):
        return Liveness.ALIVE
    return Liveness.DEAD


def spawn_group(argv: list[str], **popen_kwargs) -> tuple[subprocess.Popen, ProcessIdentity | None]:
    """Start argv as the leader of a new session and process group; the process and its identity
    (None when the whole group had already exited before its start time could be read)."""
    for reserved in ("start_new_session", "process_group", "preexec_fn"):
        if reserved in popen_kwargs:
            raise ValueError(f"{reserved} is set by spawn_group")
    popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
    popen = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
    stat = _stat(popen.pid)
    start_ticks = stat.start_ticks if stat is not None else None
    if start_ticks is None:
        # The leader was already reaped: its children (same tick or later) still identify the group.
        survivors = [s for s in map(_stat, group_members(popen.pid)) if s is not None]
        if not survivors:
            return popen, None
        start_ticks = min(s.start_ticks for s in survivors)
    return popen, ProcessIdentity(HOST, boot_id(), popen.pid, popen.pid, start_ticks)


def _signal_group(identity: ProcessIdentity, sig: int) -> bool:
    """Signal the group if it is still ours; whether anything was there to signal."""
    if identity.pgid <= 1 or identity.pgid == os.getpgrp():
        raise StopUnconfirmed(f"refusing to signal process group {identity.pgid}")
    if group_liveness(identity) is not Liveness.ALIVE:
        return False
    try:
        os.killpg(identity.pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(identity: ProcessIdentity, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_liveness(identity) is Liveness.ALIVE:
        if time.monotonic() >= deadline:
            return False
        gevent.sleep(PROCESS_POLL_S)
    return True


def stop_group(
    identity: ProcessIdentity, *, timeout_s: float, kill_wait_s: float = KILL_CONFIRM_S
) -> str:
    """SIGTERM to the whole group, SIGKILL after `timeout_s`, then confirm no member is left.

    Returns "absent" (already gone), "terminated" or "killed"; raises StopUnconfirmed when a
    member survives SIGKILL, or Liveness is Unknown (another host). A leader that exits while
    its children live is not stopped: the group is judged by every member.
    """
    liveness = group_liveness(identity)
    if liveness is Liveness.UNKNOWN:
        raise StopUnconfirmed(f"process group {identity.pgid} is on host {identity.host}")
    if liveness is Liveness.DEAD:
        return "absent"
    if not _signal_group(identity, signal.SIGTERM):
        return "absent"
    if _wait_gone(identity, timeout_s):
        return "terminated"
    _signal_group(identity, signal.SIGKILL)
    if _wait_gone(identity, kill_wait_s):
        return "killed"
    left = group_members(identity.pgid, started_since=identity.start_ticks)
    raise StopUnconfirmed(f"process group {identity.pgid}: {len(left)} member(s) survived SIGKILL")


@lru_cache(maxsize=1)
def own_start_ticks() -> int | None:
    """This process's start time in clock ticks (recorded with the rows it owns)."""
    stat = _stat(os.getpid())
    return stat.start_ticks if stat else None
