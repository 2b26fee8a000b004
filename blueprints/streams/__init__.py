"""The live streams, each a thin adapter over engine/readside/follow.py: SSE of a project and
of a task's gateway turns, and the timeline websocket with its per-process hub."""
