// Search in the Chinese edition (added to its pages by tools/sphinxext/attnlib_i18n.py).
// Sphinx indexes Chinese text word by word (jieba segments it at build time), but splits a
// query only at spaces and punctuation, so a phrase typed without spaces ("推理时的注意力")
// would be one term that no page contains. This splitter cuts each run of Chinese
// characters into the longest words the index knows (greedy longest match against its
// terms and title terms); characters it does not know (的, 了, ...) are dropped, and Latin
// words are split as Sphinx does. searchtools.js uses it because it defines none when one
// exists.
var splitQuery = function (query) {
  const index = (typeof Search !== "undefined" && Search._index) || {};
  const has = (table, word) => !!table && Object.prototype.hasOwnProperty.call(table, word);
  const known = (word) => has(index.terms, word) || has(index.titleterms, word);
  const cjk = /[\u3400-\u9fff]/;
  const words = [];
  for (const part of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    for (const piece of part.match(/[\u3400-\u9fff]+|[^\u3400-\u9fff]+/g) || []) {
      if (!cjk.test(piece)) {
        words.push(piece);
        continue;
      }
      let i = 0;
      while (i < piece.length) {
        let j = Math.min(piece.length, i + 8);
        while (j > i + 1 && !known(piece.slice(i, j))) j--;
        if (known(piece.slice(i, j))) words.push(piece.slice(i, j));
        i = j;
      }
    }
  }
  return words;
};
