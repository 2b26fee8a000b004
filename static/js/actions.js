// actions.js: the answers to action requests (htmx elements marked data-fragments: cancel,
// redeploy, deploy, input): applied as fragments, or told as a flash when they fail; and the
// optimistic "Cancelling…" between a cancel click and its answer.
import { byId, flash } from "./dom.js";
import { focusChip, rememberFocusOf } from "./focus.js";
import { applyFragments } from "./fragments.js";
import { signedOut } from "./session.js";

function surfacesOf(taskId) {
  return document.querySelectorAll('[data-task-id="' + taskId + '"]');
}

function bridgeCancel(button, on) {
  var taskId = button.dataset.cancelFor;
  surfacesOf(taskId).forEach(function (surface) {
    if (surface.id === "timeline-pane") return;  // a container: its head is the surface
    surface.classList.toggle("is-cancelling", on);
    surface.querySelectorAll("[data-status-label]").forEach(function (label) {
      if (on) {
        if (label.dataset.before === undefined) label.dataset.before = label.textContent;
        label.textContent = button.dataset.optimisticLabel;
      } else if (label.dataset.before !== undefined) {
        label.textContent = label.dataset.before;
        delete label.dataset.before;
      }
    });
  });
  document.querySelectorAll('[data-cancel-for="' + taskId + '"]').forEach(function (b) {
    b.disabled = on;
    if (on) b.textContent = button.dataset.optimisticLabel;
    else b.textContent = "Cancel";
  });
}

// The answer is handled by a listener on the requesting element itself: a live update may
// replace that element (a chip, say) while its request is in flight, and events of a detached
// element never bubble to the document.
document.addEventListener("htmx:beforeRequest", function (evt) {
  var elt = evt.detail.elt;
  if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-fragments")) return;
  rememberFocusOf(elt);
  var openBefore = openTaskId();
  if (elt.dataset.optimisticLabel) bridgeCancel(elt, true);
  elt.addEventListener("htmx:afterRequest", function (done) {
    if (done.target !== elt) return;
    if (done.detail.successful) {
      applyFragments(done.detail.xhr.responseText);
      // A deploy that went through opens the new task's timeline: focus goes to its chip.
      var opened = openTaskId();
      if (elt.hasAttribute("data-focus-new-chip") && opened !== openBefore) focusChip(opened);
      return;
    }
    if (elt.dataset.optimisticLabel) bridgeCancel(elt, false);
    var status = done.detail.xhr ? done.detail.xhr.status : 0;
    if (status === 401) { signedOut(); return; }
    var said = serverMessage(done.detail.xhr);
    if (said && status !== 403) { flash(said); return; }
    flash(status === 403 ? "This page is out of date: reload it and try again."
                         : "That did not go through (" + (status || "network error") + "). Try again.");
  }, { once: true });
});

function openTaskId() {
  var pane = byId("timeline-pane");
  return (pane && pane.dataset.taskId) || null;
}

// The readable message of an error answer (error.html's box), if it sent one.
function serverMessage(xhr) {
  if (!xhr || !xhr.responseText) return null;
  var tpl = document.createElement("template");
  tpl.innerHTML = xhr.responseText;
  var box = tpl.content.querySelector("[data-error-code]");
  return box ? box.textContent.trim() : null;
}
