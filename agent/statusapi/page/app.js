// kdm status page: renders the PageState that /api/stream pushes (server-sent events), and
// keeps the countdowns and the "updated … ago" line ticking between pushes. Read-only.
"use strict";

(function () {
  // A resource's devices are drawn as labelled tiles while those fit in its height budget,
  // and otherwise as the largest squares (details on tap) that fit, between SQUARE_MIN and
  // SQUARE_MAX px; past that, SQUARE_MIN squares take the height they need. A drawing in
  // squares is given the whole budget as its minimum height, and the budget grows with the
  // device count, so more devices never make a shorter drawing: with n devices, labelled tiles
  // take at most budget(n), squares at least budget(n).
  const BUDGET_PX = 240;        // budget(1)
  const BUDGET_PER_DOUBLING = 20;
  const SQUARE_MIN = 14, SQUARE_MAX = 64;
  const STALE_AFTER_MS = 3500;  // the server pushes at least every second
  const EVENTS_SHOWN = 50;      // the newest events; /api/state has them all
  const IDS_SHOWN = 12;         // device IDs listed per container and resource; the rest on hover
  const $ = (id) => document.getElementById(id);

  let lastAt = 0;          // performance.now() of the last state received
  let selected = null;     // {resource, id} of the tapped device
  let current = null;      // the last state
  const shown = {};        // section id -> HTML last written, to skip identical redraws

  // esc makes s safe as HTML text or a quoted attribute value. Values the page looks up
  // again (data-id, data-resource, data-pod) go through esc alone; text shown to a person
  // goes through txt.
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  // Characters that are invisible or reorder the text around them: C0 and C1 controls, DEL,
  // and the Unicode format characters that steer bidirectional text (U+202E makes
  // "evil\u202Egpj.exe" read "evilexe.jpg"), zero-width ones, line and paragraph separators
  // and the byte order mark.
  const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\ufff9-\ufffb]/g;
  // visible returns s with every HIDDEN character escaped, as \x00 or \u202e, so that names
  // and device IDs (smarter-device-manager uses "\u0000") read as what they are.
  function visible(s) {
    return String(s).replace(HIDDEN, (c) => {
      const n = c.charCodeAt(0);
      return n < 0x80 ? "\\x" + n.toString(16).padStart(2, "0") : "\\u" + n.toString(16).padStart(4, "0");
    });
  }
  // txt is esc(visible(s)): text from the state, shown to a person.
  function txt(s) { return esc(visible(s)); }
  // A long ID keeps its start and its end, where IDs of one vendor differ (GPU-a100a100-…-000000000003).
  function shortID(s) {
    s = visible(s);
    return s.length > 16 ? s.slice(0, 8) + "…" + s.slice(-7) : s;
  }
  // idPrefix is what every ID of a resource starts with, cut after its last '-' (so that a
  // tile shows whole parts), when that is at least 8 characters and leaves something of every
  // ID: the card shows it once and the tiles the rest, which is what tells devices apart (the
  // mock GPUs differ only in their last digits). "" when IDs differ early, or for one device.
  function idPrefix(ids) {
    if (ids.length < 2) return "";
    let p = ids[0];
    for (const id of ids) {
      let i = 0;
      while (i < p.length && i < id.length && p[i] === id[i]) i++;
      p = p.slice(0, i);
    }
    p = p.slice(0, p.lastIndexOf("-") + 1);
    if (p.length < 8 || ids.some((id) => id.length === p.length)) return "";
    return p;
  }
  // tileID is the ID as a tile shows it: without the resource's common prefix, shortened.
  function tileID(id, prefix) {
    return prefix ? "…" + shortID(id.slice(prefix.length)) : shortID(id);
  }
  function badge(v) { return `<span class="badge" data-v="${esc(v)}">${esc(v)}</span>`; }
  function mmss(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    const ss = String(r).padStart(2, "0");
    return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
  }
  function clock(t) { return new Date(t).toLocaleTimeString([], { hour12: false }); }
  // A countdown element; tick() keeps it current from the time left when the state was taken.
  function countdown(ms) {
    return `<span class="countdown" data-until="${lastAt + ms}">${mmss(ms)}</span>`;
  }
  function holderText(h) { return `${h.pod} · ${h.container}`; }
  // idHTML shows a device ID that a line may break only after a '-' (GPU-…-…), never inside a
  // part: one part longer than a whole line is the only exception.
  function idHTML(id) {
    return `<span class="id">${visible(id).split(/(?<=-)/).map(esc).join("<wbr>")}</span>`;
  }
  function setHTML(id, html) {
    if (shown[id] === html) return false;
    shown[id] = html;
    $(id).innerHTML = html;
    return true;
  }

  function renderResources(st) {
    if (st.resources.length === 0) {
      return setHTML("resources", `<p class="empty">No device plugin has registered.</p>`);
    }
    const changed = setHTML("resources", st.resources.map(renderResource).join(""));
    if (changed) layoutDevices();
    return changed;
  }

  function renderResource(r) {
    const ep = r.endpoint;
    const devs = r.devices || [];
    const held = devs.filter((d) => d.holders && d.holders.length).length;
    const unhealthy = devs.filter((d) => d.health !== "Healthy").length;
    let state = ep.state, detail = "";
    if (ep.state === "Stopped") {
      const what = ep.restored ? "restored from the checkpoint, plugin not registered yet" : "plugin disconnected";
      detail = ep.graceRemainingMs > 0
        ? `${what}; removed in ${countdown(ep.graceRemainingMs)} unless it registers again`
        : `${what}; grace period over, removal pending`;
    } else if (ep.state === "Removed") {
      detail = `removed at ${esc(clock(ep.removedAt))}: the plugin stayed away past the grace period`;
    } else if (ep.state === "None") {
      detail = "no plugin; devices still held by containers";
    }
    let html = `<article class="resource" data-resource="${esc(r.name)}" data-state="${esc(state)}">`;
    html += `<div class="res-head"><h3>${txt(r.name)}</h3>${badge(state)}<span class="ep-detail">${detail}</span></div>`;
    html += `<div class="numbers"><div><b class="cap">${r.capacity}</b>capacity</div>` +
      `<div><b class="alloc">${r.allocatable}</b>allocatable</div>` +
      `<div><b class="free-count">${r.free}</b>free</div>` +
      `<div><b class="held-count">${held}</b>assigned</div>` +
      `<div><b class="bad-count">${unhealthy}</b>not healthy</div></div>`;
    if (ep.socket) html += `<div class="socket">socket ${txt(ep.socket)}</div>`;
    if (devs.length > 0) {
      const prefix = idPrefix(devs.map((d) => d.id));
      if (prefix) html += `<div class="id-prefix">device IDs start with <code>${txt(prefix)}</code></div>`;
      html += `<div class="legend"><span class="l-free">free</span><span class="l-held">assigned</span>` +
        `<span class="l-bad">unhealthy</span><span class="l-unknown">unknown</span></div>`;
      html += renderDevices(r.name, devs, prefix);
      html += `<p class="selected-detail" data-for="${esc(r.name)}"></p>`;
    }
    return html + `</article>`;
  }

  // Devices grouped by NUMA node (when the plugin reports topology); layoutDevices sizes them.
  function renderDevices(resource, devs, prefix) {
    const groups = new Map();
    for (const d of devs) {
      const key = d.numa && d.numa.length ? "NUMA " + d.numa.join(", ") : "";
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(d);
    }
    const keys = [...groups.keys()].sort();
    // One NUMA node's label is shown on squares only: labelled tiles name their node.
    const single = keys.length === 1 ? " single" : "";
    return `<div class="devices" data-n="${devs.length}">` + keys.map((key) => {
      const list = groups.get(key);
      const label = key ? `<div class="numa-label${single}">${esc(key)} · ${list.length}</div>` : "";
      return `<div class="numa">${label}<div class="grid">` +
        list.map((d) => renderDevice(resource, d, prefix)).join("") + `</div></div>`;
    }).join("") + `</div>`;
  }

  function budget(n) { return BUDGET_PX + BUDGET_PER_DOUBLING * Math.log2(Math.max(1, n)); }

  // layoutDevices picks, for each resource's devices, labelled tiles or the size of their
  // squares, from the width the card has and the number of devices (see BUDGET_PX).
  function layoutDevices() {
    document.querySelectorAll(".devices").forEach(layoutArea);
  }

  function layoutArea(area) {
    const limit = budget(Number(area.dataset.n));
    const grids = area.querySelectorAll(".grid");
    const squares = (on) => grids.forEach((g) => g.classList.toggle("compact", on));
    const height = () => area.getBoundingClientRect().height;
    area.style.minHeight = "";
    area.style.removeProperty("--sq");
    squares(false);
    if (height() <= limit) return;
    squares(true);
    const fits = (px) => { area.style.setProperty("--sq", px + "px"); return height() <= limit; };
    let lo = SQUARE_MIN, hi = SQUARE_MAX;
    if (fits(lo)) { // the largest size that fits, by bisection: taller squares, taller drawing
      while (lo < hi) {
        const mid = Math.ceil((lo + hi) / 2);
        if (fits(mid)) lo = mid; else hi = mid - 1;
      }
    }
    area.style.setProperty("--sq", lo + "px");
    area.style.minHeight = limit + "px";
  }

  function renderDevice(resource, d, prefix) {
    const holders = (d.holders || []).map(holderText);
    const classes = ["dev"];
    if (holders.length) classes.push("held");
    if (d.reserved) classes.push("reserved");
    if (selected && selected.resource === resource && selected.id === d.id) classes.push("selected");
    const numa = d.numa && d.numa.length ? `NUMA ${d.numa.join(", ")}` : "";
    const state = numa ? `${d.health} · ${numa}` : d.health;
    const title = [d.id, numa ? state : d.health + " · no NUMA node", ...(holders.length ? holders : [d.reserved ? "being allocated" : "free"])]
      .map(visible).join("\n");
    return `<div class="${classes.join(" ")}" tabindex="0" data-id="${esc(d.id)}" data-health="${esc(d.health)}"` +
      ` data-holder="${esc(holders.join("; "))}" title="${esc(title)}">` +
      `<span class="dev-id">${esc(tileID(d.id, prefix))}</span>` +
      `<span class="dev-numa">${txt(state)}</span>` +
      `<span class="dev-holder">${txt(holders.length ? holders.join(", ") : d.reserved ? "being allocated" : "free")}</span></div>`;
  }

  function renderPods(st) {
    const rt = st.runtime || {};
    const runtime = $("runtime");
    runtime.textContent = rt.message || "";
    runtime.dataset.containersRun = rt.containersRun ? "true" : "false";
    $("pods-count").textContent = st.pods.length ? `(${st.pods.length})` : "";
    if (st.pods.length === 0) return setHTML("pods", `<p class="empty">No pods.</p>`);
    const held = heldIndex(st);
    return setHTML("pods", st.pods.map((p) => renderPod(p, held)).join(""));
  }

  // heldIndex maps resource and device ID to the pods that hold the device now, from the
  // resources' devices: the truth about who holds what, which a pod's record of what it was
  // given may no longer be (a finished pod's devices are released and may be another's).
  function heldIndex(st) {
    const held = new Map();
    for (const r of st.resources || []) {
      for (const d of r.devices || []) held.set(r.name + "\u0000" + d.id, new Set((d.holders || []).map((h) => h.pod)));
    }
    return held;
  }

  function renderPod(p, held) {
    const name = `${p.namespace}/${p.name}`;
    let body = "";
    if (p.phase === "Admitted") {
      for (const c of p.containers || []) {
        const kind = c.sidecar ? " (sidecar)" : c.init ? " (init)" : "";
        const devs = Object.keys(c.devices || {}).sort().map((res) => {
          // A device the node knows and this pod no longer holds was released: it is not
          // listed as the pod's (another pod may hold it now), only counted.
          const all = c.devices[res];
          const ids = all.filter((id) => { const h = held.get(res + "\u0000" + id); return !h || h.has(name); });
          const released = all.length - ids.length;
          const gone = released ? ` <span class="released" title="${esc(`given back to the node; the ${visible(res)} card shows who holds them now`)}">${released} released</span>` : "";
          if (ids.length === 0) return `<span>${txt(res)}:</span>${gone}`;
          const more = ids.length > IDS_SHOWN ? ` … (${ids.length} in all)` : "";
          return `<span title="${esc(ids.map(visible).join(", "))}">${txt(res)}: ${ids.slice(0, IDS_SHOWN).map(idHTML).join(", ")}${more}</span>${gone}`;
        }).join("; ");
        const sick = (c.unhealthy || []).map(visible);
        const health = sick.length ? ` <span class="sick" title="${esc(sick.join(", "))}">${sick.length} unhealthy</span>` : "";
        const restarts = c.restartCount ? `, ${c.restartCount} restart${c.restartCount === 1 ? "" : "s"}` : "";
        const state = c.state ? ` <span class="ctr-state">${txt(c.state + restarts)}</span>` : "";
        body += `<div class="ctr" data-state="${esc(c.state || "")}"><span class="ctr-name">${txt(c.name)}</span>${kind}${state} ` +
          `<span class="devs">${devs || "no devices"}</span>${health}</div>`;
      }
    } else if (p.phase === "Pending") {
      if (p.waiting) {
        body += `<div class="wait">container <b>${txt(p.waiting.container)}</b> waits for the device plugin of ` +
          `<b class="wait-resource">${txt(p.waiting.resource)}</b>; gives up in ${countdown(p.waiting.remainingMs)} ` +
          `(at ${esc(clock(p.waiting.deadline))})</div>`;
      } else {
        body += `<div class="msg">${txt(p.message || "")}</div>`;
      }
    } else {
      body += `<div><span class="reason">${txt(p.reason || "")}</span> <span class="msg">${txt(p.message || "")}</span></div>`;
    }
    if (p.warning) body += `<div class="warning">${txt(p.warning)}</div>`;
    const running = p.runtimePhase ? badge(p.runtimePhase) : "";
    // A removed pod holds its devices until the runtime confirms its containers are gone.
    const terminating = p.terminating ? badge("Terminating") : "";
    return `<div class="pod" data-pod="${esc(name)}" data-phase="${esc(p.phase)}" data-runtime-phase="${esc(p.runtimePhase || "")}" data-terminating="${p.terminating ? "true" : ""}">` +
      `<div class="pod-head"><span class="pod-name" title="${txt(name)}">${txt(name)}</span>${badge(p.phase)}${running}${terminating}</div>` +
      `<div class="pod-body">${body}</div></div>`;
  }

  function renderEvents(st) {
    if (st.events.length === 0) return setHTML("events", `<li class="empty">No events yet.</li>`);
    const more = st.events.length > EVENTS_SHOWN
      ? `<li class="empty">${st.events.length - EVENTS_SHOWN} older events in <a href="/api/state">/api/state</a></li>` : "";
    return setHTML("events", st.events.slice(0, EVENTS_SHOWN).map((e) => {
      const subject = e.pod || e.resource || "";
      // A wait counts down as the pod's card does, from the state's own time.
      const wait = e.deadline
        ? `; gives up in ${countdown(Date.parse(e.deadline) - Date.parse(st.time))} (at ${esc(clock(e.deadline))})` : "";
      return `<li data-kind="${esc(e.kind)}"><time datetime="${esc(e.time)}">${esc(clock(e.time))}</time>` +
        `<span>${badge(e.kind)} <span class="subject" title="${txt(subject)}">${txt(subject)}</span></span>` +
        `<span class="ev-text">${txt(e.message)}${wait}</span></li>`;
    }).join("") + more);
  }

  function renderSelected() {
    document.querySelectorAll(".selected-detail").forEach((p) => { p.textContent = ""; });
    if (!selected || !current) return;
    const r = current.resources.find((x) => x.name === selected.resource);
    const d = r && (r.devices || []).find((x) => x.id === selected.id);
    const p = [...document.querySelectorAll(".selected-detail")].find((x) => x.dataset.for === selected.resource);
    if (!d || !p) return;
    const holders = (d.holders || []).map(holderText);
    p.textContent = visible(`${d.id} — ${d.health}, ${d.numa && d.numa.length ? "NUMA " + d.numa.join(", ") : "no NUMA node"}, ` +
      (holders.length ? "held by " + holders.join(", ") : d.reserved ? "being allocated" : "free"));
  }

  function render(st) {
    current = st;
    $("node").textContent = visible(st.node || "");
    $("policy").textContent = st.policy ? "policy " + visible(st.policy) : "";
    document.title = `kdm${st.node ? " · " + visible(st.node) : ""} · node status`;
    renderResources(st);
    renderPods(st);
    renderEvents(st);
    renderSelected();
    tick();
  }

  // tick keeps countdowns and the liveness line current between pushes.
  function tick() {
    const now = performance.now();
    document.querySelectorAll(".countdown[data-until]").forEach((el) => {
      el.textContent = mmss(Number(el.dataset.until) - now);
    });
    const live = $("live");
    if (lastAt === 0) return;
    const age = now - lastAt;
    if (live.dataset.state === "reconnecting") return;
    if (age > STALE_AFTER_MS) {
      live.dataset.state = "stale";
      $("live-text").textContent = `stale: no update for ${Math.round(age / 1000)} s`;
    } else {
      live.dataset.state = "live";
      $("live-text").textContent = `live · updated ${(age / 1000).toFixed(1)} s ago`;
    }
  }

  function onState(data) {
    let st;
    try { st = JSON.parse(data); } catch (e) { return; }
    lastAt = performance.now();
    $("live").dataset.state = "live";
    render(st);
  }

  function connect() {
    if (!window.EventSource) { poll(); return; }
    const es = new EventSource("/api/stream");
    es.addEventListener("state", (ev) => onState(ev.data));
    es.onerror = () => {
      $("live").dataset.state = "reconnecting";
      $("live-text").textContent = "reconnecting…";
    };
  }

  // Without EventSource, poll the same state.
  function poll() {
    fetch("/api/state", { cache: "no-store" })
      .then((r) => r.text()).then(onState)
      .catch(() => { $("live").dataset.state = "reconnecting"; $("live-text").textContent = "reconnecting…"; })
      .finally(() => setTimeout(poll, 1000));
  }

  function select(el) {
    const card = el.closest("[data-resource]");
    if (!card) return;
    selected = { resource: card.dataset.resource, id: el.dataset.id };
    document.querySelectorAll(".dev.selected").forEach((x) => x.classList.remove("selected"));
    el.classList.add("selected");
    renderSelected();
  }
  document.addEventListener("click", (ev) => {
    const el = ev.target.closest(".dev");
    if (el) select(el);
  });
  document.addEventListener("keydown", (ev) => {
    if ((ev.key === "Enter" || ev.key === " ") && ev.target.classList && ev.target.classList.contains("dev")) {
      ev.preventDefault();
      select(ev.target);
    }
  });

  let relayout = 0;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(relayout);
    relayout = requestAnimationFrame(layoutDevices);
  });
  setInterval(tick, 250);
  // The state the page was served with (page.go): rendered before the first paint, so the
  // page never shows a placeholder while /api/stream connects. The liveness line still waits
  // for the stream.
  const initial = $("initial-state");
  if (initial) {
    try {
      const st = JSON.parse(initial.textContent);
      if (st) render(st);
    } catch (e) { /* the stream renders the state */ }
  }
  connect();
})();
