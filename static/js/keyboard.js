// keyboard.js: focus and keys around the panes. Focus goes into a pane htmx opened (and back
// when it closes), Tab is trapped in the top pane, Escape closes it, and the arrow keys (Home,
// End) walk the dock's chips. Where focus is kept and handed over: focus.js.
import { byId } from "./dom.js";
import { tick } from "./clock.js";
import { focusables, focusInto, returnFocus, visible } from "./focus.js";
import { closeTimeline, followLogAgain, syncTimelineSocket } from "./timeline.js";

document.addEventListener("htmx:afterSettle", function (evt) {
  syncTimelineSocket();
  var target = evt.detail && evt.detail.target;
  if (target && (target.id === "timeline-pane" || target.id === "pane")) {
    var opened = byId(target.id);
    if (opened && opened.classList.contains("is-open")) {
      if (opened.id === "timeline-pane") followLogAgain();
      focusInto(opened);
    } else if (target.id === "pane") {
      returnFocus(null);
    }
  }
  tick();
});

function topLayer() {
  var pane = document.querySelector("#pane.is-open");
  if (pane) return pane;
  return document.querySelector("#timeline-pane.is-open");
}

function closePane() {
  var close = document.querySelector("#pane.is-open .pane-head button");
  if (close) close.click();
}

document.addEventListener("keydown", function (evt) {
  if (document.querySelector("dialog[open]")) return;  // a modal dialog handles its own keys
  var layer = topLayer();
  if (evt.key === "Escape" && layer) {
    evt.preventDefault();
    if (layer.id === "pane") closePane(); else closeTimeline();
    return;
  }
  if (evt.key === "Tab" && layer) {
    var items = focusables(layer);
    if (!items.length) return;
    var first = items[0], last = items[items.length - 1];
    if (!layer.contains(document.activeElement)) {
      evt.preventDefault();
      first.focus();
    } else if (evt.shiftKey && document.activeElement === first) {
      evt.preventDefault();
      last.focus();
    } else if (!evt.shiftKey && document.activeElement === last) {
      evt.preventDefault();
      first.focus();
    }
    return;
  }
  var chipOpen = evt.target.closest && evt.target.closest(".chip-open");
  var keys = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1, Home: "first", End: "last" };
  if (chipOpen && keys[evt.key] !== undefined) {
    var all = Array.from(document.querySelectorAll("#dock-chips .chip-open")).filter(visible);
    var at = all.indexOf(chipOpen);
    var move = keys[evt.key];
    var next = move === "first" ? all[0] : move === "last" ? all[all.length - 1] :
      all[Math.min(all.length - 1, Math.max(0, at + move))];
    if (next) {
      evt.preventDefault();
      next.focus();
      next.scrollIntoView({ block: "nearest" });
    }
  }
});
