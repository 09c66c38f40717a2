// The experiment page: the timeline follows the experiment's websocket (each step or state
// event refreshes the htmx partial), and the current sweep's throughput is charted live from
// that sweep's own websocket, switching when the experiment moves on to the next sweep.
(function () {
  "use strict";

  const config = window.specdashLive && window.specdashLive.pageData("experiment-config");
  if (!config) return;
  const charts = window.specdashCharts;
  const nodes = {
    state: document.getElementById("experiment-state"),
    current: document.getElementById("current-sweep"),
    chart: document.getElementById("chart-live"),
  };
  const steps = new Map();
  let sweepId = null;
  let sweepSocket = null;
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

  // A snapshot (of a sweep followed from now on) draws the chart; live batches extend it.
  function drawSnapshot(samples) {
    if (!charts) return;
    const xs = samples.map(function (s) { return s.t * 1000; });
    const ys = samples.map(function (s) { return s.tok_s; });
    charts.draw(nodes.chart, [{ x: xs, y: ys, mode: "lines", type: "scatter", name: "tok/s" }],
      charts.timeLayout("output tok/s"));
  }

  function addSamples(samples) {
    if (!charts || samples.length === 0) return;
    charts.extend(nodes.chart, {
      x: [samples.map(function (s) { return s.t * 1000; })],
      y: [samples.map(function (s) { return s.tok_s; })],
    }, [0]);
  }

  function followSweep(id) {
    if (id === sweepId) return;
    if (sweepSocket) sweepSocket.close();
    sweepId = id;
    sweepSocket = null;
    if (id === null) return;
    sweepSocket = window.specdashLive.connect("/ws/sweeps/" + id + "/", {
      "snapshot": function (message) {
        snapshotSamples = new Set(message.samples.map(sampleKey));
        drawSnapshot(message.samples);
      },
      "sweep.samples": function (message) {
        addSamples(message.samples.filter(function (s) {
          return !snapshotSamples.has(sampleKey(s));
        }));
      },
    }, { probe: "/sweeps/" + id + "/" });  // asked if a reconnect fails: the sweep's own page
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

  window.specdashLive.connect(config.wsPath, {
    "snapshot": function (message) {
      showState(message.experiment);
      updateSteps(message.steps);
    },
    "experiment.step": function (message) {
      updateSteps([message.step]);
      refresh();
    },
    "experiment.state": function (message) {
      showState(message.experiment);
      refresh();
    },
  });
  window.setInterval(tick, 1000);
})();
