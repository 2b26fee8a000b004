"""Fragments: top-level elements with ids that the page's one fragment applier (static/app.js)
replaces in place, inserts into their `data-slot`, or removes. Page writes, the project stream
and the timeline websocket all send these very fragments, so a click, a teammate's action and a
reconnect render through one path."""

from flask import Response, render_template

from blueprints.pages.forms import input_fields
from blueprints.pages.task_views import TaskView, dismissed_ids, view_from_row, view_from_store
from blueprints.request_helpers import runtime
from engine.readside import dto
from engine.readside import timeline as timelines
from engine.readside.store import TaskStore


def render_chip(view: TaskView) -> str:
    return render_template("partials/chip.html", view=view)


def render_placeholder(view: TaskView) -> str:
    if not view.active:
        return removal(f"ph-{view.id}", version=view.version)
    return render_template("partials/placeholder.html", view=view)


def render_cards(store: TaskStore) -> str:
    return render_template("partials/cards.html", cards=store.resource_cards())


def removal(*element_ids: str, version: int | None = None) -> str:
    """Remove elements; a later insert of one of them at or below `version` (none: any) is stale."""
    stamp = f' data-version="{version}"' if version is not None else ""
    return f'<template data-remove="{" ".join(element_ids)}"{stamp}></template>'


def reset(*container_ids: str) -> str:
    return f'<template data-reset="{" ".join(container_ids)}"></template>'


def store_fragments(store: TaskStore, changes) -> list[str]:
    """The fragments that bring a page from before `changes` to the store's state, one task each."""
    parts = []
    if changes.reset:
        parts.append(reset("dock-chips", "placeholders"))
        upserted = [i["id"] for i in reversed(store.chips())]
    else:
        upserted = [i for i in changes.upserted if i in store]
    for task_id in upserted:
        view = view_from_store(store, task_id)
        parts.append(render_chip(view) + render_placeholder(view))
    for task_id in changes.removed:
        parts.append(removal(f"chip-{task_id}", f"ph-{task_id}"))
    if changes.cards or changes.reset:
        parts.append(render_cards(store))
    return parts


def timeline_context(row: dict, events: list[dict] | None = None) -> dict:
    """What the timeline pane renders for one task row (read_task's: with its successor_id)."""
    snapshot = dto.snapshot(row)
    view = view_from_row(row)
    built = timelines.build(
        events
        if events is not None
        else timelines.read_events(runtime().db, row["workspace"], row["id"])
    )
    return {
        "view": view,
        "snap": snapshot,
        "timeline": built,
        "outcome": timelines.outcome(snapshot),
        "inputs": input_fields(snapshot),
    }


def render_timeline_sections(row: dict) -> str:
    """The timeline pane's header, input form and outcome of one task (replaced where shown)."""
    ctx = timeline_context(row, events=[])
    return "".join(
        render_template(f"partials/{name}.html", **ctx)
        for name in ("timeline_head", "timeline_input", "timeline_outcome")
    )


def task_fragments(row: dict) -> str:
    """Everything that shows one task: chip, placeholder, timeline sections."""
    view = view_from_row(row, dismissed_ids(row["project_id"]))
    return render_chip(view) + render_placeholder(view) + render_timeline_sections(row)


def fragments_response(*parts: str) -> Response:
    return Response("".join(parts), mimetype="text/html")
