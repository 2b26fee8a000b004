// The page's small plain JavaScript: one fragment applier shared by action responses, the project
// stream (SSE) and the timeline websocket; the optimistic "Cancelling…" bridge; the confirm
// dialog; dismissals (a cookie); placeholder dragging (PATCH /api/v1/tasks/<id>/canvas).
// Status words and hues are never decided here: they arrive rendered from the server.
(function () {
  "use strict";

  var DISMISS_COOKIE = "dock_dismissed";
  var MAX_DISMISSED = 40;

  function byId(id) { return document.getElementById(id); }

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  function flash(message) {
    var box = byId("flash");
    if (!box) return;
    box.textContent = message;
    box.hidden = false;
    clearTimeout(flash.timer);
    flash.timer = setTimeout(function () { box.hidden = true; }, 6000);
  }

  // -- signed out: htmx answers 401; streams and sockets only fail, so they ask /api/v1/whoami
  // to tell "signed out" (401: show the link, stop reconnecting) from "offline" (retry).
  var isSignedOut = false;

  function signedOut() {
    isSignedOut = true;
    document.body.classList.add("is-signed-out");
    var box = byId("signed-out");
    if (!box) return;
    var link = box.querySelector("a");
    if (link) link.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
    box.hidden = false;
  }

  function checkSignedIn() {
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

  // -- dismissals (client-local: seed 000, "dismissals stay client-local in v1") --------------
  function dismissed() {
    var match = document.cookie.match(/(?:^|;\s*)dock_dismissed=([^;]*)/);
    return new Set(match && match[1] ? match[1].split(".") : []);
  }

  function dismiss(taskId) {
    var ids = Array.from(dismissed()).filter(function (id) { return id !== taskId; });
    ids.push(taskId);
    ids = ids.slice(-MAX_DISMISSED);
    document.cookie = DISMISS_COOKIE + "=" + ids.join(".") + "; path=/; max-age=" + (30 * 86400) +
      "; samesite=lax";
    var chip = byId("chip-" + taskId);
    if (chip) chip.remove();
  }

  // -- fragments ------------------------------------------------------------------------------
  function insertSorted(container, el) {
    var key = el.dataset.sort;
    var desc = container.dataset.sortDir === "desc";
    if (key !== undefined) {
      var children = container.children;
      for (var i = 0; i < children.length; i++) {
        var other = children[i].dataset.sort;
        if (other !== undefined && (desc ? other < key : other > key)) {
          container.insertBefore(el, children[i]);
          return;
        }
      }
    }
    container.appendChild(el);
  }

  // Fragments of one task carry data-version (its row's updated_at): an action's answer and a
  // stream frame may cross, and the older one must never win. Removed ids are remembered with
  // the version that removed them, so a late answer cannot bring a finished placeholder back.
  var tombstones = new Map();

  function version(el) {
    return el && el.dataset.version !== undefined ? Number(el.dataset.version) : null;
  }

  // Each top-level element of `html` either resets containers (data-reset), removes elements
  // (data-remove), replaces the element with its id, or is inserted into its data-slot.
  function applyFragments(html) {
    var tpl = document.createElement("template");
    tpl.innerHTML = html;
    var gone = dismissed();
    Array.from(tpl.content.children).forEach(function (el) {
      if (el.hasAttribute("data-reset")) {
        el.dataset.reset.split(" ").forEach(function (id) {
          var c = byId(id);
          if (c) rememberFocus(c);
          if (c) c.replaceChildren();
        });
        tombstones.clear();  // a bootstrap follows: it is the whole truth
        return;
      }
      if (el.hasAttribute("data-remove")) {
        var removedAt = version(el);
        el.dataset.remove.split(" ").forEach(function (id) {
          var c = byId(id);
          if (c && removedAt !== null && version(c) !== null && version(c) > removedAt) return;
          if (c) c.remove();
          tombstones.set(id, removedAt === null ? Infinity : removedAt);
        });
        return;
      }
      if (el.hasAttribute("data-dismissable") && gone.has(el.dataset.taskId)) {
        var stale = el.id && byId(el.id);
        if (stale) stale.remove();
        return;
      }
      var existing = el.id ? byId(el.id) : null;
      var incoming = version(el);
      if (incoming !== null) {
        if (existing && version(existing) !== null && version(existing) > incoming) return;
        if (!existing && tombstones.has(el.id) && tombstones.get(el.id) >= incoming) return;
      }
      if (existing) {
        if (existing.classList.contains("is-dragging")) return;  // the drop will re-render it
        existing.querySelectorAll("details[open]").forEach(function (d, i) {
          var twin = el.querySelectorAll("details")[i];
          if (twin) twin.open = true;
        });
        rememberFocus(existing);
        existing.replaceWith(el);
      } else if (el.dataset.slot && byId(el.dataset.slot)) {
        insertSorted(byId(el.dataset.slot), el);
      } else {
        return;  // shows a task or section this page does not display
      }
      if (window.htmx) htmx.process(el);
    });
    syncTimelineSocket();
    restoreFocus();
    refreshDock();
    followLog();
    tick();
  }

  // A live update that replaces the element holding the keyboard focus hands the focus on to its
  // replacement (a bootstrap re-inserts it a few frames later), so keyboard users keep their place.
  var lostFocus = null;

  function rememberFocus(container) {
    var active = document.activeElement;
    if (!active || active === document.body || !container.contains(active)) return;
    var holder = active.id ? active : (active.parentElement && active.parentElement.closest("[id]"));
    if (!holder) return;
    var sel = active === holder ? null :
      active.dataset.action ? '[data-action="' + active.dataset.action + '"]' :
      active.classList.length ? "." + active.classList[0] : null;
    lostFocus = { holder: holder.id, sel: sel };
  }

  function restoreFocus() {
    if (!lostFocus) return;
    var active = document.activeElement;
    if (active && active !== document.body) { lostFocus = null; return; }
    var holder = byId(lostFocus.holder);
    if (!holder) return;  // not back yet
    var target = lostFocus.sel ? holder.querySelector(lostFocus.sel) : holder;
    lostFocus = null;
    if (target) target.focus({ preventScroll: true });
  }

  // -- optimistic "Cancelling…" between the click and the response ----------------------------
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
    if (elt.dataset.optimisticLabel) bridgeCancel(elt, true);
    elt.addEventListener("htmx:afterRequest", function (done) {
      if (done.target !== elt) return;
      if (done.detail.successful) {
        applyFragments(done.detail.xhr.responseText);
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

  // The readable message of an error answer (error.html's box), if it sent one.
  function serverMessage(xhr) {
    if (!xhr || !xhr.responseText) return null;
    var tpl = document.createElement("template");
    tpl.innerHTML = xhr.responseText;
    var box = tpl.content.querySelector("[data-error-code]");
    return box ? box.textContent.trim() : null;
  }

  // -- confirm dialog (hx-confirm: redeploy over applied resources) ---------------------------
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

  // -- clicks: dismiss, close the timeline ----------------------------------------------------
  document.addEventListener("click", function (evt) {
    var target = evt.target.closest("[data-dismiss], [data-close-timeline]");
    if (!target) return;
    if (target.hasAttribute("data-dismiss")) {
      dismiss(target.dataset.dismiss);
      refreshDock();
    } else {
      closeTimeline();
    }
  });

  function closeTimeline() {
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

  // -- placeholder dragging -------------------------------------------------------------------
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

  // -- the project stream (SSE): dock and canvas ----------------------------------------------
  function connectProjectStream() {
    var main = document.querySelector("[data-stream]");
    if (!main) return;
    var source = new EventSource(main.dataset.stream);
    // Frames that arrive together (a bootstrap is one per task) are applied as one batch: one
    // parse, one pass of counts and clocks, instead of one per frame.
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

  // -- the timeline websocket -----------------------------------------------------------------
  var timeline = { url: null, socket: null, attempts: 0, timer: null };

  function syncTimelineSocket() {
    var pane = document.querySelector("#timeline-pane[data-timeline-ws]");
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

  document.addEventListener("htmx:afterSettle", function (evt) {
    syncTimelineSocket();
    var target = evt.detail && evt.detail.target;
    if (target && (target.id === "timeline-pane" || target.id === "pane")) {
      var opened = byId(target.id);
      if (opened && opened.classList.contains("is-open")) {
        if (opened.id === "timeline-pane") stickToLog = true;
        focusInto(opened);
      } else if (target.id === "pane") {
        returnFocus(null);
      }
    }
    tick();
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

  function followLog() {
    var pane = document.querySelector("#timeline-pane.is-open");
    if (pane && stickToLog && pane.dataset.live) pane.scrollTop = pane.scrollHeight;
  }

  // -- durations, ages, "step k of n" (ticking once a second) ---------------------------------
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

  function tick() {
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

  // -- dock: counts and filters ---------------------------------------------------------------
  function refreshDock() {
    var dock = byId("dock-chips");
    if (!dock) return;
    var counts = { all: 0, active: 0, attention: 0, finished: 0 };
    dock.querySelectorAll(".chip").forEach(function (chip) {
      counts.all++;
      counts[chip.dataset.group] = (counts[chip.dataset.group] || 0) + 1;
    });
    document.querySelectorAll("[data-count]").forEach(function (c) {
      c.textContent = counts[c.dataset.count] || 0;
    });
  }

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest("[data-filter]");
    if (!button || !button.classList.contains("dock-filter")) return;
    var dock = byId("dock-chips");
    dock.dataset.filter = button.dataset.filter;
    document.querySelectorAll(".dock-filter").forEach(function (b) {
      var on = b === button;
      b.classList.toggle("is-active", on);
      b.setAttribute("aria-pressed", on ? "true" : "false");
    });
  });

  // -- keyboard: focus into what opens, trap it there, Escape closes, arrows walk the chips ---
  var FOCUSABLE = 'a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), ' +
    'select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex="-1"])';
  var opener = null;  // what had focus when a pane or the timeline opened

  document.addEventListener("focusin", function (evt) {
    var t = evt.target;
    if (t.closest && !t.closest("#pane, #timeline-pane, #confirm-dialog, #cluster-dialog")) opener = t;
  });

  function visible(el) { return !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length); }

  function focusables(container) {
    return Array.from(container.querySelectorAll(FOCUSABLE)).filter(visible);
  }

  function focusInto(container) {
    var first = container.querySelector("input:not([type=hidden]):not([disabled]), select, textarea");
    if (!first || !visible(first)) first = focusables(container)[0] || container;
    first.focus();
  }

  function returnFocus(taskId) {
    var back = null;
    if (taskId) back = document.querySelector('#chip-' + taskId + ' .chip-open');
    if (!back && opener && document.contains(opener)) back = opener;
    if (back) back.focus();
  }

  function topLayer() {
    var pane = document.querySelector("#pane.is-open");
    if (pane) return pane;
    return document.querySelector("#timeline-pane.is-open");
  }

  function closePane() {
    var close = document.querySelector("#pane.is-open .pane-head button");
    if (close) close.click();
  }

  document.addEventListener("keydown", function (evt) {
    if (document.querySelector("dialog[open]")) return;  // a modal dialog handles its own keys
    var layer = topLayer();
    if (evt.key === "Escape" && layer) {
      evt.preventDefault();
      if (layer.id === "pane") closePane(); else closeTimeline();
      return;
    }
    if (evt.key === "Tab" && layer) {
      var items = focusables(layer);
      if (!items.length) return;
      var first = items[0], last = items[items.length - 1];
      if (!layer.contains(document.activeElement)) {
        evt.preventDefault();
        first.focus();
      } else if (evt.shiftKey && document.activeElement === first) {
        evt.preventDefault();
        last.focus();
      } else if (!evt.shiftKey && document.activeElement === last) {
        evt.preventDefault();
        first.focus();
      }
      return;
    }
    var chipOpen = evt.target.closest && evt.target.closest(".chip-open");
    var keys = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1, Home: "first", End: "last" };
    if (chipOpen && keys[evt.key] !== undefined) {
      var all = Array.from(document.querySelectorAll("#dock-chips .chip-open")).filter(visible);
      var at = all.indexOf(chipOpen);
      var move = keys[evt.key];
      var next = move === "first" ? all[0] : move === "last" ? all[all.length - 1] :
        all[Math.min(all.length - 1, Math.max(0, at + move))];
      if (next) {
        evt.preventDefault();
        next.focus();
        next.scrollIntoView({ block: "nearest" });
      }
    }
  });

  // -- cluster access: a kubeconfig kept in this tab only, sent where a run starts or resumes --
  // sessionStorage (this tab, gone when it closes); never a cookie, never sent elsewhere. The
  // requests that carry it are exactly the ones marked data-cluster-access: deploy, redeploy,
  // input. The server checks it by the API's own rules and never stores it.
  var KUBECONFIG_KEY = "kubeconfig";
  var CLUSTER_KEY = "kubeconfigTarget";

  function storedKubeconfig() {
    try { return sessionStorage.getItem(KUBECONFIG_KEY); } catch (e) { return null; }
  }

  function showClusterTarget() {
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

  function start() {
    showClusterTarget();
    connectProjectStream();
    syncTimelineSocket();
    refreshDock();
    tick();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
