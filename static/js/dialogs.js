// dialogs.js: the page's two modal dialogs. The confirm dialog that stands in for hx-confirm
// (redeploy over applied resources), and cluster access: a kubeconfig kept in this tab only
// (sessionStorage: gone when the tab closes; never a cookie, never sent elsewhere), added as
// X-Kubeconfig to exactly the requests marked data-cluster-access (deploy, redeploy, input).
// The server checks it by the API's own rules and never stores it.
import { byId, csrfToken, flash } from "./dom.js";

// -- confirm dialog (hx-confirm) ----------------------------------------------------------------
document.addEventListener("htmx:confirm", function (evt) {
  if (!evt.detail.question) return;
  var dialog = byId("confirm-dialog");
  if (!dialog || typeof dialog.showModal !== "function") return;  // falls back to confirm()
  evt.preventDefault();
  byId("confirm-message").textContent = evt.detail.question;
  dialog.returnValue = "";
  dialog.addEventListener("close", function onClose() {
    dialog.removeEventListener("close", onClose);
    if (dialog.returnValue === "ok") evt.detail.issueRequest(true);
  });
  dialog.showModal();
});

// -- cluster access ---------------------------------------------------------------------------
var KUBECONFIG_KEY = "kubeconfig";
var CLUSTER_KEY = "kubeconfigTarget";

function storedKubeconfig() {
  try { return sessionStorage.getItem(KUBECONFIG_KEY); } catch (e) { return null; }
}

export function showClusterTarget() {
  var target = null;
  try { target = JSON.parse(sessionStorage.getItem(CLUSTER_KEY) || "null"); } catch (e) { target = null; }
  var words = target && storedKubeconfig()
    ? target.context + " on " + (target.cluster || target.server) : null;
  document.querySelectorAll("[data-cluster-label]").forEach(function (label) {
    label.textContent = words || "not set";
  });
  var current = document.querySelector("[data-cluster-current]");
  if (current) {
    current.hidden = !words;
    current.textContent = words ? "In use: context " + target.context + ", cluster " +
      target.cluster + (target.server ? " (" + target.server + ")" : "") : "";
  }
}

function toBase64(text) {
  var bytes = new TextEncoder().encode(text);
  var binary = "";
  bytes.forEach(function (b) { binary += String.fromCharCode(b); });
  return btoa(binary);
}

function clusterError(message) {
  var box = byId("cluster-error");
  if (!box) return;
  box.textContent = message || "";
  box.hidden = !message;
}

function openClusterDialog() {
  var dialog = byId("cluster-dialog");
  if (!dialog) return false;
  clusterError("");
  showClusterTarget();
  if (!dialog.open) dialog.showModal();
  byId("cluster-kubeconfig").focus();
  return true;
}

function checkAndUseKubeconfig() {
  var text = byId("cluster-kubeconfig").value.trim();
  clusterError("");
  if (!text) { clusterError("Paste or upload a kubeconfig first."); return; }
  var encoded = toBase64(text);
  var project = document.querySelector("main[data-project]");
  showAccess(null);
  fetch("/cluster-access/check", {
    method: "POST",
    headers: { "X-CSRF-Token": csrfToken(), "X-Kubeconfig": encoded,
               "Content-Type": "application/json" },
    body: JSON.stringify({ projectId: project ? project.dataset.project : null })
  }).then(function (r) {
    return r.json().then(function (body) { return { ok: r.ok, body: body }; },
                        function () { return { ok: false, body: {} }; });
  }).then(function (answer) {
    if (!answer.ok || !answer.body.ok) {
      clusterError(answer.body.message || "This kubeconfig cannot be used.");
      return;
    }
    // The cluster's own answer: unreachable or refused keeps nothing; missing permissions
    // are listed (the kubeconfig is kept: what is missing may not matter to this deploy).
    var access = answer.body.access;
    var problems = (access && access.problems) || [];
    if (access && !access.reachable) { clusterError(problems.join(" ")); return; }
    try {
      sessionStorage.setItem(KUBECONFIG_KEY, encoded);
      sessionStorage.setItem(CLUSTER_KEY, JSON.stringify(answer.body));
    } catch (e) {
      clusterError("This browser does not let the page keep it (storage is off).");
      return;
    }
    byId("cluster-kubeconfig").value = "";
    showClusterTarget();
    if (problems.length) { showAccess(problems); return; }
    byId("cluster-dialog").close("ok");
    flash("Cluster access set: " + answer.body.context);
  }, function () { clusterError("Could not reach the server. Try again."); });
}

// What the access check found missing, listed in the dialog (none: the list is hidden).
function showAccess(problems) {
  var list = byId("cluster-access");
  if (!list) return;
  list.textContent = "";
  (problems || []).forEach(function (text) {
    var item = document.createElement("li");
    item.textContent = text;
    list.appendChild(item);
  });
  list.hidden = !(problems && problems.length);
}

function forgetKubeconfig() {
  try {
    sessionStorage.removeItem(KUBECONFIG_KEY);
    sessionStorage.removeItem(CLUSTER_KEY);
  } catch (e) { /* nothing kept */ }
  var field = byId("cluster-kubeconfig");
  if (field) field.value = "";
  showClusterTarget();
}

document.addEventListener("click", function (evt) {
  if (evt.target.closest("[data-cluster-open]")) openClusterDialog();
  else if (evt.target.closest("[data-cluster-save]")) checkAndUseKubeconfig();
  else if (evt.target.closest("[data-cluster-forget]")) forgetKubeconfig();
});

document.addEventListener("change", function (evt) {
  if (evt.target.id !== "cluster-file" || !evt.target.files.length) return;
  evt.target.files[0].text().then(function (text) {
    byId("cluster-kubeconfig").value = text;
    evt.target.value = "";
  });
});

document.addEventListener("htmx:configRequest", function (evt) {
  var elt = evt.detail.elt;
  if (evt.detail.verb !== "post" || !elt || !elt.hasAttribute("data-cluster-access")) return;
  var kubeconfig = storedKubeconfig();
  if (kubeconfig) {
    evt.detail.headers["X-Kubeconfig"] = kubeconfig;
  } else if (document.querySelector("[data-cluster-required]")) {
    evt.preventDefault();  // a real cluster needs it: ask first instead of a request that fails
    openClusterDialog();
    clusterError("Set cluster access first, then deploy again.");
  }
});
