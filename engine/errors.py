"""The engine's errors, under one base (EngineError): the domain errors below, the integration
errors (engine/integrations/base.py: IntegrationError and its kinds, each with the `reason` a
failed task records) and the fencing signal LeaseLost.

Domain errors are what a surface answers: each subclass's docstring is its message and `code` its
stable name; they carry no HTTP status: blueprints/errors.py chooses those, in one place (with
the errors only the web edge raises). LeaseLost, at the end, is no domain error.
"""


class EngineError(Exception):
    """Something went wrong."""

    def __init__(self, message: str | None = None):
        #: What went wrong, in words: the message given, else the class's docstring.
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class DomainError(EngineError):
    """Something went wrong."""

    code = "error"


class TaskConflict(DomainError):
    """The task's current state refuses this; `snapshot` shows it as it is now."""

    # No code of its own: only its subclasses are raised (and answered), each with its code.
    def __init__(self, message: str | None = None, *, snapshot: dict | None = None):
        super().__init__(message)
        #: The task the request met (None when it is gone), so a surface can show it instead.
        self.snapshot = snapshot


class TaskNotFound(DomainError):
    """No such task in this workspace."""

    code = "task_not_found"


class PredecessorNotFound(DomainError):
    """The task to redeploy does not exist or has been purged."""

    code = "predecessor_not_found"


class IllegalTransition(DomainError):
    """That status change is not in the transition table."""

    code = "illegal_transition"


class TaskAlreadyFinished(TaskConflict):
    """The task has already finished."""

    code = "task_already_finished"


class TaskNotBlocked(TaskConflict):
    """The task is not waiting for inputs."""

    code = "task_not_blocked"


class PredecessorNotRedeployable(TaskConflict):
    """Only a failed or cancelled task can be redeployed."""

    code = "predecessor_not_redeployable"


class RedeployAlreadyActive(TaskConflict):
    """Another redeploy of this task is already active."""

    code = "redeploy_already_active"


class ShuttingDown(DomainError):
    """This server is shutting down; retry on another one."""

    code = "shutting_down"


class Overloaded(DomainError):
    """This server already runs as many deployments as it can; retry after Retry-After seconds."""

    code = "overloaded"
    #: What a client waits before trying again (the Retry-After header); runs end and free room.
    retry_after_s = 1


class InvalidRequest(DomainError):
    """The request is not valid."""

    code = "invalid_request"

    def __init__(self, message: str | None = None, *, fields: dict | None = None):
        super().__init__(message)
        self.fields = fields


class UnknownTemplate(DomainError):
    """No template of that name in the catalog."""

    code = "template_not_found"


class IdempotencyKeyReused(DomainError):
    """This Idempotency-Key was already used for a different request."""

    code = "idempotency_key_reused"


class IdempotencyKeyInFlight(DomainError):
    """A request with this Idempotency-Key is still being processed; retry shortly."""

    code = "idempotency_key_in_flight"


class OperatorOnly(DomainError):
    """Only an operator may see this."""

    code = "operator_only"


class LeaseLost(EngineError):
    """This process no longer holds the task's lease; the write was fenced off.

    An engine error but not a DomainError, so no surface can answer it: only a run's handle
    raises it (a fenced write), in the run's own greenlet, which ends the run (engine/process.py).
    No request holds a handle; one that ever met it would fail like any bug (500), never as a
    client's conflict.
    """


class DatabaseUnavailable(DomainError):
    """The database is unavailable right now; retry shortly."""

    code = "database_unavailable"


class NotRollbackable(TaskConflict):
    """Only a completed deployment of an app can be rolled back to."""

    code = "task_not_rollbackable"


class AppDeployAlreadyActive(TaskConflict):
    """A deployment of this app is already active; wait for it or cancel it first."""

    code = "app_deploy_active"


class AppNotFound(DomainError):
    """No such app in this project."""

    code = "app_not_found"
