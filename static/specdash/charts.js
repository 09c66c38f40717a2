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
    if (node && fig.layout && fig.layout.legend && fig.layout.legend.yref === "container") {
      fitLegend(node);
      // A resize re-wraps the legend (responsive charts): fitted again after each redraw.
      if (!node.dataset.legendFit) {
        node.dataset.legendFit = "1";
        node.on("plotly_afterplot", function () { window.setTimeout(fitLegend, 0, node); });
      }
    }
  }

  // The server gave the legend under the axis title (charts.py, legend_below) room for the
  // rows it takes in the narrowest card; once drawn, the bottom margin and the chart's height
  // follow the rows it really took at this width, so the legend neither covers the axis title
  // nor leaves an empty band under a wide chart. The plot area keeps its height.
  const LEGEND_AXIS_BELOW_PX = 56;  // tick labels and the x axis's title (charts.py)
  function fitLegend(node) {
    const layout = node.layout;
    const legend = node.querySelector(".legend");
    if (!layout || !layout.margin || !layout.height || !legend) return;
    const plot = layout.height - layout.margin.t - layout.margin.b;
    const bottom = LEGEND_AXIS_BELOW_PX + Math.ceil(legend.getBoundingClientRect().height) + 8;
    if (Math.abs(bottom - layout.margin.b) <= 4) return;  // close enough: no redraw loop
    const height = plot + layout.margin.t + bottom;
    node.style.height = height + "px";
    // react, not relayout: a relayout of the height also pins the width at its current value,
    // and the chart would stop following its card when the page is resized.
    const margin = Object.assign({}, layout.margin, { b: bottom });
    Plotly.react(node, node.data, Object.assign({}, layout, { margin: margin, height: height }),
      config);
  }

  // The server-built figures of the json_script tag `id` ({name: {data, layout}}), each drawn
  // once into its container "chart-<name>" (a figure whose container the page lacks is skipped).
  function figures(id) {
    const source = document.getElementById(id);
    if (!source) return;
    const all = JSON.parse(source.textContent);
    Object.keys(all).forEach(function (name) {
      figure(document.getElementById("chart-" + name), all[name]);
    });
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
    figures: figures,
    extend: extend,
    relayout: relayout,
    drawn: drawn,
    MAX_POINTS: MAX_POINTS,
  };
})();
