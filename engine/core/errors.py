"""Domain errors. Each subclass's docstring is its message and `code` its stable name;
blueprints/errors.py maps them to HTTP statuses in one place."""


class DomainError(Exception):
    """Something went wrong."""

    code = "error"

    def __init__(self, message: str | None = None, *, snapshot: dict | None = None):
        self.message = message or (self.__doc__ or "").strip()
        self.snapshot = snapshot
        super().__init__(self.message)


class TaskNotFound(DomainError):
    """No such task in this workspace."""

    code = "task_not_found"


class PredecessorNotFound(DomainError):
    """The task to redeploy does not exist or has been purged."""

    code = "predecessor_not_found"


class IllegalTransition(DomainError):
    """That status change is not in the transition table."""

    code = "illegal_transition"


class TaskAlreadyFinished(DomainError):
    """The task has already finished."""

    code = "task_already_finished"


class TaskNotBlocked(DomainError):
    """The task is not waiting for inputs."""

    code = "task_not_blocked"


class PredecessorNotRedeployable(DomainError):
    """Only a failed or cancelled task can be redeployed."""

    code = "predecessor_not_redeployable"


class RedeployAlreadyActive(DomainError):
    """Another redeploy of this task is already active."""

    code = "redeploy_already_active"


class ShuttingDown(DomainError):
    """This server is shutting down; retry on another one."""

    code = "shutting_down"


class InvalidRequest(DomainError):
    """The request is not valid."""

    code = "invalid_request"

    def __init__(self, message: str | None = None, *, fields: dict | None = None):
        super().__init__(message)
        self.fields = fields


class MalformedBody(DomainError):
    """The body is not valid JSON."""

    code = "malformed_json"


class UnsupportedMediaType(DomainError):
    """Send the body as JSON (Content-Type: application/json)."""

    code = "unsupported_media_type"


class UnknownTemplate(DomainError):
    """No template of that name in the catalog."""

    code = "template_not_found"


class UntrustedHost(DomainError):
    """This server does not answer to that Host (TRUSTED_HOSTS)."""

    code = "untrusted_host"


class CrossSiteRequest(DomainError):
    """Cross-site requests may not change anything here."""

    code = "cross_site_request"


class KubeconfigRequired(DomainError):
    """This server deploys to real clusters: send your kubeconfig (base64) in X-Kubeconfig."""

    code = "kubeconfig_required"


class LeaseLost(DomainError):
    """This process no longer holds the task's lease; the write was fenced off."""

    code = "lease_lost"


class IdempotencyKeyReused(DomainError):
    """This Idempotency-Key was already used for a different request."""

    code = "idempotency_key_reused"


class IdempotencyKeyInFlight(DomainError):
    """A request with this Idempotency-Key is still being processed; retry shortly."""

    code = "idempotency_key_in_flight"


class OperatorOnly(DomainError):
    """Only an operator may see this."""

    code = "operator_only"


class NotRollbackable(DomainError):
    """Only a completed deployment of an app can be rolled back to."""

    code = "task_not_rollbackable"


class AppDeployAlreadyActive(DomainError):
    """A deployment of this app is already active; wait for it or cancel it first."""

    code = "app_deploy_active"


class AppNotFound(DomainError):
    """No such app in this project."""

    code = "app_not_found"
