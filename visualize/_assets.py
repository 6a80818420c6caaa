"""The CSS and JavaScript inlined into the before/after page (no network, no server)."""

CSS = """
body { font: 13px Helvetica, Arial, sans-serif; margin: 0; color: #222; }
header { padding: 8px 12px; border-bottom: 1px solid #ccc; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
header h1 { font-size: 16px; margin: 0; }
#search { width: 260px; padding: 4px; font: inherit; }
#search-result { color: #555; }
.legend span { display: inline-block; padding: 1px 6px; margin-right: 4px; border: 1px solid #999; border-radius: 3px; }
.legend .st { background: #fff; border-width: 3px; }
.panes { display: grid; grid-template-columns: repeat(auto-fit, minmax(0, 1fr)); gap: 6px; padding: 6px; }
.pane { border: 1px solid #bbb; display: flex; flex-direction: column; min-width: 0; }
.pane h2 { font-size: 14px; margin: 0; padding: 4px 8px; background: #f4f4f4; border-bottom: 1px solid #ddd; }
.pane .notice { font-size: 12px; color: #8a4b00; padding: 2px 8px; }
.viewport { height: 78vh; overflow: hidden; cursor: grab; background: #fff; }
.viewport.dragging { cursor: grabbing; }
.viewport svg { width: 100%; height: 100%; display: block; }
.node.removed > path, .node.removed > polygon, .node.removed > ellipse { stroke: #d62728; stroke-width: 3px; stroke-dasharray: 6 3; }
.node.added > path, .node.added > polygon, .node.added > ellipse { stroke: #2ca02c; stroke-width: 3px; }
.node.changed > path, .node.changed > polygon, .node.changed > ellipse { stroke: #ff7f0e; stroke-width: 3px; }
.node.fused > path, .node.fused > polygon, .node.fused > ellipse { stroke: #6a3d9a; stroke-width: 3px; }
.cluster.fused > path, .cluster.fused > polygon { stroke: #6a3d9a; stroke-width: 3px; }
.cluster.changed > path, .cluster.changed > polygon { stroke: #ff7f0e; stroke-width: 3px; }
/* the search highlight: blue, a colour no status uses (removed is red) */
.hit > path, .hit > polygon, .hit > ellipse { stroke: #0077ff !important; stroke-width: 6px !important; stroke-dasharray: none !important; }
.hit text { font-weight: bold; }
.node { cursor: pointer; }
section.totals { padding: 6px 12px; }
#totals th[scope], #totals tr > th:first-child { text-align: left; }
#totals td.num { min-width: 90px; }
section.tables { padding: 6px 12px; display: flex; gap: 24px; flex-wrap: wrap; align-items: flex-start; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: 4px 0; }
"""

JS = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("hlo-data").textContent);
  const panes = {};

  function setup(side) {
    const vp = document.querySelector("#pane-" + side + " .viewport");
    const svg = vp && vp.querySelector("svg");
    if (!svg) return;
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    const vb0 = svg.viewBox.baseVal;
    const home = { x: vb0.x, y: vb0.y, w: vb0.width, h: vb0.height };
    const pane = { side, vp, svg, home, view: Object.assign({}, home) };
    panes[side] = pane;
    pane.view = readable(pane, (data.focus || {})[side]);
    apply(pane);
    vp.addEventListener("wheel", (e) => {
      e.preventDefault();
      const p = toSvg(pane, e.clientX, e.clientY);
      zoomAt(pane, p.x, p.y, e.deltaY < 0 ? 0.8 : 1.25);
    }, { passive: false });
    let drag = null;
    vp.addEventListener("mousedown", (e) => { drag = { x: e.clientX, y: e.clientY, v: Object.assign({}, pane.view) }; vp.classList.add("dragging"); });
    window.addEventListener("mouseup", () => { drag = null; vp.classList.remove("dragging"); });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const r = vp.getBoundingClientRect();
      const s = Math.max(drag.v.w / r.width, drag.v.h / r.height);
      pane.view.x = drag.v.x - (e.clientX - drag.x) * s;
      pane.view.y = drag.v.y - (e.clientY - drag.y) * s;
      apply(pane);
    });
    vp.addEventListener("dblclick", () => { pane.view = Object.assign({}, home); apply(pane); });
    svg.querySelectorAll("g.node").forEach((g) => g.addEventListener("click", () => showCounterpart(side, g.id.slice(2))));
  }

  // A big graph fitted to the pane is unreadable: open it at one SVG unit per pixel
  // (Graphviz's 14pt labels at 14px) on the focus node, or the top of the graph.
  function readable(p, focus) {
    const r = p.vp.getBoundingClientRect();
    if (!r.width || !r.height) return Object.assign({}, p.home);
    const fit = Math.min(r.width / p.home.w, r.height / p.home.h);
    if (fit >= 0.75) return Object.assign({}, p.home);
    const w = r.width, h = r.height;
    const el = focus ? document.getElementById(p.side[0] + "-" + focus) : null;
    let cx = p.home.x + p.home.w / 2, cy = p.home.y + h / 2;
    if (el) {
      const c = centre(p, el);
      cx = c.x; cy = c.y;
    }
    return { x: cx - w / 2, y: cy - h / 2, w: w, h: h };
  }

  function centre(p, el) {
    const b = el.getBBox();
    let cx = b.x + b.width / 2, cy = b.y + b.height / 2;
    const m = p.svg.getScreenCTM() && el.getScreenCTM() ? p.svg.getScreenCTM().inverse().multiply(el.getScreenCTM()) : null;
    if (m) { const pt = p.svg.createSVGPoint(); pt.x = cx; pt.y = cy; const q = pt.matrixTransform(m); cx = q.x; cy = q.y; }
    return { x: cx, y: cy };
  }

  function apply(p) { p.svg.setAttribute("viewBox", [p.view.x, p.view.y, p.view.w, p.view.h].join(" ")); }

  function toSvg(p, cx, cy) {
    const pt = p.svg.createSVGPoint();
    pt.x = cx; pt.y = cy;
    return pt.matrixTransform(p.svg.getScreenCTM().inverse());
  }

  function zoomAt(p, x, y, f) {
    p.view.x = x - (x - p.view.x) * f;
    p.view.y = y - (y - p.view.y) * f;
    p.view.w *= f; p.view.h *= f;
    apply(p);
  }

  function centerOn(p, el) {
    const b = el.getBBox();
    // element space -> viewBox space, whatever transforms graphviz put between them
    const m = p.svg.getScreenCTM() && el.getScreenCTM() ? p.svg.getScreenCTM().inverse().multiply(el.getScreenCTM()) : null;
    let cx = b.x + b.width / 2, cy = b.y + b.height / 2;
    if (m) { const pt = p.svg.createSVGPoint(); pt.x = cx; pt.y = cy; const q = pt.matrixTransform(m); cx = q.x; cy = q.y; }
    const w = Math.min(p.home.w, Math.max(b.width * 8, 600)), h = w * (p.home.h / p.home.w || 1);
    const r = p.vp.getBoundingClientRect(), ratio = r.width > 0 ? r.height / r.width : 1;
    p.view = { x: cx - w / 2, y: cy - (w * ratio) / 2, w: w, h: w * ratio };
    apply(p);
  }

  function clearHits() { document.querySelectorAll(".hit").forEach((e) => e.classList.remove("hit")); }

  function search(query) {
    clearHits();
    const q = (query || "").trim().replace(/^%/, "");
    const out = { before: [], after: [] };
    if (!q) { report(out, q); return out; }
    for (const side of ["before", "after"]) {
      const p = panes[side];
      if (!p) continue;
      const prefix = side[0] + "-";
      const all = Array.from(p.svg.querySelectorAll("g.node, g.cluster")).filter((g) => g.id.startsWith(prefix));
      let hits = all.filter((g) => g.id.slice(2) === q);
      if (!hits.length) hits = all.filter((g) => g.id.slice(2).toLowerCase().includes(q.toLowerCase()));
      out[side] = hits;
    }
    // a name that is gone on one side (fused, renamed): show its matched counterpart there
    for (const [side, other] of [["before", "after"], ["after", "before"]]) {
      if (out[side].length || !out[other].length || !panes[side]) continue;
      const names = new Set();
      out[other].forEach((g) => (data[other + "_counterparts"][g.id.slice(2)] || []).forEach((n) => names.add(n)));
      out[side] = Array.from(names).map((n) => document.getElementById(side[0] + "-" + n)).filter((e) => e);
    }
    for (const side of ["before", "after"]) {
      out[side].forEach((g) => g.classList.add("hit"));
      if (out[side].length) centerOn(panes[side], out[side][0]);
      out[side] = out[side].map((g) => g.id.slice(2));
    }
    report(out, q);
    return out;
  }

  function report(out, q) {
    const el = document.getElementById("search-result");
    el.textContent = q ? (out.before.length + " in before, " + out.after.length + " in after") : "";
  }

  function showCounterpart(side, name) {
    clearHits();
    const other = side === "before" ? "after" : "before";
    const self = document.getElementById(side[0] + "-" + name);
    if (self) self.classList.add("hit");
    const names = (data[side + "_counterparts"][name] || []);
    names.forEach((n, i) => {
      const el = document.getElementById(other[0] + "-" + n);
      if (el) { el.classList.add("hit"); if (i === 0 && panes[other]) centerOn(panes[other], el); }
    });
    document.getElementById("search-result").textContent = "%" + name + " -> " + (names.length ? names.map((n) => "%" + n).join(", ") : "no counterpart");
  }

  ["before", "after"].forEach(setup);
  const box = document.getElementById("search");
  box.addEventListener("keydown", (e) => { if (e.key === "Enter") search(box.value); });
  box.addEventListener("change", () => search(box.value));
  window.hloViz = { search, showCounterpart, panes, readable };
})();
"""
