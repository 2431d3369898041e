// The book's chart loader: draws each Vega-Lite explorer in the browser, no kernel needed.
//
// render.py puts this file in the script element of every chart, wrapped in a function, and
// calls setUp(libraries), then transformerTutorial.embed(id, options). The first chart on a page
// sets everything up; the others find window.transformerTutorial.embed and skip to drawing.
// For each chart it:
//   - loads vega, vega-lite and vega-embed once per page (RequireJS when the page has it);
//   - reads the spec from the JSON script element "ID-spec" (never executed);
//   - follows the site's light or dark theme, keeping every control where the reader left it;
//   - narrows a slider or menu when a preset has fewer choices (usermeta.limits);
//   - lists the values drawn in a <details> table, for readers who do not see the chart;
//   - marks the chart data-drawn="true" after each drawing, or shows why it could not draw.
/* exported setUp */

function setUp(libraries) {
  "use strict";
  const tt = (window.transformerTutorial = window.transformerTutorial || {});
  if (tt.embed) return; // an earlier chart on this page did the set-up

  tt.views = tt.views || {}; // chart id -> its Vega view (for tests and curious readers)
  const charts = []; // every chart drawn on this page, so a theme change redraws them all

  // Colours of the book's dark theme; data scales (cividis, Okabe-Ito...) stay as they are.
  const LIGHT_TEXT = "#ced6dd";
  const MUTED = "#9ca4af";
  const DARK_CONFIG = {
    background: "transparent",
    title: { color: LIGHT_TEXT, subtitleColor: MUTED },
    axis: {
      domainColor: MUTED,
      tickColor: MUTED,
      gridColor: "#48505a",
      labelColor: LIGHT_TEXT,
      titleColor: LIGHT_TEXT,
    },
    legend: { labelColor: LIGHT_TEXT, titleColor: LIGHT_TEXT },
    header: { labelColor: LIGHT_TEXT, titleColor: LIGHT_TEXT },
    view: { stroke: "#5c6570" },
    text: { color: LIGHT_TEXT },
    rule: { color: MUTED },
    style: {
      "guide-label": { fill: LIGHT_TEXT },
      "guide-title": { fill: LIGHT_TEXT },
      "group-title": { fill: LIGHT_TEXT },
      "group-subtitle": { fill: MUTED },
    },
  };
  const MAX_ROWS = 2000; // the values table stops here

  const STYLE = `
.tt-chart { max-width: 100%; margin: 0.5rem 0 1rem; }
.tt-chart .vega-embed { display: flex; flex-direction: column; align-items: flex-start;
  max-width: 100%; overflow-x: auto; }
.tt-chart .vega-embed > svg { flex: none; }
.tt-chart .vega-bindings { order: -1; align-self: stretch; display: flex; flex-wrap: wrap;
  gap: 0.25rem 1.25rem; margin-bottom: 0.5rem; font-size: 0.9rem; }
.tt-chart .vega-bind, .tt-chart .vega-bind label, .tt-chart .vega-bind-radio { display: flex;
  flex-wrap: wrap; align-items: center; gap: 0.1rem 0.4rem; max-width: 100%; min-width: 0; }
.tt-chart .vega-bind select { max-width: 100%; min-width: 0; }
.tt-chart .vega-bind input[type="range"] { flex: 1 1 7rem; width: 9rem; min-width: 4rem;
  max-width: 100%; }
.tt-chart .vega-bind input[type="range"] + span { min-width: 2ch; }
.tt-chart option[hidden] { display: none; }
html[data-theme="dark"] .tt-chart { color-scheme: dark; }
.tt-chart-error { color: #d55e00; }
.tt-values { margin-top: 0.25rem; font-size: 0.85rem; }
.tt-values summary { cursor: pointer; }
.tt-values-body { max-height: 20rem; overflow: auto; }
.tt-values table { border-collapse: collapse; margin: 0.25rem 0; }
.tt-values th, .tt-values td { padding: 0.1rem 0.5rem; border-bottom: 1px solid #8884;
  text-align: left; }
`;

  function addStyle() {
    if (document.getElementById("tt-chart-style")) return;
    const style = document.createElement("style");
    style.id = "tt-chart-style";
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  // ---- Loading Vega, once per page -------------------------------------------------------

  function loadScript(url) {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = url;
      script.onload = resolve;
      script.onerror = () => reject(new Error(`could not load ${url} (offline?)`));
      document.head.appendChild(script);
    });
  }

  function loadVegaEmbed() {
    if (typeof window.vegaEmbed === "function") return Promise.resolve(window.vegaEmbed);
    // Where RequireJS is present (classic Jupyter, VS Code), UMD files register themselves
    // with it instead of setting globals, so ask it for them (as Altair's template does).
    if (typeof window.define === "function" && window.define.amd && window.require) {
      return new Promise((resolve, reject) => {
        window.require.config({ paths: libraries });
        window.require(["vega-embed"], resolve, reject);
      });
    }
    return loadScript(libraries["vega"])
      .then(() => loadScript(libraries["vega-lite"]))
      .then(() => loadScript(libraries["vega-embed"]))
      .then(() => window.vegaEmbed);
  }

  function vegaEmbed() {
    tt.vegaEmbed =
      tt.vegaEmbed ||
      loadVegaEmbed().catch((error) => {
        tt.vegaEmbed = null; // let a later chart try again
        throw error;
      });
    return tt.vegaEmbed;
  }

  // ---- Theme -----------------------------------------------------------------------------

  function isDark() {
    const theme = document.documentElement.dataset.theme; // pydata-sphinx-theme: dark | light
    if (theme) return theme === "dark";
    const body = document.body; // JupyterLab
    return Boolean(body && body.dataset.jpThemeLight === "false");
  }

  function watchTheme() {
    if (tt.themeObserver) return;
    tt.themeObserver = new MutationObserver(() => {
      const dark = isDark();
      for (const chart of charts) if (chart.dark !== dark) draw(chart);
    });
    const options = { attributes: true, attributeFilter: ["data-theme", "data-jp-theme-light"] };
    tt.themeObserver.observe(document.documentElement, options);
    if (document.body) tt.themeObserver.observe(document.body, options);
  }

  // ---- Drawing ---------------------------------------------------------------------------

  // The element just before `script` with this id (a chart shown twice has two), else any.
  function findBefore(script, id) {
    for (let node = script && script.previousElementSibling; node; ) {
      if (node.id === id) return node;
      node = node.previousElementSibling;
    }
    return document.getElementById(id);
  }

  tt.embed = function embed(id, options) {
    const script = document.currentScript;
    const element = findBefore(script, id);
    const specScript = findBefore(script, `${id}-spec`);
    if (!element || !specScript) return;
    addStyle();
    element.textContent = "";
    const chart = { id, element, options: options || {}, specText: specScript.textContent };
    chart.target = element.appendChild(document.createElement("div"));
    chart.values = element.appendChild(valuesTable(chart));
    if (window.ResizeObserver) new ResizeObserver(() => keepReachable(chart)).observe(element);
    chart.queue = Promise.resolve();
    // A re-executed notebook cell replaces its chart: forget the old one.
    for (let i = charts.length - 1; i >= 0; i--) {
      if (charts[i].id === id && !charts[i].element.isConnected) charts.splice(i, 1);
    }
    charts.push(chart);
    watchTheme();
    draw(chart);
  };

  // Top-level parameters the reader sets with a control: name -> current value.
  function controlValues(chart) {
    const values = {};
    if (!chart.view) return values;
    for (const param of chart.spec.params || []) {
      if (param.bind && !param.select) {
        try {
          values[param.name] = chart.view.signal(param.name);
        } catch {
          // not a signal of this view: leave it at its start value
        }
      }
    }
    return values;
  }

  function draw(chart) {
    chart.queue = chart.queue.then(() => drawNow(chart));
    return chart.queue;
  }

  async function drawNow(chart) {
    const { element, target } = chart;
    element.removeAttribute("data-drawn");
    const values = controlValues(chart); // where the reader left the controls
    // A fresh copy every time: Vega writes into the rows it is given.
    const spec = JSON.parse(chart.specText);
    chart.spec = spec;
    chart.dark = isDark();
    const options = {
      ...chart.options,
      config: chart.dark ? DARK_CONFIG : {},
      tooltip: { theme: chart.dark ? "dark" : "light" },
    };
    target.style.minHeight = `${target.offsetHeight}px`; // no jump while redrawing
    try {
      const embed = await vegaEmbed();
      if (chart.result) chart.result.finalize();
      chart.result = null;
      chart.view = null;
      const result = await embed(target, spec, options);
      chart.result = result;
      chart.view = result.view;
      tt.views[chart.id] = result.view;
      // Move the controls back as the reader would: from the first drawing, one change.
      await result.view.runAsync(null, () => {
        for (const [name, value] of Object.entries(values)) result.view.signal(name, value);
      });
      watchControls(chart);
      await result.view.runAsync();
      describe(chart);
      keepReachable(chart);
      chart.values.hidden = false;
      refreshValues(chart);
      element.dataset.drawn = "true";
    } catch (error) {
      showError(chart, error);
    } finally {
      target.style.minHeight = "";
    }
  }

  function showError(chart, error) {
    const message = document.createElement("p");
    message.className = "tt-chart-error";
    message.setAttribute("role", "alert");
    message.textContent = `This chart could not be drawn: ${(error && error.message) || error}.`;
    chart.target.replaceChildren(message);
    chart.values.hidden = true; // no values to list
    console.error(error);
  }

  // ---- Controls: per-preset limits, and redrawing the table ------------------------------

  function watchControls(chart) {
    const view = chart.view;
    const limits = (chart.spec.usermeta && chart.spec.usermeta.limits) || {};
    for (const [name, limit] of Object.entries(limits)) {
      const apply = () => applyLimit(chart, name, limit);
      try {
        view.addSignalListener(limit.by, apply);
      } catch {
        console.warn(`usermeta.limits.${name}: this chart has no parameter ${limit.by}`);
        continue;
      }
      apply();
    }
    const refresh = () =>
      view.runAsync().then(() => {
        describe(chart);
        keepReachable(chart);
        refreshValues(chart);
      });
    for (const name of Object.keys(controlValues(chart))) view.addSignalListener(name, refresh);
  }

  // usermeta.limits[name] = {by, max}: the control `name` goes up to max[value of `by`].
  function applyLimit(chart, name, limit) {
    const view = chart.view;
    const max = limit.max[view.signal(limit.by)];
    if (max == null || !(name in controlValues(chart))) return;
    const selector = `.vega-bindings [name="${CSS.escape(name)}"]`;
    for (const control of chart.target.querySelectorAll(selector)) {
      if (control.type === "range") control.max = String(max);
      for (const option of control.options || []) {
        const beyond = Number(option.value) > max;
        option.disabled = beyond;
        option.hidden = beyond;
      }
    }
    if (view.signal(name) > max) view.runAsync(null, () => view.signal(name, max));
  }

  // Vega names the chart (aria-label) with the spec's description; without one, use the titles.
  function describe(chart) {
    const body = chart.values.querySelector(".tt-values-body");
    const name = () => {
      const text = chart.view.description() || chart.id;
      return `Values of: ${text.length > 80 ? `${text.slice(0, 79)}…` : text}`;
    };
    body.setAttribute("aria-label", name());
    if (chart.spec.description) return;
    // The chart's own title first (Vega draws it after the parts' titles), then the parts'.
    const texts = new Set(chart.target.querySelectorAll(".root > g > .role-title text"));
    for (const text of chart.target.querySelectorAll(".role-title text")) texts.add(text);
    const titles = [...texts].map((text) => {
      const lines = text.querySelectorAll("tspan");
      return lines.length ? [...lines].map((line) => line.textContent).join(" ") : text.textContent;
    });
    if (titles.length) chart.view.description(titles.join(". "));
    body.setAttribute("aria-label", name());
  }

  // A chart wider than the column scrolls sideways; then the keyboard must reach it too.
  function keepReachable(chart) {
    const target = chart.target;
    if (target.scrollWidth > target.clientWidth) target.tabIndex = 0;
    else target.removeAttribute("tabindex");
  }

  // ---- The values table ------------------------------------------------------------------

  function valuesTable(chart) {
    const details = document.createElement("details");
    details.className = "tt-values";
    const summary = details.appendChild(document.createElement("summary"));
    summary.textContent = "Table of the values shown";
    const body = details.appendChild(document.createElement("div"));
    body.className = "tt-values-body";
    body.tabIndex = 0; // a scrolling box must be reachable from the keyboard
    body.setAttribute("role", "region");
    body.setAttribute("aria-label", `Values of chart ${chart.id}`); // describe() names it
    details.addEventListener("toggle", () => refreshValues(chart));
    return details;
  }

  // Every drawn item with a tooltip is one row; items whose tooltips have other keys make
  // another table. Identical rows (the same point under a hover rule...) appear once.
  function tooltipTables(view) {
    const tables = new Map();
    let count = 0;
    const visit = (node) => {
      if (node.tooltip != null && node.tooltip !== "") {
        const tip = typeof node.tooltip === "object" ? node.tooltip : { value: node.tooltip };
        const keys = Object.keys(tip);
        const key = JSON.stringify(keys);
        if (!tables.has(key)) tables.set(key, { keys, rows: new Map() });
        const row = keys.map((name) => asText(tip[name]));
        const rows = tables.get(key).rows;
        const rowKey = JSON.stringify(row);
        if (!rows.has(rowKey)) {
          rows.set(rowKey, row);
          count += 1;
        }
      }
      for (const child of node.items || []) visit(child);
    };
    visit(view.scenegraph().root);
    return { tables: [...tables.values()], count };
  }

  function asText(value) {
    return value !== null && typeof value === "object" ? JSON.stringify(value) : String(value);
  }

  function cell(kind, text) {
    const node = document.createElement(kind);
    node.textContent = text; // labels may look like HTML: always text
    return node;
  }

  function refreshValues(chart) {
    const body = chart.values.querySelector(".tt-values-body");
    if (!chart.values.open || !chart.view) return;
    const { tables, count } = tooltipTables(chart.view);
    const parts = [];
    if (count === 0) parts.push(cell("p", "This chart shows no values with labels."));
    if (count > MAX_ROWS) {
      parts.push(cell("p", `Showing the first ${MAX_ROWS} of ${count} values.`));
    }
    let left = MAX_ROWS;
    tables.forEach(({ keys, rows }, i) => {
      if (left <= 0) return;
      const table = document.createElement("table");
      if (tables.length > 1) {
        table.appendChild(cell("caption", `Part ${i + 1} of ${tables.length}`));
      }
      const head = table.appendChild(document.createElement("thead")).appendChild(
        document.createElement("tr"),
      );
      for (const name of keys) head.appendChild(cell("th", name)).scope = "col";
      const tbody = table.appendChild(document.createElement("tbody"));
      for (const row of rows.values()) {
        if (left-- <= 0) break;
        const tr = tbody.appendChild(document.createElement("tr"));
        for (const text of row) tr.appendChild(cell("td", text));
      }
      parts.push(table);
    });
    body.replaceChildren(...parts);
  }
}
