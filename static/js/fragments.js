// fragments.js: the one fragment applier, shared by action answers (actions.js), the project
// stream (stream.js) and the timeline websocket (timeline.js). Each top-level element of the
// HTML resets containers (data-reset), removes elements (data-remove), replaces the element
// with its id, or is inserted into its data-slot. Status words and hues are never decided
// here: they arrive rendered from the server. What runs after each batch is set in main.js.
import { byId } from "./dom.js";
import { rememberFocus } from "./focus.js";

var afterApply = [];

// Call each of `steps`, in order, after every applied batch of fragments.
export function onFragmentsApplied(...steps) {
  afterApply = steps;
}

function insertSorted(container, el) {
  var key = el.dataset.sort;
  var desc = container.dataset.sortDir === "desc";
  if (key !== undefined) {
    var children = container.children;
    for (var i = 0; i < children.length; i++) {
      var other = children[i].dataset.sort;
      if (other !== undefined && (desc ? other < key : other > key)) {
        container.insertBefore(el, children[i]);
        return;
      }
    }
  }
  container.appendChild(el);
}

// Fragments of one task carry data-version (its row's updated_at): an action's answer and a
// stream frame may cross, and the older one must never win. Removed ids are remembered with
// the version that removed them, so a late answer cannot bring a finished placeholder back.
var tombstones = new Map();

function version(el) {
  return el && el.dataset.version !== undefined ? Number(el.dataset.version) : null;
}

export function applyFragments(html) {
  var tpl = document.createElement("template");
  tpl.innerHTML = html;
  Array.from(tpl.content.children).forEach(function (el) {
    if (el.hasAttribute("data-reset")) {
      el.dataset.reset.split(" ").forEach(function (id) {
        var c = byId(id);
        if (c) rememberFocus(c);
        if (c) c.replaceChildren();
      });
      tombstones.clear();  // a bootstrap follows: it is the whole truth
      return;
    }
    if (el.hasAttribute("data-remove")) {
      var removedAt = version(el);
      el.dataset.remove.split(" ").forEach(function (id) {
        var c = byId(id);
        if (c && removedAt !== null && version(c) !== null && version(c) > removedAt) return;
        if (c) c.remove();
        tombstones.set(id, removedAt === null ? Infinity : removedAt);
      });
      return;
    }
    var existing = el.id ? byId(el.id) : null;
    var incoming = version(el);
    if (incoming !== null) {
      if (existing && version(existing) !== null && version(existing) > incoming) return;
      if (!existing && tombstones.has(el.id) && tombstones.get(el.id) >= incoming) return;
    }
    if (existing) {
      if (existing.classList.contains("is-dragging")) return;  // the drop will re-render it
      existing.querySelectorAll("details[open]").forEach(function (d, i) {
        var twin = el.querySelectorAll("details")[i];
        if (twin) twin.open = true;
      });
      rememberFocus(existing);
      existing.replaceWith(el);
    } else if (el.dataset.slot && byId(el.dataset.slot)) {
      insertSorted(byId(el.dataset.slot), el);
    } else {
      return;  // shows a task or section this page does not display
    }
    if (window.htmx) window.htmx.process(el);
  });
  afterApply.forEach(function (step) { step(); });
}
