"""The AI runner's answer protocol: what the model must answer (PROTOCOL), how an answer is
read and checked, and how its manifests are filled in and made safe to persist.

The model answers with ONE JSON object, either
  {"plan": {...}, "manifests": [<Kubernetes object>, ...]}            -> apply and verify
  {"needInputs": [{"name", "type", "sensitive", "required", "default"}]} -> park blocked
and refers to an input's value as ${input:NAME}. Sensitive values are never sent to the model:
the runner substitutes them into the manifests in memory, just before apply, and only a Secret's
data/stringData may carry one. The manifest rules themselves live in engine/trust/manifests.py.

An answer is hostile input: longer than MAX_ANSWER_CHARS it is refused unread, JSON deeper than
engine.untrusted's limit is skipped, and YAML is read without aliases (a 345-byte alias bomb
expands to megabytes and blocks the worker, lease renewal included). Every field is checked for
its type before it is read, and an answer holding what PostgreSQL cannot keep (a NUL character,
a lone surrogate, NaN, a YAML date) is refused: its plan and manifests are stored.
"""

import json
import re

from engine.trust import manifests, secrets
from engine.trust.untrusted import json_depth_exceeds, load_json, load_yaml_all, unfit_for_jsonb

#: Longest model answer read (characters); a longer one fails the run as malformed_answer.
MAX_ANSWER_CHARS = 200_000
MAX_MANIFESTS = 50
MAX_DECLARED_INPUTS = 20
#: Keys whose values are name -> value maps a model may put an input's value in.
ARGS_FIELDS = {"args", "arguments", "inputs", "parameters", "values", "env", "environment"}
PLACEHOLDER = manifests.ANSWER_PLACEHOLDER
INPUT_NAME = manifests.INPUT_NAME
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

PROTOCOL = """You are a deployment planner for Kubernetes. Answer with exactly ONE JSON object and
nothing else that looks like JSON. Either:
  {"plan": {"summary": "...", "args": {...}}, "manifests": [<Kubernetes object>, ...]}
to deploy, or, when you cannot plan without values from the user:
  {"needInputs": [{"name": "NAME", "type": "string|password|number|boolean",
                   "sensitive": true|false, "required": true|false, "default": <value or null>,
                   "description": "..."}]}
Rules: namespaced kinds only (no Namespace, ClusterRole, CRD, ...); the namespace is set for you.
Write ${input:NAME} wherever an input's value belongs; put sensitive values only into Secrets.
Never invent passwords or keys: ask for them as sensitive inputs."""


class MalformedAnswer(Exception):
    """The model's answer does not follow the protocol."""


def parse_answer(text: str) -> dict:
    """The protocol object in a model's answer (fenced, bare, or amid prose), validated.

    Returns {"plan": dict, "manifests": [dict]} or {"needInputs": [declaration]}.
    """
    if len(text) > MAX_ANSWER_CHARS:
        raise MalformedAnswer(f"the answer is longer than {MAX_ANSWER_CHARS} characters")
    for candidate in _json_objects(text):
        if "needInputs" not in candidate and "manifests" not in candidate:
            continue
        _refuse_unfit(candidate)
        if "needInputs" in candidate:
            return {"needInputs": _declarations(candidate["needInputs"])}
        return {
            "plan": _plan(candidate.get("plan")),
            "manifests": _manifests(candidate["manifests"]),
        }
    raise MalformedAnswer('no JSON object with "manifests" or "needInputs" in it')


def _json_objects(text: str):
    decoder = json.JSONDecoder()
    blocks = re.findall(r"```(?:json|JSON)?\s*\n(.*?)```", text, re.DOTALL)
    for block in blocks + [text]:
        try:
            value = load_json(block.strip())
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value
    for attempt, match in enumerate(re.finditer(r"\{", text)):
        if attempt >= 200:
            return
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            continue
        if json_depth_exceeds(json.dumps(value)):
            continue
        if isinstance(value, dict):
            yield value


def _plan(plan) -> dict:
    if plan is None:
        return {}
    if isinstance(plan, str):
        return {"summary": plan[:2000]}
    if not isinstance(plan, dict):
        raise MalformedAnswer('"plan" must be an object')
    return plan


def _manifests(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise MalformedAnswer('"manifests" must be a non-empty list')
    docs: list = []
    for item in value:
        if isinstance(item, str):
            try:
                docs.extend(d for d in load_yaml_all(item) if d is not None)
            except ValueError as exc:
                reason = "it uses YAML aliases" if "aliases" in str(exc) else "nor valid YAML"
                raise MalformedAnswer(f"a manifest is neither an object {reason}") from None
        else:
            docs.append(item)
    if len(docs) > MAX_MANIFESTS:
        raise MalformedAnswer(f"more than {MAX_MANIFESTS} manifests")
    _refuse_unfit(docs, ("manifests",))  # YAML has types JSON has not (a date, a binary)
    for doc in docs:
        if not isinstance(doc, dict):
            raise MalformedAnswer("every manifest must be an object")
        kind, api_version = doc.get("kind"), doc.get("apiVersion")
        meta = doc.get("metadata")
        if not (isinstance(kind, str) and kind and isinstance(api_version, str) and api_version):
            raise MalformedAnswer("every manifest needs apiVersion and kind")
        if (
            not isinstance(meta, dict)
            or not isinstance(meta.get("name"), str)
            or not K8S_NAME.match(meta["name"])
        ):
            raise MalformedAnswer(f"{kind} needs a valid metadata.name")
        refusal = manifests.kind_refusal(kind)
        if refusal:
            raise MalformedAnswer(refusal)
    return docs


def _refuse_unfit(value, path: tuple = ()) -> None:
    """MalformedAnswer naming the first thing in `value` that cannot be stored."""
    unfit = unfit_for_jsonb(value, path)
    if unfit:
        path, reason = next(iter(unfit.items()))
        where = ".".join(str(part) for part in path) or "the answer"
        raise MalformedAnswer(f"{where} {reason}")


def _declarations(value) -> list[dict]:
    if not isinstance(value, list) or not value or len(value) > MAX_DECLARED_INPUTS:
        raise MalformedAnswer(f'"needInputs" must list 1 to {MAX_DECLARED_INPUTS} inputs')
    declared, seen = [], set()
    for item in value:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not INPUT_NAME.match(item["name"])
        ):
            raise MalformedAnswer("every requested input needs a valid name")
        if item["name"] not in seen:
            seen.add(item["name"])
            declared.append(sanitize_declaration(item))
    return declared


def sanitize_declaration(item: dict) -> dict:
    """One input declaration as persisted: typed, sensitivity decided, no sensitive default."""
    declared_type = item.get("type")
    known = isinstance(declared_type, str) and declared_type in manifests.INPUT_TYPES
    input_type = declared_type if known else "string"
    sensitive = bool(item.get("sensitive")) or secrets.is_sensitive(
        item["name"], input_type=input_type
    )
    declaration = {
        "name": item["name"],
        "type": input_type,
        "sensitive": sensitive,
        "required": item.get("required", True) is not False,
    }
    default = item.get("default")
    if not sensitive and isinstance(default, (str, int, float, bool)):
        declaration["default"] = default
    if isinstance(item.get("description"), str):
        declaration["description"] = item["description"][:500]
    return declaration


def check_secret_placement(docs: list[dict], sensitive: set[str]) -> None:
    """MalformedAnswer unless every sensitive input is written only into a Secret's data."""
    for doc in docs:
        misplaced = manifests.sensitive_outside_secret_data(
            doc, sensitive, manifests.ANSWER_PLACEHOLDER
        )
        if misplaced:
            raise MalformedAnswer(
                f"{doc.get('kind')} {(doc.get('metadata') or {}).get('name')} uses sensitive "
                f"inputs {sorted(misplaced)} outside a Secret's data or stringData"
            )


def missing_inputs(declared: list[dict], inputs: dict) -> list[str]:
    """Required inputs this run has no value for (values live in memory, so a resumed run needs
    every required one submitted again)."""
    return [d["name"] for d in declared if d.get("required") and d["name"] not in inputs]


def placeholders(obj) -> set[str]:
    """The input names an object refers to as ${input:NAME}."""
    return manifests.references(obj, PLACEHOLDER)


def substitute(obj, inputs: dict):
    """obj with every ${input:NAME} replaced by its value (in memory only, for the cluster)."""
    return manifests.map_strings(
        obj, lambda text: PLACEHOLDER.sub(lambda m: str(inputs[m.group(1)]), text)
    )


def sanitize(obj, sensitive: set[str]):
    """A copy safe to persist: sensitive keys stripped from embedded args maps, sensitive env
    values and Secret data redacted. (Known values are scrubbed by the handle on top.)"""
    if isinstance(obj, list):
        return [
            _sanitize_env_entry(v, sensitive) if _is_env_entry(v) else sanitize(v, sensitive)
            for v in obj
        ]
    if not isinstance(obj, dict):
        return obj
    is_secret = obj.get("kind") == "Secret"
    out = {}
    for key, value in obj.items():
        if is_secret and key in ("data", "stringData") and isinstance(value, dict):
            out[key] = {k: secrets.REDACTED for k in value}
        elif key in ARGS_FIELDS and isinstance(value, dict):
            out[key] = {
                k: sanitize(v, sensitive)
                for k, v in value.items()
                if not secrets.is_sensitive(k, declared=sensitive)
            }
        else:
            out[key] = sanitize(value, sensitive)
    return out


def _is_env_entry(value) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("name"), str)
        and "value" in value
        and set(value) <= {"name", "value"}
    )


def _sanitize_env_entry(entry: dict, sensitive: set[str]) -> dict:
    if secrets.is_sensitive(entry["name"], declared=sensitive):
        return {"name": entry["name"], "value": secrets.REDACTED}
    return dict(entry)
