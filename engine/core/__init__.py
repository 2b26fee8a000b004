"""The core: statuses as data, the one guarded transition, leases, fenced handles and runner
notices."""
