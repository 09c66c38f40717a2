// Controller tracking (templates/benchmarks/_controller_tracking.html): each level's figure is
// built on the server (benchmarks/controller_report.py) and drawn once with charts.js's config.
(function () {
  "use strict";

  if (!window.specdashCharts) return;
  document.querySelectorAll("[data-controller-figure]").forEach(function (node) {
    const data = document.getElementById(node.dataset.controllerFigure);
    if (data) window.specdashCharts.figure(node, JSON.parse(data.textContent));
  });
})();
