// The lab's panels: each one a PromQL query against Prometheus' HTTP API (proxied by the
// lab under /api/v1/, read-only), drawn as inline SVG. Nothing is fetched from elsewhere.
"use strict";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2",
                "#db2777", "#65a30d", "#9333ea", "#ea580c", "#0d9488", "#4f46e5"];
const RANGE_SECONDS = 600;
const STEP_SECONDS = 5;
const W = 560, H = 200, PAD = 34;
const SVG = "http://www.w3.org/2000/svg";

async function api(path, params) {
  const answer = await fetch("api/v1/" + path + "?" + new URLSearchParams(params));
  if (!(answer.headers.get("Content-Type") || "").includes("json")) {
    // A Prometheus restarting answers in plain text: say what it said, not a JSON error.
    const text = (await answer.text()).trim().slice(0, 120);
    throw new Error(`${answer.status} ${answer.statusText}${text ? ": " + text : ""}`);
  }
  const body = await answer.json();
  if (body.status !== "success") throw new Error(body.error || answer.statusText);
  return body.data;
}

async function range(query) {
  const end = Date.now() / 1000;
  const data = await api("query_range",
    {query, start: end - RANGE_SECONDS, end, step: STEP_SECONDS});
  return data.result;
}

async function instant(query) {
  return (await api("query", {query})).result;
}

function el(tag, attrs, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function titled(section) {
  // The panel emptied to its title: what every draw, and a failed one, starts from.
  section.replaceChildren();
  const title = document.createElement("h2");
  title.textContent = section.dataset.title;
  section.appendChild(title);
}

function frame(section) {
  // The panel's title, a fresh SVG and legend; `data-points` counts what was drawn.
  titled(section);
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
                         "aria-label": section.dataset.title}, section);
  el("rect", {x: PAD, y: 4, width: W - 2 * PAD, height: H - PAD - 4,
              fill: "none", stroke: "#e5e7eb"}, svg);
  const legend = document.createElement("div");
  legend.className = "legend";
  section.appendChild(legend);
  section.dataset.points = "0";
  return {svg, legend};
}

function note(section, text) {
  const p = document.createElement("p");
  p.className = "empty";
  p.textContent = text;
  section.appendChild(p);
}

function label(svg, x, y, text, anchor) {
  el("text", {x, y, "font-size": 10, fill: "#6b7280", "text-anchor": anchor || "end"}, svg)
    .textContent = text;
}

function key(legend, color, text) {
  const span = document.createElement("span");
  const swatch = document.createElement("i");
  swatch.style.background = color;
  span.append(swatch, text);
  legend.appendChild(span);
}

function lines(section, series, options) {
  // series: [{name, values: [[t, v], ...], right: bool}]; right-axis series (dashed) get
  // their own scale.
  const {svg, legend} = frame(section);
  const now = Date.now() / 1000, t0 = now - RANGE_SECONDS;
  const max = (right) => Math.max(options.min || 1, ...series.filter((s) => !!s.right === right)
    .flatMap((s) => s.values.map(([, v]) => v)));
  const scales = {false: max(false), true: max(true)};
  const x = (t) => PAD + (t - t0) / RANGE_SECONDS * (W - 2 * PAD);
  const y = (v, right) => H - PAD - v / scales[right] * (H - PAD - 8);
  label(svg, PAD - 4, 12, scales.false.toFixed(options.digits || 0));
  label(svg, PAD - 4, H - PAD, "0");
  if (series.some((s) => s.right)) {
    label(svg, W - PAD + 4, 12, scales.true.toFixed(0), "start");
  }
  label(svg, PAD, H - PAD + 14, "-10 min", "start");
  label(svg, W - PAD, H - PAD + 14, "now");
  let points = 0;
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    // A gap in the samples (a part down, a metric absent) is a gap in the line, not a ramp.
    const d = s.values.map(([t, v], j) => {
      const jump = !j || t - s.values[j - 1][0] > 2 * STEP_SECONDS;
      return `${jump ? "M" : "L"}${x(t).toFixed(1)},${y(v, !!s.right).toFixed(1)}`;
    }).join("");
    el("path", {d, fill: "none", stroke: color, "stroke-width": 2,
                "stroke-dasharray": s.right ? "4 3" : "none"}, svg);
    points += s.values.length;
    key(legend, color, s.name);
  });
  section.dataset.points = String(points);
  if (!points) note(section, options.empty || "no data yet");
}

function bars(section, rows, digits) {
  // rows: [{name, value}], drawn as horizontal bars.
  const {svg, legend} = frame(section);
  const shown = rows.slice(0, 12);
  const max = Math.max(1e-9, ...shown.map((r) => r.value));
  const band = (H - PAD - 8) / Math.max(shown.length, 1);
  shown.forEach((r, i) => {
    const top = 6 + i * band;
    const width = Math.max(1, r.value / max * (W - 2 * PAD - 150));
    el("rect", {x: PAD + 110, y: top, width, height: Math.max(band - 3, 2),
                fill: COLORS[i % COLORS.length]}, svg);
    label(svg, PAD + 106, top + band / 2 + 3, r.name);
    label(svg, PAD + 114 + width, top + band / 2 + 3, r.value.toFixed(digits), "start");
  });
  section.dataset.points = String(shown.length);
  if (!shown.length) note(section, "no data yet");
  legend.remove();
}

const numeric = (values) => values.map(([t, v]) => [Number(t), Number(v)])
  .filter(([, v]) => Number.isFinite(v));

async function utilByNode(section) {
  // Per GPU first: a shared GPU's pods' series add up to the GPU's own value. NVML has no
  // utilization for a MIG-enabled GPU: its instances' pods are in the pod panel.
  const result = await range(
    "avg by (Hostname) (sum by (Hostname, UUID) (DCGM_FI_DEV_GPU_UTIL or 100 * DCGM_FI_DEV_GPU_UTIL_RATIO))");
  lines(section, result.map((r) => ({name: r.metric.Hostname || "?",
                                     values: numeric(r.values)})),
        {min: 100, empty: "no data: no GPU without MIG reports utilization yet"});
}

async function utilByPod(section) {
  // The rules' definition of a pod's use, in % of one GPU: its own GPU_UTIL (its part of a
  // shared GPU), or its MIG slice's engine activity times its part of the GPU.
  const result = await instant("topk(12, 100 * pod:gpufleet_gpus_used:sum)");
  bars(section, result.map((r) => ({name: `${r.metric.namespace}/${r.metric.pod}`,
                                    value: Number(r.value[1])}))
    .sort((a, b) => b.value - a.value), 0);
}

async function replicas(section) {
  const queries = [
    ["desired", "sum by (workload) (gpufleet_autoscaler_desired_replicas)", false],
    ["current", "sum by (workload) (gpufleet_autoscaler_current_replicas)", false],
    ["placeholders", "sum by (workload) (gpufleet_autoscaler_placeholder_replicas)", false],
    // The gateway's held requests too: at zero replicas they are all the demand there is.
    ["demand (requests in flight, right axis)",
     'sum by (namespace) ({__name__=~"vllm:num_requests_(running|waiting)|lab_gateway_requests_waiting"})',
     true],
  ];
  const answers = await Promise.all(queries.map(([, q]) => range(q)));
  const series = [];
  answers.forEach((result, i) => {
    for (const r of result) {
      const who = r.metric.workload || r.metric.namespace || "";
      series.push({name: `${queries[i][0]} ${who}`, values: numeric(r.values),
                   right: queries[i][2]});
    }
  });
  lines(section, series, {min: 2});
}

async function idleCost(section) {
  const [result, down] = await Promise.all([
    instant("namespace:gpufleet_idle_gpu_cost:dollars_per_hour"),
    instant('up{job="gpufleet-exporter"} == 0'),
  ]);
  bars(section, result.map((r) => ({name: r.metric.namespace || "?", value: Number(r.value[1])}))
    .sort((a, b) => b.value - a.value), 2);
  // A node whose exporter is down has no pods in the sum: the cost drawn is too low, and
  // read alone it looked like savings.
  section.dataset.exportersDown = String(down.length);
  if (down.length) {
    note(section, `${down.length} exporter${down.length > 1 ? "s" : ""} down: ` +
                  "their nodes' idle cost is missing from these bars");
  }
}

async function alerts(section) {
  const data = await api("alerts", {});
  titled(section);
  const list = document.createElement("ul");
  list.className = "alerts";
  const shown = data.alerts.filter((a) => a.state === "firing" || a.state === "pending");
  for (const a of shown) {
    const li = document.createElement("li");
    li.className = a.state;
    const where = a.labels.Hostname || a.labels.namespace || a.labels.instance || "";
    li.textContent = `${a.state}: ${a.labels.alertname} ${where} ` +
                     `(${a.labels.severity || "none"}) ${a.annotations.summary || ""}`;
    list.appendChild(li);
  }
  section.appendChild(list);
  section.dataset.points = String(shown.length);
  if (!shown.length) note(section, "no alert is firing");
}

const PANELS = {"util-node": utilByNode, "util-pod": utilByPod, "replicas": replicas,
                "idle-cost": idleCost, "alerts": alerts};

async function refresh() {
  await Promise.all(Object.entries(PANELS).map(async ([id, draw]) => {
    const section = document.getElementById(id);
    try {
      await draw(section);
      delete section.dataset.error;
    } catch (err) {
      // One line in place of the chart: a stale chart under "now" would read as current,
      // and a line added at each refresh piled up.
      titled(section);
      section.dataset.points = "0";
      section.dataset.error = String(err);
      note(section, "Prometheus: " + err);
    }
  }));
  for (const id of Object.keys(PANELS)) {  // where each chart is, for a screenshot's reader
    const section = document.getElementById(id);
    const box = (section.querySelector("svg") || section).getBoundingClientRect();
    section.dataset.box = [box.left, box.top, box.width, box.height].map(Math.round).join(",");
  }
  document.body.dataset.refreshed = String(Date.now());
}

refresh();
setInterval(refresh, 5000);
