"""Marshmallow schemas of the API's response bodies, for the OpenAPI document only.

Responses are built by engine/readside/dto.py; these describe that shape so the document (and the
contract tests that check every response against it) can tell when the two drift apart.
"""

from marshmallow import Schema, fields

from engine.core.status import Status

STATUSES = [str(s) for s in Status]
Nullable = {"allow_none": True, "required": True}


class Failure(Schema):
    reason = fields.String(**Nullable)
    message = fields.String(**Nullable)


class Task(Schema):
    """The full public view of one task (secret values redacted)."""

    id = fields.UUID(required=True)
    status = fields.String(required=True, metadata={"enum": STATUSES})
    phase = fields.String(**Nullable)
    projectId = fields.String(required=True)
    workspace = fields.String(required=True)
    createdBy = fields.String(required=True)
    runner = fields.String(required=True)
    source = fields.Dict(required=True, metadata={"description": "the source, secrets redacted"})
    sensitiveKeys = fields.List(fields.String(), required=True)
    failure = fields.Nested(Failure, **Nullable)
    cancelRequestedAt = fields.DateTime(**Nullable)
    retriedFromTaskId = fields.UUID(**Nullable)
    rolledBackFromTaskId = fields.UUID(
        **Nullable, metadata={"description": "the completed task this one rolls back to"}
    )
    appKey = fields.String(
        **Nullable,
        metadata={"description": "the app: what its deployments converge on (null: none yet)"},
    )
    resultIdentities = fields.Dict(required=True)
    plannedResources = fields.List(fields.Dict(), required=True)
    appliedResources = fields.List(fields.Dict(), required=True)
    hasAppliedResources = fields.Boolean(required=True)
    cancellation = fields.Dict(**Nullable)
    pendingInputs = fields.List(
        fields.Dict(), **Nullable, metadata={"description": "what a blocked task asks for"}
    )
    canvas = fields.Dict(**Nullable)
    createdAt = fields.DateTime(**Nullable)
    updatedAt = fields.DateTime(**Nullable)
    finishedAt = fields.DateTime(**Nullable)


class WaitedTask(Task):
    """A snapshot after a long-poll: `waitOutcome` says whether the wait ended or timed out."""

    waitOutcome = fields.String(metadata={"enum": ["terminal", "blocked", "timeout"]})


class WaitOutcome(Schema):
    """What wait_for_deployment answers: why the wait ended, and the task then."""

    outcome = fields.String(required=True, metadata={"enum": ["terminal", "blocked", "timeout"]})
    snapshot = fields.Nested(Task, required=True)


class Explanation(Schema):
    """explain_deployment's answer (engine/readside/explain.py)."""

    taskId = fields.UUID(required=True)
    status = fields.String(required=True, metadata={"enum": STATUSES})
    summary = fields.String(required=True)
    steps = fields.List(fields.String(), required=True)
    applied = fields.List(fields.String(), required=True)
    nextSteps = fields.List(fields.String(), required=True)
    recent = fields.List(fields.String(), required=True)
    logTail = fields.String(**Nullable)


class TaskPage(Schema):
    items = fields.List(fields.Nested(Task), required=True)
    nextCursor = fields.String(**Nullable)


class Event(Schema):
    seq = fields.Integer(required=True)
    kind = fields.String(required=True)
    payload = fields.Dict(required=True)
    createdAt = fields.DateTime(**Nullable)


class EventPage(Schema):
    items = fields.List(fields.Nested(Event), required=True)
    nextCursor = fields.String(**Nullable)


class App(Schema):
    """An app: the deployments that converge on the same resources (a template instance, an
    image's or a database's object name)."""

    key = fields.String(required=True)
    projectId = fields.String(required=True)
    kind = fields.String(
        required=True, metadata={"description": "the source kind its deployments share"}
    )
    name = fields.String(required=True)
    status = fields.String(
        required=True, metadata={"enum": STATUSES, "description": "of its newest deployment"}
    )
    active = fields.Boolean(required=True)
    latestTaskId = fields.UUID(required=True)
    updatedAt = fields.DateTime(**Nullable)


class AppResource(Schema):
    kind = fields.String(**Nullable)
    name = fields.String(**Nullable)
    namespace = fields.String(**Nullable)
    endpoint = fields.String(**Nullable)
    taskId = fields.UUID(
        required=True, metadata={"description": "the deployment that last applied it"}
    )
    status = fields.String(
        required=True, metadata={"enum": STATUSES, "description": "how that deployment ended"}
    )


class AppEndpoint(Schema):
    address = fields.String(required=True)
    url = fields.String(
        **Nullable, metadata={"description": "a link to open; null for an in-cluster address"}
    )
    inCluster = fields.Boolean(required=True)


class AppList(Schema):
    items = fields.List(fields.Nested(App), required=True)


class HistoryEntry(Task):
    """A deployment of an app: its snapshot, and whether it can be rolled back to."""

    rollbackable = fields.Boolean(required=True)


class AppHistoryPage(Schema):
    items = fields.List(fields.Nested(HistoryEntry), required=True)
    nextCursor = fields.String(**Nullable)


class AppDetail(App):
    """An app with what it runs now and a page of its deployment history, newest first."""

    resources = fields.List(fields.Nested(AppResource), required=True)
    endpoints = fields.List(fields.Nested(AppEndpoint), required=True)
    history = fields.Nested(AppHistoryPage, required=True)


class TemplateList(Schema):
    items = fields.List(
        fields.Dict(),
        required=True,
        metadata={"description": "templates with their declared inputs"},
    )


class ToolDefinition(Schema):
    name = fields.String(required=True)
    description = fields.String(required=True)
    parameters = fields.Dict(required=True, metadata={"description": "JSON Schema"})


class ToolList(Schema):
    items = fields.List(fields.Nested(ToolDefinition), required=True)


class MissingAccess(Schema):
    verb = fields.String(required=True)
    resource = fields.String(required=True)
    namespace = fields.String(required=True)
    why = fields.String(required=True)


class ClusterAccess(Schema):
    """The cluster's own answer (engine/integrations/kube/access.py)."""

    reachable = fields.Boolean(required=True)
    version = fields.String(**Nullable)
    user = fields.String(**Nullable)
    namespace = fields.String(required=True)
    namespaceExists = fields.Boolean(**Nullable)
    missing = fields.List(fields.Nested(MissingAccess), required=True)
    problems = fields.List(
        fields.String(),
        required=True,
        metadata={"description": "what stands in a deploy's way, in plain words"},
    )


class AccessVerdict(Schema):
    """The access check's verdict: `ok` with the names the kubeconfig gives and the cluster's
    answer (null where the target is the sandbox, which needs no access), or not `ok` with why
    the kubeconfig cannot be used."""

    ok = fields.Boolean(required=True)
    context = fields.String()
    cluster = fields.String()
    server = fields.String(metadata={"description": "the server's host (and port)"})
    namespace = fields.String(metadata={"description": "the context's namespace, if it names one"})
    access = fields.Nested(ClusterAccess, allow_none=True)
    code = fields.String(metadata={"description": "why not, as a stable code"})
    message = fields.String()


class Error(Schema):
    """Every error: a stable `code`, a message, the bad fields, the task when one is concerned."""

    code = fields.String(required=True)
    message = fields.String(required=True)
    fields_ = fields.Dict(data_key="fields", metadata={"description": "field name -> messages"})
    snapshot = fields.Nested(Task)
