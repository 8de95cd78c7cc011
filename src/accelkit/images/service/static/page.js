// The search page of `accelkit images serve`. Plain DOM, no framework, no build step.
// Every text from the service or from the address goes in with textContent or an input's value
// (never as markup), so a file name, metadata value or URL parameter such as "<script>" stays
// text; the CSP forbids inline script besides.
//
// The search lives in the address: ?q=words or ?id=stored-id, and filter, k (top k), c
// (collection), min (the min score), auto=1 (cut at a clear gap), fold=1 (near-duplicates
// folded) and not=id (a result the search is pushed away from: "less like this"; repeatable). Every search writes it (history.pushState), so reload, back/forward and a
// pasted link run the same search again. An uploaded query image cannot travel in a link: the
// page says so, and the address then keeps the rest.
//
// Only the latest search is shown: each search (and each clearing of the grid) takes the next
// number, and an answer or error that comes back under an older number is dropped, so a slow
// earlier answer (back/forward or Enter pressed again quickly) never replaces a newer one. The
// address written with an answer is the search that was sent, not the boxes as edited since.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const KEY = "accelkit.images.key";
  const TOPK = { min: 1, max: 100, initial: 12 };
  const MAX_TEXT = 1000;
  const MAX_FILTER = 4096;
  const FOLD = 0.95; // the cosine at which the page folds near-duplicates (the CLI's default)
  const CLEARS_ITSELF = ["api-key", "filter"]; // boxes that Escape empties, and nothing else
  const state = { query: null, negatives: [], blobs: [], preview: null, results: [], searched: null, seq: 0 };
  const MAX_NEGATIVES = 16;

  function authHeaders() {
    const key = sessionStorage.getItem(KEY);
    return key ? { Authorization: "Bearer " + key } : {};
  }

  // One request to the API; throws an Error with the service's message, status and code.
  async function api(path, options = {}) {
    const response = await fetch(path, {
      ...options,
      headers: { ...authHeaders(), ...(options.headers || {}) },
    });
    if (response.status === 401) $("key-form").hidden = false;
    const isJson = (response.headers.get("content-type") || "").includes("json");
    const body = isJson ? await response.json() : null;
    if (!response.ok) {
      const error = new Error(
        body && body.error ? body.error.message : `${response.status} ${response.statusText}`
      );
      error.status = response.status;
      error.code = body && body.error ? body.error.code : "";
      throw error;
    }
    return body;
  }

  function show(id, text) {
    $(id).textContent = text || "";
  }

  function collection() {
    return $("collection").value;
  }

  function itemPath(id) {
    return `collections/${encodeURIComponent(collection())}/items/${encodeURIComponent(id)}/thumbnail`;
  }

  async function loadThumbnail(img, id) {
    try {
      const response = await fetch(itemPath(id), { headers: authHeaders() });
      if (!response.ok) throw new Error(String(response.status));
      const url = URL.createObjectURL(await response.blob());
      state.blobs.push(url);
      img.src = url;
    } catch (error) {
      img.classList.add("missing");
      img.alt = "no thumbnail";
    }
  }

  async function loadCollections() {
    try {
      const body = await api("collections");
      const select = $("collection");
      const previous = select.value || sessionStorage.getItem("accelkit.images.collection");
      select.replaceChildren();
      for (const name of body.collections) {
        const option = document.createElement("option");
        option.value = name;
        option.textContent = name;
        select.append(option);
      }
      if (!body.collections.length) {
        const option = document.createElement("option");
        option.value = "";
        option.textContent = "(default; made on the first insert)";
        select.append(option);
      }
      if (previous && body.collections.includes(previous)) select.value = previous;
      show("status", `${body.count} collection${body.count === 1 ? "" : "s"}`);
      show("error", "");
      return true;
    } catch (error) {
      show("error", error.message);
      return false;
    }
  }

  function sourceOf(hit) {
    const source = hit.metadata && hit.metadata.source;
    return typeof source === "string" && source ? source : hit.id;
  }

  function render(results) {
    for (const url of state.blobs) URL.revokeObjectURL(url);
    state.blobs = [];
    state.results = results;
    $("export-csv").disabled = $("export-json").disabled = !results.length;
    const list = $("results");
    list.replaceChildren();
    for (const hit of results) {
      const item = document.createElement("li");
      item.className = "result";
      item.tabIndex = 0;
      item.title = "search by this image (Enter)";
      const img = document.createElement("img");
      img.alt = "";
      const name = document.createElement("div");
      name.className = "name";
      name.textContent = sourceOf(hit);
      const score = document.createElement("div");
      score.className = "score";
      score.textContent = `score ${Number(hit.score).toFixed(4)}`;
      if (hit.similar && hit.similar.length) {
        const similar = document.createElement("span");
        similar.className = "similar";
        similar.textContent = ` +${hit.similar.length} similar`;
        similar.title = hit.similar.join("\n");
        score.append(similar);
      }
      const meta = document.createElement("dl");
      for (const [key, value] of Object.entries(hit.metadata || {})) {
        if (key === "source") continue;
        const term = document.createElement("dt");
        term.textContent = key;
        const detail = document.createElement("dd");
        detail.textContent = typeof value === "string" ? value : JSON.stringify(value);
        meta.append(term, detail);
      }
      const less = document.createElement("button");
      less.type = "button";
      less.className = "less";
      less.textContent = "less like this";
      less.title = "search again, pushed away from this result";
      less.addEventListener("click", (event) => {
        event.stopPropagation(); // not "search by this result"
        if (!state.negatives.includes(hit.id) && state.negatives.length < MAX_NEGATIVES) {
          state.negatives.push(hit.id);
        }
        showNegatives();
        search();
      });
      less.addEventListener("keydown", (event) => event.stopPropagation());
      item.append(img, name, score, meta, less);
      const searchByThis = () => {
        setQuery({ id: hit.id, name: sourceOf(hit) });
        search();
      };
      item.addEventListener("click", searchByThis);
      item.addEventListener("keydown", (event) => {
        if (event.key === "Enter") searchByThis();
        else moveFocus(item, event);
      });
      list.append(item);
      loadThumbnail(img, hit.id);
    }
  }

  // The scores of the answer before the cut, one bar each (best first), the kept ones in the
  // accent colour, and a line at the cut, so a user sees where it falls. Heights are set through
  // the CSSOM (element.style), which the CSP allows; no style attribute is written.
  function renderScores(cut) {
    const strip = $("score-strip");
    strip.replaceChildren();
    const scores = (cut && cut.scores) || [];
    $("scores").hidden = !scores.length;
    show("cut-message", (cut && cut.message) || "");
    if (!scores.length) return;
    const limit = cut.threshold;
    const values = limit === null || limit === undefined ? scores : scores.concat([limit]);
    const low = Math.min(...values), high = Math.max(...values);
    const span = high - low || 1;
    const percent = (value) => `${(5 + (90 * (value - low)) / span).toFixed(2)}%`;
    scores.forEach((value, i) => {
      const bar = document.createElement("div");
      bar.className = "bar " + (i < cut.kept ? "kept" : "dropped");
      bar.style.height = percent(value);
      bar.title = `#${i + 1}: ${Number(value).toFixed(4)}`;
      strip.append(bar);
    });
    if (limit !== null && limit !== undefined) {
      const line = document.createElement("div");
      line.className = "cut";
      line.style.bottom = percent(limit);
      line.title = `cut at ${Number(limit).toFixed(4)}`;
      strip.append(line);
    }
    const range = `scores ${Number(scores[scores.length - 1]).toFixed(4)} to ${Number(scores[0]).toFixed(4)}`;
    show(
      "score-caption",
      limit === null || limit === undefined
        ? `${range}, no cut`
        : `${range}; cut at ${Number(limit).toFixed(4)}` +
            (cut.auto_score !== null && cut.auto_score === limit ? " (a clear gap)" : "") +
            `: ${cut.kept} kept, ${cut.dropped} below`
    );
  }

  // Arrow keys move through the grid: left/right by one, up/down by a row (as many items as
  // share the first item's line), Home/End to the ends.
  function moveFocus(item, event) {
    const items = Array.from($("results").children);
    const at = items.indexOf(item);
    const columns = Math.max(1, items.filter((i) => i.offsetTop === items[0].offsetTop).length);
    const step = {
      ArrowLeft: -1,
      ArrowRight: 1,
      ArrowUp: -columns,
      ArrowDown: columns,
      Home: -at,
      End: items.length - 1 - at,
    }[event.key];
    if (step === undefined) return;
    event.preventDefault();
    const next = items[at + step];
    if (next) next.focus();
    else if (event.key === "ArrowUp") $("text").focus();
  }

  function showNegatives() {
    const n = state.negatives.length;
    show("negatives", n ? `pushed away from ${n} result${n === 1 ? "" : "s"} (Esc clears)` : "");
  }

  function setQuery(query) {
    state.query = query;
    state.negatives = []; // a new query starts without "less like this"
    showNegatives();
    const preview = $("query-preview");
    if (state.preview) URL.revokeObjectURL(state.preview);
    state.preview = null;
    preview.hidden = true;
    if (!query) {
      show("query-name", "or drop a query image here, or");
      return;
    }
    if (!query.text) $("text").value = "";
    show("query-name", query.file ? query.file.name : query.text ? "" : query.name);
    if (query.file) {
      state.preview = URL.createObjectURL(query.file);
      preview.src = state.preview;
      preview.hidden = false;
    } else if (query.id) {
      fetch(itemPath(query.id), { headers: authHeaders() })
        .then((response) => (response.ok ? response.blob() : null))
        .then((blob) => {
          if (!blob || state.query !== query) return;
          state.preview = URL.createObjectURL(blob);
          preview.src = state.preview;
          preview.hidden = false;
        })
        .catch(() => {});
    }
  }

  // -- the address -------------------------------------------------------------------------

  function topk() {
    return Number($("topk").value);
  }

  function setTopk(value) {
    const k = Number.isInteger(value) && value >= TOPK.min && value <= TOPK.max ? value : TOPK.initial;
    $("topk").value = String(k);
    show("topk-value", String(k));
  }

  // The min score box: null when empty; NaN when it holds something that is not a score in
  // [-1, 1] (the search says so instead of sending it).
  function minScore() {
    const text = $("min-score").value.trim();
    if (!text) return null;
    const value = Number(text);
    return Number.isFinite(value) && value >= -1 && value <= 1 ? value : NaN;
  }

  // The address of the search on the page (no image upload: it cannot travel in a link).
  function address() {
    const params = new URLSearchParams();
    const query = state.query;
    if (query && query.text) params.set("q", query.text);
    if (query && query.id) params.set("id", query.id);
    const filter = $("filter").value.trim();
    if (filter) params.set("filter", filter);
    params.set("k", String(topk()));
    if (collection()) params.set("c", collection());
    const min = minScore();
    if (min !== null && !Number.isNaN(min)) params.set("min", String(min));
    if ($("auto-cut").checked) params.set("auto", "1");
    if ($("fold").checked) params.set("fold", "1");
    for (const id of state.negatives) params.append("not", id);
    return "?" + params.toString();
  }

  function remember(replace, target = address()) {
    $("link-note").hidden = !(state.query && state.query.file);
    if (target === location.search) return;
    if (replace) history.replaceState(null, "", target);
    else history.pushState(null, "", target);
  }

  function characters(value, most) {
    return Array.from(value || "").slice(0, most).join("");
  }

  // Put a search from the address on the page (values only, never markup); true when it names
  // a query to run. Anything out of range is left at its default.
  function applyAddress() {
    const params = new URLSearchParams(location.search);
    const wanted = params.get("c");
    const names = Array.from($("collection").options).map((o) => o.value);
    if (wanted !== null && names.includes(wanted)) $("collection").value = wanted;
    else if (wanted !== null) show("error", "the collection in the address is not on this service");
    const k = params.get("k");
    setTopk(k !== null && /^[0-9]{1,3}$/.test(k) ? Number(k) : TOPK.initial);
    // at most as many characters as the service takes, counted as it counts them (code
    // points): a cut in UTF-16 units could split an emoji and send half of it, which it refuses
    $("filter").value = characters(params.get("filter"), MAX_FILTER);
    const min = params.get("min");
    const score = min !== null && /^-?[0-9]{0,1}(\.[0-9]{1,8})?$/.test(min) ? Number(min) : NaN;
    $("min-score").value = min !== null && min !== "" && score >= -1 && score <= 1 ? String(score) : "";
    $("auto-cut").checked = params.get("auto") === "1";
    $("fold").checked = params.get("fold") === "1";
    const text = characters(params.get("q"), MAX_TEXT);
    const id = params.get("id");
    $("text").value = text;
    if (text.trim()) setQuery({ text });
    else if (id) setQuery({ id, name: id });
    else setQuery(null);
    state.negatives = Array.from(new Set(params.getAll("not")))
      .filter((id) => id && id.length <= 200)
      .slice(0, MAX_NEGATIVES);
    showNegatives();
    return Boolean(state.query);
  }

  // -- search --------------------------------------------------------------------------------

  function clearSearch() {
    state.seq += 1; // a search still on its way is not shown
    setQuery(null);
    $("text").value = "";
    $("filter").value = "";
    show("filter-error", "");
    show("error", "");
    show("status", "");
    render([]);
    renderScores(null);
    state.searched = null;
    remember(false);
  }

  async function search(options = {}) {
    const seq = ++state.seq;
    show("filter-error", "");
    show("error", "");
    const words = $("text").value.trim();
    if (words && !(state.query && state.query.text === words)) setQuery({ text: words });
    if (!state.query) {
      show("error", "type words, choose or drop a query image first");
      return;
    }
    const k = topk();
    const filter = $("filter").value.trim();
    const min = minScore();
    if (Number.isNaN(min)) {
      show("error", "min score: give a number between -1 and 1, or leave it empty");
      return;
    }
    const steering = {};
    if (min !== null) steering.min_score = min;
    if ($("auto-cut").checked) steering.auto_cut = true;
    if ($("fold").checked) steering.fold_duplicates = FOLD;
    if (state.negatives.length) steering.negative_ids = state.negatives.slice();
    let request;
    if (state.query.file) {
      const form = new FormData();
      form.append("file", state.query.file, state.query.file.name);
      form.append("topk", String(k));
      if (collection()) form.append("collection", collection());
      if (filter) form.append("filter", filter);
      for (const [key, value] of Object.entries(steering)) {
        form.append(key, Array.isArray(value) ? JSON.stringify(value) : String(value));
      }
      request = { method: "POST", body: form };
    } else {
      const body = state.query.text ? { text: state.query.text, topk: k } : { id: state.query.id, topk: k };
      if (collection()) body.collection = collection();
      if (filter) body.filter = filter;
      Object.assign(body, steering);
      request = {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "Content-Type": "application/json" },
      };
    }
    const sent = { target: address(), query: describeQuery() };
    show("status", "searching…");
    try {
      const body = await api("search", request);
      if (seq !== state.seq) return; // a newer search was started: its answer is the one shown
      render(body.results);
      renderScores(body.cut);
      state.searched = { collection: body.collection, topk: k, filter, query: sent.query, ...steering };
      const warned = (body.warnings || []).join("; ");
      show("status", `${body.results.length} results in ${body.took_ms} ms` + (warned ? ` (${warned})` : ""));
      remember(Boolean(options.fromAddress), sent.target);
    } catch (error) {
      if (seq !== state.seq) return; // so is its error
      show("status", "");
      // the service names the field first ("filter: …"); a filter's error goes beside its box
      if (error.code === "invalid_filter" || error.message.startsWith("filter")) {
        show("filter-error", error.message);
      } else {
        show("error", error.message);
      }
    }
  }

  function describeQuery() {
    const query = state.query;
    if (query.text) return { text: query.text };
    if (query.id) return { id: query.id };
    return { file: query.file.name };
  }

  // -- export --------------------------------------------------------------------------------

  // A CSV cell: quoted, quotes doubled; text a spreadsheet would read as a formula (= + - @,
  // or a tab or carriage return first) is prefixed with ' so that it stays text there too.
  // Numbers (a negative score) are numbers.
  function cell(value) {
    let text = value === undefined || value === null ? "" : String(value);
    if (typeof value !== "number" && /^[=+\-@\t\r]/.test(text)) text = "'" + text;
    return '"' + text.replace(/"/g, '""') + '"';
  }

  function rows() {
    return state.results.map((hit, i) => ({
      rank: i + 1,
      id: hit.id,
      source: sourceOf(hit),
      score: hit.score,
      metadata: hit.metadata || {},
    }));
  }

  function download(name, type, text) {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const link = document.createElement("a");
    link.href = url;
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  function exportName(extension) {
    const name = (state.searched && state.searched.collection) || "results";
    return `accelkit-search-${name.replace(/[^A-Za-z0-9_]/g, "_")}.${extension}`;
  }

  function exportCsv() {
    const lines = [["rank", "id", "source", "score", "metadata"].map(cell).join(",")];
    for (const row of rows()) {
      lines.push([row.rank, row.id, row.source, row.score, JSON.stringify(row.metadata)].map(cell).join(","));
    }
    download(exportName("csv"), "text/csv", lines.join("\r\n") + "\r\n");
  }

  function exportJson() {
    const document_ = { ...(state.searched || {}), results: rows() };
    download(exportName("json"), "application/json", JSON.stringify(document_, null, 2) + "\n");
  }

  // -- insert ----------------------------------------------------------------------------------

  async function insert(files) {
    if (!files.length) return;
    const form = new FormData();
    for (const file of files) form.append("files", file, file.name);
    if (collection()) form.append("collection", collection());
    form.append("create_collection", "true");
    show("insert-status", `adding ${files.length}…`);
    try {
      const body = await api("insert", { method: "POST", body: form });
      const failed = body.failures.length;
      show(
        "insert-status",
        `added ${body.inserted}` +
          (failed ? `; ${failed} failed, first: ${body.failures[0].error}` : "")
      );
      await loadCollections();
    } catch (error) {
      show("insert-status", error.message);
    }
  }

  function dropZone(zone, onFiles) {
    zone.addEventListener("dragover", (event) => {
      event.preventDefault();
      zone.classList.add("over");
    });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("over");
      onFiles(Array.from(event.dataTransfer.files));
    });
  }

  function typing(element) {
    return element && (element.tagName === "INPUT" || element.tagName === "SELECT" || element.tagName === "TEXTAREA");
  }

  async function fromAddress() {
    if (applyAddress()) await search({ fromAddress: true });
    else {
      state.seq += 1; // this address has no search: one still on its way is not shown
      render([]);
      renderScores(null);
      $("link-note").hidden = true;
    }
  }

  async function start() {
    // a file dropped anywhere else must not make the browser leave the page
    window.addEventListener("dragover", (event) => event.preventDefault());
    window.addEventListener("drop", (event) => event.preventDefault());
    dropZone($("query-drop"), (files) => {
      if (files.length) {
        setQuery({ file: files[0] });
        search();
      }
    });
    dropZone($("insert-drop"), insert);
    $("query-file").addEventListener("change", (event) => {
      if (event.target.files.length) {
        setQuery({ file: event.target.files[0] });
        search();
      }
    });
    $("insert-files").addEventListener("change", (event) => {
      insert(Array.from(event.target.files));
      event.target.value = "";
    });
    $("topk").addEventListener("input", () => show("topk-value", $("topk").value));
    $("collection").addEventListener("change", () => {
      sessionStorage.setItem("accelkit.images.collection", collection());
    });
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      search();
    });
    $("text").addEventListener("keydown", (event) => {
      if (event.key === "ArrowDown" && $("results").firstElementChild) {
        event.preventDefault();
        $("results").firstElementChild.focus();
      }
    });
    $("export-csv").addEventListener("click", exportCsv);
    $("export-json").addEventListener("click", exportJson);
    document.addEventListener("keydown", (event) => {
      if (event.key === "/" && !typing(document.activeElement)) {
        event.preventDefault();
        $("text").focus();
        $("text").select();
      } else if (event.key === "Escape" && CLEARS_ITSELF.includes(event.target.id)) {
        // Escape in the key or filter box empties that box only (and the filter's message)
        event.preventDefault();
        event.target.value = "";
        if (event.target.id === "filter") show("filter-error", "");
      } else if (event.key === "Escape") {
        // anywhere else (the words box, a result, the page) it clears the search
        event.preventDefault();
        clearSearch();
        $("text").focus();
      }
    });
    window.addEventListener("popstate", fromAddress);
    $("key-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, $("api-key").value);
      $("api-key").value = "";
      $("key-form").hidden = true;
      if (await loadCollections()) await fromAddress();
    });
    setTopk(TOPK.initial);
    if (await loadCollections()) await fromAddress();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
