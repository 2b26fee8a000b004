// timeline.js: the timeline pane of one task. Its websocket (events and steps, live), the
// model's streamed text (prompt and GitHub sources: the gateway stream), the log that follows
// the run unless the reader scrolled up, and closing the pane. Opening it is htmx's (the
// focus then: keyboard.js).
import { byId } from "./dom.js";
import { returnFocus } from "./focus.js";
import { applyFragments } from "./fragments.js";
import { checkSignedIn, isSignedOut } from "./session.js";

// -- the timeline websocket ---------------------------------------------------------------------
var timeline = { url: null, socket: null, attempts: 0, timer: null };

// Keep the websocket (and the model's stream) on the pane shown: open, switch or close them;
// and the address and the dock with it (which task is open).
export function syncTimelineSocket() {
  var pane = document.querySelector("#timeline-pane[data-timeline-ws]");
  syncOpenTask(pane ? pane.dataset.taskId : null);
  syncModelStream(pane);
  var url = pane ? pane.dataset.timelineWs : null;
  if (url === timeline.url) return;
  closeTimelineSocket();
  timeline.url = url;
  timeline.attempts = 0;
  if (url) openTimelineSocket(url);
}

function closeTimelineSocket() {
  clearTimeout(timeline.timer);
  if (timeline.socket) {
    var s = timeline.socket;
    timeline.socket = null;
    s.close();
  }
}

function openTimelineSocket(url) {
  var scheme = location.protocol === "https:" ? "wss://" : "ws://";
  var socket = new WebSocket(scheme + location.host + url);
  var finished = false;
  timeline.socket = socket;
  socket.onopen = function () { timeline.attempts = 0; };
  socket.onmessage = function (evt) {
    if (timeline.socket !== socket) return;
    var msg = JSON.parse(evt.data);
    if (msg.t === "reset") {
      var pane = byId("timeline-pane");
      var taskId = pane && pane.dataset.taskId;
      ["tl-steps-", "tl-events-"].forEach(function (prefix) {
        var c = byId(prefix + taskId);
        if (c) c.replaceChildren();
      });
    } else if (msg.t === "frag") {
      applyFragments(msg.html);
    } else if (msg.t === "ready") {
      var live = byId("timeline-pane");  // bootstrapped: from here on, every event as it happens
      if (live) live.dataset.live = "1";
    } else if (msg.t === "gone") {
      finished = true;  // purged: nothing more will come
    }
  };
  socket.onclose = function () {
    var pane = byId("timeline-pane");
    if (pane) delete pane.dataset.live;
    if (timeline.socket !== socket || finished) return;
    timeline.socket = null;
    checkSignedIn();
    if (isSignedOut) return;
    var delay = Math.min(10000, 250 * Math.pow(2, timeline.attempts++));
    timeline.timer = setTimeout(function () {
      if (timeline.url === url) openTimelineSocket(url);
    }, delay);
  };
}

// -- the open task in the address (?task=<id>) and in the dock -------------------------------
// Opening a timeline pushes its address (a link to share: the server opens it from ?task=),
// closing it pushes the project's own; Back and Forward open and close the pane to match.
var arriving = null;  // a task Back or Forward asked for, until its timeline is in

function taskInAddress() {
  return new URL(location.href).searchParams.get("task");
}

function syncOpenTask(taskId) {
  document.querySelectorAll("#dock-chips .chip[aria-current]").forEach(function (chip) {
    if (chip.dataset.taskId !== taskId) chip.removeAttribute("aria-current");
  });
  var chip = taskId && byId("chip-" + taskId);
  if (chip) chip.setAttribute("aria-current", "true");
  if (arriving) {
    if (arriving !== taskId) return;
    arriving = null;
  }
  if (taskId === taskInAddress() || !document.querySelector("main[data-project]")) return;
  var url = new URL(location.href);
  if (taskId) url.searchParams.set("task", taskId);
  else url.searchParams.delete("task");
  history.pushState({ task: taskId }, "", url);
}

window.addEventListener("popstate", function () {
  var wanted = taskInAddress();
  var pane = document.querySelector("#timeline-pane.is-open");
  if (wanted === (pane ? pane.dataset.taskId : null)) return;
  if (!wanted) { arriving = null; closeTimeline(); return; }
  arriving = wanted;
  window.htmx.ajax("GET", "/tasks/" + encodeURIComponent(wanted) + "/timeline",
                   { target: "#timeline-pane", swap: "outerHTML" });
});

// -- the model's streamed text (prompt and GitHub sources): the gateway stream --------------
var model = { url: null, source: null };

function syncModelStream(pane) {
  var url = pane && pane.dataset.gatewayStream ? pane.dataset.gatewayStream : null;
  if (url === model.url) return;
  if (model.source) model.source.close();
  model.url = url;
  model.source = null;
  if (!url) return;
  var source = new EventSource(url);
  model.source = source;
  var turns = {};
  function out() {
    var live = byId("timeline-pane");
    return live && live.dataset.gatewayStream === url ? live.querySelector("[data-model-text]") : null;
  }
  source.addEventListener("turn_started", function (evt) {
    var data = JSON.parse(evt.data);
    var pre = out();
    if (!pre || turns[data.turn]) return;
    turns[data.turn] = true;
    var head = document.createElement("span");
    head.className = "turn";
    head.textContent = "— model turn " + data.turn + " —";
    pre.appendChild(head);
  });
  source.addEventListener("delta", function (evt) {
    var data = JSON.parse(evt.data);
    var pre = out();
    if (!pre) return;
    // The text box follows like the pane: only a reader at its bottom is carried along.
    var atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    pre.appendChild(document.createTextNode(data.text));
    if (atBottom) pre.scrollTop = pre.scrollHeight;
    followLog();
  });
  source.addEventListener("end", function () {
    source.close();  // finished: everything was sent; no reconnect
  });
}

// -- the log follows the run unless the reader scrolled up -----------------------------------
var stickToLog = true;

document.addEventListener("scroll", function (evt) {
  if (evt.target && evt.target.id === "timeline-pane") {
    var pane = evt.target;
    stickToLog = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 40;
  }
}, true);

export function followLog() {
  var pane = document.querySelector("#timeline-pane.is-open");
  if (pane && stickToLog && pane.dataset.live) pane.scrollTop = pane.scrollHeight;
}

// A timeline just opened: follow its log from the start.
export function followLogAgain() {
  stickToLog = true;
}

// -- closing the pane -------------------------------------------------------------------------
export function closeTimeline() {
  arriving = null;
  var pane = byId("timeline-pane");
  var taskId = pane && pane.dataset.taskId;
  if (pane) {
    var empty = document.createElement("aside");
    empty.id = "timeline-pane";
    empty.className = "timeline-pane";
    empty.setAttribute("aria-label", "Timeline");
    pane.replaceWith(empty);
  }
  syncTimelineSocket();
  returnFocus(taskId);
}

document.addEventListener("click", function (evt) {
  if (evt.target.closest("[data-close-timeline]")) closeTimeline();
});
