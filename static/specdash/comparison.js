// The comparison page: every chart is a figure built on the server (benchmarks/experiments/
// figures.py), drawn once. Plotly's modebar exports PNG; one more button exports SVG.
(function () {
  "use strict";

  const node = document.getElementById("comparison-figures");
  if (!node || !window.Plotly) return;
  const figures = JSON.parse(node.textContent);
  const svgButton = {
    name: "Download plot as SVG",
    icon: window.Plotly.Icons.disk,
    click: function (gd) {
      window.Plotly.downloadImage(gd, { format: "svg", filename: gd.id || "chart" });
    },
  };
  const config = {
    responsive: true,
    displaylogo: false,
    toImageButtonOptions: { format: "png", scale: 2 },
    modeBarButtonsToAdd: [svgButton],
  };
  Object.keys(figures).forEach(function (name) {
    const el = document.getElementById("chart-" + name);
    if (!el) return;
    const fig = figures[name];
    window.Plotly.newPlot(el, fig.data, fig.layout, config);
  });
})();
