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

// What the user pasted or uploaded, as the X-Kubeconfig header (base64): the file as it is
// (YAML or JSON), or a kubeconfig someone already base64-encoded, taken as it stands.
function encodeKubeconfig(text) {
  var blob = text.replace(/\s+/g, "");
  if (/^[A-Za-z0-9+/]+={0,2}$/.test(blob) && blob.length % 4 === 0) {
    try {
      var decoded = atob(blob);
      if (/(clusters|contexts|users)"?\s*:/.test(decoded)) return blob;
    } catch (e) { /* not base64 after all: the text itself */ }
  }
  return toBase64(text);
}

// The server's refusal in the dialog's words: the API's header name means nothing here.
function refusalWords(message) {
  if (!message) return "This kubeconfig cannot be used.";
  if (/^X-Kubeconfig must be/.test(message)) {
    return "This is not a kubeconfig. Paste the whole file (YAML that lists clusters, " +
      "contexts and users, as in ~/.kube/config) or upload it.";
  }
  var why = message.replace(/^X-Kubeconfig: /, "");
  return "This kubeconfig cannot be used: " + why.charAt(0).toLowerCase() + why.slice(1) +
    (/[.)]$/.test(why) ? "" : ".");
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
  showAnswer(storedAnswer());
  if (!dialog.open) dialog.showModal();
  byId("cluster-kubeconfig").focus();
  return true;
}

function storedAnswer() {
  if (!storedKubeconfig()) return null;
  try { return JSON.parse(sessionStorage.getItem(CLUSTER_KEY) || "null"); } catch (e) { return null; }
}

function checkAndUseKubeconfig() {
  var text = byId("cluster-kubeconfig").value.trim();
  clusterError("");
  if (!text) { clusterError("Paste or upload a kubeconfig first."); return; }
  var encoded = encodeKubeconfig(text);
  var project = document.querySelector("main[data-project]");
  showAnswer(null);
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
      clusterError(refusalWords(answer.body.message));
      return;
    }
    // The cluster's whole answer is shown before any deploy. Unreachable or refused keeps
    // nothing; missing permissions are listed and the kubeconfig is kept (what is missing may
    // not matter to this deploy).
    var access = answer.body.access;
    showAnswer(answer.body);
    if (access && !access.reachable) {
      clusterError("Nothing was kept: the cluster did not accept this kubeconfig (see below).");
      return;
    }
    try {
      sessionStorage.setItem(KUBECONFIG_KEY, encoded);
      sessionStorage.setItem(CLUSTER_KEY, JSON.stringify(answer.body));
    } catch (e) {
      clusterError("This browser does not let the page keep it (storage is off).");
      return;
    }
    byId("cluster-kubeconfig").value = "";
    showClusterTarget();
    flash("Cluster access set: " + answer.body.context);
    var done = document.querySelector("[data-cluster-close]");
    if (done) done.focus();
  }, function () { clusterError("Could not reach the server. Try again."); });
}

// The access check's answer in the dialog: which cluster, whether it answered (and its
// version), who the credential is, the namespace, and what is missing (or that nothing is).
function showAnswer(body) {
  var box = byId("cluster-answer");
  if (!box) return;
  box.hidden = !body;
  if (!body) return;
  var access = body.access;
  function put(key, text, state) {
    var dd = box.querySelector('[data-answer="' + key + '"]');
    if (key !== "missing") dd.textContent = text;
    if (state) dd.dataset.state = state; else delete dd.dataset.state;
  }
  put("target", "context " + body.context + ", cluster " + body.cluster +
      (body.server ? " (" + body.server + ")" : ""));
  var namespace = (access && access.namespace) || body.namespace || "default";
  if (!access) {
    put("reachable", "Not asked: this server deploys to its sandbox, which needs no access.");
    put("user", "—");
    put("namespace", namespace);
  } else {
    put("reachable", access.reachable
      ? "Yes" + (access.version ? ", Kubernetes " + access.version : "")
      : "No", access.reachable ? "good" : "bad");
    put("user", access.user || (access.reachable ? "not told by the cluster" : "—"));
    put("namespace", namespace + (access.namespaceExists === false ? " (does not exist yet)" : ""),
        access.namespaceExists === false ? "bad" : null);
  }
  var problems = (access && access.problems) || [];
  var list = byId("cluster-access");
  list.textContent = "";
  if (!problems.length) {
    var none = document.createElement("li");
    none.textContent = access ? "Nothing: deploys to this namespace can go ahead." : "Nothing checked.";
    list.appendChild(none);
  }
  problems.forEach(function (text) {
    var item = document.createElement("li");
    item.textContent = text;
    list.appendChild(item);
  });
  put("missing", "", problems.length ? "bad" : (access ? "good" : null));
}

function forgetKubeconfig() {
  try {
    sessionStorage.removeItem(KUBECONFIG_KEY);
    sessionStorage.removeItem(CLUSTER_KEY);
  } catch (e) { /* nothing kept */ }
  var field = byId("cluster-kubeconfig");
  if (field) field.value = "";
  showClusterTarget();
  showAnswer(null);
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
