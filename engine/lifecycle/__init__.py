"""The use cases every surface calls (create, cancel, redeploy, input) and the operator's
(engine/lifecycle/operator.py), who asks, and idempotent creates."""
