// The history chart of a profile's sweeps: the figure comes from the json_script tag.
(function () {
  const source = document.getElementById("history-figure");
  if (!source || !window.Plotly) return;
  const fig = JSON.parse(source.textContent);
  window.Plotly.newPlot("chart-history", fig.data, fig.layout, { responsive: true, displaylogo: false });
})();
