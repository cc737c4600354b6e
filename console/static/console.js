// txinbox console: the only script. It ticks every row of the page's list of dead letters (or dead
// outbox events) at once, and disables a confirmation button once clicked so that a double click
// posts once. The pages work without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      all.closest("table").querySelectorAll('input[type=checkbox][name=id]').forEach(function (c) { c.checked = all.checked; });
    });
  }
  var form = document.getElementById("confirm-form");
  if (form) {
    form.addEventListener("submit", function () {
      var b = document.getElementById("confirm-button");
      if (b) { setTimeout(function () { b.disabled = true; }, 0); }
    });
  }
});
