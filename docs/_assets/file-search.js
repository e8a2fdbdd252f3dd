// Opened from file:// the browser lets no Web Worker run, so material's search cannot start; say so
// in the search box instead of "Initializing search" forever. Served over http, search works as usual.
if (location.protocol === "file:") {
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("input.md-search__input").forEach(function (input) {
      input.disabled = true;
      input.placeholder = "Search needs a server: python -m http.server -d site";
      input.title = input.placeholder;
    });
  });
}
