// Forms marked data-confirm="question" ask before submitting (an inline onsubmit handler
// would be blocked by the Content-Security-Policy, and the form would submit unasked).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});
