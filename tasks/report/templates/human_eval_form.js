// The form's behaviour: answers kept in localStorage under STORE_KEY, progress, and the CSV download with
// the sheet's COLUMNS (COLUMNS, REQUIRED and STORE_KEY are set by the page before this script).
(function () {
  "use strict";
  var items = Array.prototype.slice.call(document.querySelectorAll("article.item"));
  var nameBox = document.getElementById("annotator");
  var state = { annotator: "", items: {} };
  function load() {
    try {
      var saved = JSON.parse(window.localStorage.getItem(STORE_KEY));
      if (saved && saved.items) state = saved;
    }
    catch (e) { /* no storage (private window, file:// rules): the form still works, without memory */ }
  }
  function save() {
    try { window.localStorage.setItem(STORE_KEY, JSON.stringify(state)); } catch (e) { /* see load() */ }
  }
  function answers(id) { return state.items[id] || (state.items[id] = {}); }
  function isDone(id) {
    var a = state.items[id] || {};
    return REQUIRED.every(function (f) { return a[f]; });
  }
  function refresh() {
    var done = 0;
    items.forEach(function (el) {
      var ok = isDone(el.dataset.item);
      el.classList.toggle("done", ok);
      if (ok) done += 1;
    });
    document.getElementById("progress").textContent = done + " of " + items.length + " items rated";
  }
  function restore() {
    nameBox.value = state.annotator || "";
    items.forEach(function (el) {
      var a = state.items[el.dataset.item] || {};
      el.querySelectorAll("[data-field]").forEach(function (input) {
        var v = a[input.dataset.field] || "";
        if (input.type === "radio") input.checked = input.value === v;
        else input.value = v;
      });
    });
  }
  function record(event) {
    var input = event.target;
    if (input === nameBox) { state.annotator = nameBox.value.trim(); save(); return; }
    if (!input.dataset || !input.dataset.field) return;
    var el = input.closest("article.item");
    answers(el.dataset.item)[input.dataset.field] = input.value;
    save();
    refresh();
  }
  function text(el, selector) { var t = el.querySelector(selector); return t ? t.textContent : ""; }
  function download() {
    var who = nameBox.value.trim();
    if (!who) { window.alert("Please type your name first."); nameBox.focus(); return; }
    state.annotator = who;
    save();
    var rows = [COLUMNS];
    items.forEach(function (el) {
      var id = el.dataset.item, a = state.items[id] || {};
      rows.push([id, neutralize(text(el, ".source")), neutralize(text(el, ".synthetic")), a.fluency || "",
                 a.meaning || "", a.attribute_guess || "", neutralize(who), neutralize(a.comment || "")]);
    });
    var blob = new Blob(["\ufeff" + toCsv(rows)], { type: "text/csv;charset=utf-8" });
    var link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = "sheet-" + (who.replace(/[^A-Za-z0-9_-]+/g, "_") || "annotator") + ".csv";
    document.body.appendChild(link);
    link.click();
    setTimeout(function () { URL.revokeObjectURL(link.href); link.remove(); }, 1000);
  }
  load();
  restore();
  refresh();
  document.addEventListener("change", record);
  document.addEventListener("input", record);
  document.getElementById("download").addEventListener("click", download);
})();
