#!/usr/bin/env python3
"""ANSI SGR text (a `tmux capture-pane -e`) on stdin -> a standalone HTML page on stdout.

Only what a ratatui screen uses: bold, reverse, the 16 colours, 256 colours and RGB.
"""
import html
import re
import sys

BASE = ["#1e1e1e", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5"]
BRIGHT = ["#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"]
FG, BG = "#d4d4d4", "#1e1e1e"


def c256(n):
    if n < 8:
        return BASE[n]
    if n < 16:
        return BRIGHT[n - 8]
    if n < 232:
        n -= 16
        v = [0, 95, 135, 175, 215, 255]
        return "#%02x%02x%02x" % (v[n // 36], v[(n // 6) % 6], v[n % 6])
    g = 8 + (n - 232) * 10
    return "#%02x%02x%02x" % (g, g, g)


def main():
    text = sys.stdin.read()
    st = {"fg": None, "bg": None, "bold": False, "rev": False}
    out = []
    for part in re.split(r"(\x1b\[[0-9;]*m)", text):
        m = re.fullmatch(r"\x1b\[([0-9;]*)m", part)
        if m:
            codes = [int(c) if c else 0 for c in m.group(1).split(";")]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0:
                    st = {"fg": None, "bg": None, "bold": False, "rev": False}
                elif c == 1:
                    st["bold"] = True
                elif c == 22:
                    st["bold"] = False
                elif c == 7:
                    st["rev"] = True
                elif c == 27:
                    st["rev"] = False
                elif 30 <= c <= 37:
                    st["fg"] = BASE[c - 30]
                elif 90 <= c <= 97:
                    st["fg"] = BRIGHT[c - 90]
                elif 40 <= c <= 47:
                    st["bg"] = BASE[c - 40]
                elif 100 <= c <= 107:
                    st["bg"] = BRIGHT[c - 100]
                elif c == 39:
                    st["fg"] = None
                elif c == 49:
                    st["bg"] = None
                elif c in (38, 48) and i + 1 < len(codes):
                    key = "fg" if c == 38 else "bg"
                    if codes[i + 1] == 5 and i + 2 < len(codes):
                        st[key] = c256(codes[i + 2])
                        i += 2
                    elif codes[i + 1] == 2 and i + 4 < len(codes):
                        st[key] = "#%02x%02x%02x" % tuple(codes[i + 2:i + 5])
                        i += 4
                i += 1
            continue
        if not part:
            continue
        fg, bg = st["fg"] or FG, st["bg"] or BG
        if st["rev"]:
            fg, bg = bg, fg
        style = "color:%s;background:%s%s" % (fg, bg, ";font-weight:bold" if st["bold"] else "")
        out.append('<span style="%s">%s</span>' % (style, html.escape(part)))
    print(
        "<!doctype html><html><head><meta charset='utf-8'><style>"
        "body{margin:0;background:%s}"
        "pre{margin:0;padding:8px;font:13px/16px 'DejaVu Sans Mono',monospace;color:%s}"
        "</style></head><body><pre>%s</pre></body></html>" % (BG, FG, "".join(out))
    )


if __name__ == "__main__":
    main()
