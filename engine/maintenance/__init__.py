"""The loops that keep the engine true, each named for its duty: the lease renewer, the reaper,
the NOTIFY listener and the cleanup worker (with the purges it runs). The per-process runtime
(engine/process.py) starts and stops them; none of them runs a task."""
