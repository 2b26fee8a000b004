"""Numbers the scale-out suite measures, printed at the end of the run (make test-scaleout)."""

RESULTS: list[tuple[str, str, str]] = []


def record(mode: str, what: str, text: str) -> None:
    RESULTS.append((mode, what, text))
