// canvas.js: the in-progress boxes (placeholders) on the project canvas: laid out to the
// canvas's width, and dragged (the drop is saved with PATCH /api/v1/tasks/<id>/canvas).
import { byId, csrfToken, flash } from "./dom.js";

// -- layout -------------------------------------------------------------------------------------
// Boxes the user never dragged flow in rows that fit the canvas's width, around the ones they
// placed; the area grows to hold every box, so none is drawn over the resource cards below it
// or past the right edge, whatever the width and however many deployments run.
var GAP_PX = 12;

function overlaps(a, b) {
  return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

export function layoutPlaceholders() {
  var area = byId("placeholders");
  if (!area) return;
  var width = area.clientWidth;
  var boxes = Array.from(area.querySelectorAll(":scope > .placeholder"));
  var taken = [];
  var bottom = 0;
  boxes.forEach(function (box) {
    if (!box.hasAttribute("data-placed") && !box.classList.contains("is-dragging")) return;
    if (!box.classList.contains("is-dragging")) {
      var left = Math.max(0, Math.min(box.offsetLeft, width - box.offsetWidth));
      box.style.left = left + "px";
    }
    var rect = { x: box.offsetLeft, y: box.offsetTop, w: box.offsetWidth, h: box.offsetHeight };
    taken.push(rect);
    bottom = Math.max(bottom, rect.y + rect.h);
  });
  var x = 0, y = 0, rowHeight = 0;
  boxes.forEach(function (box) {
    if (box.hasAttribute("data-placed") || box.classList.contains("is-dragging")) return;
    var spot = { x: x, y: y, w: box.offsetWidth, h: box.offsetHeight };
    for (;;) {
      if (spot.x > 0 && spot.x + spot.w > width) {
        spot.x = 0;
        spot.y += rowHeight + GAP_PX;
        rowHeight = 0;
      }
      var hit = taken.find(function (r) { return overlaps(spot, r); });
      if (!hit) break;
      spot.x = hit.x + hit.w + GAP_PX;
    }
    box.style.left = spot.x + "px";
    box.style.top = spot.y + "px";
    taken.push(spot);
    x = spot.x + spot.w + GAP_PX;
    y = spot.y;
    rowHeight = Math.max(rowHeight, spot.h);
    bottom = Math.max(bottom, spot.y + spot.h);
  });
  area.style.height = boxes.length ? bottom + "px" : "";
}

// Lay out again when the canvas's width changes (the window, the timeline opening beside it);
// in the next frame, so the new height never feeds back into the observer's own callback.
export function watchCanvas() {
  var canvas = document.querySelector(".canvas");
  if (!canvas || !window.ResizeObserver) return;
  var width = null;
  new ResizeObserver(function (entries) {
    var now = Math.round(entries[0].contentRect.width);
    if (now === width) return;
    width = now;
    requestAnimationFrame(layoutPlaceholders);
  }).observe(canvas);
}

// -- dragging -----------------------------------------------------------------------------------

document.addEventListener("pointerdown", function (evt) {
  var grip = evt.target.closest("[data-drag]");
  if (!grip) return;
  var node = grip.closest(".placeholder");
  var taskId = grip.dataset.drag;
  evt.preventDefault();
  grip.setPointerCapture(evt.pointerId);
  node.classList.add("is-dragging");
  var start = { x: evt.clientX, y: evt.clientY, left: node.offsetLeft, top: node.offsetTop };
  function move(e) {
    node.style.left = Math.max(0, start.left + e.clientX - start.x) + "px";
    node.style.top = Math.max(0, start.top + e.clientY - start.y) + "px";
  }
  function end() {
    grip.removeEventListener("pointermove", move);
    grip.removeEventListener("pointerup", end);
    grip.removeEventListener("pointercancel", end);
    node.classList.remove("is-dragging");
    if (node.offsetLeft === start.left && node.offsetTop === start.top) return;
    node.setAttribute("data-placed", "");
    layoutPlaceholders();
    fetch("/api/v1/tasks/" + taskId + "/canvas", {
      method: "PATCH",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() },
      body: JSON.stringify({ x: node.offsetLeft, y: node.offsetTop })
    }).then(function (r) { if (!r.ok) flash("Could not save the placement (" + r.status + ")."); },
            function () { flash("Could not save the placement (network error)."); });
  }
  grip.addEventListener("pointermove", move);
  grip.addEventListener("pointerup", end);
  grip.addEventListener("pointercancel", end);
});
