// window.siteCheck: what the browser checks (tests/test_site_*.py) read and do in a page.
//
// tests/site_server.py adds this file to every page it opens, before the page's own scripts.
// A chart is the element render.py writes, <div id="vega-<16 hex digits>">, drawn by the book's
// loader (window.transformerTutorial). Its drawing is its SVG, serialised: two drawings are the
// same when their serialisations are, with Vega's generated ids (gradients, clip paths)
// renumbered in document order. Nothing here changes a chart except through its controls.
(() => {
  "use strict";
  const CHART_ID = /^vega-[0-9a-f]{16}$/;
  const first = {}; // chart id -> {svg, controls, grids}: the drawing the page opened with
  let marked = {}; // chart id -> the Vega view before a theme change

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));

  function charts() {
    return [...document.querySelectorAll('div[id^="vega-"]')].filter((e) => CHART_ID.test(e.id));
  }

  function chart(id) {
    const element = document.getElementById(id);
    if (!element) throw new Error(`no chart with id ${id}`);
    return element;
  }

  const svgOf = (id) => chart(id).querySelector("svg.marks");
  const viewOf = (id) =>
    (window.transformerTutorial && window.transformerTutorial.views || {})[id] || null;
  const errorOf = (element) => element.querySelector(".tt-chart-error, .vega-embed .error");

  // Drawn: the loader marked it (data-drawn), or a page without the loader has an SVG.
  function drawn(element) {
    if (window.transformerTutorial) return element.dataset.drawn === "true";
    return Boolean(element.querySelector("svg.marks"));
  }

  function allDrawn() {
    return charts().every((element) => drawn(element) || errorOf(element));
  }

  function chartErrors() {
    const errors = {};
    for (const element of charts()) {
      const error = errorOf(element);
      if (error) errors[element.id] = error.textContent.trim();
    }
    return errors;
  }

  // The chart's titles (its own and its views'), one per line (a title's lines joined by a
  // space: Vega draws each as a <tspan>).
  function titles(element) {
    return [...element.querySelectorAll("svg.marks g.role-title text")]
      .map((text) => {
        const lines = [...text.querySelectorAll("tspan")].map((line) => line.textContent);
        return lines.length ? lines.join(" ").replace(/\s+/g, " ") : text.textContent;
      })
      .join("\n");
  }

  // ---- Controls --------------------------------------------------------------------------

  function controls(id) {
    const found = [];
    for (const bind of chart(id).querySelectorAll(".vega-bindings .vega-bind")) {
      const name = bind.querySelector(".vega-bind-name");
      const label = name ? name.textContent.trim() : "";
      const select = bind.querySelector("select");
      const range = bind.querySelector("input[type=range]");
      const radios = [...bind.querySelectorAll("input[type=radio]")];
      const checkbox = bind.querySelector("input[type=checkbox]");
      const visible = (node) => !node.disabled && !node.hidden;
      if (select) {
        found.push({
          label, name: select.name, kind: "select", value: select.value,
          options: [...select.options].map((o) => ({ value: o.value, text: o.text, enabled: visible(o) })),
        });
      } else if (range) {
        found.push({
          label, name: range.name, kind: "range", value: range.value,
          min: Number(range.min), max: Number(range.max), step: Number(range.step) || 1,
        });
      } else if (radios.length) {
        const checked = radios.find((radio) => radio.checked);
        found.push({
          label, name: radios[0].name, kind: "radio", value: checked ? checked.value : null,
          options: radios.map((r) => ({ value: r.value, text: r.value, enabled: visible(r) })),
        });
      } else if (checkbox) {
        found.push({ label, name: checkbox.name, kind: "checkbox", value: String(checkbox.checked) });
      } else {
        const input = bind.querySelector("input");
        found.push({ label, name: input ? input.name : label, kind: "other", value: input && input.value });
      }
    }
    return found;
  }

  // A menu or a slider set as the browser does when a reader picks a value: the new value,
  // then its input and change events. (Radios and checkboxes are clicked by Playwright.)
  function setControl(id, name, value) {
    const selector = `.vega-bindings [name="${CSS.escape(name)}"]`;
    const control = chart(id).querySelector(selector);
    if (!control) throw new Error(`chart ${id} has no control named ${name}`);
    control.value = String(value);
    control.dispatchEvent(new Event("input", { bubbles: true }));
    control.dispatchEvent(new Event("change", { bubbles: true }));
    return control.value; // a slider keeps its value within min..max
  }

  // Wait until the chart has drawn everything its controls asked for: its Vega view has no run
  // pending (a control's run, then the runs its listeners start) and the loader marked it drawn.
  async function settle(id, timeout = 60000) {
    const element = chart(id);
    const start = performance.now();
    if (!window.transformerTutorial) return settleByLooking(id, start, timeout);
    for (;;) {
      if (performance.now() - start > timeout) throw new Error(`chart ${id} never settled`);
      const view = viewOf(id);
      if (!view || element.dataset.drawn !== "true") {
        if (errorOf(element)) return;
        await sleep(25);
        continue;
      }
      await view.runAsync();
      await frame();
      if (!view._running && viewOf(id) === view && element.dataset.drawn === "true") return;
    }
  }

  // A page without the loader (an old build): wait until the SVG stops changing.
  async function settleByLooking(id, start, timeout) {
    let last = null;
    let same = 0;
    while (same < 3) {
      if (performance.now() - start > timeout) throw new Error(`chart ${id} never settled`);
      await sleep(50);
      const svg = svgOf(id);
      const now = svg ? svg.outerHTML : "";
      same = now === last ? same + 1 : 0;
      last = now;
    }
  }

  // ---- Drawings --------------------------------------------------------------------------

  // Vega's layout sums floats in whatever order it meets them: -19.580078125 one time,
  // -19.580078125000014 the next. Numbers are compared to 1/1000 of a pixel.
  const roundNumber = (number) => String(Number(Number(number).toFixed(3)));

  // Vega draws a mark's items in the order its data reaches the mark, and a filter lets rows
  // back in another order than the first time (ticks and grid lines too): the same picture,
  // but for which of two overlapping items is on top. A mark's items are compared as a set.
  const UNORDERED = "g.role-mark, g.role-axis-grid, g.role-axis-tick, g.role-axis-label, "
    + "g.role-legend-label, g.role-legend-symbol";
  // Vega's SVG renderer writes a guide's generated caption ("X-axis titled 'key' for a discrete
  // scale with 6 values...") when it first draws the guide and leaves it when only the guide's
  // labels change, so it may describe an earlier state; what the guide draws is compared.
  const CAPTIONED = "g.role-axis[aria-label], g.role-legend[aria-label], g.role-title [aria-label]";

  function serialise(svg) {
    if (!svg) return "";
    const copy = svg.cloneNode(true);
    for (const group of copy.querySelectorAll(UNORDERED)) {
      const items = [...group.children].sort((a, b) => (a.outerHTML < b.outerHTML ? -1 : 1));
      group.replaceChildren(...items);
    }
    for (const guide of copy.querySelectorAll(CAPTIONED)) guide.removeAttribute("aria-label");
    let text = copy.outerHTML.replace(/-?\d+\.\d{4,}(e-?\d+)?/g, roundNumber);
    const ids = [...svg.querySelectorAll("[id]")].map((node) => node.id);
    ids.forEach((old, index) => {
      text = text.split(`"${old}"`).join(`"#${index}"`).split(`#${old})`).join(`#${index})`);
    });
    return text;
  }

  // Each rect mark whose items are all the same size is a heatmap: its cells must fill the
  // grid of their x and y positions (a collapsed or half-drawn heatmap does not). Vega draws a
  // rect as a path "M x,y h width v height h -width Z".
  const RECT = /^M([-\d.e]+),([-\d.e]+)h([-\d.e]+)v([-\d.e]+)/;

  function grids(svg) {
    const found = [];
    if (!svg) return found;
    for (const mark of svg.querySelectorAll("g.mark-rect.role-mark")) {
      const rects = [...mark.children].map((cell) => (cell.getAttribute("d") || "").match(RECT));
      if (rects.length < 2 || rects.some((rect) => !rect)) continue;
      const sizes = new Set(rects.map((rect) => `${rect[3]}x${rect[4]}`));
      if (sizes.size !== 1) continue; // bars, not cells
      const columns = new Set(rects.map((rect) => rect[1])).size;
      const rows = new Set(rects.map((rect) => rect[2])).size;
      found.push({ cells: rects.length, columns, rows });
    }
    return found;
  }

  // What a test needs to know of a drawing, without shipping the SVG to Python each time.
  function look(id) {
    const element = chart(id);
    const svg = svgOf(id);
    const text = serialise(svg);
    const before = first[id];
    const items = svg ? svg.querySelectorAll("g.role-mark > *").length : 0;
    let difference = null;
    if (before && text !== before.svg) {
      let at = 0;
      while (at < text.length && text[at] === before.svg[at]) at += 1;
      const from = Math.max(0, at - 150);
      difference = {
        at, length: text.length, firstLength: before.svg.length,
        first: before.svg.slice(from, at + 150), now: text.slice(from, at + 150),
      };
    }
    const error = errorOf(element);
    return {
      same: before ? text === before.svg : null, difference, items, grids: grids(svg),
      titles: titles(element), error: error ? error.textContent.trim() : null,
      controls: controls(id),
    };
  }

  function recordFirstDrawings() {
    for (const element of charts()) {
      if (element.id in first) continue;
      const svg = svgOf(element.id);
      first[element.id] = { svg: serialise(svg), controls: controls(element.id) };
    }
    return Object.keys(first);
  }

  function firstDrawing(id) {
    return first[id] ? { controls: first[id].controls, length: first[id].svg.length } : null;
  }

  // The charts on the page, in document order, with their titles and controls as they are.
  function list() {
    return charts().map((element) => ({
      id: element.id, titles: titles(element), controls: controls(element.id),
      first: element.id in first,
    }));
  }

  // ---- Theme changes -----------------------------------------------------------------------

  function markViews() {
    marked = {};
    for (const element of charts()) marked[element.id] = viewOf(element.id);
  }

  // Every chart drew again since markViews(): a new Vega view, marked drawn.
  function notRedrawn() {
    return charts()
      .filter((e) => !errorOf(e) && (viewOf(e.id) === marked[e.id] || !drawn(e)))
      .map((e) => e.id);
  }

  const allRedrawn = () => notRedrawn().length === 0;

  // ---- Geometry: does the chart fit its column, and its SVG its content? --------------------

  const box = (r) => ({ left: r.left, top: r.top, right: r.right, bottom: r.bottom,
                        width: r.width, height: r.height });

  function hidden(node) {
    const attribute = (name) => node.getAttribute(name);
    if (attribute("opacity") === "0" || attribute("display") === "none") return true;
    if (attribute("visibility") === "hidden") return true;
    if (node.tagName === "text") return !node.textContent.trim();
    const none = (paint) => paint === null || paint === "none" || paint === "transparent";
    // Without a fill attribute SVG fills black; without a stroke attribute it draws none.
    const fill = attribute("fill");
    const noFill = (fill !== null && none(fill)) || attribute("fill-opacity") === "0";
    const noStroke = none(attribute("stroke")) || attribute("stroke-opacity") === "0"
      || attribute("stroke-width") === "0";
    return noFill && noStroke;
  }

  // The smallest box around everything the SVG draws (in page coordinates).
  function contentBox(svg) {
    let left = Infinity, top = Infinity, right = -Infinity, bottom = -Infinity;
    const shapes = svg.querySelectorAll("path, text, rect, line, circle, ellipse, polygon, polyline, image");
    for (const node of shapes) {
      if (node.closest("defs, clipPath") || node.classList.contains("background")) continue;
      if (node.closest("[clip-path]")) continue; // drawn only inside its clip: a view's area
      if (hidden(node)) continue;
      const r = node.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      left = Math.min(left, r.left); top = Math.min(top, r.top);
      right = Math.max(right, r.right); bottom = Math.max(bottom, r.bottom);
    }
    if (left === Infinity) return null;
    return { left, top, right, bottom, width: right - left, height: bottom - top };
  }

  // The text column: the article's box inside its padding (where the text runs).
  function textColumn(element) {
    const column = element.closest("article") || document.body;
    const r = column.getBoundingClientRect();
    const style = getComputedStyle(column);
    const left = r.left + parseFloat(style.paddingLeft) + parseFloat(style.borderLeftWidth);
    const right = r.right - parseFloat(style.paddingRight) - parseFloat(style.borderRightWidth);
    return { left, top: r.top, right, bottom: r.bottom, width: right - left, height: r.height };
  }

  function fit(id) {
    const element = chart(id);
    const svg = svgOf(id);
    // Anything wider than the chart's box (the SVG, a control) makes it scroll sideways.
    const wide = [element, ...element.querySelectorAll(".vega-embed, .vega-bindings")]
      .filter((node) => node.scrollWidth > node.clientWidth + 1)
      .map((node) => `${node.className || node.id}: ${node.scrollWidth} px in ${node.clientWidth}`);
    return {
      wide,
      chart: box(element.getBoundingClientRect()),
      svg: svg ? box(svg.getBoundingClientRect()) : null,
      content: svg ? contentBox(svg) : null,
      column: textColumn(element),
    };
  }

  function pageWidth() {
    return { scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth };
  }

  // ---- Colours: is the chart's text readable on what is behind it? -------------------------

  function rgb(colour) {
    const probe = document.createElement("canvas").getContext("2d");
    probe.fillStyle = "#000";
    probe.fillStyle = colour;
    const value = probe.fillStyle; // "#rrggbb" or "rgba(r, g, b, a)"
    if (value.startsWith("#")) {
      return [1, 3, 5].map((i) => parseInt(value.slice(i, i + 2), 16)).concat([1]);
    }
    const parts = value.match(/[\d.]+/g).map(Number);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  }

  function luminance([r, g, b]) {
    const linear = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  }

  function contrast(a, b) {
    const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (light + 0.05) / (dark + 0.05);
  }

  // The colour behind the chart: its SVG's background, else the first opaque ancestor's.
  function background(id) {
    const svg = svgOf(id);
    const backdrop = svg && svg.querySelector("rect.background, path.background");
    const own = backdrop && backdrop.getAttribute("fill");
    if (own && own !== "none" && rgb(own)[3] > 0) return rgb(own);
    for (let node = svg; node && node.nodeType === 1; node = node.parentElement) {
      const colour = rgb(getComputedStyle(node).backgroundColor);
      if (colour[3] > 0) return colour;
    }
    return [255, 255, 255, 1]; // the canvas: white
  }

  // Titles, axis and legend text: its fill against the chart's background.
  const GUIDE_TEXT = [
    "g.role-title text", "g.role-axis-label text", "g.role-axis-title text",
    "g.role-legend-label text", "g.role-legend-title text", "g.role-column-title text",
    "g.role-row-title text",
  ].join(", ");

  function readability(id) {
    const svg = svgOf(id);
    const behind = background(id);
    const texts = svg ? [...svg.querySelectorAll(GUIDE_TEXT)].filter((t) => t.textContent.trim()) : [];
    let worst = null;
    for (const text of texts) {
      const fill = text.getAttribute("fill") || getComputedStyle(text).fill;
      const ratio = contrast(rgb(fill), behind);
      if (!worst || ratio < worst.ratio) worst = { ratio, fill, text: text.textContent };
    }
    return { background: behind, luminance: luminance(behind), texts: texts.length, worst };
  }

  // ---- The values table beside each chart --------------------------------------------------

  async function valuesText(id) {
    const details = chart(id).querySelector("details.tt-values");
    if (!details) return null;
    details.open = true;
    await sleep(50);
    await frame();
    const text = details.textContent;
    const markup = details.querySelectorAll("b, img, script").length;
    details.open = false;
    return { text, markup };
  }

  window.siteCheck = {
    allDrawn, chartErrors, list, controls, setControl, settle, look, recordFirstDrawings,
    firstDrawing, markViews, notRedrawn, allRedrawn, fit, pageWidth, readability, valuesText,
  };
})();
