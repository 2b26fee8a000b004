"""Snapshot and projection DTOs (camelCase JSON). Secrets never reach here: they were stripped
before persist; redaction of sensitive-named keys below is defence in depth."""

import base64
import json
from datetime import datetime
from uuid import UUID

from engine.core.status import ACTIVE, Status
from engine.errors import InvalidRequest
from engine.runners.kinds import KINDS, TEMPLATE_INSTANCE
from engine.trust import secrets
from engine.trust.untrusted import load_json


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _id(value) -> str | None:
    return str(value) if value else None


def _failure(row: dict) -> dict | None:
    if row["status"] != Status.FAILED:
        return None
    return {"reason": row["failure_reason"], "message": row["failure_message"]}


def _redacted(source: dict, sensitive_keys: list[str]) -> dict:
    declared = set(sensitive_keys)

    def walk(obj):
        if isinstance(obj, dict):
            return {
                k: (
                    secrets.REDACTED
                    if secrets.is_sensitive(k, declared=declared)
                    and not isinstance(v, (dict, list))
                    else walk(v)
                )
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    return walk(source)


def snapshot(row: dict) -> dict:
    """The full public view of one task."""
    summary = row["artifact_summary"] or {}
    applied = summary.get("appliedResources") or []
    return {
        "id": str(row["id"]),
        "status": row["status"],
        "phase": row["phase"],
        "projectId": row["project_id"],
        "workspace": row["workspace"],
        "createdBy": row["created_by"],
        "runner": row["runner"],
        "source": _redacted(row["source"], row["sensitive_keys"]),
        "sensitiveKeys": list(row["sensitive_keys"]),
        "failure": _failure(row),
        "cancelRequestedAt": _iso(row["cancel_requested_at"]),
        "retriedFromTaskId": _id(row["retried_from_task_id"]),
        "rolledBackFromTaskId": _id(row.get("rolled_back_from_task_id")),
        "appKey": row.get("app_key"),
        "resultIdentities": summary.get("resultIdentities") or {},
        "plannedResources": summary.get("plannedResources") or [],
        "appliedResources": applied,
        "hasAppliedResources": bool(applied),
        "cancellation": summary.get("cancellation"),
        "pendingInputs": summary.get("pendingInputs") if row["status"] == Status.BLOCKED else None,
        "canvas": row["canvas"],
        "createdAt": _iso(row["created_at"]),
        "updatedAt": _iso(row["updated_at"]),
        "finishedAt": _iso(row["finished_at"]),
    }


def source_summary(kind: str, source: dict) -> str:
    """Which deployment this is, in a few words: image tag, template, engine, repository, prompt."""
    known = KINDS.get(kind)
    return known.summary(source) if known else kind


def projection(row: dict) -> dict:
    """The small view the dock and canvas need (one stream frame each)."""
    summary = row["artifact_summary"] or {}
    source = row["source"] or {}
    return {
        "id": str(row["id"]),
        "projectId": row["project_id"],
        "status": row["status"],
        "phase": row["phase"],
        "sourceKind": row["source_kind"],
        "summary": source_summary(row["source_kind"], source),
        "createdBy": row["created_by"],
        # A template deployment reads as its instance (`webapp-3f2a`) once it has one: four
        # deployments of one template must not all read "webapp".
        "title": source.get("name")
        or (summary.get("resultIdentities") or {}).get(TEMPLATE_INSTANCE)
        or source.get("template")
        or source.get("repo")
        or (source.get("prompt") or "")[:200]
        or row["source_kind"],
        "active": Status(row["status"]) in ACTIVE,
        "cancelRequestedAt": _iso(row["cancel_requested_at"]),
        "retriedFromTaskId": _id(row["retried_from_task_id"]),
        "successorId": _id(row.get("successor_id")),
        "failure": _failure(row),
        "hasAppliedResources": bool(summary.get("appliedResources")),
        "appliedResources": summary.get("appliedResources") or [],
        "canvas": row["canvas"],
        "createdAt": _iso(row["created_at"]),
        # Every write bumps it: lets a surface drop a fragment older than the one it shows.
        "updatedAt": _iso(row["updated_at"]),
        "finishedAt": _iso(row["finished_at"]),
    }


def event(row: dict) -> dict:
    return {
        "seq": row["seq"],
        "kind": row["kind"],
        "payload": row["payload"],
        "createdAt": _iso(row["created_at"]),
    }


def encode_cursor(row: dict) -> str:
    return _cursor(row["created_at"].isoformat(), row["id"])


def projection_cursor(item: dict) -> str:
    """The list cursor after a projection (what encode_cursor writes for its row)."""
    return _cursor(item["createdAt"], item["id"])


def _cursor(created_at: str, task_id) -> str:
    raw = json.dumps([created_at, str(task_id)])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """(created_at, id) from a list cursor; InvalidRequest when it is not one of ours."""
    invalid = InvalidRequest("cursor is not valid", fields={"cursor": ["not a valid cursor"]})
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = load_json(base64.urlsafe_b64decode(padded))
    except ValueError:
        raise invalid from None
    # Exactly the shape encode_cursor writes: anything else is someone else's string.
    if not (
        isinstance(decoded, list)
        and len(decoded) == 2
        and all(isinstance(part, str) for part in decoded)
    ):
        raise invalid
    try:
        created_at = datetime.fromisoformat(decoded[0])
        task_id = UUID(decoded[1])
    except ValueError:
        raise invalid from None
    if created_at.tzinfo is None:
        raise invalid
    return created_at, task_id
