"""The core: statuses as data, the one guarded transition, leases, fenced handles, runner notices,
the reaper, the abort signal and the domain errors."""
