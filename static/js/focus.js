// focus.js: where the keyboard focus goes. What had focus when a pane opened (to return to it),
// focusing into an opened pane, and the hand-over when a live update replaces the element
// holding the focus. Keys themselves are handled in keyboard.js.
import { byId } from "./dom.js";

export var FOCUSABLE = 'a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), ' +
  'select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex="-1"])';
var opener = null;  // what had focus when a pane or the timeline opened

document.addEventListener("focusin", function (evt) {
  var t = evt.target;
  if (t.closest && !t.closest("#pane, #timeline-pane, #confirm-dialog, #cluster-dialog")) opener = t;
});

export function visible(el) { return !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length); }

export function focusables(container) {
  return Array.from(container.querySelectorAll(FOCUSABLE)).filter(visible);
}

export function focusInto(container) {
  var first = container.querySelector("input:not([type=hidden]):not([disabled]), select, textarea");
  if (!first || !visible(first)) first = focusables(container)[0] || container;
  first.focus();
}

export function returnFocus(taskId) {
  var back = null;
  if (taskId) back = document.querySelector('#chip-' + taskId + ' .chip-open');
  if (!back && opener && document.contains(opener)) back = opener;
  if (back) back.focus();
}

// A live update that replaces the element holding the keyboard focus hands the focus on to its
// replacement (a bootstrap re-inserts it a few frames later), so keyboard users keep their place.
var lostFocus = null;

export function rememberFocus(container) {
  var active = document.activeElement;
  if (!active || active === document.body || !container.contains(active)) return;
  var holder = active.id ? active : (active.parentElement && active.parentElement.closest("[id]"));
  if (!holder) return;
  var sel = active === holder ? null :
    active.dataset.action ? '[data-action="' + active.dataset.action + '"]' :
    active.classList.length ? "." + active.classList[0] : null;
  lostFocus = { holder: holder.id, sel: sel };
}

export function restoreFocus() {
  if (!lostFocus) return;
  var active = document.activeElement;
  // A disabled control still holds the focus until the browser's next rendering update drops
  // it (an action's own button, while its request runs): that focus is as good as lost, and
  // no later update would hand it on.
  if (active && active !== document.body && !active.disabled) { lostFocus = null; return; }
  var holder = byId(lostFocus.holder);
  if (!holder) return;  // not back yet
  var target = lostFocus.sel ? holder.querySelector(lostFocus.sel) : holder;
  lostFocus = null;
  // The control itself may be gone (a finished task has no Cancel): stay on its chip, or on
  // the pane that holds it (the timeline), never fall back to the top of the page.
  if (!target || target.disabled) {
    target = holder.querySelector(".chip-open") || holder.closest("[tabindex]");
  }
  if (target) target.focus({ preventScroll: true });
}

// An action's own button is disabled while its request runs, which drops the focus: remember
// where it was before that, so the answer can hand it on.
export function rememberFocusOf(elt) {
  if (elt && elt === document.activeElement) rememberFocus(document.body);
}

// After a deploy or redeploy: focus the new task's chip (the dock's newest).
export function focusChip(taskId) {
  var open = taskId && document.querySelector("#chip-" + taskId + " .chip-open");
  if (!open) return;
  open.focus({ preventScroll: true });
  open.scrollIntoView({ block: "nearest" });
}
