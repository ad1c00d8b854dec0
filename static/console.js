// ztq console: small progressive enhancements. Every page works without this file.
// - live refresh: <main data-live="N"> reloads its content every N seconds while the tab is
//   visible, nothing is selected or focused, and the "Live refresh" switch is on;
// - confirmations: buttons with data-confirm ask first;
// - "select all" checkboxes; bulk progress forms (data-autosubmit) continue by themselves;
// - <time> elements show the browser's local time.
(function () {
  "use strict";

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) { return; }
      el.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) +
        " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    });
  }

  function busy(main) {
    if (main.querySelector("input[type=checkbox]:checked:not(#live-toggle)")) { return true; }
    var active = document.activeElement;
    return !!(active && active !== document.body && main.contains(active) &&
      /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
  }

  function setupLive() {
    var main = document.getElementById("main");
    var toggle = document.getElementById("live-toggle");
    if (!main || !toggle) { return; }
    var every = parseInt(main.getAttribute("data-live") || "0", 10);
    if (!every) { return; }
    toggle.parentElement.hidden = false;
    toggle.checked = window.localStorage.getItem("ztq-live") !== "off";
    toggle.addEventListener("change", function () {
      window.localStorage.setItem("ztq-live", toggle.checked ? "on" : "off");
    });
    var running = false;
    window.setInterval(function () {
      if (running || !toggle.checked || document.hidden || busy(main)) { return; }
      running = true;
      fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok || r.redirected) { throw new Error("status " + r.status); }
          return r.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("main");
          if (fresh && !busy(main)) {
            fresh.querySelectorAll(".flashes").forEach(function (f) { f.remove(); });
            main.innerHTML = fresh.innerHTML;
            localTimes(main);
          }
        })
        .catch(function () { /* keep the page as it is; try again next time */ })
        .then(function () { running = false; });
    }, every * 1000);
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

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    setupLive();
    var auto = document.querySelector("form[data-autosubmit]");
    if (auto) { window.setTimeout(function () { auto.submit(); }, 150); }
  });
})();
