// The one place for the dashboard's Plotly look and drawing rules (loaded after
// vendor/plotly.min.js): the shared config (PNG at 2x from the modebar, one more button for
// SVG), the layout of a chart over time, and the two ways a chart changes:
//  - draw(node, data, layout) renders a whole figure with Plotly.react, which creates the
//    chart the first time and updates it in place afterwards (a fresh snapshot, a new GPU);
//  - extend(node, update, traces) appends points with Plotly.extendTraces, keeping the last
//    MAX_POINTS, for each live batch; a chart is never re-created per tick.
(function () {
  "use strict";

  if (!window.Plotly) return;
  const Plotly = window.Plotly;
  const MAX_POINTS = 3600;
  const MARGIN = { l: 60, r: 20, t: 24, b: 40 };

  const config = {
    responsive: true,
    displaylogo: false,
    toImageButtonOptions: { format: "png", scale: 2 },
    modeBarButtonsToAdd: [{
      name: "Download plot as SVG",
      icon: Plotly.Icons.disk,
      click: function (gd) {
        Plotly.downloadImage(gd, { format: "svg", filename: gd.id || "chart" });
      },
    }],
  };

  // A chart against wall-clock time (samples carry Unix seconds; x is in ms).
  function timeLayout(title, extra) {
    return Object.assign({
      margin: Object.assign({}, MARGIN), showlegend: false, xaxis: { type: "date" },
      yaxis: { title: { text: title }, rangemode: "tozero" },
    }, extra || {});
  }

  function layout(extra) {
    return Object.assign({ margin: Object.assign({}, MARGIN) }, extra || {});
  }

  function draw(node, data, figureLayout) {
    if (!node) return;
    Plotly.react(node, data, figureLayout, config);
  }

  // A figure built on the server ({data, layout} from a json_script tag).
  function figure(node, fig) {
    // A figure that states its height (its legend's rows added under the plot, figures.py)
    // gets it: the chart's box grows instead of squashing the plot.
    if (node && fig.layout && fig.layout.height) node.style.height = fig.layout.height + "px";
    draw(node, fig.data, fig.layout);
  }

  function extend(node, update, traces, maxPoints) {
    if (!node || !node.data) return;
    Plotly.extendTraces(node, update, traces, maxPoints || MAX_POINTS);
  }

  function relayout(node, update) {
    if (node && node.data) Plotly.relayout(node, update);
  }

  function drawn(node) {
    return Boolean(node && node.data);
  }

  window.specdashCharts = {
    config: config,
    timeLayout: timeLayout,
    layout: layout,
    draw: draw,
    figure: figure,
    extend: extend,
    relayout: relayout,
    drawn: drawn,
    MAX_POINTS: MAX_POINTS,
  };
})();
