// The break-even map's page: the heat map is a figure built on the server
// (benchmarks/experiments/breakeven_report.py), drawn once with charts.js's shared config.
(function () {
  "use strict";

  const node = document.getElementById("breakeven-figure");
  if (!node || !window.specdashCharts) return;
  window.specdashCharts.figure(document.getElementById("chart-breakeven"), JSON.parse(node.textContent));
})();
