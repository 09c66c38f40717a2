// The sweep page's ramp charts: figures built on the server from the levels' stored slices
// (benchmarks/phases.py), in the "ramp-figures" json_script tag by the id of their container,
// drawn once with charts.js's shared config (they are not live: a level's slices exist once
// it has ended).
(function () {
  "use strict";

  if (window.specdashCharts) window.specdashCharts.figures("ramp-figures");
})();
