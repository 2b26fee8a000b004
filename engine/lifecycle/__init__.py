"""The use cases every surface calls (create, cancel, redeploy, input), who asks, and idempotent
creates."""
