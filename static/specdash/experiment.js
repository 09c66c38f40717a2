// The experiment page: the timeline follows the experiment's websocket (each step or state
// event refreshes the htmx partial), and the current sweep's throughput is charted live from
// that sweep's own websocket, switching when the experiment moves on to the next sweep.
(function () {
  "use strict";

  const MAX_POINTS = 3600;
  const configNode = document.getElementById("experiment-config");
  if (!configNode || !window.specdashLive) return;
  const config = JSON.parse(configNode.textContent);
  const nodes = {
    state: document.getElementById("experiment-state"),
    current: document.getElementById("current-sweep"),
    chart: document.getElementById("chart-live"),
  };
  const steps = new Map();
  let sweepId = null;
  let sweepSocket = null;
  let chartBuilt = false;
  // Samples of the sweep's snapshot: the first live batch may repeat some (the socket
  // subscribes before the snapshot is read); those are left out.
  let snapshotSamples = new Set();

  function sampleKey(s) { return s.level_index + ":" + s.t; }
  let refreshTimer = null;

  function refresh() {
    // Several events arrive together (a step ends, the next starts): one refresh for them.
    if (refreshTimer !== null) return;
    refreshTimer = window.setTimeout(function () {
      refreshTimer = null;
      document.body.dispatchEvent(new CustomEvent("experiment-changed"));
    }, 150);
  }

  function currentStep() {
    const started = Array.from(steps.values())
      .filter(function (s) { return s.started_at !== null; })
      .sort(function (a, b) { return a.index - b.index; });
    const running = started.filter(function (s) { return !s.finished; });
    if (running.length) return running[running.length - 1];
    return started.length ? started[started.length - 1] : null;
  }

  function showCurrent(step) {
    nodes.current.replaceChildren();
    if (!step || step.sweep_id === null) {
      const none = document.createElement("span");
      none.className = "muted";
      none.textContent = step ? step.label + ": " + step.state_label.toLowerCase() : "none yet";
      nodes.current.appendChild(none);
      return;
    }
    const link = document.createElement("a");
    link.href = "/sweeps/" + step.sweep_id + "/";
    link.textContent = "sweep #" + step.sweep_id;
    nodes.current.appendChild(link);
    nodes.current.appendChild(document.createTextNode(" (" + step.label + ": " + step.profile + ")"));
  }

  function drawSamples(samples) {
    if (!window.Plotly) return;
    const xs = samples.map(function (s) { return s.t * 1000; });
    const ys = samples.map(function (s) { return s.tok_s; });
    if (!chartBuilt) {
      window.Plotly.newPlot(nodes.chart, [{ x: xs, y: ys, mode: "lines", type: "scatter", name: "tok/s" }], {
        margin: { l: 60, r: 20, t: 24, b: 40 }, showlegend: false, xaxis: { type: "date" },
        yaxis: { title: { text: "output tok/s" }, rangemode: "tozero" },
      }, { responsive: true, displaylogo: false });
      chartBuilt = true;
    } else if (xs.length) {
      window.Plotly.extendTraces(nodes.chart, { x: [xs], y: [ys] }, [0], MAX_POINTS);
    }
  }

  function followSweep(id) {
    if (id === sweepId) return;
    if (sweepSocket) sweepSocket.close();
    sweepId = id;
    sweepSocket = null;
    if (id === null) return;
    sweepSocket = window.specdashLive.connect("/ws/sweeps/" + id + "/", function (message) {
      if (message.type === "snapshot") {
        if (chartBuilt && window.Plotly) window.Plotly.purge(nodes.chart);
        chartBuilt = false;
        snapshotSamples = new Set(message.samples.map(sampleKey));
        drawSamples(message.samples);
      } else if (message.type === "sweep.samples") {
        drawSamples(message.samples.filter(function (s) {
          return !snapshotSamples.has(sampleKey(s));
        }));
      }
    });
  }

  function showState(experiment) {
    nodes.state.textContent = experiment.state_label;
    nodes.state.className = "state state-" + experiment.state;
    if (experiment.finished) {
      const actions = document.getElementById("experiment-actions");
      if (actions) actions.remove();
    }
  }

  function updateSteps(list) {
    list.forEach(function (s) { steps.set(s.id, s); });
    const step = currentStep();
    showCurrent(step);
    followSweep(step && step.sweep_id !== null && !step.finished ? step.sweep_id : sweepId);
  }

  function tick() {
    const now = Date.now() / 1000;
    document.querySelectorAll("[data-running-since]").forEach(function (cell) {
      const since = parseFloat(cell.getAttribute("data-running-since"));
      cell.textContent = Math.max(0, now - since).toFixed(0) + " s";
    });
  }

  window.specdashLive.connect(config.wsPath, function (message) {
    switch (message.type) {
      case "snapshot":
        showState(message.experiment);
        updateSteps(message.steps);
        break;
      case "experiment.step":
        updateSteps([message.step]);
        refresh();
        break;
      case "experiment.state":
        showState(message.experiment);
        refresh();
        break;
      default:
        break;
    }
  });
  window.setInterval(tick, 1000);
})();
