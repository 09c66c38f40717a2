// The sweep page's ramp charts: figures built on the server from the levels' stored slices
// (benchmarks/phases.py), in the "ramp-figures" json_script tag by the id of their container,
// drawn once with charts.js's shared config (they are not live: a level's slices exist once
// it has ended).
(function () {
  "use strict";

  const node = document.getElementById("ramp-figures");
  if (!node || !window.specdashCharts) return;
  const figures = JSON.parse(node.textContent);
  Object.keys(figures).forEach(function (name) {
    const target = document.getElementById("chart-" + name);
    if (target) window.specdashCharts.figure(target, figures[name]);
  });
})();
