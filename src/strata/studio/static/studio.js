// Strata Studio: the few things the pages do without a reload.
// Every piece of HTML inserted here was rendered (and escaped) by the server.
"use strict";

(function () {
  function $(sel, root) { return (root || document).querySelector(sel); }

  // forms that change something ask first, as the CLI's report follows
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) ev.preventDefault();
  });

  function load(url, target) {
    var started = performance.now();
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      return r.text().then(function (text) {
        if (!r.ok) throw new Error(text);
        target.innerHTML = text;
        target.setAttribute("data-loaded-ms", String(Math.round(performance.now() - started)));
        document.dispatchEvent(new CustomEvent("studio:loaded", { detail: target.id }));
      });
    }).catch(function (err) {
      target.setAttribute("data-error", String(err && err.message || err).slice(0, 200));
    });
  }

  // the tree panel: the play head, "tree" links on the timeline, folders in the panel
  var tree = $("#tree");
  var slider = $("#playhead");
  var treeUrl = slider ? slider.getAttribute("data-tree") : null;
  function showTree(at, dir) {
    if (!tree) return;
    var base = treeUrl || location.pathname.replace(/\/[^/]*$/, "/tree");
    var url = base + "?fragment=1&at=" + encodeURIComponent(at) + (dir ? "&dir=" + encodeURIComponent(dir) : "");
    load(url, tree);
  }
  function pointAt(index) {
    var opts = document.querySelectorAll("#points option");
    return opts[index] || null;
  }
  if (slider) {
    var timer = null;
    var label = $("#playhead-label");
    var update = function () {
      var opt = pointAt(Number(slider.value));
      if (!opt) return;
      label.textContent = opt.getAttribute("label");
      document.querySelectorAll(".ev.playing").forEach(function (el) { el.classList.remove("playing"); });
      var row = document.querySelector('.ev[data-id="' + opt.getAttribute("data-id") + '"]');
      if (row) row.classList.add("playing");
      clearTimeout(timer);
      timer = setTimeout(function () { showTree(opt.getAttribute("data-id"), ""); }, 20);
    };
    slider.addEventListener("input", update);
    var first = pointAt(Number(slider.value));
    if (first && label) label.textContent = first.getAttribute("label");
  }
  document.addEventListener("click", function (ev) {
    var link = ev.target.closest ? ev.target.closest("a.at, #tree a.dir") : null;
    if (!link || !tree) return;
    ev.preventDefault();
    if (link.classList.contains("at")) {
      showTree(link.getAttribute("data-at"), "");
    } else {
      var panel = $("#tree-panel");
      showTree(panel.getAttribute("data-at"), link.getAttribute("data-tree"));
    }
  });

  // live events: the newest page of the timeline follows the ledger
  var timeline = $("#timeline");
  if (timeline && timeline.getAttribute("data-live") === "1" && window.EventSource) {
    var rows = $("#rows");
    var source = new EventSource(timeline.getAttribute("data-events"));
    source.onmessage = function (msg) {
      var current = $(".rows", rows);
      var last = current ? Number(current.getAttribute("data-last")) : 0;
      if (Number(msg.data) <= last) return;
      // the points picked for a comparison stay picked in the new list
      var picked = Array.prototype.map.call(
        rows.querySelectorAll('input[name="pick"]:checked'), function (box) { return box.value; });
      load(timeline.getAttribute("data-fragment"), rows).then(function () {
        picked.forEach(function (id) {
          var box = rows.querySelector('input[name="pick"][value="' + CSS.escape(id) + '"]');
          if (box) box.checked = true;
        });
      });
    };
  }

  // the compare button: exactly two points
  var compare = $("#compare");
  if (compare) {
    compare.addEventListener("submit", function (ev) {
      var picked = document.querySelectorAll('input[name="pick"]:checked');
      if (picked.length !== 2) {
        ev.preventDefault();
        window.alert("Pick two points to compare (" + picked.length + " picked).");
      }
    });
  }
})();

// the approvals page looks for new requests every second (they are files, not events)
(function () {
  var list = document.getElementById("approvals");
  if (!list) return;
  setInterval(function () {
    if (document.activeElement && document.activeElement.name === "reason") return;
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("approvals");
        if (fresh && fresh.innerHTML !== list.innerHTML) list.innerHTML = fresh.innerHTML;
      })
      .catch(function () { /* the studio stopped or the page is leaving: look again later */ });
  }, 1000);
})();

// a Workshop turn: its text as it streams in, then the recorded conversation
(function () {
  var box = document.getElementById("streaming");
  if (!box || !window.EventSource) return;
  var out = document.getElementById("streamed");
  var source = new EventSource(box.getAttribute("data-stream"));
  source.onmessage = function (msg) { out.textContent = msg.data; };
  source.addEventListener("done", function () { source.close(); location.reload(); });
})();
