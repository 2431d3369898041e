// "Type any sentence": the book's pretrained encoder, run in the reader's browser.
//
// book/browser_model.py copies this file (with wordpiece.js) into _static/encoder/, beside the
// encoder it exports (encoder.int8.onnx, vocab.txt, anchors.json, manifest.json), and adds it to
// every page with a placeholder <div class="tt-typed"></div> (a markdown cell of a chapter).
// In each placeholder it puts a text box and a button that says how much the first run
// downloads. Nothing large is fetched before the reader clicks (only manifest.json, 2 kB, for
// the button's label). On the first click it loads, once per page:
//   - ONNX Runtime Web from jsDelivr (the WebAssembly build, one thread),
//   - the model and its vocabulary from _static/encoder/, and wordpiece.js (the tokenizer);
// then, on every click, it tokenizes the text, runs the model, and draws the page's own
// explorers for the sentence. It does not draw charts of its own: it copies the Vega-Lite spec
// of the page's attention explorer (views/explorers/attention.py) and of its real-model apple
// explorer (apple.py), puts the typed sentence's data in place of the presets, in exactly the
// rows the Python code writes (attention_explorer_data, apple_explorer_data), and hands the
// copy to the page's chart loader, transformerTutorial.embed (explorer.js). A menu beside the
// charts picks the word of the sentence the apple explorer follows.
//
// window.transformerTutorial.encode(text) runs the same path and resolves to
// {tokens, ids, attention: [layer][head][query][key], hidden: [layer 0..L][token][dim]}.
//
// Typed text only ever reaches the page as text (textContent, option labels, JSON given to
// Vega, which draws SVG text), never as markup.
(function () {
  "use strict";
  const tt = (window.transformerTutorial = window.transformerTutorial || {});
  if (tt.typed) return; // loaded twice: the first copy does the work

  const ORT_VERSION = "1.30.0"; // tests/browser/package.json pins the same
  const ORT_DIR = `https://cdn.jsdelivr.net/npm/onnxruntime-web@${ORT_VERSION}/dist/`;
  const ORT_SCRIPT = `${ORT_DIR}ort.wasm.min.js`; // the WebAssembly build only: 50 kB
  // What ONNX Runtime Web downloads besides: its WebAssembly module and the script that loads
  // it (tests/test_site_typed.py checks these sizes against the pinned package).
  const ORT_BYTES = 50196 + 24381 + 14239897;

  const script = document.currentScript;
  const BASE = new URL(".", (script && script.src) || document.baseURI).href; // _static/encoder/
  const DEFAULT_SENTENCE = "My apple laptop needs an update";

  // ---- Loading, once per page ------------------------------------------------------------

  function loadScript(url) {
    return new Promise((resolve, reject) => {
      const element = document.createElement("script");
      element.src = url;
      element.onload = resolve;
      element.onerror = () => reject(new Error(`could not load ${url} (offline?)`));
      document.head.appendChild(element);
    });
  }

  async function fetchOk(url) {
    let response;
    try {
      response = await fetch(url);
    } catch {
      throw new Error(`could not load ${url} (offline?)`);
    }
    if (!response.ok) throw new Error(`could not load ${url}: HTTP ${response.status}`);
    return response;
  }

  let manifestPromise = null;
  function manifest() {
    manifestPromise =
      manifestPromise ||
      fetchOk(`${BASE}manifest.json`)
        .then((response) => response.json())
        .catch((error) => {
          manifestPromise = null;
          throw error;
        });
    return manifestPromise;
  }

  // The model's bytes, reporting progress (bytes so far) as they arrive.
  async function fetchBytes(url, expected, progress) {
    const response = await fetchOk(url);
    if (!response.body || !response.body.getReader) {
      return new Uint8Array(await response.arrayBuffer());
    }
    const reader = response.body.getReader();
    const chunks = [];
    let received = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      received += value.length;
      progress(received);
    }
    if (expected && received !== expected) {
      throw new Error(`${url} has ${received} bytes, the manifest says ${expected}`);
    }
    const bytes = new Uint8Array(received);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.length;
    }
    return bytes;
  }

  let modelPromise = null;
  let anchorsLoaded = null; // anchors.json, once loaded: the apple explorer's anchor words
  const loadedAnchors = () => anchorsLoaded;
  const listeners = new Set(); // progress messages for every box on the page

  function say(message) {
    for (const listener of listeners) listener(message);
  }

  class LoadError extends Error {}

  function loadModel() {
    modelPromise =
      modelPromise ||
      startLoading().catch((error) => {
        throw new LoadError((error && error.message) || String(error));
      });
    modelPromise.catch(() => {
      modelPromise = null; // a later click tries again
    });
    return modelPromise;
  }

  async function startLoading() {
    const started = performance.now();
    const info = await manifest();
    const files = info.files;
    const modelBytes = files["encoder.int8.onnx"].bytes;
    say(`Loading ONNX Runtime (${megabytes(ORT_BYTES)}) and the model (${megabytes(modelBytes)})…`);
    const runtime = (window.ort ? Promise.resolve() : loadScript(ORT_SCRIPT)).then(() => {
      if (!window.ort) throw new Error("ONNX Runtime Web did not load");
      const ort = window.ort;
      ort.env.wasm.numThreads = 1; // no SharedArrayBuffer needed; same sums on every run
      ort.env.wasm.proxy = false;
      ort.env.wasm.wasmPaths = ORT_DIR;
      return ort;
    });
    const tokenizerReady = (tt.wordpiece ? Promise.resolve() : loadScript(`${BASE}wordpiece.js`))
      .then(() => fetchOk(`${BASE}vocab.txt`))
      .then((response) => response.text())
      .then((text) => tt.wordpiece.makeTokenizer(text));
    const anchorsReady = fetchOk(`${BASE}anchors.json`).then((response) => response.json());
    const bytes = await fetchBytes(`${BASE}encoder.int8.onnx`, modelBytes, (received) =>
      say(`Downloading the model: ${megabytes(received)} of ${megabytes(modelBytes)}…`),
    );
    const ort = await runtime;
    say("Starting the model…");
    const session = await ort.InferenceSession.create(bytes, {
      executionProviders: ["wasm"],
      graphOptimizationLevel: "all",
    });
    const [tokenizer, anchors] = await Promise.all([tokenizerReady, anchorsReady]);
    anchorsLoaded = anchors;
    timings.loadMs = performance.now() - started;
    return { ort, session, tokenizer, anchors, manifest: info };
  }

  function megabytes(bytes) {
    return `${(bytes / 1e6).toFixed(1)} MB`;
  }

  // ---- Running the model -----------------------------------------------------------------

  const timings = { loadMs: null, runs: [] }; // tt.typed.timings: what the last runs took
  let queue = Promise.resolve(); // one run at a time: a session runs one input at a time

  // Tokenize `text` and run the encoder: tokens, IDs, attention (L, H, T, T) as nested arrays
  // [layer][head][query][key], hidden states (L + 1, T, D) as [layer][token][dim].
  function encode(text) {
    const run = queue.then(async () => {
      if (typeof text !== "string") throw new TypeError("text must be a string");
      const model = await loadModel();
      const started = performance.now();
      const { tokens, ids } = model.tokenizer.encode(text);
      const limit = model.manifest.model.max_length;
      if (ids.length > limit) {
        throw new TooLong(
          `This text is ${ids.length} word pieces long (with [CLS] and [SEP]); the model reads ` +
            `at most ${limit}. Shorten it.`,
        );
      }
      const input = new model.ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [
        1,
        ids.length,
      ]);
      const output = await model.session.run({ ids: input });
      const result = {
        tokens,
        ids,
        attention: nest(output.attention.data, output.attention.dims),
        hidden: nest(output.hidden.data, output.hidden.dims),
      };
      timings.runs.push({ tokens: ids.length, ms: performance.now() - started });
      return result;
    });
    queue = run.catch(() => {});
    return run;
  }

  class TooLong extends Error {}

  // A flat Float32Array of shape `dims` as nested arrays of plain numbers.
  function nest(data, dims) {
    const build = (offset, level) => {
      if (level === dims.length - 1) return Array.from(data.subarray(offset, offset + dims[level]));
      const stride = dims.slice(level + 1).reduce((a, b) => a * b, 1);
      const rows = [];
      for (let i = 0; i < dims[level]; i++) rows.push(build(offset + i * stride, level + 1));
      return rows;
    };
    return build(0, 0);
  }

  // ---- Words: the tokens of each word of the sentence ------------------------------------

  // [{word, positions}] for every word between [CLS] and [SEP]: a token starting with "##"
  // continues the word before it (WordPiece's continuing pieces).
  function words(tokens) {
    const found = [];
    for (let position = 1; position < tokens.length - 1; position++) {
      const token = tokens[position];
      const last = found[found.length - 1];
      if (token.startsWith("##") && last) {
        last.word += token.slice(2);
        last.positions.push(position);
      } else {
        found.push({ word: token, positions: [position] });
      }
    }
    const seen = {};
    for (const entry of found) {
      seen[entry.word] = (seen[entry.word] || 0) + 1;
      entry.label = seen[entry.word] > 1 ? `${entry.word} (${seen[entry.word]})` : entry.word;
    }
    return found;
  }

  function defaultWord(found) {
    const apple = found.findIndex((entry) => entry.word === "apple");
    if (apple >= 0) return apple;
    const longest = found.reduce(
      (best, entry, index) => (entry.word.length > found[best].word.length ? index : best),
      0,
    );
    return found.length ? longest : -1;
  }

  // ---- Text layout, as the Python explorers estimate it ----------------------------------

  const NARROW = new Set("iljtfrI.,:;!|'()[] ");
  const WIDE = new Set("mwMW@");

  // apple.py text_width: an upper estimate of a text's width in pixels.
  function textWidth(text, size, bold = false) {
    let ems = 0;
    for (const char of text) {
      const upper = char !== char.toLowerCase() && char === char.toUpperCase();
      ems += NARROW.has(char) ? 0.3 : WIDE.has(char) ? 0.85 : upper ? 0.72 : 0.58;
    }
    return ems * size * (bold ? 1.12 : 1.0);
  }

  // Python's textwrap.wrap(text, width) for plain words.
  function wrap(text, width) {
    const lines = [];
    let line = "";
    for (const word of text.split(/\s+/).filter(Boolean)) {
      if (line && line.length + 1 + word.length > width) {
        lines.push(line);
        line = word;
      } else {
        line = line ? `${line} ${word}` : word;
      }
    }
    if (line) lines.push(line);
    return lines;
  }

  const round = (value, decimals) => {
    const scale = 10 ** decimals;
    return Math.round(value * scale) / scale;
  };

  function cut(text, length) {
    const chars = Array.from(text);
    return chars.length > length ? `${chars.slice(0, length - 1).join("")}…` : text;
  }

  // Every object in a spec (views, encodings...), depth first.
  function* objects(node) {
    if (Array.isArray(node)) {
      for (const item of node) yield* objects(item);
    } else if (node && typeof node === "object") {
      yield node;
      for (const [key, value] of Object.entries(node)) if (key !== "datasets") yield* objects(value);
    }
  }

  // ---- Finding the page's explorers ------------------------------------------------------

  function pageSpecs() {
    const found = [];
    for (const element of document.querySelectorAll('script[type="application/json"][id$="-spec"]')) {
      if (element.closest(".tt-typed")) continue; // our own copies
      try {
        found.push({ id: element.id, spec: JSON.parse(element.textContent) });
      } catch {
        // not a chart's spec
      }
    }
    return found;
  }

  const paramNames = (spec) => new Set((spec.params || []).map((param) => param.name));

  // The attention explorer that shows a model of this shape (layers x heads), if any.
  function attentionSpec(specs, layers, heads) {
    for (const { spec } of specs) {
      const names = paramNames(spec);
      if (!["sentence", "layer", "head", "tokens_q", "tokens_k"].every((n) => names.has(n))) continue;
      const tokenRows = datasetWith(spec, "qt");
      const layerParam = spec.params.find((param) => param.name === "layer");
      const headParam = spec.params.find((param) => param.name === "head");
      if (
        tokenRows &&
        layerParam.bind.options.length >= layers &&
        headParam.bind.max >= heads
      ) {
        return spec;
      }
    }
    return null;
  }

  // The apple explorer whose plane is the real model's (anchor words from anchors.json).
  function appleSpec(specs, anchors) {
    const wanted = Object.values(anchors.groups).flat().sort().join(" ");
    for (const { spec } of specs) {
      const names = paramNames(spec);
      if (!names.has("preset") || !names.has("attention_tokens")) continue;
      const rows = spec.datasets && spec.datasets[datasetWith(spec, "lx")];
      if (rows && rows.map((row) => row.word).sort().join(" ") === wanted) return spec;
    }
    return null;
  }

  // The name of the spec's dataset whose rows have `field`.
  function datasetWith(spec, field) {
    for (const [name, rows] of Object.entries(spec.datasets || {})) {
      if (rows.length && field in rows[0]) return name;
    }
    return null;
  }

  // ---- The attention explorer, for one typed sentence ------------------------------------

  // attention.py constants
  const MAX_WIDTH = 348;
  const LABEL_LIMIT = 80;
  const GRID_SPACING = 8;
  const GRID_INSET = 8;

  // attention.py _cell_sizes for one record: the big heatmap's and the grid's cell sizes.
  function cellSizes(tokens, heads, columns) {
    const labels = Math.min(LABEL_LIMIT, Math.max(0, ...tokens.map((t) => textWidth(t, 10))));
    const firstKey = Math.min(LABEL_LIMIT, textWidth(tokens[0], 10));
    const room = Math.max(labels + 26, 0.65 * firstKey + 5 - 8 / 2);
    const clip = (value, low, high) => Math.min(high, Math.max(low, value));
    const main = clip(Math.floor((MAX_WIDTH - 1 - room) / tokens.length), 8, 26);
    const widest = Math.min(heads, columns) * tokens.length;
    const grid = Math.floor((MAX_WIDTH - GRID_INSET - (columns - 1) * GRID_SPACING) / widest);
    return [main, clip(grid, 2, 12)];
  }

  // attention_explorer_data's rows for one record (r = 0): weights rounded to 3 decimals.
  function attentionRows(result) {
    const weights = [];
    result.attention.forEach((layer, l) =>
      layer.forEach((head, h) =>
        head.forEach((row, q) => weights.push({ r: 0, l, h, q, w: row.map((w) => round(w, 3)) })),
      ),
    );
    return { weights, tokens: [{ r: 0, qt: result.tokens.slice(), kt: result.tokens.slice() }] };
  }

  function typedAttentionSpec(source, result, text, keep) {
    const spec = JSON.parse(JSON.stringify(source));
    const layers = result.attention.length;
    const heads = result.attention[0].length;
    const rows = attentionRows(result);
    const weightsName = datasetWith(spec, "w");
    const tokensName = datasetWith(spec, "qt");
    const mixed = paramNames(spec).has("record_layers");
    if (mixed) {
      // The note above the heatmap names the model: copy it from a preset of this model.
      const model = spec.datasets[tokensName].find((row) => row.nl === layers && row.nh === heads);
      for (const field of ["m", "nl", "nh", "ln", "nt"]) rows.tokens[0][field] = model[field];
    }
    spec.datasets[weightsName] = rows.weights;
    spec.datasets[tokensName] = rows.tokens;
    for (const param of spec.params) {
      if (param.name === "sentence") {
        param.value = 0;
        param.bind.options = [0];
        param.bind.labels = [cut(`your sentence: ${text}`, 80)];
      } else if (param.name === "layer" && keep.layer != null) {
        param.value = Math.min(keep.layer, layers - 1);
      } else if (param.name === "head" && keep.head != null) {
        param.value = Math.min(keep.head, heads);
      } else if (param.name === "tokens_q" || param.name === "tokens_k") {
        param.value = [result.tokens.slice()];
      } else if (param.name === "record_layers") {
        param.value = [layers];
      } else if (param.name === "record_heads") {
        param.value = [heads];
      }
    }
    spec.usermeta = {
      limits: {
        layer: { by: "sentence", max: [layers - 1] },
        head: { by: "sentence", max: [heads] },
      },
    };
    // Cell sizes for this sentence's length, as attention_explorer computes them.
    const facet = [...objects(spec)].find((node) => node.facet && node.spec);
    const columns = (facet && facet.columns) || 4;
    const [main, grid] = cellSizes(result.tokens, heads, columns);
    for (const node of objects(spec)) {
      if (node.title === "The chosen head" && node.width && node.width.step) {
        node.width = { step: main };
        node.height = { step: main };
      }
    }
    if (facet) {
      facet.spec.width = { step: grid };
      facet.spec.height = { step: grid };
    }
    const name = (tt.typed.modelName || "the model").trim();
    spec.title = {
      ...spec.title,
      text: wrap(`Your sentence on ${name}: attention weights, every layer and head`, 40),
    };
    return spec;
  }

  // ---- The apple explorer, for one word of the typed sentence ----------------------------

  // apple.py constants
  const PLANE_SIZE = 270;
  const LABEL_FONT = 11;
  const DIRECTIONS = [[1, 0], [-1, 0], [0, -1], [0, 1], [1, -1], [1, 1], [-1, -1], [-1, 1]];

  function cosine(a, b) {
    let dot = 0;
    let aa = 0;
    let bb = 0;
    for (let i = 0; i < a.length; i++) {
      dot += a[i] * b[i];
      aa += a[i] * a[i];
      bb += b[i] * b[i];
    }
    return dot / Math.max(Math.sqrt(aa) * Math.sqrt(bb), 1e-8);
  }

  const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;

  // real_model.shift_record: after each layer, the word's mean cosine similarity to the anchor
  // words of each group (x: the first group, y: the second); and the word's attention over the
  // sentence, averaged over every layer, head and piece of the word.
  function shift(result, positions, anchors) {
    const groups = Object.values(anchors.groups);
    const trajectory = result.hidden.map((layer, l) => {
      const dims = layer[0].length;
      const vector = new Array(dims).fill(0);
      for (const p of positions) for (let d = 0; d < dims; d++) vector[d] += layer[p][d];
      for (let d = 0; d < dims; d++) vector[d] /= positions.length;
      return groups.map((words) => mean(words.map((word) => cosine(vector, anchors.vectors[word][l]))));
    });
    const T = result.tokens.length;
    const looked = new Array(T).fill(0);
    let count = 0;
    for (const layer of result.attention) {
      for (const head of layer) {
        for (const p of positions) {
          for (let k = 0; k < T; k++) looked[k] += head[p][k];
          count += 1;
        }
      }
    }
    return { trajectory, attention: looked.map((value) => value / count) };
  }

  // apple.py _LabelPlacer: free spots for labels in a size x size pixel plane.
  function placer(size, boxes = [], discs = []) {
    function clashes([x0, y0, x1, y1]) {
      let outside = Math.max(0, -x0) + Math.max(0, -y0) + Math.max(0, x1 - size);
      outside += Math.max(0, y1 - size);
      let overlap = 0;
      for (const b of boxes) {
        overlap +=
          Math.max(0, Math.min(x1, b[2]) - Math.max(x0, b[0]) + 2) *
          Math.max(0, Math.min(y1, b[3]) - Math.max(y0, b[1]) + 2);
      }
      for (const [x, y, radius] of discs) {
        const nearX = Math.min(Math.max(x, x0), x1);
        const nearY = Math.min(Math.max(y, y0), y1);
        overlap += Math.max(0, radius + 1 - Math.hypot(x - nearX, y - nearY)) * 10;
      }
      return 100 * outside + overlap;
    }
    function place(x, y, width, height, gap) {
      let best = null;
      [0, 12, 26, 42, 60, 80].some((extra, step) => {
        for (const [dx, dy] of DIRECTIONS) {
          const scale = dx && dy ? 0.75 : 1.0;
          const cx = x + dx * ((gap + extra) * scale + width / 2);
          const cy = y + dy * ((gap + extra) * scale + height / 2);
          const box = [cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2];
          const clash = clashes(box);
          if (best === null || clash < best.clash) best = { clash, step, cx, cy, box };
          if (clash === 0) break;
        }
        return best.clash === 0;
      });
      const { step, cx, cy, box } = best;
      boxes.push(box);
      if (step === 0) return { cx, cy, line: null };
      const nearX = Math.min(Math.max(x, box[0]), box[2]);
      const nearY = Math.min(Math.max(y, box[1]), box[3]);
      return { cx, cy, line: [x, y, nearX, nearY] };
    }
    return { boxes, discs, place };
  }

  // apple.py _domain and _place_labels: one square domain; label spots and leader lines.
  function layOut(data) {
    const values = [...data.anchors, ...data.paths].flatMap((row) => [row.x, row.y]);
    const low = Math.min(...values);
    const high = Math.max(...values);
    const margin = 0.12 * (high - low || 1.0);
    const domain = [round(low - margin, 2), round(high + margin, 2)];
    const scale = PLANE_SIZE / (domain[1] - domain[0]);
    const pixels = (x, y) => [(x - domain[0]) * scale, (domain[1] - y) * scale];
    const units = (px, py) => [round(domain[0] + px / scale, 3), round(domain[1] - py / scale, 3)];
    const leaders = [];
    const leader = (r, line) => {
      if (!line) return;
      const [x, y] = units(line[0], line[1]);
      const [x2, y2] = units(line[2], line[3]);
      leaders.push({ r, x, y, x2, y2 });
    };
    const shared = placer(PLANE_SIZE);
    for (const row of data.anchors) shared.discs.push([...pixels(row.x, row.y), 6]);
    for (const row of data.paths) shared.discs.push([...pixels(row.x, row.y), 4]);
    for (const row of data.ends) {
      shared.discs.push([...pixels(row.x0, row.y0), 8], [...pixels(row.x1, row.y1), 9]);
    }
    for (const row of data.anchors) {
      const width = textWidth(row.word, LABEL_FONT);
      const spot = shared.place(...pixels(row.x, row.y), width, LABEL_FONT + 2, 7);
      [row.lx, row.ly] = units(spot.cx, spot.cy);
      leader(-1, spot.line);
    }
    for (const row of data.ends) {
      const own = placer(PLANE_SIZE, shared.boxes.slice(), shared.discs.slice());
      const ends = [
        ["0", row.static_text, 9],
        ["1", row.context_text, 10],
      ];
      for (const [end, text, gap] of ends) {
        const width = textWidth(text, LABEL_FONT, true);
        const spot = own.place(...pixels(row[`x${end}`], row[`y${end}`]), width, LABEL_FONT + 2, gap);
        const [x, y] = units(spot.cx, spot.cy);
        if (end === "0") [row.sx, row.sy] = [x, y];
        else [row.cx, row.cy] = [x, y];
        leader(row.r, spot.line);
      }
    }
    data.leaders = leaders.length ? leaders : [{ r: -2, x: 0, y: 0, x2: 0, y2: 0 }];
    return domain;
  }

  // apple_explorer_data's rows for one record (r = 0), labels placed.
  function appleRows(result, entry, anchors) {
    const { trajectory, attention } = shift(result, entry.positions, anchors);
    const path = trajectory.map(([x, y]) => [round(x, 3), round(y, 3)]);
    const n = path.length;
    const dx = trajectory[n - 1][0] - trajectory[n - 2][0];
    const dy = trajectory[n - 1][1] - trajectory[n - 2][1];
    const data = {
      anchors: anchors.points.map((point) => ({
        word: point.word,
        group: point.group,
        x: round(point.x, 3),
        y: round(point.y, 3),
      })),
      paths: path.map(([x, y], step) => ({ r: 0, step, x, y })),
      ends: [
        {
          r: 0,
          word: entry.word,
          x0: path[0][0],
          y0: path[0][1],
          x1: path[n - 1][0],
          y1: path[n - 1][1],
          angle: round((Math.atan2(dx, dy) * 180) / Math.PI, 1),
          static_text: `${entry.word} (static)`,
          context_text: `${entry.word} (in context)`,
        },
      ],
      attention: [{ r: 0, tokens: result.tokens.slice(), a: attention.map((a) => round(a, 3)) }],
    };
    const domain = layOut(data);
    return { data, domain };
  }

  function typedAppleSpec(source, result, entry, anchors, text) {
    const spec = JSON.parse(JSON.stringify(source));
    const oldWord = spec.datasets[datasetWith(spec, "x0")][0].word;
    const { data, domain } = appleRows(result, entry, anchors);
    const names = {
      anchors: datasetWith(spec, "lx"),
      paths: datasetWith(spec, "step"),
      ends: datasetWith(spec, "x0"),
      attention: datasetWith(spec, "a"),
      leaders: datasetWith(spec, "x2"),
    };
    for (const [kind, name] of Object.entries(names)) if (name) spec.datasets[name] = data[kind];
    for (const node of objects(spec)) {
      // the plane's square domain (the bars' scale, 0 to 1, has no `nice`)
      if (node.scale && node.scale.nice === false && Array.isArray(node.scale.domain)) {
        node.scale.domain = domain.slice();
      }
      // the plane's title names the word: 'apple' -> the chosen word
      if (Array.isArray(node.title) && node.title.join(" ").includes(`'${oldWord}'`)) {
        node.title = wrap(node.title.join(" ").replace(`'${oldWord}'`, `'${entry.word}'`), 34);
      }
    }
    for (const param of spec.params) {
      if (param.name === "preset") {
        param.value = 0;
        param.bind.options = [0];
        param.bind.labels = [cut(`your sentence: ${text}`, 80)];
      } else if (param.name === "attention_tokens") {
        param.value = [result.tokens.slice()];
      }
    }
    const name = (tt.typed.modelName || "the model").trim();
    spec.title = {
      ...spec.title,
      text: wrap(`Your sentence on ${name}: where the layers move '${entry.word}'`, 40),
    };
    spec.description =
      "A plane of word vectors: anchor words as dots coloured by group, the static vector of " +
      `'${entry.word}' (a ring) and an arrow to its vector in your sentence, through one point ` +
      "per layer. Below, how much the word attended to each token.";
    return spec;
  }

  // ---- Charts in the box -----------------------------------------------------------------

  // Chart ids look like the book's (vega- and 16 hex digits), so that every tool that finds
  // the book's charts finds these too: one id per sentence and explorer.
  let chartCount = 0;
  function chartId(kind) {
    chartCount += 1;
    return `vega-7e${kind}${chartCount.toString(16).padStart(13, "0")}`;
  }

  // Put `spec` into `slot` as a chart with this id and let the page's loader draw it.
  function drawChart(slot, id, spec) {
    const old = slot.querySelector(".tt-chart");
    if (old && tt.views && tt.views[old.id]) {
      tt.views[old.id].finalize();
      delete tt.views[old.id];
    }
    const element = document.createElement("div");
    element.id = id;
    element.className = "tt-chart";
    const specScript = document.createElement("script");
    specScript.type = "application/json";
    specScript.id = `${id}-spec`;
    specScript.textContent = JSON.stringify(spec); // a text node: nothing in it is parsed
    slot.replaceChildren(element, specScript);
    tt.embed(id, { actions: false, renderer: "svg" });
  }

  function signal(id, name) {
    try {
      return id && tt.views && tt.views[id] ? tt.views[id].signal(name) : null;
    } catch {
      return null;
    }
  }

  // ---- The box ---------------------------------------------------------------------------

  const STYLE = `
/* no side padding: the charts need the whole text column (358 px on a phone) */
.tt-typed { margin: 1rem 0 1.5rem; padding: 0.75rem 0; border-top: 1px solid #8886;
  border-bottom: 1px solid #8886; }
.tt-typed form { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; }
.tt-typed label { font-weight: 600; }
.tt-typed input[type="text"] { flex: 1 1 14rem; min-width: 0; max-width: 100%; padding: 0.3rem 0.4rem;
  font: inherit; color: inherit; background: transparent; border: 1px solid #888; border-radius: 0.25rem; }
.tt-typed button { padding: 0.3rem 0.7rem; font: inherit; border: 1px solid #888; border-radius: 0.25rem;
  cursor: pointer; color: inherit; background: #8882; }
.tt-typed button:disabled { cursor: progress; }
.tt-typed-status { margin: 0.5rem 0 0; font-size: 0.9rem; min-height: 1.2em; }
.tt-typed-error { margin: 0.5rem 0 0; color: #b34700; }
html[data-theme="dark"] .tt-typed-error { color: #ffa366; }
.tt-typed-tokens { font-size: 0.9rem; overflow-wrap: anywhere; }
.tt-typed-word { display: flex; flex-wrap: wrap; gap: 0.25rem 0.5rem; align-items: center; margin: 0.75rem 0 0; }
.tt-typed-word select { max-width: 100%; font: inherit; color: inherit; background: transparent; }
html[data-theme="dark"] .tt-typed select { color-scheme: dark; }
`;

  function addStyle() {
    if (document.getElementById("tt-typed-style")) return;
    const style = document.createElement("style");
    style.id = "tt-typed-style";
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  function element(tag, properties = {}, ...children) {
    const node = Object.assign(document.createElement(tag), properties);
    node.append(...children);
    return node;
  }

  let boxCount = 0;

  function setUpBox(box) {
    boxCount += 1;
    const inputId = `tt-typed-input-${boxCount}`;
    const input = element("input", {
      type: "text",
      id: inputId,
      value: box.dataset.sentence || DEFAULT_SENTENCE,
      spellcheck: false,
      autocomplete: "off",
    });
    const button = element("button", { type: "submit", className: "tt-typed-run" }, "Run");
    const form = element(
      "form",
      {},
      element("label", { htmlFor: inputId }, "Your sentence"),
      input,
      button,
    );
    const status = element("p", { className: "tt-typed-status" });
    status.setAttribute("role", "status");
    status.setAttribute("aria-live", "polite");
    const error = element("p", { className: "tt-typed-error", hidden: true });
    error.setAttribute("role", "alert");
    const tokensLine = element("p", { className: "tt-typed-tokens", hidden: true });
    const wordId = `tt-typed-word-${boxCount}`;
    const wordMenu = element("select", { id: wordId, className: "tt-typed-word-menu" });
    const wordRow = element(
      "p",
      { className: "tt-typed-word", hidden: true },
      element("label", { htmlFor: wordId }, "Word the apple explorer follows"),
      wordMenu,
    );
    const attentionSlot = element("div", { className: "tt-typed-attention" });
    const appleSlot = element("div", { className: "tt-typed-apple" });
    box.replaceChildren(form, status, error, tokensLine, attentionSlot, wordRow, appleSlot);

    const state = { result: null, text: "", entries: [], attentionId: null, appleId: null };
    const label = (costs) => {
      button.textContent = costs ? `Run the model in your browser (downloads ${costs})` : "Run";
    };
    label(modelPromise ? null : "about 39 MB");
    manifest()
      .then((info) => {
        tt.typed.modelName = info.model.name;
        const files = info.files["encoder.int8.onnx"].bytes + info.files["vocab.txt"].bytes;
        if (!modelPromise) {
          label(`${megabytes(files)}, and ${megabytes(ORT_BYTES)} of ONNX Runtime`);
        }
      })
      .catch(() => {}); // the click reports it

    const showError = (message) => {
      error.textContent = message;
      error.hidden = false;
      status.textContent = "";
    };

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = input.value;
      error.hidden = true;
      if (!text.trim()) {
        showError("Type a sentence first.");
        return;
      }
      if (!tt.embed) {
        showError("This page has no chart loader, so the model's output cannot be drawn here.");
        return;
      }
      button.disabled = true;
      listeners.add(statusListener);
      status.textContent = modelPromise ? "Running the model…" : "Loading…";
      try {
        const result = await encode(text);
        label(null);
        draw(text, result);
        const run = timings.runs[timings.runs.length - 1];
        status.textContent = `Ran ${result.tokens.length} tokens in ${Math.round(run.ms)} ms.`;
      } catch (failure) {
        console.warn(failure);
        clear();
        const reason = (failure && failure.message) || String(failure);
        if (failure instanceof TooLong) showError(reason);
        else if (failure instanceof LoadError) {
          showError(`The model could not be loaded: ${reason}. Click the button to try again.`);
        } else showError(`The model could not run on this text: ${reason}.`);
      } finally {
        listeners.delete(statusListener);
        button.disabled = false;
      }
    });
    function statusListener(message) {
      status.textContent = message;
    }

    function clear() {
      for (const slot of [attentionSlot, appleSlot]) {
        const old = slot.querySelector(".tt-chart");
        if (old && tt.views && tt.views[old.id]) {
          tt.views[old.id].finalize();
          delete tt.views[old.id];
        }
        slot.replaceChildren();
      }
      tokensLine.hidden = true;
      wordRow.hidden = true;
      state.result = null;
    }

    function draw(text, result) {
      state.result = result;
      state.text = text;
      tokensLine.textContent = `${result.tokens.length} tokens: ${result.tokens.join(" · ")}`;
      tokensLine.hidden = false;
      const specs = pageSpecs();
      const layers = result.attention.length;
      const heads = result.attention[0].length;
      const source = attentionSpec(specs, layers, heads);
      if (source) {
        const keep = { layer: signal(state.attentionId, "layer"), head: signal(state.attentionId, "head") };
        state.attentionId = chartId("a");
        drawChart(attentionSlot, state.attentionId, typedAttentionSpec(source, result, text, keep));
      } else {
        attentionSlot.replaceChildren(element("p", {}, "This page has no attention explorer to reuse."));
      }
      state.entries = words(result.tokens);
      const apple = loadedAnchors() && appleSpec(specs, loadedAnchors());
      if (!apple || state.entries.length === 0) {
        wordRow.hidden = true;
        appleSlot.replaceChildren();
        return;
      }
      const previous = wordMenu.value !== "" ? state.entries.findIndex((e) => e.label === wordMenu.selectedOptions[0].text) : -1;
      wordMenu.replaceChildren(
        ...state.entries.map((entry, index) => element("option", { value: String(index) }, entry.label)),
      );
      wordMenu.value = String(previous >= 0 ? previous : defaultWord(state.entries));
      wordRow.hidden = false;
      state.appleId = chartId("b");
      drawApple(apple);
    }

    function drawApple(source) {
      const entry = state.entries[Number(wordMenu.value)];
      const spec = typedAppleSpec(source, state.result, entry, loadedAnchors(), state.text);
      drawChart(appleSlot, state.appleId, spec);
    }

    // Another word: the same chart (same id), redrawn for it.
    wordMenu.addEventListener("change", () => {
      if (!state.result) return;
      const apple = appleSpec(pageSpecs(), loadedAnchors());
      if (apple) drawApple(apple);
    });
  }

  const api = {
    timings,
    version: ORT_VERSION,
    runtimeBytes: ORT_BYTES,
    modelName: null,
    words,
    setUpBox,
  };
  tt.typed = api;
  tt.encode = encode;

  function start() {
    addStyle();
    for (const box of document.querySelectorAll(".tt-typed")) setUpBox(box);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
