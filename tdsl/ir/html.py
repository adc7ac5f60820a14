"""HTML for notebooks: a small syntax highlighter for loop IR, LLVM IR, assembly and C, and
the rich displays built on it. Plain `str()` stays the readable text; these only add colour.

Tokens are classified by a handful of regular expressions, enough for the languages tdsl
prints; no dependency is needed.
"""
from __future__ import annotations

import html
import re

STYLE = """<style>
.tdsl pre {background:#f8f8f8; padding:6px 8px; border-radius:4px; line-height:1.35; font-size:12px}
.tdsl .kw {color:#0033b3; font-weight:bold} .tdsl .ty {color:#008080}
.tdsl .num {color:#1750eb} .tdsl .str {color:#067d17} .tdsl .com {color:#8c8c8c; font-style:italic}
.tdsl .fn {color:#00627a} .tdsl .kind {color:#9e0000; font-weight:bold} .tdsl .var {color:#871094}
.tdsl table {border-collapse:collapse; font-size:12px} .tdsl td, .tdsl th {border:1px solid #ddd; padding:2px 8px; text-align:left}
</style>"""

_KEYWORDS = {
    "ir": r"def|for|in|if|else|and|or|not|return|allocate|barrier",
    "llvm": r"define|declare|call|ret|br|label|phi|alloca|load|store|getelementptr|icmp|fcmp|select|"
            r"fadd|fsub|fmul|fdiv|add|sub|mul|sdiv|srem|udiv|urem|shl|ashr|lshr|and|or|xor|"
            r"sext|zext|trunc|fpext|fptrunc|sitofp|fptosi|uitofp|fptoui|bitcast|insertelement|"
            r"extractelement|shufflevector|noalias|nsw|nuw|fast|contract|reassoc|align|global|"
            r"constant|private|internal|to|x",
    "asm": r"",
    "c": r"for|if|else|return|while|extern|const|static|void|int|float|double|half|char|long|"
         r"unsigned|__global__|__kernel|__global|__local|__shared__|__syncthreads|barrier",
}
_KINDS = r"parallel|vectorized|unroll|thread_binding|range"
_TYPES = {
    "ir": r"float16|float32|float64|int8|int16|int32|int64|uint8|uint16|uint32|uint64|bool|Buffer",
    "llvm": r"i1|i8|i16|i32|i64|half|float|double|void|ptr|<\d+ x [a-z0-9]+>",
    "asm": r"[xyz]mm\d+|r[a-z0-9]+|e[a-z]x",
    "c": r"float4|int32_t|int64_t|size_t",
}
_COMMENT = {"ir": r"#[^\n]*", "llvm": r";[^\n]*", "asm": r"[#;][^\n]*", "c": r"//[^\n]*"}


def _lexer(lang):
    parts = [("com", _COMMENT[lang]), ("str", r'"[^"\n]*"')]
    if lang == "ir":
        parts.append(("kind", r"\b(?:%s)\b(?=\()" % _KINDS))
    parts.append(("ty", r"(?<![\w.])(?:%s)(?![\w])" % _TYPES[lang]))
    if _KEYWORDS[lang]:
        parts.append(("kw", r"\b(?:%s)\b" % _KEYWORDS[lang]))
    parts += [("num", r"(?<![\w.%@])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?[fh]?\b"),
              ("fn", r"@[\w.$]+|\b[a-z_][\w.]*(?=\()" if lang != "asm" else r"^\s*v?[a-z]\w*|^[\w.$]+:"),
              ("var", r"%[\w.]+" if lang == "llvm" else r"(?!)")]
    return re.compile("|".join(f"(?P<{name}>{rx})" for name, rx in parts), re.M)


_LEXERS = {}


def highlight(text: str, lang: str = "ir") -> str:
    """`text` as HTML with <span class=...> around tokens (lang: ir, llvm, asm, c)."""
    lex = _LEXERS.get(lang) or _LEXERS.setdefault(lang, _lexer(lang))
    out, pos = [], 0
    for m in lex.finditer(text):
        if m.start() == m.end():
            continue
        out.append(html.escape(text[pos:m.start()]))
        out.append(f'<span class="{m.lastgroup}">{html.escape(m.group())}</span>')
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "<pre>" + "".join(out) + "</pre>"


def wrap(body: str) -> str:
    return f'{STYLE}<div class="tdsl">{body}</div>'


def func_html(func) -> str:
    return wrap(highlight(func.script(), "ir"))
