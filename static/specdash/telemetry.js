// Live telemetry of one host: GPU memory per GPU (stacked), GPU utilisation (one small chart per
// GPU), the server's running/queued requests and accept length, and a compact GPU strip for the
// Servers page. A socket to /ws/telemetry/<hosts|instances|sweeps>/<id>/ sends the recent
// history first ({"type": "snapshot", "samples": [...]}), then batches ("telemetry.samples").
// The socket is specdashLive's (it renews the page's claim on the host's probes as the snapshot
// asks); figures are drawn with charts.js and extended per batch, and drawn again only when the
// set of GPUs changes or a reconnect brings a fresh snapshot. Each drawn GPU sample's age (ms since it was taken on the host) is kept
// in window.__telemetryLatencies for the latency benchmark.
(function () {
  "use strict";

  const MAX_LATENCIES = 20000;
  const charts = window.specdashCharts;
  window.__telemetryLatencies = window.__telemetryLatencies || [];
  window.__telemetrySnapshotPoints = 0;

  function recordLatency(t) {
    const list = window.__telemetryLatencies;
    list.push(Date.now() - t * 1000);
    if (list.length > MAX_LATENCIES) list.splice(0, list.length - MAX_LATENCIES);
  }

  // The socket subscribes before the snapshot is read, so the first live batch may repeat
  // samples the snapshot holds: those are left out.
  function sampleKey(s) { return s.k + ":" + s.i + ":" + s.t; }

  function gib(mib) { return mib === null || mib === undefined ? null : mib / 1024; }

  function sameIndexes(a, b) {
    return a.length === b.length && a.every(function (v, i) { return v === b[i]; });
  }

  function Charts(options) {
    this.nodes = options.nodes;
    this.instanceId = options.instanceId;
    this.gpus = null;  // GPU indexes the figures were built for
    this.marks = { shapes: [], annotations: [] };
    this.serverBuilt = false;
    this.snapshotSamples = new Set();
  }

  Charts.prototype.timeLayout = function (title, extra) {
    return charts.timeLayout(title, Object.assign({
      showlegend: true, legend: { orientation: "h", y: -0.2 },
      shapes: this.marks.shapes, annotations: this.marks.annotations,
    }, extra || {}));
  };

  Charts.prototype.buildGpu = function (samples) {
    const gpus = samples[samples.length - 1].d.index;
    const xs = samples.map(function (s) { return s.t * 1000; });
    function series(field, position, scale) {
      return samples.map(function (s) {
        const at = s.d.index.indexOf(gpus[position]);
        const value = at < 0 ? null : s.d[field][at];
        return scale ? scale(value) : value;
      });
    }
    const memory = gpus.map(function (g, i) {
      return { x: xs.slice(), y: series("used", i, gib), name: "GPU " + g, mode: "lines",
               type: "scatter", stackgroup: "memory", line: { width: 0.5 } };
    });
    const util = gpus.map(function (g, i) {
      return { x: xs.slice(), y: series("util", i), name: "GPU " + g, mode: "lines",
               type: "scatter", xaxis: "x", yaxis: i === 0 ? "y" : "y" + (i + 1),
               showlegend: false, line: { width: 1 } };
    });
    const utilLayout = this.timeLayout("", {
      showlegend: false, height: Math.max(220, 36 * gpus.length + 80),
      grid: { rows: gpus.length, columns: 1, pattern: "coupled", ygap: 0.15 },
    });
    gpus.forEach(function (g, i) {
      utilLayout[i === 0 ? "yaxis" : "yaxis" + (i + 1)] = {
        range: [0, 100], title: { text: "GPU " + g, font: { size: 10 } }, tickfont: { size: 9 },
        nticks: 2,
      };
    });
    charts.draw(this.nodes.memory, memory, this.timeLayout("GiB used (stacked)"));
    charts.draw(this.nodes.util, util, utilLayout);
    this.gpus = gpus;
  };

  Charts.prototype.addGpu = function (samples) {
    if (samples.length === 0) return;
    const last = samples[samples.length - 1].d.index;
    if (this.gpus === null || !sameIndexes(this.gpus, last)) {
      // First samples, or the GPU set changed: rebuild from these.
      this.buildGpu(samples);
      return;
    }
    const gpus = this.gpus;
    const xs = gpus.map(function () { return samples.map(function (s) { return s.t * 1000; }); });
    function columns(field, scale) {
      return gpus.map(function (g) {
        return samples.map(function (s) {
          const at = s.d.index.indexOf(g);
          const value = at < 0 ? null : s.d[field][at];
          return scale ? scale(value) : value;
        });
      });
    }
    const traces = gpus.map(function (g, i) { return i; });
    charts.extend(this.nodes.memory, { x: xs, y: columns("used", gib) }, traces);
    charts.extend(this.nodes.util,
      { x: xs.map(function (x) { return x.slice(); }), y: columns("util") }, traces);
  };

  Charts.prototype.addServer = function (samples) {
    if (!this.nodes.server) return;
    const own = samples.filter(function (s) { return s.i === this.instanceId; }, this);
    if (own.length === 0 && this.serverBuilt) return;
    const xs = own.map(function (s) { return s.t * 1000; });
    function field(name) { return own.map(function (s) { return s.d[name]; }); }
    if (!this.serverBuilt) {
      const line = { mode: "lines", type: "scatter" };
      const traces = [
        Object.assign({}, line, { x: xs, y: field("running"), name: "running",
          line: { shape: "hv", width: 1.5 } }),
        Object.assign({}, line, { x: xs.slice(), y: field("queued"), name: "queued",
          line: { shape: "hv", width: 1.5, color: "#c27c0e" } }),
        Object.assign({}, line, { x: xs.slice(), y: field("accept_length"),
          name: "accept length", yaxis: "y2", line: { width: 1.5, color: "#5b8c3a" } }),
      ];
      const layout = this.timeLayout("requests", {
        margin: { l: 60, r: 50, t: 24, b: 40 },
        yaxis2: { title: { text: "accept length" }, overlaying: "y", side: "right",
                  rangemode: "tozero" },
      });
      charts.draw(this.nodes.server, traces, layout);
      this.serverBuilt = true;
      return;
    }
    charts.extend(this.nodes.server, {
      x: [xs, xs.slice(), xs.slice()],
      y: [field("running"), field("queued"), field("accept_length")],
    }, [0, 1, 2]);
  };

  Charts.prototype.add = function (samples, live) {
    const gpu = samples.filter(function (s) { return s.k === "gpu"; });
    this.addGpu(gpu);
    this.addServer(samples.filter(function (s) { return s.k === "server"; }));
    if (live) gpu.forEach(function (s) { recordLatency(s.t); });
  };

  Charts.prototype.setMarks = function (marks) {
    this.marks = { shapes: marks.shapes || [], annotations: marks.annotations || [] };
    const update = { shapes: this.marks.shapes, annotations: this.marks.annotations };
    [this.nodes.memory, this.nodes.util, this.nodes.server].forEach(function (node) {
      charts.relayout(node, update);
    });
  };

  const mounted = [];
  let pendingMarks = null;

  // Charts for a host, instance or sweep page. options: {wsPath, instanceId, nodes: {memory,
  // util, server}}; any node may be missing.
  function mount(options) {
    if (!charts) return null;
    const view = new Charts(options);
    mounted.push(view);
    window.specdashLive.connect(options.wsPath, {
      "snapshot": function (message) {
        // A reconnect brings a fresh snapshot: drawn again from it.
        view.gpus = view.gpus === null ? null : [];
        view.serverBuilt = false;
        window.__telemetrySnapshotPoints = message.samples.filter(function (s) {
          return s.k === "gpu";
        }).length;
        view.snapshotSamples = new Set(message.samples.map(sampleKey));
        view.add(message.samples, false);
      },
      "telemetry.samples": function (message) {
        view.add(message.samples.filter(function (s) {
          return !view.snapshotSamples.has(sampleKey(s));
        }), true);
      },
    });
    return view;
  }

  // Level boundaries (from the sweep page) on every telemetry chart, as on its throughput chart.
  function setMarks(marks) {
    pendingMarks = marks;
    mounted.forEach(function (view) { view.setMarks(JSON.parse(JSON.stringify(marks))); });
  }

  // The Servers page: one row of GPU cells per host, the latest memory and utilisation.
  function strip(node) {
    function render(sample) {
      const cells = sample.d.index.map(function (g, i) {
        const used = sample.d.used[i];
        const total = sample.d.total[i];
        const util = sample.d.util[i];
        const pct = used !== null && total ? Math.round(100 * used / total) : 0;
        const cell = document.createElement("span");
        cell.className = "gpu-cell";
        cell.dataset.testid = "gpu-cell";
        cell.title = "GPU " + g + ": " + (used === null ? "?" : (used / 1024).toFixed(1)) +
          " / " + (total ? (total / 1024).toFixed(1) : "?") + " GiB, " +
          (util === null ? "?" : util) + "% busy";
        const bar = document.createElement("i");
        bar.style.height = pct + "%";
        cell.appendChild(bar);
        const label = document.createElement("small");
        label.textContent = "GPU " + g + " " + pct + "% · " + (util === null ? "-" : util + "%");
        cell.appendChild(label);
        return cell;
      });
      node.replaceChildren.apply(node, cells);
    }
    // "waiting for nvidia-smi" must not stay forever: once the host's own load readings
    // arrive (the host answers) and no GPU reading follows within NO_GPU_AFTER_MS (a working
    // nvidia-smi streams one a second), the strip says so and where to find the cause; a GPU
    // reading arriving later replaces the message.
    const NO_GPU_AFTER_MS = 10000;
    let sawGpu = false;
    let noGpuTimer = null;
    function noGpu() {
      if (sawGpu) return;
      const note = document.createElement("span");
      note.className = "muted";
      note.dataset.testid = "gpu-strip-none";
      note.textContent = "No GPU readings: nvidia-smi gave none on this host (not installed, " +
        "or no NVIDIA GPU). The host answers; Test connection shows what nvidia-smi said.";
      node.replaceChildren(note);
    }
    function latest(message, live) {
      const gpu = message.samples.filter(function (s) { return s.k === "gpu"; });
      if (gpu.length) {
        sawGpu = true;
        render(gpu[gpu.length - 1]);
        if (live) recordLatency(gpu[gpu.length - 1].t);
      } else if (!sawGpu && noGpuTimer === null &&
                 message.samples.some(function (s) { return s.k === "host"; })) {
        noGpuTimer = window.setTimeout(noGpu, NO_GPU_AFTER_MS);
      }
    }
    window.specdashLive.connect(node.dataset.ws, {
      "snapshot": function (message) { latest(message, false); },
      "telemetry.samples": function (message) { latest(message, true); },
    });
  }

  window.specdashTelemetry = {
    mount: mount,
    setMarks: setMarks,
    strip: strip,
    marks: function () { return pendingMarks; },
  };

  // Pages declare what to chart with data attributes; nothing else to call.
  document.querySelectorAll("[data-telemetry-ws]").forEach(function (root) {
    const view = mount({
      wsPath: root.dataset.telemetryWs,
      instanceId: root.dataset.instance ? Number(root.dataset.instance) : null,
      nodes: {
        memory: root.querySelector("[data-chart=gpu-memory]"),
        util: root.querySelector("[data-chart=gpu-util]"),
        server: root.querySelector("[data-chart=server]"),
      },
    });
    if (view && pendingMarks) view.setMarks(pendingMarks);
  });
  document.querySelectorAll(".gpu-strip[data-ws]").forEach(strip);
})();
