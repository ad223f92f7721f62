/* attnlib-sentence-explorer.js: chapter 13's sentence explorer, on the course website only.
 *
 * The chapter holds one raw HTML block (site_assets/sentence-explorer-snippet.html):
 *
 *   <div class="attnlib-sentence-explorer" data-model="../_static/models/shakespeare"
 *        data-sentence="To be, or not to be: that is the question." data-label-sentence="..." ...>
 *   <p>...fallback text: what Jupyter shows, where these scripts never run...</p>
 *   </div>
 *   <script src="../_static/attnlib-text-model.js" defer></script>
 *   <script src="../_static/attnlib-sentence-explorer.js" defer></script>
 *
 * Only that page loads the two scripts. This one replaces the div's content with: a text box,
 * the 8 heads as buttons (each with a thumbnail of its weights), a heat map of the chosen
 * head (query rows, key columns), a query-character slider with that row's weights drawn
 * under the sentence's characters, and the model's most likely next characters, all computed
 * in the page by attnlib-text-model.js from _static/models/shakespeare.{json,bin}.
 *
 * Every visible word comes from a data- attribute of the div (STRINGS below lists them with
 * their English defaults), so the Chinese edition, which translates the chapter's raw HTML
 * through the page's catalogue, shows Chinese. {name} fields are filled in here. Keep
 * data-sentence in English: the model knows only the plays' characters.
 *
 * For tests: the div gets data-state="loading" | "computing" | "ready" | "error" and, when
 * ready, div.attnlibResult = {input, text, ids, dropped, cut, weights, probs} (weights[layer]
 * a Float64Array (h, L, L), probs a Float64Array (V,), as attnlib-text-model.js returns them).
 */
(function () {
  'use strict';

  var STRINGS = {
    sentence: 'To be, or not to be: that is the question.',
    labelSentence: 'Sentence (the model reads it character by character)',
    labelHeads: 'Choose a head',
    headName: 'Layer {layer}, head {head}',
    mapCaption: 'Rows: the character that asks (the query); columns: the characters it reads (the keys); darker means more weight.',
    mapLabel: '{head}: attention weights of “{text}”; {strongest}',
    strongest: 'strongest: {share} of the characters look most at {target}',
    targetSelf: 'themselves',
    targetPrevious: 'the previous character',
    targetFirst: 'the first character',
    targetBack: 'the character {k} places back',
    labelQuery: 'Query character',
    queryValue: '“{char}”, position {pos} of {n}',
    stripLabel: 'Where “{char}” (position {pos}) looks in {head}: {top}',
    labelNext: 'Most likely next characters after “{tail}”',
    noticeDropped: 'Not in the model’s alphabet, left out: {chars}',
    noticeCut: 'Only the first {n} characters are read (the model’s context).',
    noticeEmpty: 'Type at least one character the model knows.',
    loading: 'Loading the model (1.7 MB)…',
    error: 'The model could not be loaded: {error}',
    space: 'space',
    newline: 'new line'
  };
  var BLUE = [8, 48, 107];  // the heat map's darkest colour (weight 1); white is weight 0

  function fill(template, fields) {
    return template.replace(/\{(\w+)\}/g, function (m, k) { return k in fields ? fields[k] : m; });
  }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function shown(ch) { return ch === ' ' ? '␣' : ch === '\n' ? '↵' : ch; }
  function colour(w) {
    return 'rgb(' + BLUE.map(function (c) { return Math.round(255 + (c - 255) * w); }).join(',') + ')';
  }

  var CSS = [
    '.attnlib-sentence-explorer{max-width:100%;margin:1em 0}',
    '.attnlib-sentence-explorer p{margin:.5em 0}',
    '.attnlib-se-input{width:100%;box-sizing:border-box;font:1em monospace;padding:.3em}',
    '.attnlib-se-heads{display:grid;gap:.4em;max-width:30em}',
    '.attnlib-se-heads button{min-width:0;padding:.25em;font:inherit;font-size:.8em;color:inherit;background:transparent;',
    'border:1px solid currentColor;border-radius:4px;cursor:pointer}',
    '.attnlib-se-heads button[aria-pressed=true]{background:#1f5fa8;color:#fff;border-color:#1f5fa8}',
    '.attnlib-sentence-explorer button:focus-visible,.attnlib-sentence-explorer input:focus-visible,',
    '.attnlib-se-map:focus-visible{outline:3px solid #e8a33d;outline-offset:2px}',
    '.attnlib-se-heads canvas{display:block;width:100%;aspect-ratio:1;image-rendering:pixelated;margin-top:.2em;border:1px solid #8a8f96}',
    '.attnlib-se-map{overflow:auto;max-width:100%;max-height:80vh}',
    '.attnlib-se-map canvas{display:block}',
    '.attnlib-se-query{width:100%;box-sizing:border-box}',
    '.attnlib-se-strip{display:flex;flex-wrap:wrap;font-family:monospace}',
    '.attnlib-se-strip span{display:flex;flex-direction:column;align-items:center;width:1.1em;cursor:pointer}',
    '.attnlib-se-strip b{display:block;width:80%;height:1.6em;position:relative;border-bottom:1px solid #8a8f96}',
    '.attnlib-se-strip i{position:absolute;left:0;right:0;bottom:0;background:#1f5fa8}',
    '.attnlib-se-strip .attnlib-se-q{outline:2px solid #e8a33d}',
    '.attnlib-se-next{list-style:none;padding:0;font-family:monospace}',
    '.attnlib-se-next span{display:inline-block;height:.8em;background:#1f5fa8;margin:0 .4em}'
  ].join('');

  /** Draw the weights (L, L) of one head, offset `off` into `w`; `query` (row) is outlined.
   * Up to 48 characters the cells are labelled and at least 9 px (the box scrolls on a
   * phone); a longer sentence is scaled to the box's width, unlabelled. Returns the geometry. */
  function drawMap(canvas, w, off, L, chars, query, boxWidth) {
    var labels = 14, cell = Math.min(22, Math.floor((Math.min(boxWidth, 600) - labels - 2) / L));
    if (cell < 9 && L <= 48) cell = 9;
    if (cell < 9) { labels = 0; cell = Math.max(2, Math.floor((Math.min(boxWidth, 600) - 2) / L)); }
    var size = labels + cell * L, ratio = window.devicePixelRatio || 1;
    canvas.width = size * ratio; canvas.height = size * ratio;
    canvas.style.width = size + 'px'; canvas.style.height = size + 'px';
    var g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.fillStyle = '#fff'; g.fillRect(0, 0, size, size);
    for (var i = 0; i < L; i++) {
      for (var j = 0; j <= i; j++) { g.fillStyle = colour(w[off + i * L + j]); g.fillRect(labels + j * cell, labels + i * cell, cell, cell); }
    }
    if (labels) {
      g.fillStyle = '#000'; g.font = Math.min(12, cell - 1) + 'px monospace'; g.textAlign = 'center'; g.textBaseline = 'middle';
      chars.forEach(function (ch, k) {
        g.fillText(shown(ch), labels + (k + 0.5) * cell, labels / 2);   // keys along the top
        g.fillText(shown(ch), labels / 2, labels + (k + 0.5) * cell);   // queries down the side
      });
    }
    g.strokeStyle = '#e8a33d'; g.lineWidth = 2;
    g.strokeRect(labels + 1, labels + query * cell + 1, L * cell - 2, cell - 2);
    return {cell: cell, labels: labels};
  }

  /** What a head mostly does: the most common place of each query's largest weight. */
  function strongest(w, off, L, s) {
    var counts = {}, best = null;
    for (var i = 0; i < L; i++) {
      var jmax = 0;
      for (var j = 1; j <= i; j++) if (w[off + i * L + j] > w[off + i * L + jmax]) jmax = j;
      var key = jmax === 0 && i > 1 ? 'first' : String(i - jmax);
      counts[key] = (counts[key] || 0) + 1;
      if (best === null || counts[key] > counts[best]) best = key;
    }
    var target = best === 'first' ? s.targetFirst : best === '0' ? s.targetSelf
      : best === '1' ? s.targetPrevious : fill(s.targetBack, {k: best});
    return fill(s.strongest, {share: Math.round(100 * counts[best] / L) + '%', target: target});
  }

  function setup(root) {
    var s = {};
    Object.keys(STRINGS).forEach(function (k) { s[k] = root.dataset[k] !== undefined ? root.dataset[k] : STRINGS[k]; });
    var M = window.attnlibTextModel, uid = 'attnlib-se-' + Math.random().toString(36).slice(2, 8);
    var state = {layer: 0, head: 0, query: 0, res: null, chars: []}, model = null, timer = null;
    root.dataset.state = 'loading';
    root.textContent = '';
    var status = root.appendChild(el('p', {role: 'status'}, s.loading));

    var label = el('label', {for: uid + '-text'}, s.labelSentence);
    var input = el('input', {type: 'text', id: uid + '-text', class: 'attnlib-se-input', spellcheck: 'false', autocomplete: 'off'});
    input.value = s.sentence;
    var notice = el('p', {role: 'status', class: 'attnlib-se-notice'});
    var headsLabel = el('p', {id: uid + '-heads'}, s.labelHeads);
    var heads = el('div', {role: 'group', class: 'attnlib-se-heads', 'aria-labelledby': uid + '-heads'});
    var mapBox = el('div', {class: 'attnlib-se-map', role: 'group', 'aria-labelledby': uid + '-cap'});
    var map = mapBox.appendChild(el('canvas', {role: 'img'}));
    var caption = el('p', {id: uid + '-cap'}, s.mapCaption);
    var qLabel = el('label', {for: uid + '-q'}, s.labelQuery);
    var qOut = el('output', {for: uid + '-q'});
    var query = el('input', {type: 'range', id: uid + '-q', class: 'attnlib-se-query', min: '0', max: '0', value: '0'});
    var strip = el('div', {class: 'attnlib-se-strip', role: 'img'});
    var nextLabel = el('p', {id: uid + '-next'});
    var next = el('ol', {class: 'attnlib-se-next', 'aria-labelledby': uid + '-next'});
    var buttons = [];

    function headName(layer, head) { return fill(s.headName, {layer: layer + 1, head: head + 1}); }
    function charName(ch) { return ch === ' ' ? s.space : ch === '\n' ? s.newline : ch; }

    function drawAll() {
      var r = state.res, L = r.ids.length, h = model.h, chars = state.chars;
      var short = r.text.length > 24 ? r.text.slice(0, 24) + '…' : r.text;
      buttons.forEach(function (b, n) {   // thumbnails: one pixel per weight
        var layer = Math.floor(n / h), head = n % h, c = b.querySelector('canvas'), g = c.getContext('2d');
        c.width = L; c.height = L;
        var img = g.createImageData(L, L), w = r.weights[layer];
        for (var i = 0; i < L * L; i++) {
          var v = w[head * L * L + i], p = i * 4;
          img.data[p] = 255 + (BLUE[0] - 255) * v; img.data[p + 1] = 255 + (BLUE[1] - 255) * v;
          img.data[p + 2] = 255 + (BLUE[2] - 255) * v; img.data[p + 3] = 255;
        }
        g.putImageData(img, 0, 0);
        c.setAttribute('aria-label', strongest(w, head * L * L, L, s));
        b.setAttribute('aria-pressed', String(layer === state.layer && head === state.head));
      });
      var off = state.head * L * L, w = r.weights[state.layer];
      state.geom = drawMap(map, w, off, L, chars, state.query, mapBox.clientWidth || 300);
      var scrolls = mapBox.scrollWidth > mapBox.clientWidth || mapBox.scrollHeight > mapBox.clientHeight;
      if (scrolls) mapBox.setAttribute('tabindex', '0'); else mapBox.removeAttribute('tabindex');  // a box that scrolls takes the focus
      map.setAttribute('aria-label', fill(s.mapLabel, {head: headName(state.layer, state.head), text: short,
                                                       strongest: strongest(w, off, L, s)}));
      drawQuery();
    }

    function drawQuery() {
      var r = state.res, L = r.ids.length, q = state.query, chars = state.chars;
      var row = state.head * L * L + q * L, w = r.weights[state.layer];
      qOut.textContent = fill(s.queryValue, {char: charName(chars[q]), pos: q + 1, n: L});
      strip.textContent = '';
      var order = [];
      chars.forEach(function (ch, j) {
        var cell = strip.appendChild(el('span', {'data-pos': String(j)}));
        cell.appendChild(el('b')).appendChild(el('i')).style.height = (100 * w[row + j]).toFixed(1) + '%';
        cell.appendChild(el('span', {}, shown(ch)));
        if (j === q) cell.className = 'attnlib-se-q';
        if (j <= q) order.push(j);
      });
      order.sort(function (a, b) { return w[row + b] - w[row + a]; });
      var top = order.slice(0, 3).map(function (j) { return '“' + charName(chars[j]) + '” ' + Math.round(100 * w[row + j]) + '%'; });
      strip.setAttribute('aria-label', fill(s.stripLabel, {char: charName(chars[q]), pos: q + 1,
                                                           head: headName(state.layer, state.head), top: top.join(', ')}));
    }

    function setQuery(q) {
      state.query = Math.max(0, Math.min(state.res.ids.length - 1, q));
      query.value = String(state.query);
      drawAll();
    }

    function compute() {
      var tok = M.tokenize(model, input.value), msgs = [];
      if (tok.dropped.length) msgs.push(fill(s.noticeDropped, {chars: tok.dropped.map(function (c) { return '“' + charName(c) + '”'; }).join(' ')}));
      if (tok.cut) msgs.push(fill(s.noticeCut, {n: model.config.context_length}));
      if (!tok.ids.length) msgs.push(s.noticeEmpty);
      notice.textContent = msgs.join(' ');
      if (!tok.ids.length) {
        root.attnlibResult = {input: input.value, text: '', ids: [], dropped: tok.dropped, cut: false, weights: [], probs: null};
        root.dataset.state = 'ready';
        return;
      }
      var res = M.forward(model, tok.ids);
      state.res = {input: input.value, text: tok.text, ids: tok.ids, dropped: tok.dropped, cut: tok.cut,
                   weights: res.weights, probs: res.probs};
      state.chars = Array.from(tok.text);
      query.max = String(tok.ids.length - 1);
      var tail = tok.text.slice(-12);
      nextLabel.textContent = fill(s.labelNext, {tail: tail.replace(/\n/g, '↵')});
      next.textContent = '';
      var ranked = Array.from(res.probs.keys()).sort(function (a, b) { return res.probs[b] - res.probs[a]; }).slice(0, 5);
      ranked.forEach(function (t) {
        var li = next.appendChild(el('li'));
        li.appendChild(el('code', {}, '“' + shown(model.alphabet[t]) + '”'));
        li.appendChild(el('span', {'aria-hidden': 'true'})).style.width = (6 * res.probs[t]).toFixed(2) + 'em';
        li.appendChild(document.createTextNode((100 * res.probs[t]).toFixed(1) + '%'));
        if (model.alphabet[t] === ' ' || model.alphabet[t] === '\n') li.firstChild.setAttribute('aria-label', charName(model.alphabet[t]));
      });
      setQuery(tok.ids.length - 1);
      root.attnlibResult = state.res;
      root.dataset.state = 'ready';
    }

    M.load(root.dataset.model).then(function (m) {
      model = m;
      root.textContent = '';
      heads.style.gridTemplateColumns = 'repeat(' + m.h + ', minmax(0, 1fr))';  // a row per layer
      for (var n = 0; n < m.config.num_layers * m.h; n++) {
        var b = heads.appendChild(el('button', {type: 'button', 'aria-pressed': 'false', 'data-layer': String(Math.floor(n / m.h)),
                                                'data-head': String(n % m.h)}));
        b.appendChild(el('span', {}, headName(Math.floor(n / m.h), n % m.h)));
        b.appendChild(el('canvas', {role: 'img'}));
        buttons.push(b);
      }
      [label, input, notice, headsLabel, heads, mapBox, caption, qLabel, query, qOut, strip, nextLabel, next]
        .forEach(function (e) { root.appendChild(e.tagName === 'OUTPUT' ? el('p').appendChild(e).parentNode : e); });
      heads.addEventListener('click', function (ev) {
        var b = ev.target.closest('button');
        if (b) { state.layer = Number(b.dataset.layer); state.head = Number(b.dataset.head); drawAll(); }
      });
      heads.addEventListener('keydown', function (ev) {  // arrows move along the 8 heads
        var step = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1}[ev.key], i = buttons.indexOf(document.activeElement);
        if (!step || i < 0) return;
        ev.preventDefault();
        var b = buttons[(i + step + buttons.length) % buttons.length];
        b.focus(); b.click();
      });
      input.addEventListener('input', function () {
        root.dataset.state = 'computing';
        clearTimeout(timer);
        timer = setTimeout(compute, 150);
      });
      query.addEventListener('input', function () { setQuery(Number(query.value)); });
      function rowAt(ev) {
        var g = state.geom, rect = map.getBoundingClientRect();
        return g ? Math.floor((ev.clientY - rect.top - g.labels) / g.cell) : -1;
      }
      map.addEventListener('mousemove', function (ev) { var q = rowAt(ev); if (q >= 0 && q !== state.query) setQuery(q); });
      map.addEventListener('click', function (ev) { var q = rowAt(ev); if (q >= 0) setQuery(q); });
      strip.addEventListener('click', function (ev) {
        var c = ev.target.closest('[data-pos]');
        if (c) setQuery(Number(c.dataset.pos));
      });
      var width = 0;
      window.addEventListener('resize', function () {   // redraw the heat map for the new width
        if (state.res && mapBox.clientWidth !== width) { width = mapBox.clientWidth; drawAll(); }
      });
      compute();
    }).catch(function (e) {
      root.dataset.state = 'error';
      status.textContent = fill(s.error, {error: e.message});
      if (window.console) console.warn(e);
    });
  }

  function start() {
    if (!document.getElementById('attnlib-se-css')) document.head.appendChild(el('style', {id: 'attnlib-se-css'}, CSS));
    Array.prototype.forEach.call(document.querySelectorAll('.attnlib-sentence-explorer'), setup);
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
