// Search results list each page once (added to both editions by tools/sphinxext/attnlib_i18n.py).
// Sphinx lists a page twice when a query matches one of its entries (a glossary term, an API
// object, a section title: a result with an anchor) and also its text (a result without one):
// searching 词元 gave 术语表 > 词元 and then 术语表 again. The text match of a page adds
// nothing when one of its entries is listed, so it is dropped.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || typeof Search._performSearch !== "function") return;
  const perform = Search._performSearch;
  // a result is [docname, title, anchor, description, score, filename]
  Search._performSearch = (...args) => {
    const results = perform(...args);
    const withEntry = new Set(results.filter((r) => r[2]).map((r) => r[0]));
    return results.filter((r) => r[2] || !withEntry.has(r[0]));
  };
});
