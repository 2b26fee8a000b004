// dock.js: the dock of task chips: the counts per group and the filter buttons. Dismissals are
// the server's (per user and project): the dismiss button posts through htmx and the answer
// removes the chip.
// Walking the chips with the arrow keys is in keyboard.js.
import { byId } from "./dom.js";

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
