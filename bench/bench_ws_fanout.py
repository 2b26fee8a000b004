"""Benchmark: a status write -> the timeline frame received by 1,000 websocket viewers of ONE
gunicorn gevent worker.

    .venv/bin/python -m bench.bench_ws_fanout [--viewers 1000] [--writes 100] [--interval 0.1]

What it does: starts `gunicorn -c gunicorn.conf.py -w 1 wsgi:app` on a fresh benchmark database,
parks one task `blocked` (this process plays the lease holder), and opens N viewers of its
timeline websocket (`/ws/tasks/<id>/timeline`, Origin set like a browser) from separate client
processes. Then, K times, it makes one status write through the engine's one guarded transition
(alternately blocked -> running, a claim, and running -> blocked, fenced on the lease epoch) and
every viewer timestamps the frame carrying that write's event (CLOCK_MONOTONIC is shared by
every process of the machine). Two latencies are reported: from the write's commit (the statement
returned: the status IS written) to the frame, which is what the targets judge; and from just
before the statement, which adds the write's own commit (an fsync on this machine's disk). The
clients run on the same 2 cores as the server and PostgreSQL, so the numbers include their
scheduling. Targets: p50 <= 10 ms, p99 <= 50 ms, worker RSS <= 200 MB.
"""

import json
import os
import re
import select
import sys
import time
from pathlib import Path


# -- client process: M websocket viewers, one thread, one epoll (no gevent) ---------------------
def client_main(url: str, origin: str, count: int, out: str) -> None:
    """Open `count` viewers; print "ready" once all have bootstrapped; on stdin EOF, dump
    {seq: [receive monotonic ns, ...]} to `out` and exit.

    After the handshake a viewer's raw bytes are read straight off its socket and the `"seq":N`
    of each event frame is found with one regex (server frames are unmasked and uncompressed).
    The clients share the server's two cores, so each frame must cost them as little as
    possible: one epoll loop, no greenlets.
    """
    import websocket

    seq_pattern = re.compile(rb'"t":"frag","seq":(\d+),')
    received: dict[int, list[int]] = {}
    sockets = {}
    for _ in range(count):
        ws = websocket.create_connection(url, origin=origin, timeout=120)
        ws.sock.setblocking(False)
        sockets[ws.sock.fileno()] = {"ws": ws, "ready": False, "seen": set(), "tail": b""}
    poller = select.epoll()
    for fd in sockets:
        poller.register(fd, select.EPOLLIN)
    poller.register(sys.stdin.fileno(), select.EPOLLIN)
    pending = count
    while True:
        for fd, _ in poller.poll():
            now = time.monotonic_ns()
            if fd == sys.stdin.fileno():
                Path(out).write_text(json.dumps(received))
                os._exit(0)
            viewer = sockets[fd]
            try:
                data = viewer["ws"].sock.recv(262144)
            except BlockingIOError:
                continue
            if not data:
                poller.unregister(fd)
                continue
            data = viewer["tail"] + data
            viewer["tail"] = data[-64:]  # a frame head cut by the read boundary
            if not viewer["ready"]:
                start = data.find(b'"t":"ready"')
                if start < 0:
                    continue
                viewer["ready"] = True
                pending -= 1
                if pending == 0:
                    print("ready", flush=True)
                data = data[start:]
            seen = viewer["seen"]
            for match in seq_pattern.finditer(data):
                seq = int(match.group(1))
                if seq not in seen:
                    seen.add(seq)
                    received.setdefault(seq, []).append(now)


if __name__ == "__main__" and sys.argv[1:2] == ["--client"]:
    client_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])

from gevent import monkey  # noqa: E402  (the coordinator and the server side are gevent's)

monkey.patch_all()

import argparse  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import requests  # noqa: E402

from bench.common import PROJECT_ROOT, fresh_database, machine, percentile  # noqa: E402

TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0
TARGET_RSS_MB = 200.0


# -- coordinator ---------------------------------------------------------------------------------
def worker_pid(master: int) -> int:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == master:
            return int(stat.parent.name)
    raise RuntimeError("no gunicorn worker found")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(
    viewers: int = 1000, writes: int = 100, interval_s: float = 0.1, client_procs: int = 2
) -> dict:
    from engine.db import Database
    from engine.status import Status
    from engine.transitions import Guard, transition

    port = 18000 + os.getpid() % 1000
    base = f"http://127.0.0.1:{port}"
    with fresh_database() as url, tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "DATA_DIR": tmp,
            "WORKER_CONNECTIONS": str(viewers + 200),
            "ACCESS_LOG": "",
            "PYTHONUNBUFFERED": "1",
        }
        log = open(Path(tmp) / "server.log", "wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-w", "1", "wsgi:app"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        clients = []
        db = Database(url, max_size=2)
        db.open()
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if requests.get(base + "/healthz", timeout=1).ok:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError((Path(tmp) / "server.log").read_text())
                time.sleep(0.2)
            worker = worker_pid(server.pid)

            # One task, parked blocked; this process holds its lease whenever it runs.
            row = db.one(
                "task_insert",
                namespace="default",
                project_id="bench",
                created_by="bench",
                source_kind="image",
                runner="direct",
                source={"kind": "image", "image": "bench:1", "name": "bench"},
                sensitive_keys=[],
                artifact_summary={},
                retried_from_task_id=None,
            )
            task_id = row["id"]
            epoch = transition(db, task_id, Status.RUNNING, claim_owner="bench", lease_ttl_s=3600)[
                0
            ]["lease_epoch"]
            transition(
                db,
                task_id,
                Status.BLOCKED,
                reason="bench",
                actor="bench",
                guard=Guard(expect_epoch=epoch, expect_owner="bench"),
            )
            rss_idle = rss_mb(worker)

            ws_url = f"ws://127.0.0.1:{port}/ws/tasks/{task_id}/timeline"
            per_client = [
                viewers // client_procs + (1 if i < viewers % client_procs else 0)
                for i in range(client_procs)
            ]
            outs = [str(Path(tmp) / f"client-{i}.json") for i in range(client_procs)]
            started = time.monotonic()
            for count, out in zip(per_client, outs, strict=False):
                clients.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "bench.bench_ws_fanout",
                            "--client",
                            ws_url,
                            base,
                            str(count),
                            out,
                        ],
                        cwd=PROJECT_ROOT,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            for client in clients:
                assert client.stdout.readline().strip() == "ready", "a client failed to connect"
            connect_s = time.monotonic() - started
            time.sleep(1.0)
            rss_connected = rss_mb(worker)

            sent_at: list[int] = []
            committed_at: list[int] = []
            for i in range(writes):
                t0 = time.monotonic_ns()
                if i % 2 == 0:
                    moved = transition(
                        db, task_id, Status.RUNNING, claim_owner="bench", lease_ttl_s=3600
                    )
                    epoch = moved[0]["lease_epoch"]
                else:
                    moved = transition(
                        db,
                        task_id,
                        Status.BLOCKED,
                        reason="bench",
                        actor="bench",
                        guard=Guard(expect_epoch=epoch, expect_owner="bench"),
                    )
                committed_at.append(time.monotonic_ns())
                assert moved, "the status write was refused"
                sent_at.append(t0)
                time.sleep(interval_s)
            time.sleep(1.0)
            rss_after = rss_mb(worker)
            for client in clients:
                client.stdin.close()
            for client in clients:
                client.wait(60)

            events = db.all(
                "event_list_for_task",
                task_id=task_id,
                namespace="default",
                after_seq=0,
                limit=10_000,
            )
            seqs = [e["seq"] for e in events][-writes:]  # the writes' events, in write order
            received: dict[str, list[int]] = {}
            for out in outs:
                for seq, stamps in json.loads(Path(out).read_text()).items():
                    received.setdefault(seq, []).extend(stamps)
            latencies, with_write, write_ms, missing = [], [], [], 0
            for seq, t0, t1 in zip(seqs, sent_at, committed_at, strict=False):
                stamps = received.get(str(seq), [])
                missing += viewers - len(stamps)
                latencies += [(t - t1) / 1e6 for t in stamps]
                with_write += [(t - t0) / 1e6 for t in stamps]
                write_ms.append((t1 - t0) / 1e6)
        finally:
            for client in clients:
                if client.poll() is None:
                    client.kill()
            os.killpg(server.pid, 15)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
            db.close()
            log.close()

    result = {
        "viewers": viewers,
        "writes": writes,
        "frames": len(latencies),
        "missing": missing,
        "p50_ms": percentile(latencies, 50),
        "p90_ms": percentile(latencies, 90),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "incl_write_p50_ms": percentile(with_write, 50),
        "incl_write_p99_ms": percentile(with_write, 99),
        "write_p50_ms": percentile(write_ms, 50),
        "write_p99_ms": percentile(write_ms, 99),
        "rss_idle_mb": rss_idle,
        "rss_connected_mb": rss_connected,
        "rss_after_mb": rss_after,
        "connect_s": connect_s,
        "machine": machine(),
    }
    result["met"] = (
        result["p50_ms"] <= TARGET_P50_MS
        and result["p99_ms"] <= TARGET_P99_MS
        and max(rss_connected, rss_after) <= TARGET_RSS_MB
        and missing == 0
    )
    return result


def markdown(r: dict) -> str:
    ok = lambda passed: "met" if passed else "**missed**"  # noqa: E731
    return "\n".join(
        [
            f"- {r['viewers']} viewers x {r['writes']} status writes = {r['frames']} frames "
            f"({r['missing']} missing); all connected and bootstrapped in {r['connect_s']:.1f} s",
            f"- committed write -> frame received: p50 {r['p50_ms']:.1f} ms "
            f"({ok(r['p50_ms'] <= TARGET_P50_MS)}"
            f" <= {TARGET_P50_MS:g}), p90 {r['p90_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms "
            f"({ok(r['p99_ms'] <= TARGET_P99_MS)} <= {TARGET_P99_MS:g}), max {r['max_ms']:.1f} ms",
            f"- counting the write's own statement and commit too: "
            f"p50 {r['incl_write_p50_ms']:.1f} ms, p99 {r['incl_write_p99_ms']:.1f} ms "
            f"(the write alone: p50 {r['write_p50_ms']:.1f} "
            f"ms, p99 {r['write_p99_ms']:.1f} ms)",
            f"- worker RSS: {r['rss_idle_mb']:.0f} MB idle, {r['rss_connected_mb']:.0f} MB with "
            f"{r['viewers']} viewers, {r['rss_after_mb']:.0f} MB after the writes "
            f"({ok(max(r['rss_connected_mb'], r['rss_after_mb']) <= TARGET_RSS_MB)} <= "
            f"{TARGET_RSS_MB:g} MB)",
            f"- machine: {r['machine']['cpu']}; load before: {r['machine']['load']}",
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--viewers", type=int, default=1000)
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--client-procs", type=int, default=2)
    args = parser.parse_args()
    outcome = main(args.viewers, args.writes, args.interval, args.client_procs)
    print(markdown(outcome))
    print(json.dumps({k: v for k, v in outcome.items() if k != "machine"}))
    sys.exit(0 if outcome["met"] else 1)
