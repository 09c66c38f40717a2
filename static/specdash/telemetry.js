// Live telemetry of one host: GPU memory per GPU (stacked), GPU utilisation (one small chart per
// GPU), the server's running/queued requests and accept length, and a compact GPU strip for the
// Servers page. A socket to /ws/telemetry/<hosts|instances|sweeps>/<id>/ sends the recent
// history first ({"type": "snapshot", "samples": [...]}), then batches ("telemetry.samples").
// Figures are built once and extended with Plotly.extendTraces; they are rebuilt only when the
// set of GPUs changes. Each drawn GPU sample's age (ms since it was taken on the host) is kept
// in window.__telemetryLatencies for the latency benchmark.
(function () {
  "use strict";

  const MAX_POINTS = 3600;
  const MAX_LATENCIES = 20000;
  const plotConfig = { responsive: true, displaylogo: false };
  const margin = { l: 60, r: 50, t: 24, b: 40 };
  window.__telemetryLatencies = window.__telemetryLatencies || [];
  window.__telemetrySnapshotPoints = 0;

  // A socket that reconnects with back-off and renews the page's claim on the host's probes.
  function connect(path, onMessage) {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    let delay = 1000;
    let keepalive = null;
    function open() {
      const socket = new WebSocket(scheme + "//" + window.location.host + path);
      socket.addEventListener("open", function () { delay = 1000; });
      socket.addEventListener("message", function (event) {
        let message;
        try { message = JSON.parse(event.data); } catch (err) { return; }
        if (message.type === "snapshot" && message.keepalive_s) {
          window.clearInterval(keepalive);
          keepalive = window.setInterval(function () {
            if (socket.readyState === WebSocket.OPEN) socket.send('{"type": "keepalive"}');
          }, message.keepalive_s * 1000);
        }
        onMessage(message);
      });
      socket.addEventListener("close", function (event) {
        window.clearInterval(keepalive);
        if (event.code >= 4400 && event.code < 4500) return;
        window.setTimeout(open, delay);
        delay = Math.min(delay * 2, 15000);
      });
    }
    open();
  }

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
    return Object.assign({
      margin: margin, xaxis: { type: "date" }, showlegend: true,
      legend: { orientation: "h", y: -0.2 },
      yaxis: { title: { text: title }, rangemode: "tozero" },
      shapes: this.marks.shapes, annotations: this.marks.annotations,
    }, extra || {});
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
    const draw = this.gpus === null ? window.Plotly.newPlot : window.Plotly.react;
    if (this.nodes.memory) {
      draw(this.nodes.memory, memory, this.timeLayout("GiB used (stacked)"), plotConfig);
    }
    if (this.nodes.util) draw(this.nodes.util, util, utilLayout, plotConfig);
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
    if (this.nodes.memory) {
      window.Plotly.extendTraces(this.nodes.memory, { x: xs, y: columns("used", gib) }, traces,
        MAX_POINTS);
    }
    if (this.nodes.util) {
      window.Plotly.extendTraces(this.nodes.util,
        { x: xs.map(function (x) { return x.slice(); }), y: columns("util") }, traces, MAX_POINTS);
    }
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
        yaxis2: { title: { text: "accept length" }, overlaying: "y", side: "right",
                  rangemode: "tozero" },
      });
      window.Plotly.newPlot(this.nodes.server, traces, layout, plotConfig);
      this.serverBuilt = true;
      return;
    }
    window.Plotly.extendTraces(this.nodes.server, {
      x: [xs, xs.slice(), xs.slice()],
      y: [field("running"), field("queued"), field("accept_length")],
    }, [0, 1, 2], MAX_POINTS);
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
      if (node && node.data) window.Plotly.relayout(node, update);
    });
  };

  const mounted = [];
  let pendingMarks = null;

  // Charts for a host, instance or sweep page. options: {wsPath, instanceId, nodes: {memory,
  // util, server}}; any node may be missing.
  function mount(options) {
    if (!window.Plotly) return null;
    const charts = new Charts(options);
    mounted.push(charts);
    connect(options.wsPath, function (message) {
      if (message.type === "snapshot") {
        // A reconnect brings a fresh snapshot: rebuild from it.
        charts.gpus = charts.gpus === null ? null : [];
        charts.serverBuilt = false;
        window.__telemetrySnapshotPoints = message.samples.filter(function (s) {
          return s.k === "gpu";
        }).length;
        charts.snapshotSamples = new Set(message.samples.map(sampleKey));
        charts.add(message.samples, false);
      } else if (message.type === "telemetry.samples") {
        charts.add(message.samples.filter(function (s) {
          return !charts.snapshotSamples.has(sampleKey(s));
        }), true);
      }
    });
    return charts;
  }

  // Level boundaries (from the sweep page) on every telemetry chart, as on its throughput chart.
  function setMarks(marks) {
    pendingMarks = marks;
    mounted.forEach(function (charts) { charts.setMarks(JSON.parse(JSON.stringify(marks))); });
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
    connect(node.dataset.ws, function (message) {
      const samples = message.samples || [];
      const gpu = samples.filter(function (s) { return s.k === "gpu"; });
      if (gpu.length) {
        render(gpu[gpu.length - 1]);
        if (message.type !== "snapshot") recordLatency(gpu[gpu.length - 1].t);
      }
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
    const charts = mount({
      wsPath: root.dataset.telemetryWs,
      instanceId: root.dataset.instance ? Number(root.dataset.instance) : null,
      nodes: {
        memory: root.querySelector("[data-chart=gpu-memory]"),
        util: root.querySelector("[data-chart=gpu-util]"),
        server: root.querySelector("[data-chart=server]"),
      },
    });
    if (charts && pendingMarks) charts.setMarks(pendingMarks);
  });
  document.querySelectorAll(".gpu-strip[data-ws]").forEach(strip);
})();
