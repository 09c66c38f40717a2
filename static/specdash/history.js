// The history chart of a profile's sweeps: the figure comes from the json_script tag.
(function () {
  "use strict";

  const source = document.getElementById("history-figure");
  if (!source || !window.specdashCharts) return;
  window.specdashCharts.figure(document.getElementById("chart-history"), JSON.parse(source.textContent));
})();
