// The what-if page. The state is the query string: the keys are `plan`'s long flags without
// dashes, exactly as GET /api/plan takes them, so the page's link, the API call and the CLI
// command are one and the same set of flags. Charts are hand-written SVG (see README: two
// charts, <title> tooltips, readable from the DOM by the browser tests).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const GiB = 1024 ** 3;
const ALIASES = {
  "tensor-parallel-size": "tp",
  "pipeline-parallel-size": "pp",
  "data-parallel-size": "dp",
};
const VERSIONS = ["0.6.6", "0.7.3", "0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.20.0", "0.27.0"];

let META = null;
let mode = "flags";
let seq = 0;
let timer = null;

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
const svg = (tag, attrs = {}) => {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};
const fmtInt = (n) => Number(n).toLocaleString("en-US");
const fmtGiB = (b) => (b / GiB).toFixed(2) + " GiB";
const fmt = (v) =>
  v === null || v === undefined
    ? "—"
    : typeof v === "number"
      ? Number.isInteger(v) ? fmtInt(v) : String(v)
      : typeof v === "object" ? JSON.stringify(v) : String(v);

// ---- state <-> form --------------------------------------------------------------------------

function formParams() {
  const out = [];
  const form = $("#form");
  for (const node of form.querySelectorAll("[name], .triplet")) {
    if (node.classList.contains("triplet")) {
      const vals = [...node.querySelectorAll("input")].map((i) => i.value.trim());
      if (vals.some((v) => v !== "")) out.push([node.dataset.triplet, vals.join(",")]);
      continue;
    }
    if (node.disabled || node.closest("[hidden]")) continue;
    const name = node.name;
    if (node.type === "checkbox") {
      if (node.checked) out.push([name, "1"]);
    } else if (node.dataset.repeat) {
      for (const line of node.value.split("\n")) if (line.trim()) out.push([name, line.trim()]);
    } else if (node.value.trim() !== "") {
      out.push([name, node.value.trim()]);
    }
  }
  return out;
}

function setForm(params) {
  const form = $("#form");
  for (const node of form.querySelectorAll("[name]")) {
    if (node.type === "checkbox") node.checked = false;
    else node.value = "";
  }
  for (const t of form.querySelectorAll(".triplet input")) t.value = "";
  const repeats = {};
  for (let [k, v] of params) {
    k = ALIASES[k] || k;
    const trip = form.querySelector(`.triplet[data-triplet="${CSS.escape(k)}"]`);
    if (trip) {
      const parts = v.split(",");
      trip.querySelectorAll("input").forEach((i, n) => (i.value = (parts[n] || "").trim()));
      continue;
    }
    const node = form.querySelector(`[name="${CSS.escape(k)}"]`);
    if (!node) continue;
    if (node.type === "checkbox") node.checked = !["0", "false", "off", "no"].includes(v.toLowerCase());
    else if (node.dataset.repeat) (repeats[k] = repeats[k] || []).push(v);
    else {
      if (node.tagName === "SELECT" && ![...node.options].some((o) => o.value === v))
        node.append(el("option", { value: v, text: v }));
      node.value = v;
    }
  }
  for (const [k, vs] of Object.entries(repeats)) form.querySelector(`[name="${k}"]`).value = vs.join("\n");
}

const toQuery = (params) => new URLSearchParams(params).toString();

function shellQuote(s) {
  return /^[A-Za-z0-9_./:=,@%+-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
}

function cliCommand(params) {
  const kinds = Object.fromEntries((META ? META.flags : []).map((f) => [f.name, f.kind]));
  const parts = ["inference-capacity", "plan"];
  for (const [k, v] of params) {
    if (kinds[k] === "bool") parts.push("--" + k);
    else parts.push("--" + k, shellQuote(v));
  }
  parts.push("-o", "json");
  return parts.join(" ");
}

// ---- the form's options from /api/meta ---------------------------------------------------------

function fillForm(meta) {
  const models = $("#models-list");
  for (const m of meta.models) models.append(el("option", { value: m }));
  const gpu = $("#f-gpu");
  gpu.append(el("option", { value: "", text: "(none: GPU memory below)" }));
  for (const g of meta.gpus) gpu.append(el("option", { value: g.name, text: `${g.name} (${g.gib} GiB)` }));
  const versions = $("#versions-list");
  for (const v of [...VERSIONS, meta.newest_engine_version]) versions.append(el("option", { value: v }));
  $("#f-engine-version").placeholder = meta.newest_engine_version;
  const byName = Object.fromEntries(meta.flags.map((f) => [f.name, f]));
  for (const sel of document.querySelectorAll("select[data-choices]")) {
    sel.append(el("option", { value: "", text: "(default)" }));
    for (const c of byName[sel.dataset.choices].choices || []) sel.append(el("option", { value: c, text: c }));
  }
  // a field for a flag this build's CLI does not have is hidden (and not sent)
  for (const node of document.querySelectorAll("[data-optional]")) {
    if (!byName[node.dataset.optional]) {
      node.hidden = true;
      if (node.name) node.disabled = true;
    }
  }
  // every other flag of `plan`, generated from the parser
  const shown = new Set(
    [...document.querySelectorAll("#form [name]")].map((n) => n.name)
      .concat([...document.querySelectorAll(".triplet")].map((t) => t.dataset.triplet)),
  );
  const aliasOf = new Set(Object.keys(ALIASES));
  const more = $("#more-flags");
  for (const f of meta.flags) {
    if (shown.has(f.name) || aliasOf.has(f.name)) continue;
    const id = "f-" + f.name;
    if (f.kind === "bool") {
      more.append(el("label", { class: "check", title: f.help },
        el("input", { id, name: f.name, type: "checkbox" }), " --" + f.name));
      continue;
    }
    more.append(el("label", { for: id, title: f.help, text: "--" + f.name + " " },
      el("span", { class: "hint", text: f.help })));
    if (f.choices) {
      const s = el("select", { id, name: f.name }, el("option", { value: "", text: "(default)" }));
      for (const c of f.choices) s.append(el("option", { value: c, text: c }));
      more.append(s);
    } else if (f.kind === "repeat") {
      more.append(el("textarea", { id, name: f.name, rows: "1", "data-repeat": "1", spellcheck: "false" }));
    } else {
      more.append(el("input", { id, name: f.name, type: "text", spellcheck: "false" }));
    }
  }
}

// ---- fetching ----------------------------------------------------------------------------------

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(update, 250);
}

async function update() {
  const params = formParams();
  const q = toQuery(params);
  history.replaceState(null, "", q ? "?" + q : location.pathname);
  $("#permalink").href = "/" + (q ? "?" + q : "");
  $("#permalink").textContent = location.origin + "/" + (q ? "?" + q : "");
  $("#cli").textContent = cliCommand(params);
  const mine = ++seq;
  document.body.dataset.status = "loading";
  let resp, body;
  try {
    resp = await fetch("/api/plan?" + q);
    body = await resp.text();
  } catch (e) {
    if (mine === seq) showError("cannot reach the server: " + e);
    return;
  }
  if (mine !== seq) return; // a newer input is on its way
  let data;
  try {
    data = JSON.parse(body);
  } catch (e) {
    showError("not JSON: " + body.slice(0, 200));
    return;
  }
  document.body.dataset.query = q;
  if (!resp.ok) {
    showError(data.error);
    return;
  }
  render(data, null);
  $("#patch").textContent =
    "# -o patch needs a manifest (an InferenceCapacity and its Deployment): use the Manifest tab.\n" +
    "# The vLLM flags the operator would set:\n" +
    Object.entries(data.recommended_flags || {}).map(([k, v]) => `--${k} ${v}`).join(" ");
  done(resp.headers.get("X-Exit-Code"));
}

async function planManifest(ev) {
  if (ev) ev.preventDefault();
  const text = $("#manifest").value;
  if (new Blob([text]).size > META.max_manifest_bytes) {
    showError(`manifest larger than ${META.max_manifest_bytes} bytes`);
    return;
  }
  const mine = ++seq;
  document.body.dataset.status = "loading";
  const resp = await fetch("/api/manifest", { method: "POST", body: text, headers: { "Content-Type": "application/yaml" } });
  const data = await resp.json();
  if (mine !== seq) return;
  document.body.dataset.query = "manifest";
  $("#cli").textContent = "inference-capacity plan FILE.yaml -o patch   # and -o json";
  $("#permalink").href = "/";
  $("#permalink").textContent = "(a manifest is not kept in the link)";
  if (data.error) {
    showError(data.error);
    return;
  }
  const plans = Array.isArray(data.plan) ? data.plan : [data.plan];
  render(plans[0], plans.length > 1 ? plans : null);
  $("#patch").textContent = data.patch || (data.patch_message || "") + ` (exit status ${data.patch_exit_code})`;
  done(String(data.json_exit_code));
}

function done(code) {
  document.body.dataset.exit = code || "";
  document.body.dataset.status = "ready";
}

function showError(msg) {
  const e = $("#error");
  e.textContent = msg;
  e.hidden = false;
  document.body.dataset.status = "error";
}

// ---- rendering ---------------------------------------------------------------------------------

function render(plan, many) {
  $("#error").hidden = true;
  window.lastPlan = plan;
  const st = $("#status");
  st.replaceChildren();
  if (many) st.append(el("p", { text: `${many.length} InferenceCapacity documents: showing ${plan.name}` }));
  if (plan.error) showError("inference-capacity: error: " + plan.error);
  if (plan.supported === false) {
    st.append(el("p", { class: "bad", text: plan.unsupported_message || "Supported=False: " +
      (plan.unsupported || []).map((u) => `${u.name}: ${u.why}`).join("; ") }));
  }
  const vs = plan.vllm_startup || {};
  if (plan.fits !== undefined) {
    st.append(el("p", { id: "fits", class: plan.fits ? "good" : "bad" },
      el("strong", { text: plan.fits ? "Fits" : "Does not fit" }),
      ` (${plan.reason}) ${plan.message || ""}`));
    st.append(el("p", { id: "starts", class: vs.starts ? "good" : "bad" },
      el("strong", { text: vs.starts ? "vLLM starts" : "vLLM will not start" }),
      vs.starts ? "" : " — " + (vs.error || "")));
  }
  if (plan.rollout) st.append(el("p", { id: "rollout", class: plan.rollout.safe ? "good" : "bad",
    text: `rollout: ${plan.rollout.safe ? "safe" : "not safe"} (${plan.rollout.reason}) ${plan.rollout.message}` }));
  if (plan.patch && plan.patch.action) st.append(el("p", { id: "action", text: `operator: ${plan.patch.action}${plan.patch.note ? " — " + plan.patch.note : ""}` }));
  renderSummary(plan);
  renderLedger(plan);
  renderStartup(plan);
  renderCurve(plan);
  renderLatencyKeys(plan);
  renderLevers(plan);
  renderOptions(plan);
  $("#raw").textContent = JSON.stringify(plan, null, 2);
}

function get(obj, path) {
  return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

const SUMMARY = [
  ["GPU", "gpu.name"],
  ["TP × PP", null],
  ["gpu-memory-utilization", "recommendation.gpuMemoryUtilization"],
  ["KV cache tokens", "kv.token_capacity"],
  ["GPU blocks", "vllm_startup.num_gpu_blocks"],
  ["KV bytes per token per rank", "kv.bytes_per_token_per_rank"],
  ["max-model-len", "recommendation.maxModelLen"],
  ["max-num-seqs", "recommendation.maxNumSeqs"],
  ["replicas", "recommendation.replicas"],
  ["P(preemption)", "sizing.preemption_probability"],
  ["ITL p50 (ms)", "latency.itl_ms_p50"],
  ["ITL p95 (ms)", "latency.itl_ms_p95"],
  ["output tokens/s", "latency.output_tokens_per_s"],
];

function renderSummary(plan) {
  const dl = $("#summary");
  dl.replaceChildren();
  for (const [label, path] of SUMMARY) {
    let v = path ? get(plan, path) : plan.parallelism
      ? `${plan.parallelism.tensor_parallel} × ${plan.parallelism.pipeline_parallel}` : undefined;
    if (v === undefined) continue;
    const dd = el("dd", { text: fmt(v) });
    if (path) {
      dd.dataset.path = path;
      dd.dataset.value = JSON.stringify(v);
    }
    dl.append(el("div", {}, el("dt", { text: label }), dd));
  }
}

function colour(name) {
  if (name.startsWith("weights")) return "c-weights";
  if (name.startsWith("kv_cache")) return "c-kv";
  if (name.startsWith("activation")) return "c-act";
  if (name.startsWith("cuda_graph")) return "c-graph";
  if (name === "non_torch") return "c-nontorch";
  if (name === "unallocated") return "c-free";
  if (name === "operational_headroom") return "c-headroom";
  return "c-margin";
}

function renderLedger(plan) {
  const box = $("#ledger");
  box.replaceChildren();
  const ranks = (plan.ledger && plan.ledger.ranks) || [];
  if (!ranks.length) {
    box.append(el("p", { class: "hint", text: "no ledger (no plan was made)" }));
    return;
  }
  const W = 900, H = 34, PAD = 70;
  for (const r of ranks) {
    const device = r.device_bytes || plan.ledger.deviceBytes;
    const items = r.items.filter((i) => i.bytes > 0);
    const used = items.filter((i) => i.name !== "unallocated").reduce((s, i) => s + i.bytes, 0);
    const over = Math.max(0, used - device);
    const scale = Math.max(device, used);
    const x = (b) => PAD + ((W - PAD - 10) * b) / scale;
    const s = svg("svg", { viewBox: `0 0 ${W} ${H + 26}`, class: "ledger", role: "list",
      "aria-label": `rank ${r.rank} ledger: ${fmtGiB(used)} of ${fmtGiB(device)}` });
    s.dataset.rank = r.rank;
    s.dataset.device = device;
    s.dataset.over = over;
    const lbl = svg("text", { x: 4, y: H / 2 + 5, class: "axis" });
    lbl.textContent = `rank ${r.rank}`;
    s.append(lbl);
    let at = 0;
    for (const i of items) {
      const rect = svg("rect", { x: x(at), y: 4, width: Math.max(0.5, x(at + i.bytes) - x(at)), height: H - 8,
        class: "seg " + colour(i.name), tabindex: "0", role: "listitem",
        "aria-label": `${i.name}: ${fmtInt(i.bytes)} bytes (${fmtGiB(i.bytes)})` });
      rect.dataset.name = i.name;
      rect.dataset.bytes = i.bytes;
      const t = svg("title");
      t.textContent = `${i.name}: ${fmtInt(i.bytes)} bytes (${fmtGiB(i.bytes)}), ${i.lifetime}, ${i.provenance}`;
      rect.append(t);
      const show = () => tooltip(rect, t.textContent);
      rect.addEventListener("mouseenter", show);
      rect.addEventListener("focus", show);
      rect.addEventListener("mouseleave", () => ($("#tooltip").hidden = true));
      rect.addEventListener("blur", () => ($("#tooltip").hidden = true));
      s.append(rect);
      at += i.bytes;
    }
    if (over > 0) {
      s.append(svg("rect", { x: x(device), y: 1, width: x(used) - x(device), height: H - 2, class: "over" }));
      const ot = svg("text", { x: x(device) + 4, y: H + 20, class: "over-label" });
      ot.textContent = `over-committed by ${fmtInt(over)} bytes (${fmtGiB(over)})`;
      s.append(ot);
    }
    s.append(svg("line", { x1: x(device), x2: x(device), y1: 0, y2: H, class: "device" }));
    const dt = svg("text", { x: Math.min(x(device), W - 160), y: H + 20, class: "axis" });
    dt.textContent = over > 0 ? "" : `device ${fmtGiB(device)}`;
    s.append(dt);
    box.append(s);
  }
  // the legend: one entry per item of rank 0, with its value
  const legend = el("ul", { class: "legend" });
  for (const i of ranks[0].items) {
    legend.append(el("li", {}, el("span", { class: "sw " + colour(i.name) }),
      `${i.name} ${fmtGiB(i.bytes)}`));
  }
  box.append(legend);
}

function tooltip(target, text) {
  const tip = $("#tooltip");
  tip.textContent = text;
  const r = target.getBoundingClientRect();
  tip.style.left = `${window.scrollX + r.left}px`;
  tip.style.top = `${window.scrollY + r.bottom + 4}px`;
  tip.hidden = false;
}

function renderStartup(plan) {
  const j = plan.vllm_startup;
  if (!j) {
    $("#startup").textContent = "(no prediction)";
    return;
  }
  const f2 = (v) => Number(v).toFixed(2);
  $("#startup").textContent = [
    `Model loading took ${f2(j.weights_gib)} GiB; activation peak ${f2(j.activation_peak_gib)} GiB; ` +
      `non-torch ${f2(j.non_torch_gib)} GiB; CUDA graphs ${f2(j.cuda_graph_gib)} GiB`,
    `Available KV cache memory: ${f2(j.available_kv_cache_gib)} GiB (requested ${f2(j.requested_gib)} GiB = ` +
      `${j.gpu_memory_utilization} × total)`,
    `GPU KV cache size: ${fmtInt(j.kv_cache_tokens)} tokens (${fmtInt(j.num_gpu_blocks)} blocks), ` +
      `Maximum concurrency for ${fmtInt(j.max_model_len)} tokens per request: ${f2(j.max_concurrency)}x`,
    `starts: ${j.starts ? "yes" : "NO — " + j.error}`,
  ].join("\n");
}

function renderCurve(plan) {
  const box = $("#curve");
  box.replaceChildren();
  const lat = plan.latency;
  const curve = lat && lat.curve;
  if (!curve || !curve.length) {
    box.append(el("p", { class: "hint", text: "Give a workload (prompt and output tokens) for the batch curve." }));
    return;
  }
  const W = 900, H = 260, L = 60, R = 70, T = 14, B = 36;
  const xs = curve.map((p) => p.max_num_seqs);
  const lx = (n) => Math.log2(Math.max(1, n));
  const x0 = lx(Math.min(...xs)), x1 = Math.max(lx(Math.max(...xs)), x0 + 1);
  const X = (n) => L + ((W - L - R) * (lx(n) - x0)) / (x1 - x0);
  const itlKeys = Object.keys(curve[0]).filter((k) => /^itl_ms_p\d+$/.test(k));
  const itlMax = Math.max(1e-9, ...curve.flatMap((p) => itlKeys.map((k) => p[k] || 0)), lat.itl_target_ms || 0) * 1.1;
  const tpMax = Math.max(1e-9, ...curve.map((p) => p.output_tokens_per_s || 0)) * 1.1;
  const Y = (v) => T + (H - T - B) * (1 - v / itlMax);
  const Y2 = (v) => T + (H - T - B) * (1 - v / tpMax);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "curve", role: "img",
    "aria-label": "ITL and throughput against max-num-seqs" });
  s.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axisline" }));
  for (const n of xs) {
    const t = svg("text", { x: X(n), y: H - B + 16, class: "axis", "text-anchor": "middle" });
    t.textContent = n;
    s.append(t);
  }
  const xl = svg("text", { x: (L + W - R) / 2, y: H - 4, class: "axis", "text-anchor": "middle" });
  xl.textContent = "max-num-seqs (log scale)";
  s.append(xl);
  for (const [v, txt, cls, y] of [[itlMax / 1.1, `${(itlMax / 1.1).toFixed(1)} ms`, "axis", Y], [tpMax / 1.1, `${fmtInt(Math.round(tpMax / 1.1))} tok/s`, "axis tp", Y2]]) {
    const t = svg("text", { x: y === Y ? 4 : W - R + 4, y: y(v) + 4, class: cls });
    t.textContent = txt;
    s.append(t);
  }
  const line = (key, Yf, cls, label) => {
    const pts = curve.filter((p) => p[key] !== null && p[key] !== undefined);
    if (!pts.length) return;
    s.append(svg("polyline", { points: pts.map((p) => `${X(p.max_num_seqs)},${Yf(p[key])}`).join(" "), class: "l " + cls }));
    for (const p of pts) {
      const c = svg("circle", { cx: X(p.max_num_seqs), cy: Yf(p[key]), r: 3.5, class: "pt " + cls });
      c.dataset.key = key;
      c.dataset.n = p.max_num_seqs;
      c.dataset.value = p[key];
      const t = svg("title");
      t.textContent = `max-num-seqs ${p.max_num_seqs}: ${label} ${p[key]}` +
        (p.preemption_probability !== undefined ? `, P(preemption) ${p.preemption_probability}` : "");
      c.append(t);
      s.append(c);
    }
  };
  itlKeys.forEach((k, n) => line(k, Y, "itl" + n, k.replace("itl_ms_", "ITL ") + " ms"));
  line("output_tokens_per_s", Y2, "tp", "output tokens/s");
  if (lat.itl_target_ms) {
    s.append(svg("line", { x1: L, x2: W - R, y1: Y(lat.itl_target_ms), y2: Y(lat.itl_target_ms), class: "target" }));
    const t = svg("text", { x: L + 4, y: Y(lat.itl_target_ms) - 4, class: "axis target-label" });
    t.textContent = `ITL target ${lat.itl_target_ms} ms`;
    s.append(t);
  }
  const chosen = plan.sizing ? plan.sizing.max_num_seqs : get(plan, "recommendation.maxNumSeqs");
  if (chosen) {
    const g = svg("line", { x1: X(chosen), x2: X(chosen), y1: T, y2: H - B, class: "chosen" });
    g.dataset.n = chosen;
    s.append(g);
    const t = svg("text", { x: X(chosen) + 4, y: T + 10, class: "axis chosen-label" });
    t.textContent = `chosen ${chosen}`;
    s.append(t);
  }
  box.append(s);
  // preemption probability: its own 0..1 strip under the curve
  if (curve.some((p) => p.preemption_probability !== undefined && p.preemption_probability !== null)) {
    const h = 90;
    const P = (v) => 8 + (h - 28) * (1 - v);
    const s2 = svg("svg", { viewBox: `0 0 ${W} ${h}`, class: "curve preempt", role: "img",
      "aria-label": "preemption probability against max-num-seqs" });
    const lbl = svg("text", { x: 4, y: 18, class: "axis" });
    lbl.textContent = "P(preempt)";
    s2.append(lbl);
    s2.append(svg("line", { x1: L, x2: W - R, y1: P(0), y2: P(0), class: "axisline" }));
    const pts = curve.filter((p) => p.preemption_probability !== null && p.preemption_probability !== undefined);
    s2.append(svg("polyline", { points: pts.map((p) => `${X(p.max_num_seqs)},${P(p.preemption_probability)}`).join(" "), class: "l pre" }));
    for (const p of pts) {
      const c = svg("circle", { cx: X(p.max_num_seqs), cy: P(p.preemption_probability), r: 3, class: "pt pre" });
      c.dataset.key = "preemption_probability";
      c.dataset.n = p.max_num_seqs;
      c.dataset.value = p.preemption_probability;
      const t = svg("title");
      t.textContent = `max-num-seqs ${p.max_num_seqs}: P(preemption) ${p.preemption_probability}`;
      c.append(t);
      s2.append(c);
    }
    const target = plan.sizing && plan.sizing.preemption_target;
    if (target) s2.append(svg("line", { x1: L, x2: W - R, y1: P(target), y2: P(target), class: "target" }));
    if (chosen) {
      const c2 = svg("line", { x1: X(chosen), x2: X(chosen), y1: 4, y2: h - 20, class: "chosen" });
      c2.dataset.n = chosen;
      s2.append(c2);
    }
    box.append(s2);
  }
  const legend = el("ul", { class: "legend" });
  itlKeys.forEach((k, n) => legend.append(el("li", {}, el("span", { class: "sw itl" + n }), k.replace("itl_ms_", "ITL ") + " (ms, left)")));
  legend.append(el("li", {}, el("span", { class: "sw tp" }), "output tokens/s (right)"));
  legend.append(el("li", {}, el("span", { class: "sw pre" }), "P(preemption)"));
  legend.append(el("li", {}, el("span", { class: "sw chosen" }), "chosen max-num-seqs"));
  box.append(legend);
}

function scalarTable(title, obj, id) {
  const rows = Object.entries(obj || {}).filter(([, v]) => v === null || typeof v !== "object");
  if (!rows.length) return null;
  const tb = el("tbody");
  for (const [k, v] of rows) {
    const td = el("td", { text: fmt(v) });
    td.dataset.key = k;
    tb.append(el("tr", {}, el("th", { scope: "row", text: k }), td));
  }
  return el("table", { class: "kv", id }, el("caption", { text: title }), tb);
}

function renderLatencyKeys(plan) {
  // every scalar key the JSON has (the latency model grows keys; they show up here unedited)
  const box = $("#latency-keys");
  box.replaceChildren();
  for (const [title, key] of [["latency", "latency"], ["sizing", "sizing"]]) {
    const t = scalarTable(title, plan[key], "t-" + key);
    if (t) box.append(t);
  }
}

function leverParams(lever) {
  const change = lever.change || "";
  const set = [];
  if (change.startsWith("--")) {
    const toks = change.split(/\s+/);
    for (let n = 0; n < toks.length; n++) {
      const k = toks[n].replace(/^--/, "");
      const v = toks[n + 1] && !toks[n + 1].startsWith("--") ? toks[++n] : "1";
      set.push([ALIASES[k] || k, v]);
    }
  } else if (change.startsWith("GPU ") && lever.plan) {
    set.push(["gpu", lever.plan.gpu]);
  }
  return set;
}

function applyParams(changes) {
  const cur = formParams().filter(([k]) => !changes.some(([c]) => c === k));
  // a GPU named by a lever replaces a custom memory size too
  const drop = changes.some(([k]) => k === "gpu") ? ["gpu-memory-gib"] : [];
  setForm(cur.filter(([k]) => !drop.includes(k)).concat(changes));
  schedule();
}

function renderLevers(plan) {
  const ul = $("#levers");
  ul.replaceChildren();
  for (const lv of plan.levers || []) {
    const set = leverParams(lv);
    const li = el("li");
    if (set.length && mode === "flags") {
      li.append(el("button", { type: "button", class: "lever", "data-lever": lv.name,
        onclick: () => applyParams(set), text: `${lv.name}: ${lv.change}` }));
    } else {
      li.append(el("strong", { text: `${lv.name}: ${lv.change}` }));
    }
    li.append(el("span", { class: "hint", text: " " + (lv.summary || "") }));
    ul.append(li);
  }
  if (!ul.children.length) ul.append(el("li", { class: "hint", text: "none" }));
}

function renderOptions(plan) {
  const box = $("#options");
  box.replaceChildren();
  const opts = plan.options;
  if (!opts || !opts.length) {
    box.append(el("p", { class: "hint", text: "Tick “Fleet options” or give GPU prices for the sweep." }));
    return;
  }
  const cols = Object.keys(opts[0]);
  const thead = el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })), el("th", { scope: "col", text: "what-if" }));
  const tb = el("tbody");
  for (const o of opts) {
    const tr = el("tr", {}, ...cols.map((c) => el("td", { text: fmt(o[c]) })));
    const set = [["gpu", o.gpu], ["tp", String(o.tp)], ["pp", String(o.pp)], ["kv-cache-dtype", o.kv_cache_dtype]]
      .filter(([, v]) => v !== undefined && v !== "undefined");
    tr.append(el("td", {}, mode === "flags"
      ? el("button", { type: "button", class: "try", onclick: () => applyParams(set), text: "Try" }) : ""));
    tb.append(tr);
  }
  box.append(el("table", { class: "options", id: "options-table" }, el("thead", {}, thead), tb));
}

// ---- wiring ------------------------------------------------------------------------------------

function setMode(m) {
  mode = m;
  $("#mode-flags").setAttribute("aria-pressed", String(m === "flags"));
  $("#mode-manifest").setAttribute("aria-pressed", String(m === "manifest"));
  $("#form").hidden = m !== "flags";
  $("#manifest-form").hidden = m !== "manifest";
  if (m === "flags") schedule();
}

async function copyFrom(id) {
  const text = $("#" + id).textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    const r = document.createRange();
    r.selectNodeContents($("#" + id));
    getSelection().removeAllRanges();
    getSelection().addRange(r);
    document.execCommand("copy");
  }
}

async function main() {
  META = await (await fetch("/api/meta")).json();
  fillForm(META);
  setForm([...new URLSearchParams(location.search)]);
  $("#form").addEventListener("input", schedule);
  $("#form").addEventListener("change", schedule);
  $("#form").addEventListener("submit", (e) => { e.preventDefault(); update(); });
  $("#mode-flags").addEventListener("click", () => setMode("flags"));
  $("#mode-manifest").addEventListener("click", () => setMode("manifest"));
  $("#manifest-form").addEventListener("submit", planManifest);
  $("#manifest-file").addEventListener("change", async (e) => {
    const f = e.target.files[0];
    if (!f) return;
    if (f.size > META.max_manifest_bytes) {
      showError(`${f.name}: larger than ${META.max_manifest_bytes} bytes`);
      return;
    }
    $("#manifest").value = await f.text();
    planManifest();
  });
  for (const b of document.querySelectorAll("button.copy")) b.addEventListener("click", () => copyFrom(b.dataset.copy));
  if (!location.search) setForm([["model", META.models.includes("meta-llama/Llama-3.1-8B-Instruct") ? "meta-llama/Llama-3.1-8B-Instruct" : META.models[0]], ["gpu", META.gpus[0].name]]);
  update();
}

document.addEventListener("DOMContentLoaded", main);
