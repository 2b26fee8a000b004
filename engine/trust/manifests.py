"""The manifest rules every source shares: which kinds a task may create, what an input is, and
where a sensitive input's value may go. Templates, the AI runner's answer protocol and the pages
read them from here, so the rules cannot drift apart.

A task deploys into its project's namespace and nowhere else, so only namespaced kinds are
accepted, by allow-list (a deny-list of cluster-scoped kinds misses every CRD). The Kubernetes
adapter adds the cluster's own word: a kind its discovery reports as cluster-scoped, or does not
know, is refused there for every source.
"""

import re
from collections.abc import Callable

#: Namespaced kinds a task may create (core workloads, their config and their network).
NAMESPACED_KINDS = frozenset(
    {
        "ConfigMap",
        "Secret",
        "Service",
        "ServiceAccount",
        "PersistentVolumeClaim",
        "Pod",
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "ReplicaSet",
        "Job",
        "CronJob",
        "Ingress",
        "NetworkPolicy",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "TemplateInstance",
    }
)
#: Input types a model may declare (anything else is read as "string").
INPUT_TYPES = frozenset({"string", "text", "integer", "number", "boolean", "password", "secret"})
#: Types whose values are numbers or booleans (a form shows a number field or a checkbox).
NUMERIC_INPUT_TYPES = frozenset({"integer", "number"})
BOOLEAN_INPUT_TYPES = frozenset({"boolean"})
#: The subset a template may declare (each has a coercion in templates.InputDecl).
TEMPLATE_INPUT_TYPES = frozenset({"string", "integer", "boolean", "password", "secret"})
#: An input's name, as declared and as referred to by a placeholder.
INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
#: A template input's name: also a valid `${inputs.NAME}` placeholder (no '.' or '-').
TEMPLATE_INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Where a model writes an input's value in its manifests.
ANSWER_PLACEHOLDER = re.compile(r"\$\{input:([A-Za-z_][A-Za-z0-9_.-]{0,127})\}")
#: Where a template writes a value (`${instance}`, `${namespace}`, `${inputs.NAME}`).
TEMPLATE_PLACEHOLDER = re.compile(r"\$\{\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\}")
#: The only fields a sensitive value may be written into: a Secret's data.
SECRET_DATA_FIELDS = ("data", "stringData")


def input_widget(input_type: str | None, *, sensitive: bool) -> str:
    """How a form asks for an input of this type: password, checkbox, number or text."""
    if sensitive:
        return "password"
    if input_type in BOOLEAN_INPUT_TYPES:
        return "checkbox"
    return "number" if input_type in NUMERIC_INPUT_TYPES else "text"


def kind_refusal(kind: str) -> str | None:
    """Why a task may not create `kind`, or None."""
    if kind in NAMESPACED_KINDS:
        return None
    return f"{kind} is not a namespaced kind a task may create"


def references(obj, pattern: re.Pattern) -> set[str]:
    """The names `obj` refers to through `pattern` (placeholders), anywhere inside it."""
    if isinstance(obj, str):
        return set(pattern.findall(obj))
    if isinstance(obj, dict):
        return set().union(*(references(v, pattern) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(references(v, pattern) for v in obj)) if obj else set()
    return set()


def map_strings(obj, replace: Callable[[str], object]):
    """A copy of `obj` (parsed JSON or YAML) with every string value in it replaced by
    `replace(string)`; keys and other values stay as they are."""
    if isinstance(obj, str):
        return replace(obj)
    if isinstance(obj, dict):
        return {k: map_strings(v, replace) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_strings(v, replace) for v in obj]
    return obj


def sensitive_outside_secret_data(doc: dict, sensitive: set[str], pattern: re.Pattern) -> set[str]:
    """Sensitive names `doc` refers to anywhere but a Secret's data/stringData values."""
    if doc.get("kind") == "Secret":
        outside = {k: v for k, v in doc.items() if k not in SECRET_DATA_FIELDS}
        keys = [
            k
            for field in SECRET_DATA_FIELDS
            if isinstance(doc.get(field), dict)
            for k in doc[field]
        ]
        return (references(outside, pattern) | references(keys, pattern)) & sensitive
    return references(doc, pattern) & sensitive
