// The comparison page: every chart is a figure built on the server (benchmarks/experiments/
// figures.py), drawn once with the shared config of charts.js (the modebar exports PNG and SVG).
(function () {
  "use strict";

  const node = document.getElementById("comparison-figures");
  if (!node || !window.specdashCharts) return;
  const figures = JSON.parse(node.textContent);
  Object.keys(figures).forEach(function (name) {
    window.specdashCharts.figure(document.getElementById("chart-" + name), figures[name]);
  });
})();
