// ztq console: small progressive enhancements. Every page works without this file.
// - live refresh: <main data-live="N"> reloads its content every N seconds while the tab is
//   visible and the "Live refresh" switch is on, never while the reader types, selects or
//   has a field in focus (the bar above the page says "updated … ago" or why it waits);
//   rows that moved or came new are marked, not silently reordered;
// - pending worker commands ([data-pending] in a .wstate with data-state-url): the worker's
//   state is polled each second until it confirmed, then the page is drawn again;
// - task ids ([data-copy]) get a copy button; the full id is selectable text without it;
// - after a filter is submitted, focus lands on the results (#results, else the list);
// - confirmations: buttons with data-confirm ask first;
// - "select all" checkboxes; bulk progress forms (data-autosubmit) continue by themselves;
// - <time> elements show the browser's local time;
// - on a phone, the current section is scrolled into view in the navigation's row.
(function () {
  "use strict";

  var FOCUS_KEY = "ztq-focus-results";

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) { return; }
      el.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) +
        " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    });
  }

  // -- copy buttons ---------------------------------------------------------------------
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    area.remove();
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copyButtons(root) {
    var body = document.body;
    var label = body.getAttribute("data-t-copy") || "Copy";
    root.querySelectorAll("[data-copy]").forEach(function (el) {
      var next = el.nextElementSibling;
      if (next && next.classList.contains("copy")) { return; }
      var id = el.getAttribute("data-copy");
      var b = document.createElement("button");
      b.type = "button";
      b.className = "copy";
      b.textContent = label;
      b.setAttribute("aria-label", label + " " + id);
      b.setAttribute("data-copy-text", id);
      el.insertAdjacentElement("afterend", b);
    });
  }

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest ? ev.target.closest("button.copy[data-copy-text]") : null;
    if (!b) { return; }
    ev.preventDefault();
    copyText(b.getAttribute("data-copy-text")).then(function () {
      var label = b.textContent;
      b.textContent = document.body.getAttribute("data-t-copied") || "Copied";
      b.classList.add("done");
      window.setTimeout(function () { b.textContent = label; b.classList.remove("done"); }, 1500);
    }, function () { /* the id stays selectable text */ });
  });

  // -- live refresh -----------------------------------------------------------------------
  // a <select> showing another choice than the page was served with (with no option marked
  // selected, the first one is the default of a single-choice list)
  function selectChanged(sel) {
    var opts = Array.prototype.slice.call(sel.options);
    if (sel.multiple) {
      return opts.some(function (o) { return o.selected !== o.defaultSelected; });
    }
    var dflt = 0;
    opts.forEach(function (o, i) { if (o.defaultSelected) { dflt = i; } });
    return opts.length > 0 && sel.selectedIndex !== dflt;
  }

  // what each <details> was when drawn, so that one the reader opened (or closed) is seen
  function markDetails(root) {
    root.querySelectorAll("details").forEach(function (d) {
      d.setAttribute("data-drawn-open", d.open ? "1" : "0");
    });
  }

  // the reader is at work: a field in focus, text typed and not submitted, a box ticked, a
  // choice changed, a traceback opened, focus on something of the page, text selected; a
  // refresh now would take it away
  function busy(main) {
    if (main.querySelector("input[type=checkbox]:checked:not(#live-toggle)")) { return true; }
    var active = document.activeElement;
    if (active && active !== document.body && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName) &&
        active.id !== "live-toggle") { return true; }
    if (active && active !== main && main.contains(active)) { return true; }
    if (Array.prototype.some.call(document.querySelectorAll("select"), selectChanged)) { return true; }
    var opened = Array.prototype.some.call(main.querySelectorAll("details"), function (d) {
      return d.open !== (d.getAttribute("data-drawn-open") === "1");
    });
    if (opened) { return true; }
    var typed = Array.prototype.some.call(
      document.querySelectorAll("input:not([type=hidden]):not([type=checkbox]):not([type=radio]), textarea"),
      function (el) { return el.value !== el.defaultValue; });
    if (typed) { return true; }
    var sel = window.getSelection ? window.getSelection() : null;
    return !!(sel && sel.toString() && main.contains(sel.anchorNode));
  }

  function rowKey(tr) {
    if (tr.getAttribute("data-key")) { return tr.getAttribute("data-key"); }
    var a = tr.querySelector("a[href]");
    return a ? a.getAttribute("href") : tr.textContent.trim().slice(0, 80);
  }

  function rowKeys(main) {
    return Array.prototype.map.call(main.querySelectorAll("table tbody tr"), rowKey);
  }

  // rows that came new, or changed place among the rows that stayed, get a mark (a bar
  // at their left edge): a row pushed down by a new one above it has not moved
  function markRows(main, before) {
    if (!before.length) { return 0; }
    var rows = Array.prototype.slice.call(main.querySelectorAll("table tbody tr"));
    var now = rows.map(rowKey);
    var was = {}, here = {};
    before.forEach(function (k) { was[k] = true; });
    now.forEach(function (k) { here[k] = true; });
    var oldRank = {};
    before.filter(function (k) { return here[k]; }).forEach(function (k, i) {
      if (!(k in oldRank)) { oldRank[k] = i; }
    });
    var marked = 0, rank = 0;
    rows.forEach(function (tr, i) {
      var k = now[i];
      if (!was[k]) { tr.classList.add("fresh"); marked += 1; return; }
      if (oldRank[k] !== rank) { tr.classList.add("moved"); marked += 1; }
      rank += 1;
    });
    return marked;
  }

  function enhance(root) {
    localTimes(root);
    copyButtons(root);
    markDetails(root);
  }

  var live = { main: null, toggle: null, note: null, updated: 0, why: "", drawing: false };

  function say(n, unit) {
    var note = live.note;
    return (note.getAttribute(unit) || "{n}").replace("{n}", n);
  }

  function showNote() {
    var note = live.note;
    if (!note) { return; }
    note.classList.toggle("paused", !!live.why);
    if (live.why === "off") {
      note.textContent = note.getAttribute("data-paused-off");
    } else if (live.why === "busy") {
      note.textContent = note.getAttribute("data-paused-focus");
    } else {
      var s = Math.max(0, Math.round((Date.now() - live.updated) / 1000));
      var t = s < 60 ? say(s, "data-unit-s") : say(Math.floor(s / 60), "data-unit-m");
      note.textContent = note.getAttribute("data-updated").replace("{t}", t);
    }
  }

  // draw <main> again from the server; false when the reader is at work
  function redraw() {
    var main = live.main || document.getElementById("main");
    if (!main || live.drawing) { return Promise.resolve(false); }
    if (busy(main)) { live.why = "busy"; showNote(); return Promise.resolve(false); }
    live.drawing = true;
    return fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (!r.ok || r.redirected) { throw new Error("status " + r.status); }
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        if (!fresh || busy(main)) { return false; }
        var before = rowKeys(main);
        fresh.querySelectorAll(".flashes").forEach(function (f) { f.remove(); });
        main.innerHTML = fresh.innerHTML;
        markRows(main, before);
        enhance(main);
        watchPending();
        live.updated = Date.now();
        live.why = "";
        showNote();
        return true;
      })
      .catch(function () { return false; /* keep the page as it is; try again next time */ })
      .then(function (done) { live.drawing = false; return done; });
  }

  function setupLive() {
    var main = document.getElementById("main");
    var toggle = document.getElementById("live-toggle");
    var bar = document.getElementById("livebar");
    if (!main || !toggle || !bar) { return; }
    var every = parseInt(main.getAttribute("data-live") || "0", 10);
    if (!every) { return; }
    live.main = main;
    live.toggle = toggle;
    live.note = document.getElementById("live-note");
    live.updated = Date.now();
    bar.hidden = false;
    var kept = null;
    try { kept = window.localStorage.getItem("ztq-live"); } catch (e) { /* site data blocked */ }
    toggle.checked = kept !== "off";
    live.why = toggle.checked ? "" : "off";
    toggle.addEventListener("change", function () {
      try { window.localStorage.setItem("ztq-live", toggle.checked ? "on" : "off"); } catch (e) { /* blocked */ }
      live.why = toggle.checked ? "" : "off";
      showNote();
    });
    showNote();
    var last = Date.now();
    window.setInterval(function () {
      if (!toggle.checked) { live.why = "off"; showNote(); return; }
      if (busy(main)) { live.why = "busy"; showNote(); return; }
      if (live.why === "busy") { live.why = ""; }
      showNote();
      if (document.hidden || Date.now() - last < every * 1000) { return; }
      last = Date.now();
      redraw();
    }, 1000);
  }

  // -- pending worker commands ------------------------------------------------------------
  var polling = false;

  function watchPending() {
    if (polling) { return; }
    var marks = document.querySelectorAll(".wstate[data-state-url]");
    var waiting = Array.prototype.filter.call(marks, function (el) {
      var scope = el.closest("tr") || document.getElementById("main");
      return !!(scope && scope.querySelector("[data-pending]"));
    });
    if (!waiting.length) { return; }
    polling = true;
    var tries = 0;
    var seen = waiting.map(function (el) {
      return { url: el.getAttribute("data-state-url"), sig: el.getAttribute("data-sig"),
               since: parseInt(el.getAttribute("data-since") || "0", 10) };
    });
    function poll() {
      tries += 1;
      Promise.all(seen.map(function (s) {
        return fetch(s.url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (state) {
            if (!state) { return true; }  // gone (forgotten): nothing to wait for
            // taken from the list but not reported yet: still waiting for the worker
            if (!state.pending.sig && (state.reported || 0) < s.since) { return false; }
            return state.sig !== s.sig;
          }, function () { return false; });
      })).then(function (changed) {
        if (changed.some(Boolean)) {
          return redraw().then(function (drawn) {
            polling = false;
            if (!drawn) { window.setTimeout(watchPending, 1000); }
          });
        }
        if (tries < 600) { window.setTimeout(poll, 1000); } else { polling = false; }
      });
    }
    window.setTimeout(poll, 700);
  }

  // -- focus on the results after a filter --------------------------------------------------
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (form && (form.method || "get").toLowerCase() === "get" && form.closest("main")) {
      try { window.sessionStorage.setItem(FOCUS_KEY, window.location.pathname); } catch (e) { /* private mode */ }
    }
  });

  function focusResults() {
    var wanted = null;
    try {
      wanted = window.sessionStorage.getItem(FOCUS_KEY);
      window.sessionStorage.removeItem(FOCUS_KEY);
    } catch (e) { wanted = null; }
    if (wanted === null && window.location.hash !== "#results") { return; }
    var main = document.getElementById("main");
    var target = document.getElementById("results") ||
      (main && main.querySelector(".table-wrap, table, .empty"));
    if (!target) { return; }
    if (!target.hasAttribute("tabindex")) { target.setAttribute("tabindex", "-1"); }
    target.focus();
  }

  document.addEventListener("click", function (ev) {
    var el = ev.target.closest ? ev.target.closest("[data-confirm]") : null;
    if (el && !window.confirm(el.getAttribute("data-confirm"))) {
      ev.preventDefault();
    }
  });

  document.addEventListener("change", function (ev) {
    var box = ev.target;
    if (box.classList && box.classList.contains("select-all")) {
      var form = box.closest("form");
      if (form) {
        form.querySelectorAll("input[type=checkbox][name=task]").forEach(function (c) {
          c.checked = box.checked;
        });
      }
    }
  });

  // on a phone the sections are one row that scrolls sideways: the current one in view
  function currentSectionInView() {
    var nav = document.querySelector(".main-nav");
    var cur = nav && nav.querySelector("[aria-current=page]");
    if (!cur || nav.scrollWidth <= nav.clientWidth) { return; }
    var off = cur.getBoundingClientRect().left - nav.getBoundingClientRect().left;
    nav.scrollLeft += off - (nav.clientWidth - cur.offsetWidth) / 2;
  }

  document.addEventListener("DOMContentLoaded", function () {
    currentSectionInView();
    enhance(document);
    setupLive();
    watchPending();
    focusResults();
    var auto = document.querySelector("form[data-autosubmit]");
    if (auto) { window.setTimeout(function () { auto.submit(); }, 150); }
  });
})();
