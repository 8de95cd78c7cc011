// The search page of `accelkit images serve`. Plain DOM, no framework, no build step.
// Every text from the service goes in with textContent (never as markup), so a file name or
// metadata value such as "<script>" stays text; the CSP forbids inline script besides.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const KEY = "accelkit.images.key";
  const state = { query: null, blobs: [], preview: null };

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
    } catch (error) {
      show("error", error.message);
    }
  }

  function sourceOf(hit) {
    const source = hit.metadata && hit.metadata.source;
    return typeof source === "string" && source ? source : hit.id;
  }

  function render(results) {
    for (const url of state.blobs) URL.revokeObjectURL(url);
    state.blobs = [];
    const list = $("results");
    list.replaceChildren();
    for (const hit of results) {
      const item = document.createElement("li");
      item.className = "result";
      item.tabIndex = 0;
      item.title = "search by this image";
      const img = document.createElement("img");
      img.alt = "";
      const name = document.createElement("div");
      name.className = "name";
      name.textContent = sourceOf(hit);
      const score = document.createElement("div");
      score.className = "score";
      score.textContent = `score ${Number(hit.score).toFixed(4)}`;
      const meta = document.createElement("dl");
      for (const [key, value] of Object.entries(hit.metadata || {})) {
        if (key === "source") continue;
        const term = document.createElement("dt");
        term.textContent = key;
        const detail = document.createElement("dd");
        detail.textContent = typeof value === "string" ? value : JSON.stringify(value);
        meta.append(term, detail);
      }
      item.append(img, name, score, meta);
      const searchByThis = () => {
        setQuery({ id: hit.id, name: sourceOf(hit) });
        search();
      };
      item.addEventListener("click", searchByThis);
      item.addEventListener("keydown", (event) => {
        if (event.key === "Enter") searchByThis();
      });
      list.append(item);
      loadThumbnail(img, hit.id);
    }
  }

  function setQuery(query) {
    state.query = query;
    const preview = $("query-preview");
    if (state.preview) URL.revokeObjectURL(state.preview);
    state.preview = null;
    preview.hidden = true;
    show("query-name", query.file ? query.file.name : query.name);
    if (query.file) {
      state.preview = URL.createObjectURL(query.file);
      preview.src = state.preview;
      preview.hidden = false;
    } else {
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

  async function search() {
    show("filter-error", "");
    show("error", "");
    if (!state.query) {
      show("error", "choose or drop a query image first");
      return;
    }
    const topk = Number($("topk").value);
    const filter = $("filter").value.trim();
    let options;
    if (state.query.file) {
      const form = new FormData();
      form.append("file", state.query.file, state.query.file.name);
      form.append("topk", String(topk));
      if (collection()) form.append("collection", collection());
      if (filter) form.append("filter", filter);
      options = { method: "POST", body: form };
    } else {
      const body = { id: state.query.id, topk };
      if (collection()) body.collection = collection();
      if (filter) body.filter = filter;
      options = {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "Content-Type": "application/json" },
      };
    }
    show("status", "searching…");
    try {
      const body = await api("search", options);
      render(body.results);
      show("status", `${body.results.length} results in ${body.took_ms} ms`);
    } catch (error) {
      show("status", "");
      // the service names the field first ("filter: …"); a filter's error goes beside its box
      if (error.code === "invalid_filter" || error.message.startsWith("filter")) {
        show("filter-error", error.message);
      } else {
        show("error", error.message);
      }
    }
  }

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

  function start() {
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
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, $("api-key").value);
      $("api-key").value = "";
      $("key-form").hidden = true;
      loadCollections();
    });
    loadCollections();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
