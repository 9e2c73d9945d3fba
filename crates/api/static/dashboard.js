// payoutd dashboard: refreshes the live parts of a page every few seconds without a full reload,
// so a decision made in another browser shows here. Served from /dashboard/static (CSP script-src 'self').
(function () {
  "use strict";
  var REFRESH_MS = 5000;
  function busy() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT");
  }
  function refresh() {
    var regions = document.querySelectorAll("[data-live]");
    if (regions.length === 0 || busy()) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelectorAll("[data-live]");
        if (fresh.length !== regions.length || busy()) { return; }
        for (var i = 0; i < regions.length; i++) { regions[i].replaceWith(document.importNode(fresh[i], true)); }
      })
      .catch(function () { /* the next tick tries again */ });
  }
  window.setInterval(refresh, REFRESH_MS);
})();
