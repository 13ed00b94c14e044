// Pure CSV helpers, kept in their own script element so a test can run them alone.
var FORMULA_START = /^[=+\-@\t\r]/;
function neutralize(value) { return FORMULA_START.test(value) ? "'" + value : value; }
function csvField(value) {
  var s = value == null ? "" : String(value);
  return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}
function toCsv(rows) {
  return rows.map(function (row) { return row.map(csvField).join(","); }).join("\r\n") + "\r\n";
}
