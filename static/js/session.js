// session.js: who is signed in, as the page sees it. htmx answers 401; streams and sockets only
// fail, so they call checkSignedIn(), which asks /api/v1/whoami to tell "signed out" (401: show
// the sign-in link, stop reconnecting) from "offline" (retry). Also: the workspace picker
// submits itself on change.
import { byId } from "./dom.js";

// True once the page knows it is signed out (streams and sockets stop reconnecting).
export var isSignedOut = false;

export function signedOut() {
  isSignedOut = true;
  document.body.classList.add("is-signed-out");
  var box = byId("signed-out");
  if (!box) return;
  var link = box.querySelector("a");
  if (link) link.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
  box.hidden = false;
}

export function checkSignedIn() {
  if (isSignedOut) return;
  fetch("/api/v1/whoami", { credentials: "same-origin" }).then(function (response) {
    if (response.status === 401) signedOut();
  }).catch(function () { /* offline: the stream's own retry handles it */ });
}

document.addEventListener("htmx:responseError", function (evt) {
  if (evt.detail.xhr && evt.detail.xhr.status === 401) signedOut();
});

document.addEventListener("change", function (evt) {
  var form = evt.target.closest && evt.target.closest("[data-workspace-picker]");
  if (form) form.submit();
});
