// The dashboard's only script besides htmx (CSP allows scripts from 'self' only, none inline).
// "Select all" for the runs table's bulk actions; everything else works without JavaScript.
document.addEventListener("change", (event) => {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || !box.matches("[data-select-all]")) return;
  const form = box.closest("form");
  if (!form) return;
  for (const item of form.querySelectorAll('input[type="checkbox"][name="run"]')) {
    item.checked = box.checked;
  }
});

// Keep shareable URLs short: htmx filter requests leave out the filters that are empty.
document.addEventListener("htmx:configRequest", (event) => {
  const params = event.detail.parameters;
  for (const key of Object.keys(params)) {
    if (params[key] === "") delete params[key];
  }
});
