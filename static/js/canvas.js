// canvas.js: dragging a placeholder on the project canvas; the drop is saved with
// PATCH /api/v1/tasks/<id>/canvas.
import { csrfToken, flash } from "./dom.js";

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
