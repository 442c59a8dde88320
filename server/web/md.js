// md.js - a small Markdown renderer that builds DOM nodes: model text only
// ever becomes textContent, never HTML, so it cannot inject markup.
// Handles fenced code blocks, headings, bullet and numbered lists,
// paragraphs, and inline `code`, **bold** and *italic*.

function inline(parent, text) {
  // `code` first (its content is literal), then **bold** / *italic*
  const re = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|\*([^*\n]+)\*/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
    const el = document.createElement(m[1] !== undefined ? "code" : m[2] !== undefined ? "strong" : "em");
    el.textContent = m[1] !== undefined ? m[1] : m[2] !== undefined ? m[2] : m[3];
    parent.appendChild(el);
    last = re.lastIndex;
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
}

// Replaces el's children with the rendering of text.
export function renderMarkdown(el, text) {
  const frag = document.createDocumentFragment();
  const lines = text.split("\n");
  let para = null, list = null;
  const endBlocks = () => { para = null; list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+-]*)\s*$/);
    if (fence) {
      endBlocks();
      const pre = document.createElement("pre"), code = document.createElement("code");
      if (fence[1]) code.dataset.lang = fence[1];
      const body = [];
      for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) body.push(lines[i]);
      code.textContent = body.join("\n"); // an unclosed fence (still streaming) runs to the end
      pre.appendChild(code);
      frag.appendChild(pre);
      continue;
    }
    if (/^\s*$/.test(line)) { endBlocks(); continue; }
    const h = line.match(/^(#{1,4})\s+(.*)$/);
    if (h) {
      endBlocks();
      const el = document.createElement("h" + Math.min(6, h[1].length + 2));
      inline(el, h[2]);
      frag.appendChild(el);
      continue;
    }
    const li = line.match(/^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/);
    if (li) {
      const kind = li[1] !== undefined ? "OL" : "UL";
      if (!list || list.tagName !== kind) {
        para = null;
        list = document.createElement(kind.toLowerCase());
        frag.appendChild(list);
      }
      const item = document.createElement("li");
      inline(item, li[2]);
      list.appendChild(item);
      continue;
    }
    list = null;
    if (!para) {
      para = document.createElement("p");
      frag.appendChild(para);
    } else {
      para.appendChild(document.createElement("br"));
    }
    inline(para, line);
  }
  el.replaceChildren(frag);
}
