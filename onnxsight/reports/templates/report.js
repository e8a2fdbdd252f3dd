"use strict";
(function () {
  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) { return ""; }
    var key = cell.getAttribute("data-sort");
    return key === null ? cell.textContent.trim() : key;
  }
  function compare(a, b) {
    var x = parseFloat(a), y = parseFloat(b);
    var numeric = a !== "" && b !== "" && !isNaN(x) && !isNaN(y) && isFinite(Number(a)) && isFinite(Number(b));
    if (numeric) { return x - y; }
    return a.localeCompare(b, undefined, { numeric: true });
  }
  function sortBy(table, header, index) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var result = compare(cellValue(r1, index), cellValue(r2, index));
      return ascending ? result : -result;
    });
    Array.prototype.forEach.call(header.parentNode.cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    rows.forEach(function (row) { body.appendChild(row); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var head = table.tHead;
    if (!head || !head.rows.length) { return; }
    Array.prototype.forEach.call(head.rows[0].cells, function (th, index) {
      th.setAttribute("title", "click to sort");
      th.addEventListener("click", function () { sortBy(table, th, index); });
    });
  });
  document.querySelectorAll(".tools").forEach(function (tools) { tools.classList.remove("hidden"); });
  document.querySelectorAll("button[data-details]").forEach(function (button) {
    button.addEventListener("click", function () {
      var open = button.getAttribute("data-details") === "open";
      document.querySelectorAll("details").forEach(function (d) { d.open = open; });
    });
  });
}());
