// Loaded on pages with widgets, after require.js and before the widget manager
// (embed-amd.js); see _config.yml (nb_ipywidgets_js).
(function () {
  var src = document.currentScript && document.currentScript.src;
  if (!src || typeof window.require === "undefined") { return; }
  var here = src.slice(0, src.lastIndexOf("/") + 1);  // .../_static/
  var manager = here + "vendor/html-manager";
  // The manager derives the address of its icon fonts from its own module id
  // (@jupyter-widgets/html-manager/dist/...). Map that id to the vendored copy so the
  // fonts come from this site, not from a path relative to the page.
  window.require.config({ paths: {
    "@jupyter-widgets/html-manager/dist": manager,
    "@jupyter-widgets": manager
  } });
})();

// The widgets typeset their labels with the MathJax 2 call MathJax.Hub.Queue; the site
// serves MathJax 3, which has no Hub. Provide that one call on top of MathJax 3 once
// MathJax has replaced its configuration object (it does so before DOMContentLoaded).
(function () {
  function install() {
    var mj = window.MathJax;
    if (!mj || mj.Hub || typeof mj.typesetPromise !== "function") { return; }
    mj.Hub = { Queue: function () {
      var elements = [];
      Array.prototype.forEach.call(arguments, function (job) {
        if (Array.isArray(job) && job[0] === "Typeset" && job[2]) { elements.push(job[2]); }
      });
      if (elements.length) {
        mj.startup.promise.then(function () { return mj.typesetPromise(elements); })
          .catch(function (err) { console.warn("MathJax could not typeset a widget label", err); });
      }
    } };
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", install);
  } else {
    install();
  }
})();
