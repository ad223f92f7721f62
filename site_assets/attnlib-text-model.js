/* attnlib-text-model.js: chapter 13's character-level GPT, run in the page.
 *
 * The same forward pass as attnlib/models/gpt.py (GPT with pos="learned", norm="pre",
 * mlp=True), over the weights attnlib/models/pretrained.py writes: <name>.json (config,
 * alphabet, where each tensor lies) and <name>.bin (float32, little-endian). The site
 * serves them at _static/models/ (tools/sphinxext/attnlib_models.py). Weights stay float32;
 * every activation is a JavaScript double, so the result is torch's float64 forward pass
 * over the same weights (and torch's float32 one to ~1e-6).
 *
 *   const model = await attnlibTextModel.load("../_static/models/shakespeare");
 *   const tok = attnlibTextModel.tokenize(model, "To be, or not to be");
 *   const res = attnlibTextModel.forward(model, tok.ids);
 *   // res.weights[layer]: Float64Array (h, L, L), row i = query i, causal (0 above the diagonal)
 *   // res.probs: Float64Array (V,), next-character probabilities after the last character
 *
 * Shapes as in attnlib: L characters, d = d_model, h heads, dh = d / h, V the alphabet's
 * size. A matrix (R, C) is a flat row-major array: element [r, c] is a[r * C + c].
 * The sentence explorer (attnlib-sentence-explorer.js) is the page's user of this file.
 */
(function (global) {
  'use strict';

  var cache = {};

  /** Fetch `<base>.json` and `<base>.bin` (URLs relative to the page) once per page. */
  function load(base) {
    if (!cache[base]) {
      cache[base] = Promise.all([
        fetch(base + '.json').then(function (r) { return ok(r, base + '.json').json(); }),
        fetch(base + '.bin').then(function (r) { return ok(r, base + '.bin').arrayBuffer(); })
      ]).then(function (parts) { return unpack(parts[0], parts[1]); });
    }
    return cache[base];
  }

  function ok(response, url) {
    if (!response.ok) throw new Error(url + ': HTTP ' + response.status);
    return response;
  }

  /** The JSON's tensors as Float32Array views into the .bin (little-endian float32). */
  function unpack(meta, buffer) {
    if (buffer.byteLength !== 4 * meta.numbers) {
      throw new Error('the .bin holds ' + buffer.byteLength / 4 + ' numbers but the .json lists ' + meta.numbers);
    }
    var all = new Float32Array(buffer);  // (a little-endian machine: every browser in use)
    var p = {};
    meta.tensors.forEach(function (t) {
      var n = t.shape.reduce(function (a, b) { return a * b; }, 1);
      p[t.name] = all.subarray(t.offset, t.offset + n);
    });
    var c = meta.config;
    if (c.pos !== 'learned' || c.norm !== 'pre' || !c.mlp || !c.scaled) {
      throw new Error('this page runs pre-LN GPTs with learned positions and an MLP; the model is ' + JSON.stringify(c));
    }
    var chars = Array.from(meta.alphabet), index = Object.create(null);
    chars.forEach(function (ch, i) { index[ch] = i; });
    return {config: c, alphabet: chars, index: index, params: p, record: meta.record,
            d: c.d_model, h: c.num_heads, dh: c.d_model / c.num_heads, V: c.vocab_size};
  }

  /** Token ids of `text`: characters outside the alphabet are dropped (and listed, each
   * once), and only the first context_length characters are kept (`cut` says so). */
  function tokenize(model, text) {
    var ids = [], kept = [], dropped = [];
    Array.from(text).forEach(function (ch) {
      if (ch in model.index) { ids.push(model.index[ch]); kept.push(ch); } else if (dropped.indexOf(ch) < 0) dropped.push(ch);
    });
    var T = model.config.context_length, cut = ids.length > T;
    return {ids: ids.slice(0, T), text: kept.slice(0, T).join(''), dropped: dropped, cut: cut};
  }

  // ------------------------------------------------------------------ the steps

  /** x @ w: (L, k) @ (k, n) -> (L, n), plus an optional bias (n,). */
  function matmul(x, L, w, k, n, bias) {
    var out = new Float64Array(L * n);
    for (var i = 0; i < L; i++) {
      var row = i * n;
      if (bias) for (var j = 0; j < n; j++) out[row + j] = bias[j];
      for (var t = 0; t < k; t++) {
        var a = x[i * k + t], wrow = t * n;
        if (a === 0) continue;
        for (j = 0; j < n; j++) out[row + j] += a * w[wrow + j];
      }
    }
    return out;
  }

  /** tok_emb[ids] + pos_emb[:L]: (L, d). */
  function embed(model, ids) {
    var d = model.d, p = model.params, L = ids.length, x = new Float64Array(L * d);
    for (var i = 0; i < L; i++) {
      for (var c = 0; c < d; c++) x[i * d + c] = p.tok_emb[ids[i] * d + c] + p.pos_emb[i * d + c];
    }
    return x;
  }

  /** torch's LayerNorm (biased variance, eps 1e-5) of each row: (L, d) -> (L, d). */
  function layerNorm(x, L, d, weight, bias) {
    var out = new Float64Array(L * d);
    for (var i = 0; i < L; i++) {
      var mean = 0, v = 0, c;
      for (c = 0; c < d; c++) mean += x[i * d + c];
      mean /= d;
      for (c = 0; c < d; c++) v += (x[i * d + c] - mean) * (x[i * d + c] - mean);
      var inv = 1 / Math.sqrt(v / d + 1e-5);
      for (c = 0; c < d; c++) out[i * d + c] = (x[i * d + c] - mean) * inv * weight[c] + bias[c];
    }
    return out;
  }

  /** Causal multi-head self-attention of x (L, d), the weights of `pre` ("blocks.0.attn.").
   * Head j is columns j*dh ... (j+1)*dh - 1 of q, k, v (attnlib's view + transpose).
   * Returns {out: (L, d) after W_O, weights: (h, L, L)}. */
  function attention(model, x, L, pre) {
    var d = model.d, h = model.h, dh = model.dh, p = model.params, scale = 1 / Math.sqrt(dh);
    var q = matmul(x, L, p[pre + 'w_q'], d, d), k = matmul(x, L, p[pre + 'w_k'], d, d);  // (L, d) @ (d, d) -> (L, d)
    var v = matmul(x, L, p[pre + 'w_v'], d, d);
    var weights = new Float64Array(h * L * L), heads = new Float64Array(L * d);        // (h, L, L), (L, h * dh)
    for (var hd = 0; hd < h; hd++) {
      var off = hd * dh;
      for (var i = 0; i < L; i++) {
        var row = (hd * L + i) * L, max = -Infinity, j, c, s;
        for (j = 0; j <= i; j++) {               // scores = q_i . k_j / sqrt(dh), keys j <= i only
          for (s = 0, c = 0; c < dh; c++) s += q[i * d + off + c] * k[j * d + off + c];
          weights[row + j] = s * scale;
          if (weights[row + j] > max) max = weights[row + j];
        }
        var sum = 0;                               // softmax over j <= i; j > i stay 0
        for (j = 0; j <= i; j++) { weights[row + j] = Math.exp(weights[row + j] - max); sum += weights[row + j]; }
        for (j = 0; j <= i; j++) weights[row + j] /= sum;
        for (j = 0; j <= i; j++) {                 // heads[i, head] = sum_j weights[i, j] v[j, head]
          var a = weights[row + j];
          for (c = 0; c < dh; c++) heads[i * d + off + c] += a * v[j * d + off + c];
        }
      }
    }
    return {out: matmul(heads, L, p[pre + 'w_o'], d, d), weights: weights};  // (L, d) @ (d, d) -> (L, d)
  }

  /** erf(x) with an error below 1e-15: the series erf(x) = 2/sqrt(pi) exp(-x^2)
   * sum_n (2x^2)^n x / (1 * 3 * ... * (2n+1)), whose terms are all positive (no
   * cancellation); for |x| >= 6, erf(x) = +-1 to double precision (erfc(6) = 2e-17). */
  function erf(x) {
    var z = Math.abs(x);
    if (z >= 6) return x > 0 ? 1 : -1;
    var term = z, sum = z, n = 0;
    while (term > 1e-17 * sum) { n += 1; term *= 2 * z * z / (2 * n + 1); sum += term; }
    var r = 2 / Math.sqrt(Math.PI) * Math.exp(-z * z) * sum;
    return x < 0 ? -r : r;
  }

  /** torch's exact GELU: x * Phi(x) = x/2 (1 + erf(x / sqrt 2)). */
  function gelu(x) { return 0.5 * x * (1 + erf(x / Math.SQRT2)); }

  /** gelu(x @ w1 + b1) @ w2 + b2: (L, d) -> (L, 4d) -> (L, d). */
  function mlp(model, x, L, pre) {
    var d = model.d, p = model.params, n = p[pre + 'b1'].length;
    var hidden = matmul(x, L, p[pre + 'w1'], d, n, p[pre + 'b1']);  // (L, d) @ (d, 4d) -> (L, 4d)
    for (var i = 0; i < hidden.length; i++) hidden[i] = gelu(hidden[i]);
    return matmul(hidden, L, p[pre + 'w2'], n, d, p[pre + 'b2']);      // (L, 4d) @ (4d, d) -> (L, d)
  }

  /** Next-character probabilities after the last position: softmax(ln_f(x[L-1]) @ unembed), (V,). */
  function unembed(model, x, L) {
    var d = model.d, V = model.V, p = model.params;
    var last = layerNorm(x.subarray((L - 1) * d, L * d), 1, d, p['ln_f.weight'], p['ln_f.bias']);  // (1, d)
    var logits = matmul(last, 1, p.unembed, d, V);                                              // (1, d) @ (d, V) -> (1, V)
    var max = Math.max.apply(null, logits), sum = 0, probs = new Float64Array(V);
    for (var t = 0; t < V; t++) { probs[t] = Math.exp(logits[t] - max); sum += probs[t]; }
    for (t = 0; t < V; t++) probs[t] /= sum;
    return probs;
  }

  /** The whole model on token ids (1 <= L <= context_length):
   * {weights: one Float64Array (h, L, L) per layer, probs: Float64Array (V,)}. */
  function forward(model, ids) {
    var L = ids.length, d = model.d, p = model.params, weights = [];
    if (L < 1 || L > model.config.context_length) throw new Error(L + ' tokens; the model reads 1 to ' + model.config.context_length);
    var x = embed(model, ids);                                           // (L, d)
    for (var b = 0; b < model.config.num_layers; b++) {
      var pre = 'blocks.' + b + '.';
      var a = attention(model, layerNorm(x, L, d, p[pre + 'ln1.weight'], p[pre + 'ln1.bias']), L, pre + 'attn.');
      for (var i = 0; i < x.length; i++) x[i] += a.out[i];                // x = x + Attn(LN1(x))
      var m = mlp(model, layerNorm(x, L, d, p[pre + 'ln2.weight'], p[pre + 'ln2.bias']), L, pre + 'mlp.');
      for (i = 0; i < x.length; i++) x[i] += m[i];                        // x = x + MLP(LN2(x))
      weights.push(a.weights);
    }
    return {weights: weights, probs: unembed(model, x, L)};
  }

  global.attnlibTextModel = {load: load, unpack: unpack, tokenize: tokenize, forward: forward,
                             embed: embed, layerNorm: layerNorm, attention: attention, mlp: mlp,
                             unembed: unembed, erf: erf, gelu: gelu};
})(typeof window !== 'undefined' ? window : globalThis);
