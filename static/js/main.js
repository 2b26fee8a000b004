// main.js: the page script's entry (loaded by templates/base.html as a module, after htmx). It
// imports every module (each binds its own document listeners when imported), says what runs
// after every batch of fragments, and starts the page. Where things live:
//   dom.js        byId, the CSRF token, the flash box
//   session.js    signed out or offline; the workspace picker
//   fragments.js  the one fragment applier (versions, removals, slots)
//   actions.js    answers to action requests; the optimistic "Cancelling…"
//   stream.js     the project stream (SSE): dock and canvas live
//   timeline.js   the timeline pane: its websocket, the model's text, the log follow, closing it
//   dock.js       chips: counts, filters
//   canvas.js     the in-progress boxes: laid out to the width, dragged
//   clock.js      durations, ages, "step k of n", ticking
//   dialogs.js    the confirm dialog; cluster access (the kubeconfig kept in this tab)
//   focus.js      where focus goes and how a live update hands it over
//   keyboard.js   focus into opened panes, Tab trap, Escape, arrow keys on chips
import "./actions.js";
import "./keyboard.js";
import { layoutPlaceholders, watchCanvas } from "./canvas.js";
import { tick } from "./clock.js";
import { showClusterTarget } from "./dialogs.js";
import { refreshDock } from "./dock.js";
import { restoreFocus } from "./focus.js";
import { onFragmentsApplied } from "./fragments.js";
import { connectProjectStream } from "./stream.js";
import { followLog, syncTimelineSocket } from "./timeline.js";

onFragmentsApplied(
  syncTimelineSocket, restoreFocus, refreshDock, layoutPlaceholders, followLog, tick
);

function start() {
  showClusterTarget();
  connectProjectStream();
  syncTimelineSocket();
  refreshDock();
  layoutPlaceholders();
  watchCanvas();
  tick();
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
