// Live refresh: while the page says it can still change (body[data-refresh]), fetch it again
// every few seconds and swap in the new <main>. Stops once the server stops asking.
(function () {
  "use strict";
  function schedule(seconds) {
    window.setTimeout(refresh, seconds * 1000);
  }
  async function refresh() {
    if (window.getSelection && String(window.getSelection()).length > 0) {
      schedule(Number(document.body.dataset.refresh)); // do not yank text someone is selecting
      return;
    }
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (!response.ok) { throw new Error(String(response.status)); }
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      document.querySelector("main").replaceWith(fresh.querySelector("main"));
      const next = fresh.body.dataset.refresh;
      if (next) { document.body.dataset.refresh = next; schedule(Number(next)); }
      else { delete document.body.dataset.refresh; live(false); }
    } catch (error) {
      schedule(Number(document.body.dataset.refresh) * 2);
    }
  }
  function live(on) {
    const badge = document.querySelector(".live");
    if (badge) { badge.hidden = !on; }
    // The Stop button and follow-up box go once the task can no longer change.
    if (!on) { document.querySelectorAll(".while-live").forEach(function (e) { e.hidden = true; }); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    const seconds = Number(document.body.dataset.refresh);
    if (seconds > 0) { live(true); schedule(seconds); }
  });
})();
