// The UI's actions: each form.action posts its fields as JSON to its data-post address under
// an Idempotency-Key made once per submission (a retried click sends the same key), then
// opens the new task (data-then="open"), clears the box ("clear") or stays ("stay"). An error
// shows the server's reason next to the button; nothing else changes.
(function () {
  "use strict";
  function newKey() {
    return window.crypto && window.crypto.randomUUID
      ? window.crypto.randomUUID()
      : String(Date.now()) + "-" + String(Math.random()).slice(2);
  }
  function body(form) {
    const out = {};
    new FormData(form).forEach(function (value, name) {
      const text = String(value).trim();
      if (text) { out[name] = text; }
    });
    return out;
  }
  async function submit(form, event) {
    event.preventDefault();
    const result = form.querySelector(".action-result");
    const button = form.querySelector("button[type=submit]");
    if (!form.dataset.key) { form.dataset.key = newKey(); }
    button.disabled = true;
    result.classList.remove("error");
    result.textContent = "sending…";
    try {
      const response = await fetch(form.dataset.post, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "Idempotency-Key": form.dataset.key },
        body: JSON.stringify(body(form)),
      });
      const answer = await response.json().catch(function () { return {}; });
      if (!response.ok) {
        const detail = typeof answer.detail === "string" ? answer.detail : JSON.stringify(answer.detail);
        throw new Error(detail || String(response.status));
      }
      delete form.dataset.key;  // the next submission is a new request
      if (form.dataset.then === "open" && answer.ui_url) {
        window.location.assign(answer.ui_url);
        return;
      }
      if (form.dataset.then === "clear") { form.reset(); }
      result.textContent = form.dataset.then === "stay" ? "stop requested" : "sent";
    } catch (error) {
      result.classList.add("error");
      result.textContent = error.message;
    } finally {
      button.disabled = false;
    }
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form.action").forEach(function (form) {
      form.addEventListener("submit", function (event) { submit(form, event); });
      // A changed request is a new one: it must not reuse the key of one already sent.
      form.addEventListener("input", function () { delete form.dataset.key; });
    });
  });
})();
