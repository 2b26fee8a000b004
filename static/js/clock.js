// clock.js: what changes with time alone, ticking once a second: durations, ages, and the
// timeline's "step k of n".
function span(ms) {
  var s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + "s";
  var m = Math.floor(s / 60);
  if (m < 60) return m + "m " + (s % 60) + "s";
  var h = Math.floor(m / 60);
  return h + "h " + (m % 60) + "m";
}

function ago(ms) {
  var s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return "just now";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;  // untouched text costs no layout
}

export function tick() {
  var now = Date.now();
  var pane = document.querySelector("#timeline-pane.is-open");
  var headEnd = pane && pane.querySelector(".tl-head [data-duration][data-end]");
  var ended = headEnd ? Date.parse(headEnd.dataset.end) : null;
  document.querySelectorAll("time[data-duration]").forEach(function (t) {
    var start = Date.parse(t.dataset.start);
    if (isNaN(start)) return;
    var end = t.dataset.end ? Date.parse(t.dataset.end) : (ended && pane.contains(t) ? ended : now);
    setText(t, span(end - start));
  });
  document.querySelectorAll("time[data-age]").forEach(function (t) {
    var at = Date.parse(t.getAttribute("datetime"));
    if (!isNaN(at)) setText(t, ago(now - at));
  });
  if (pane) {
    var progress = pane.querySelector("[data-progress]");
    var steps = pane.querySelectorAll(".steps .step");
    if (progress) {
      var total = Math.max(steps.length, Number(pane.dataset.expectedSteps || 0));
      progress.textContent = steps.length ? "· step " + steps.length + " of " + total : "";
    }
  }
}

setInterval(tick, 1000);
