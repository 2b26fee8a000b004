"""Patroni's on_role_change callback: when this node becomes the primary, point PgBouncer at it
and reload PgBouncer. Runs on Debian's Python as the PostgreSQL user; argv as Patroni calls it:
<pgbouncer.ini> <this node's address> <action> <role> <scope>."""

import json
import os
import signal
import sys
from pathlib import Path


def main() -> None:
    ini, address, _action, role = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    if role not in ("master", "primary"):
        return
    settings = json.loads((ini.parent / "settings.json").read_text())
    text = ini.read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(settings["dbname"] + " = "):
            lines[i] = (
                f"{settings['dbname']} = host={address} port=5432 dbname={settings['dbname']}"
            )
    tmp = ini.with_suffix(".cb")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(ini)
    try:
        os.kill(int((ini.parent / "pgbouncer.pid").read_text().split()[0]), signal.SIGHUP)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    main()
