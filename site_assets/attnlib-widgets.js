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

// The explorers' sliders for screen readers: ipywidgets' slider handle (noUiSlider's
// role="slider" element) has no name and announces the position's index ("3") where the
// page shows its label ("her"). Name each handle after its control's label and give it the
// readout as its value text, kept up to date as the slider moves
// (tests/browser/test_accessibility.py: axe-core's aria-input-field-name, and the keyboard test).
(function () {
  function describe(handle) {
    var slider = handle.closest(".widget-slider");
    if (!slider) { return; }
    var label = slider.querySelector(".widget-label");
    var readout = slider.querySelector(".widget-readout");
    if (label && label.textContent.trim() && handle.getAttribute("aria-label") !== label.textContent.trim()) {
      handle.setAttribute("aria-label", label.textContent.trim());
    }
    if (readout && readout.textContent.trim() && handle.getAttribute("aria-valuetext") !== readout.textContent.trim()) {
      handle.setAttribute("aria-valuetext", readout.textContent.trim());
    }
  }
  function describeAll() {
    Array.prototype.forEach.call(document.querySelectorAll(".widget-slider .noUi-handle[role='slider']"), describe);
  }
  function start() {
    describeAll();
    // widgets render after the page has loaded, and a move rewrites the readout and the
    // handle's aria-valuetext: describe again after every change below the body
    new MutationObserver(describeAll).observe(document.body, {
      childList: true, subtree: true, characterData: true, attributes: true, attributeFilter: ["aria-valuetext"]
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
