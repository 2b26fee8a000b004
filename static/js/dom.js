// dom.js: small page helpers every module may use: an element by id, the CSRF token the page
// was rendered with, and the flash message box. Imports nothing.

export function byId(id) { return document.getElementById(id); }

export function csrfToken() {
  var meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

var flashTimer = null;

export function flash(message) {
  var box = byId("flash");
  if (!box) return;
  box.textContent = message;
  box.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(function () { box.hidden = true; }, 6000);
}
