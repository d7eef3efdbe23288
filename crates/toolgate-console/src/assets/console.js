// Live updates: the server says when an Approval changes; the table is
// fetched again (server-rendered, escaped) and swapped in. No inline script.
"use strict";
(function () {
  const target = document.getElementById("approvals");
  if (!target || !window.EventSource) return;
  let pending = false;
  async function refresh() {
    if (pending) return;
    pending = true;
    try {
      const r = await fetch("/fragment", { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (r.ok) target.innerHTML = await r.text();
    } finally {
      pending = false;
    }
  }
  const events = new EventSource("/events");
  events.addEventListener("change", refresh);
  document.body.dataset.live = "connecting";
  events.addEventListener("open", () => { document.body.dataset.live = "on"; });
  events.addEventListener("error", () => { document.body.dataset.live = "off"; });
})();
