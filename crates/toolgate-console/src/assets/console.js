// Live updates. The server says when an Approval changes; the table is
// fetched again (server-rendered, escaped) and merged in without moving
// what is on screen: a card already shown is left as it is (with the
// reason being typed into it), a decided one is removed, a new one is
// added below the others. After any change every decision button pauses
// for a moment, so nothing that appears can take a click meant for
// something else. No inline script; no third-party code.
"use strict";
(function () {
  const root = document.getElementById("approvals");
  if (!root || !window.EventSource) return;
  const PAUSE_MS = 1000;
  let busy = false;
  let again = false;

  function pauseButtons() {
    const buttons = root.querySelectorAll("form button");
    buttons.forEach((b) => { b.disabled = true; });
    setTimeout(() => buttons.forEach((b) => { b.disabled = false; }), PAUSE_MS);
  }

  // A card is one Approval: its namespace and name.
  const key = (a) => `${a.dataset.namespace}/${a.dataset.name}`;

  function merge(html) {
    const next = document.createElement("div");
    next.innerHTML = html; // server-rendered: every agent string escaped
    const pending = root.querySelector("#pending");
    const nextPending = next.querySelector("#pending");
    if (!pending || !nextPending) {
      root.replaceChildren(...next.childNodes);
      return true;
    }
    let changed = false;
    const wanted = new Map();
    nextPending.querySelectorAll("article.approval").forEach((a) => wanted.set(key(a), a));
    pending.querySelectorAll("article.approval").forEach((a) => {
      if (!wanted.has(key(a))) { a.remove(); changed = true; }
    });
    const shown = new Set([...pending.querySelectorAll("article.approval")].map(key));
    wanted.forEach((article, k) => {
      if (!shown.has(k)) { pending.appendChild(article); changed = true; }
    });
    pending.querySelector("h2").replaceWith(nextPending.querySelector("h2"));
    const empty = pending.querySelector("p.empty");
    if (empty && wanted.size > 0) empty.remove();
    const recent = root.querySelector("#recent");
    const nextRecent = next.querySelector("#recent");
    if (recent && nextRecent) recent.replaceWith(nextRecent);
    return changed;
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        const r = await fetch("/fragment", { credentials: "same-origin", redirect: "error" });
        if (r.status === 401) { document.body.dataset.live = "signed-out"; return; }
        if (r.ok && merge(await r.text())) pauseButtons();
      } while (again);
    } catch (e) {
      document.body.dataset.live = "off";
    } finally {
      busy = false;
    }
  }

  const events = new EventSource("/events");
  document.body.dataset.live = "connecting";
  events.addEventListener("change", refresh);
  events.addEventListener("open", () => { document.body.dataset.live = "on"; });
  events.addEventListener("error", () => { document.body.dataset.live = "off"; });
})();
