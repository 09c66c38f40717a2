// The sweep page: three Plotly charts drawn from the websocket snapshot (charts.js), then
// extended with each batch of samples and each finished level; the time left counts down
// from the server's estimate between events.
(function () {
  "use strict";

  const config = window.specdashLive && window.specdashLive.pageData("sweep-config");
  if (!config || !window.specdashCharts) return;
  const charts = window.specdashCharts;
  const nodes = {
    tokps: document.getElementById("chart-tokps"),
    inflight: document.getElementById("chart-inflight"),
    curve: document.getElementById("chart-curve"),
    state: document.getElementById("sweep-state"),
    reason: document.getElementById("sweep-reason"),
    progress: document.getElementById("sweep-progress"),
    eta: document.getElementById("sweep-eta"),
  };
  // Level index -> level dict; which levels already have a boundary line / a curve point.
  let levels = new Map();
  let boundaries = new Set();
  let plotted = new Set();
  let progress = null;
  let sweepFinished = false;
  let built = false;
  // The socket subscribes before the snapshot is read, so the first live batch may repeat
  // samples the snapshot holds: those are left out (a repeat would draw a line back in time).
  let snapshotSamples = new Set();

  function sampleKey(s) { return s.level_index + ":" + s.t; }

  function finished(level) {
    return level.state !== "running" && level.output_tok_s !== null;
  }

  function boundaryShapes() {
    const shapes = [];
    const annotations = [];
    Array.from(levels.values())
      .filter(function (l) { return l.started_at !== null; })
      .sort(function (a, b) { return a.index - b.index; })
      .forEach(function (l) {
        const x = l.started_at * 1000;
        shapes.push({
          type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
          line: { color: "#9aa3b5", width: 1, dash: "dot" },
        });
        annotations.push({
          x: x, y: 1, xref: "x", yref: "paper", yanchor: "bottom", xanchor: "left",
          text: l.label || ("C=" + l.concurrency), showarrow: false, font: { size: 10, color: "#6b7385" },
        });
        boundaries.add(l.index);
      });
    // The telemetry charts below share the time axis, so they get the same boundaries.
    if (window.specdashTelemetry) {
      window.specdashTelemetry.setMarks({ shapes: shapes, annotations: annotations });
    }
    return { shapes: shapes, annotations: annotations };
  }

  function timeLayout(title) {
    const marks = boundaryShapes();
    return charts.timeLayout(title, { shapes: marks.shapes, annotations: marks.annotations });
  }

  // A rate sweep's curve is against the offered rate, a concurrency sweep's against C.
  function xOf(level) { return level.x !== undefined ? level.x : level.concurrency; }

  function curvePoints() {
    const done = Array.from(levels.values()).filter(finished)
      .sort(function (a, b) { return a.index - b.index; });
    done.forEach(function (l) { plotted.add(l.index); });
    return {
      x: done.map(xOf),
      whole: done.map(function (l) { return l.output_tok_s; }),
      steady: done.map(function (l) { return l.steady_output_tok_s; }),
    };
  }

  function build(snapshot) {
    levels = new Map();
    boundaries = new Set();
    plotted = new Set();
    snapshot.levels.forEach(function (l) { levels.set(l.index, l); });
    snapshotSamples = new Set(snapshot.samples.map(sampleKey));
    const xs = snapshot.samples.map(function (s) { return s.t * 1000; });
    const line = { mode: "lines", type: "scatter", line: { width: 1.5 } };
    const tokps = [Object.assign({}, line, {
      x: xs, y: snapshot.samples.map(function (s) { return s.tok_s; }), name: "tok/s",
    })];
    const inflight = [Object.assign({}, line, {
      x: xs.slice(), y: snapshot.samples.map(function (s) { return s.in_flight; }),
      name: "in flight", line: { width: 1.5, shape: "hv", color: "#c27c0e" },
    })];
    const pts = curvePoints();
    const curve = [
      { x: pts.x, y: pts.whole, name: "whole level", mode: "lines+markers", type: "scatter" },
      { x: pts.x, y: pts.steady, name: "steady window", mode: "lines+markers", type: "scatter",
        line: { dash: "dot" } },
    ];
    const curveLayout = charts.layout({
      legend: { orientation: "h", y: -0.25 },
      xaxis: {
        type: "log", title: { text: snapshot.sweep.x_title || "concurrency" },
        tickvals: snapshot.sweep.x_values || snapshot.sweep.levels,
      },
      yaxis: { title: { text: "output tok/s" }, rangemode: "tozero" },
    });
    // A reconnect brings a fresh snapshot: drawn again in place.
    charts.draw(nodes.tokps, tokps, timeLayout("output tok/s"));
    charts.draw(nodes.inflight, inflight, timeLayout("requests"));
    charts.draw(nodes.curve, curve, curveLayout);
    built = true;
  }

  function addSamples(samples) {
    if (!built || samples.length === 0) return;
    const xs = samples.map(function (s) { return s.t * 1000; });
    charts.extend(nodes.tokps,
      { x: [xs], y: [samples.map(function (s) { return s.tok_s; })] }, [0]);
    charts.extend(nodes.inflight,
      { x: [xs.slice()], y: [samples.map(function (s) { return s.in_flight; })] }, [0]);
  }

  function updateLevel(level) {
    levels.set(level.index, level);
    if (!built) return;
    if (level.started_at !== null && !boundaries.has(level.index)) {
      const marks = boundaryShapes();
      const update = { shapes: marks.shapes, annotations: marks.annotations };
      charts.relayout(nodes.tokps, update);
      charts.relayout(nodes.inflight, update);
    }
    if (finished(level) && !plotted.has(level.index)) {
      plotted.add(level.index);
      charts.extend(nodes.curve, {
        x: [[xOf(level)], [xOf(level)]],
        y: [[level.output_tok_s], [level.steady_output_tok_s]],
      }, [0, 1]);
    }
  }

  // finishedNow: the sweep's own word when the message carries it, else undefined.
  function showProgress(p, finishedNow) {
    if (p) progress = p;
    if (finishedNow !== undefined) sweepFinished = finishedNow;
    if (!progress) return;
    if (progress.level_number) {
      nodes.progress.textContent = "Level " + progress.level_number + " of " + progress.level_count;
    }
    if (sweepFinished || progress.eta_s === null) {
      nodes.eta.textContent = sweepFinished ? "" : "estimating time left…";
      return;
    }
    const left = Math.max(0, progress.eta_s - (Date.now() / 1000 - progress.as_of));
    nodes.eta.textContent = "about " + window.specdashLive.formatSeconds(left) + " left";
  }

  function showState(sweep) {
    nodes.state.textContent = sweep.state_label;
    nodes.state.className = "state state-" + sweep.state;
    nodes.reason.textContent = sweep.reason || "-";
    if (sweep.finished) {
      const actions = document.getElementById("sweep-actions");
      if (actions) actions.replaceChildren();
    }
  }

  function refreshTable() {
    document.body.dispatchEvent(new CustomEvent("sweep-level"));
  }

  // The table is rendered with the page; levels that started or finished before the socket
  // was subscribed come only in its snapshot (a short sweep can finish in between), so the
  // table is fetched again when the snapshot holds a level it does not show as it is.
  function tableBehind(snapshotLevels) {
    const shown = new Map();
    document.querySelectorAll("[data-testid=level-row]").forEach(function (row) {
      shown.set(Number(row.dataset.level), row.dataset.state);
    });
    return snapshotLevels.some(function (l) { return shown.get(l.index) !== l.state; });
  }

  window.specdashLive.connect(config.wsPath, {
    "snapshot": function (message) {
      build(message);
      showState(message.sweep);
      showProgress(message.progress, message.sweep.finished);
      if (tableBehind(message.levels)) refreshTable();
    },
    "sweep.samples": function (message) {
      addSamples(message.samples.filter(function (s) {
        return !snapshotSamples.has(sampleKey(s));
      }));
      showProgress(null);
    },
    "sweep.level": function (message) {
      updateLevel(message.level);
      showProgress(message.progress);
      refreshTable();
    },
    "sweep.state": function (message) {
      showState(message.sweep);
      showProgress(message.progress, message.sweep.finished);
      refreshTable();
    },
  });
  // The time left counts down between events.
  window.setInterval(function () { showProgress(null); }, 1000);
})();
