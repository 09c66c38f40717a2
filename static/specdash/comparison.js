// The comparison page: every chart is a figure built on the server (benchmarks/experiments/
// figures.py), drawn once with the shared config of charts.js (the modebar exports PNG and SVG).
(function () {
  "use strict";

  if (window.specdashCharts) window.specdashCharts.figures("comparison-figures");
})();
