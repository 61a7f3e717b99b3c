// The dashboard's only script besides htmx (CSP allows scripts from 'self' only, none inline).
// Everything works without it; it adds "select all", the bulk buttons that fit the selection, and
// the review queue's keyboard (j/k move, c claim, r resolve, o open the item's page), and opens
// a resolution's edited input when "retry with edited input" is chosen.

// ---------------------------------------------------------------------------------------------
// Runs list: selection and the bulk actions that apply to it

function bulkForm(element) {
  return element instanceof Element ? element.closest("form[data-bulk]") : null;
}

function refreshBulk(form) {
  const picked = [...form.querySelectorAll('input[type="checkbox"][name="run"]:checked')];
  const counter = form.querySelector("[data-selected-count]");
  if (counter) counter.textContent = picked.length ? `(${picked.length})` : "";
  for (const button of form.querySelectorAll("button[data-action]")) {
    // An action none of the selected runs can take is not offered (a succeeded run has none).
    const fits = picked.filter((box) => box.dataset.actions.split(" ").includes(button.dataset.action));
    button.disabled = picked.length > 0 && fits.length === 0;
  }
}

document.addEventListener("change", (event) => {
  const box = event.target;
  const form = bulkForm(box);
  if (!form || !(box instanceof HTMLInputElement)) return;
  if (box.matches("[data-select-all]")) {
    for (const item of form.querySelectorAll('input[type="checkbox"][name="run"]')) {
      item.checked = box.checked;
    }
  }
  refreshBulk(form);
});

// Keep shareable URLs short: htmx filter requests leave out the filters that are empty.
document.addEventListener("htmx:configRequest", (event) => {
  const params = event.detail.parameters;
  for (const key of Object.keys(params)) {
    if (params[key] === "") delete params[key];
  }
});

// ---------------------------------------------------------------------------------------------
// Review queue keyboard

function queueRows() {
  const queue = document.querySelector("[data-queue]");
  return queue ? [...queue.querySelectorAll(":scope > li.qrow")] : [];
}

function currentRow(rows) {
  const here = document.activeElement && document.activeElement.closest("li.qrow");
  return rows.includes(here) ? here : null;
}

function focusRow(row) {
  const summary = row.querySelector(":scope > details > summary");
  summary.focus();
  summary.scrollIntoView({ block: "nearest" });
}

// A row's card (the item in full) loads when the row first opens; one request per row, so
// that a claim's answer is never overwritten by a late load.
function loadCard(row) {
  if (!row._card) {
    const details = row.querySelector(":scope > details");
    row._card = window.htmx.ajax("GET", details.dataset.cardUrl, {
      source: details,
      target: row.querySelector(".qbody"),
      swap: "innerHTML",
    });
  }
  return row._card;
}

document.addEventListener(
  "toggle",
  (event) => {
    const details = event.target;
    if (details instanceof HTMLDetailsElement && details.open && details.matches("li.qrow > details")) {
      loadCard(details.parentElement);
    }
  },
  true, // "toggle" does not bubble: listen while it is captured
);

function focusResolution(row) {
  const choice = row.querySelector('form.resolve input[name="resolution"]:not(:disabled)');
  if (choice) choice.focus();
  return Boolean(choice);
}

function claim(row) {
  const url = row.dataset.claimUrl;
  if (!url) return Promise.resolve();
  delete row.dataset.claimUrl;
  row._card = window.htmx.ajax("POST", url, {
    source: row.querySelector(":scope > details > summary"),
    target: row.querySelector(".qbody"),
    swap: "innerHTML",
  });
  return row._card.then(() => {
    row.querySelector(":scope > details").open = true;
  });
}

function resolve(row) {
  row.querySelector(":scope > details").open = true;
  loadCard(row).then(() => {
    if (!focusResolution(row)) claim(row).then(() => focusResolution(row));
  });
}

// On an item's own page: c claims it, r goes to its resolution.
function itemKeys(event) {
  const card = document.querySelector("main article.review");
  if (!card) return;
  if (event.key === "c") card.querySelector("[data-claim]")?.click();
  else if (event.key === "r") focusResolution(card);
}

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target instanceof Element && target.closest("input, textarea, select, [contenteditable]")) return;
  const rows = queueRows();
  if (!rows.length) {
    itemKeys(event);
    return;
  }
  if (!["j", "k", "c", "r", "o"].includes(event.key)) return;
  const row = currentRow(rows);
  const index = row ? rows.indexOf(row) : -1;
  event.preventDefault();
  if (event.key === "j") focusRow(rows[Math.min(index + 1, rows.length - 1)]);
  else if (event.key === "k") focusRow(rows[Math.max(index - 1, 0)]);
  else if (!row) focusRow(rows[0]);
  else if (event.key === "c") claim(row);
  else if (event.key === "r") resolve(row);
  else if (event.key === "o") window.location.assign(row.dataset.itemUrl);
});

// ---------------------------------------------------------------------------------------------
// Review resolution: choosing "retry with edited input" opens the edited input (focus stays on
// the choice, so the arrow keys keep moving between resolutions)

document.addEventListener("change", (event) => {
  const choice = event.target;
  if (!(choice instanceof HTMLInputElement) || choice.name !== "resolution") return;
  const edited = choice.form && choice.form.querySelector("details[data-opens-with]");
  if (!edited || choice.value !== edited.dataset.opensWith) return;
  edited.open = true;
});

// ---------------------------------------------------------------------------------------------
// The project switcher shows the chosen project at once (its button stays for keyboards and
// pages without script)

document.addEventListener("change", (event) => {
  const select = event.target;
  if (!(select instanceof HTMLSelectElement) || !select.form?.matches("[data-autosubmit]")) return;
  select.form.requestSubmit();
});
