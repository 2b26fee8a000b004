"""The chat tools: the same lifecycle actions for assistants, described as JSON Schema tools.

Served over REST by blueprints/api/tool_routes.py and over MCP by blueprints/mcp/ (no routes
here). They call engine/lifecycle/actions.py exactly like the canvas does, so the two never
disagree.
"""

from collections.abc import Callable
from dataclasses import dataclass

from marshmallow import fields, validate

from blueprints import schemas
from blueprints.api.calls import answer_once, create_from, rollback_from
from blueprints.auth.gate import current_identity
from blueprints.request_helpers import kubeconfig_from_header, load, runtime
from engine.errors import InvalidRequest
from engine.lifecycle import actions, idempotency
from engine.readside import dto
from engine.readside.explain import explain
from engine.readside.timeline import read_event_tail, read_events
from engine.trust.untrusted import WholeNumber

#: wait_for_deployment's longest wait: a minute under the read timeouts assistants' HTTP clients
#: use by default (300 s in the MCP SDK and most gateways), so the answer always arrives; a
#: longer deployment answers `timeout` and the assistant calls again.
MAX_TOOL_WAIT_S = 240

#: Retrying a call with the same key within 24 h returns the first call's result.
IdempotencyKey = fields.String(
    validate=validate.Regexp(idempotency.KEY.pattern, error="1 to 255 printable characters")
)


class CreateDeployment(schemas.RequestSchema):
    """Deploy a source (image, database, template, GitHub repository, prompt) into a project."""

    projectId = fields.String(required=True, validate=schemas.PROJECT_ID)
    source = schemas.SourceField(required=True)
    inputs = schemas.InputValues
    sensitiveKeys = schemas.SensitiveKeys
    idempotencyKey = IdempotencyKey


class TaskRef(schemas.RequestSchema):
    """A deployment task by id."""

    taskId = fields.UUID(required=True)


class RedeployDeployment(schemas.RequestSchema):
    """Redeploy a failed or cancelled deployment, optionally with an edited source or inputs."""

    taskId = fields.UUID(required=True)
    projectId = fields.String(validate=schemas.PROJECT_ID)
    source = schemas.SourceField()
    inputs = schemas.InputValues
    sensitiveKeys = schemas.SensitiveKeys
    idempotencyKey = IdempotencyKey


class RollbackDeployment(schemas.RequestSchema):
    """Roll an app back to one of its completed deployments."""

    taskId = fields.UUID(required=True)
    idempotencyKey = IdempotencyKey


class SubmitDeploymentInputs(schemas.RequestSchema):
    """Answer the inputs a blocked deployment asks for; it resumes at once."""

    taskId = fields.UUID(required=True)
    inputs = schemas.SubmitInputs._declared_fields["inputs"]
    sensitiveKeys = schemas.SensitiveKeys
    idempotencyKey = IdempotencyKey


class WaitForDeployment(schemas.RequestSchema):
    """Wait until a deployment finishes or blocks on inputs, at most timeoutSeconds."""

    taskId = fields.UUID(required=True)
    timeoutSeconds = WholeNumber(
        validate=validate.Range(1, MAX_TOOL_WAIT_S), load_default=60, strict=True
    )


#: MCP tool annotations (hints an assistant shows or acts on). Unset hints default to the
#: cautious side (destructive, open world), so every tool states each one.
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}
#: Starts work on a cluster; adds resources, never deletes any.
STARTS_WORK = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[schemas.RequestSchema]
    call: Callable[[dict], tuple[dict, int]]
    #: MCP annotations: readOnlyHint, destructiveHint, idempotentHint, openWorldHint.
    annotations: dict
    #: The response schema (blueprints/api/openapi_responses.py) its result matches.
    output: str = "Task"
    #: Its result is a deployment task an assistant can follow (the MCP Tasks extension).
    starts_task: bool = False


def _cancel(args):
    return dto.snapshot(actions.cancel_task(runtime(), current_identity(), args["taskId"])), 200


def _redeploy(args):
    return create_from(args, predecessor_task_id=args["taskId"])


def _rollback(args):
    return rollback_from(args["taskId"])


def _submit(args):
    row = actions.submit_inputs(
        runtime(),
        current_identity(),
        args["taskId"],
        inputs=args["inputs"],
        sensitive_keys=args.get("sensitiveKeys"),
        kubeconfig=kubeconfig_from_header(),
    )
    return dto.snapshot(row), 200


def _explain(args):
    identity = current_identity()
    row = actions.get_task(runtime(), identity, args["taskId"])
    events = read_events(runtime().db, identity.workspace, row["id"])
    tail = read_event_tail(runtime().db, identity.workspace, row["id"], limit=500)
    return explain(dto.snapshot(row), events, tail), 200


def _wait(args):
    row, outcome = actions.wait_for_task(
        runtime(), current_identity(), args["taskId"], args["timeoutSeconds"]
    )
    return {"outcome": outcome, "snapshot": dto.snapshot(row)}, 200


TOOLS = {
    t.name: t
    for t in [
        Tool(
            "create_deployment",
            CreateDeployment.__doc__,
            CreateDeployment,
            create_from,
            {**STARTS_WORK, "openWorldHint": True},
            starts_task=True,
        ),
        Tool(
            "cancel_deployment",
            "Cancel a deployment. Queued or blocked ones stop at once; running "
            "ones stop at their next step. Nothing already applied is deleted.",
            TaskRef,
            _cancel,
            # It ends work in progress; a repeat is answered with the same cancelled task.
            {
                "readOnlyHint": False,
                "destructiveHint": True,
                "idempotentHint": True,
                "openWorldHint": False,
            },
        ),
        Tool(
            "redeploy_deployment",
            RedeployDeployment.__doc__,
            RedeployDeployment,
            _redeploy,
            {**STARTS_WORK, "openWorldHint": True},
            starts_task=True,
        ),
        Tool(
            "rollback_deployment",
            "Roll an app back to one of its completed deployments: a new deployment with that "
            "one's recorded plan (image, settings, template instance), converging on the same "
            "resources. Secret values are never stored: a plan that needs them blocks and asks "
            "for them again (submit_deployment_inputs).",
            RollbackDeployment,
            _rollback,
            {**STARTS_WORK, "openWorldHint": True},
            starts_task=True,
        ),
        Tool(
            "submit_deployment_inputs",
            SubmitDeploymentInputs.__doc__,
            SubmitDeploymentInputs,
            _submit,
            {**STARTS_WORK, "openWorldHint": True},
        ),
        Tool(
            "explain_deployment",
            "Explain a deployment in plain language: what ran, what was "
            "applied, why it ended and what to do next, its last timeline lines and, for a "
            "failure, the end of the runner's log.",
            TaskRef,
            _explain,
            {**READ_ONLY, "idempotentHint": True},
            output="Explanation",
        ),
        Tool(
            "wait_for_deployment",
            "Wait until a deployment is finished (completed, failed, "
            f"cancelled) or blocked on inputs, at most timeoutSeconds (<= {MAX_TOOL_WAIT_S}). "
            "Returns {outcome: terminal|blocked|timeout, snapshot}; on timeout it is still "
            "running: call again.",
            WaitForDeployment,
            _wait,
            {**READ_ONLY, "idempotentHint": True},
            output="WaitOutcome",
        ),
    ]
}


def invoke(tool: Tool, arguments) -> tuple[dict, int, bool]:
    """(result or error body, status, replayed) of one call, honouring its idempotencyKey."""

    def call():
        if not isinstance(arguments, dict):
            raise InvalidRequest("the arguments must be a JSON object")
        return tool.call(load(tool.arguments, arguments))

    key = arguments.get("idempotencyKey") if isinstance(arguments, dict) else None
    if not isinstance(key, str):
        key = None

    def fingerprinted():
        return {k: v for k, v in arguments.items() if k != "idempotencyKey"}

    return answer_once(key, "TOOL", tool.name, fingerprinted, call)
