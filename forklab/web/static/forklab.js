/* forklab's few lines of JavaScript; every page works without them.
   - websocket reconnects resume after the last event row received (no gap, no repeat), and
     back off: capped exponential delay with full jitter, reset when a socket opens;
   - "copy" buttons put a link or a text block on the clipboard;
   - selects marked data-autosubmit submit their form when changed;
   - the step drawer takes focus when it opens and gives it back when it closes;
   - after a timeline swap, focus stays on the chosen point (or the execution a jump found);
   - a field error that a preflight puts in a folded section opens that section. */
(function () {
  "use strict";

  function lastSeq() {
    var rows = document.querySelectorAll("#live-events tr[data-seq]");
    if (!rows.length) return null;
    return parseInt(rows[rows.length - 1].getAttribute("data-seq"), 10);
  }

  // Before reconnect n+1 since the socket last opened (the ws extension counts n and resets it
  // on open): uniform in [0, min(30 s, 0.5 s * 2^n)]. Viewers dropped together by a busy server
  // come back spread out, fewer and fewer, instead of all at once (issue 9); the same policy
  // as bench/bench_load.py's viewers.
  function reconnectDelay(retryCount) {
    return Math.random() * Math.min(30000, 500 * Math.pow(2, Math.min(retryCount, 16)));
  }

  if (window.htmx) {
    htmx.config.wsReconnectDelay = reconnectDelay;
    var open = htmx.createWebSocket || function (url) { return new WebSocket(url, []); };
    htmx.createWebSocket = function (url) {
      var seq = lastSeq();
      if (seq !== null && !isNaN(seq)) url = url.replace(/([?&]after=)\d+/, "$1" + seq);
      // the status the chip shows now, so a change while disconnected is reported
      var chip = document.getElementById("live-status");
      if (chip) url = url.replace(/([?&]seen=)\w*/, "$1" + chip.getAttribute("data-status"));
      return open(url);
    };
  }

  // A frame the server sent twice (an overlapping reconnect) keeps its first row only; the
  // tail's running sums (server-rendered for the rows the page came with) follow the rows.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var seen = {}, sums = {nodes: 0, calls: 0, tokens: 0, incurred: 0};
    document.querySelectorAll("#live-events tr[data-seq]").forEach(function (row) {
      var seq = row.getAttribute("data-seq");
      if (seen[seq]) { row.remove(); return; }
      seen[seq] = true;
      var type = row.getAttribute("data-type");
      if (type === "node.completed") sums.nodes += 1;
      if (type === "node.reused") {  // a served node: completed, its calls reused (not paid)
        sums.nodes += 1;
        sums.calls += parseInt(row.getAttribute("data-calls") || "0", 10);
        sums.tokens += parseInt(row.getAttribute("data-tokens") || "0", 10);
        return;
      }
      if (type !== "agent.responded") return;
      var label = row.getAttribute("data-label");
      sums.calls += 1;
      sums.tokens += parseInt(row.getAttribute("data-tokens") || "0", 10);
      if (label === "live" || label === "changed") {
        sums.incurred += parseFloat(row.getAttribute("data-cost") || "0");
      }
    });
    var box = document.getElementById("tail-summary");
    if (!box) return;
    box.querySelector('[data-sum="nodes"]').textContent = sums.nodes;
    box.querySelector('[data-sum="calls"]').textContent = sums.calls;
    box.querySelector('[data-sum="tokens"]').textContent = sums.tokens.toLocaleString("en-US");
    box.querySelector('[data-sum="incurred"]').textContent =
      sums.incurred === 0 ? "$0" : "$" + sums.incurred.toFixed(sums.incurred < 0.0001 ? 6 : 4);
  });

  function copy(text, button) {
    function done() {
      var old = button.textContent;
      button.classList.add("copied");
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = old; button.classList.remove("copied"); }, 1400);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
    } else {
      fallback(text);
      done();
    }
  }

  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) { /* the text stays selectable */ }
    area.remove();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy], [data-copy-from]");
    if (!button) return;
    event.preventDefault();
    // data-copy-location: the page's own address as it is now (htmx may have moved it on)
    var text = button.hasAttribute("data-copy-location") ? window.location.href
                                                         : button.getAttribute("data-copy");
    if (text === null) {
      var source = document.getElementById(button.getAttribute("data-copy-from"));
      text = source ? (source.value !== undefined && source.tagName !== "PRE" ? source.value
                                                                           : source.textContent) : "";
    }
    copy(text, button);
  });

  // After the workspace is swapped (a point chosen, a filter, a jump, a page) focus stays on
  // what was chosen: the execution a jump found, else the selected fork point.
  function settleFocus(scrollOnly) {
    var el = document.querySelector(".exec.jumped .steplink") ||
             document.querySelector('.fp.selected a[aria-current="location"]');
    if (!el) return;
    el.scrollIntoView({block: "center"});
    if (!scrollOnly) el.focus({preventScroll: true});
  }
  var workspaceSwap = false;
  document.addEventListener("htmx:afterSettle", function () {
    if (workspaceSwap) { workspaceSwap = false; settleFocus(false); }
  });
  document.addEventListener("DOMContentLoaded", function () { settleFocus(true); });

  // The step drawer: focus moves into it when it opens and back to the link that opened it
  // when it closes (Close or Escape).
  var opener = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var target = event.detail && event.detail.target;
    if (target && target.id === "drawer") opener = event.detail.elt;
    if (target && target.id === "workspace") workspaceSwap = true;
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "drawer") {
      var detail = document.getElementById("step-detail");
      if (detail) detail.focus();
    }
  });
  function closeDrawer() {
    var drawer = document.getElementById("drawer");
    if (!drawer || !drawer.firstElementChild) return false;
    drawer.innerHTML = "";
    if (opener && document.body.contains(opener)) opener.focus();
    return true;
  }
  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-drawer-close]")) {
      event.preventDefault();
      if (!closeDrawer()) history.back();
    }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && closeDrawer()) event.preventDefault();
  });

  // The preflight fills every field's error slot out of band; a slot inside a folded
  // <details> (another node's agent, a single instance, the memory patch) would hold its
  // error out of sight, so the section opens. (A submit's answer opens them server-side.)
  function revealErrors() {
    var slots = document.querySelectorAll("details:not([open]) .field-error");
    for (var i = 0; i < slots.length; i++) {
      if (slots[i].textContent.trim()) slots[i].closest("details").open = true;
    }
  }
  document.addEventListener("htmx:afterSettle", revealErrors);

  document.addEventListener("change", function (event) {
    var select = event.target.closest("[data-autosubmit]");
    if (!select || !select.form) return;
    var name = select.getAttribute("data-autosubmit");
    var submitter = name ? select.form.querySelector('[name="' + name + '"]') : null;
    if (submitter) select.form.requestSubmit(submitter); else select.form.requestSubmit();
  });
})();
