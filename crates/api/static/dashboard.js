// payoutd dashboard: refreshes the live parts of a page every few seconds without a full reload,
// so a decision made in another browser shows here. Served from /dashboard/static (CSP script-src 'self').
(function () {
  "use strict";
  var REFRESH_MS = 5000;
  function busy() {
    var el = document.activeElement;
    if (el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT")) { return true; }
    // A decision under way (a ticked Confirm, typed evidence) is never thrown away by a refresh.
    if (document.querySelector("[data-live] input[type=checkbox]:checked")) { return true; }
    var texts = document.querySelectorAll("[data-live] textarea");
    for (var i = 0; i < texts.length; i++) { if (texts[i].value !== "") { return true; } }
    return false;
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
