// dock.js: the dock of task chips. Dismissals (client-local, kept in a cookie: seed 000,
// "dismissals stay client-local in v1"), the counts per group, and the filter buttons.
// Walking the chips with the arrow keys is in keyboard.js.
import { byId } from "./dom.js";

var DISMISS_COOKIE = "dock_dismissed";
var MAX_DISMISSED = 40;

export function dismissed() {
  var match = document.cookie.match(/(?:^|;\s*)dock_dismissed=([^;]*)/);
  return new Set(match && match[1] ? match[1].split(".") : []);
}

function dismiss(taskId) {
  var ids = Array.from(dismissed()).filter(function (id) { return id !== taskId; });
  ids.push(taskId);
  ids = ids.slice(-MAX_DISMISSED);
  document.cookie = DISMISS_COOKIE + "=" + ids.join(".") + "; path=/; max-age=" + (30 * 86400) +
    "; samesite=lax";
  var chip = byId("chip-" + taskId);
  if (chip) chip.remove();
}

document.addEventListener("click", function (evt) {
  var target = evt.target.closest("[data-dismiss]");
  if (!target) return;
  dismiss(target.dataset.dismiss);
  refreshDock();
});

export function refreshDock() {
  var dock = byId("dock-chips");
  if (!dock) return;
  var counts = { all: 0, active: 0, attention: 0, finished: 0 };
  dock.querySelectorAll(".chip").forEach(function (chip) {
    counts.all++;
    counts[chip.dataset.group] = (counts[chip.dataset.group] || 0) + 1;
  });
  document.querySelectorAll("[data-count]").forEach(function (c) {
    c.textContent = counts[c.dataset.count] || 0;
  });
}

document.addEventListener("click", function (evt) {
  var button = evt.target.closest("[data-filter]");
  if (!button || !button.classList.contains("dock-filter")) return;
  var dock = byId("dock-chips");
  dock.dataset.filter = button.dataset.filter;
  document.querySelectorAll(".dock-filter").forEach(function (b) {
    var on = b === button;
    b.classList.toggle("is-active", on);
    b.setAttribute("aria-pressed", on ? "true" : "false");
  });
});
