// stream.js: the project stream (SSE) that keeps the dock and the canvas live. The open task's
// own live connections (its timeline websocket, the model's text) are in timeline.js.
import { applyFragments } from "./fragments.js";
import { checkSignedIn, isSignedOut } from "./session.js";

export function connectProjectStream() {
  var main = document.querySelector("[data-stream]");
  if (!main) return;
  var source = new EventSource(main.dataset.stream);
  // One message a change (a whole bootstrap is one). Messages that arrive together are applied
  // as one batch: one parse, one pass of counts and clocks, instead of one per message.
  var pending = [];
  source.onmessage = function (evt) {
    if (!pending.length) setTimeout(function () {
      var batch = pending.join("");
      pending = [];
      applyFragments(batch);
    }, 0);
    pending.push(evt.data);
  };
  source.onopen = function () {
    document.body.classList.remove("is-offline");
    document.body.dataset.streamOpen = "1";
  };
  // EventSource reconnects by itself; the server re-bootstraps every new connection.
  source.onerror = function () {
    document.body.classList.add("is-offline");
    checkSignedIn();
    if (isSignedOut) source.close();
  };
  window.addEventListener("pagehide", function () { source.close(); });
}
