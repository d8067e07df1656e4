#!/usr/bin/env python3
"""check-layers: no import circle between the files of a crate, no import from a layer above.

For every library/binary crate of the workspace (the root Cargo.toml's members, except the
test and bench packages tests/, bench/, fuzz/), this script

  1. builds the module tree from the files (`mod x;` declarations, `foo.rs`, `foo/mod.rs`,
     `foo/bar.rs`, `#[path]`; an inline `mod x { ... }` belongs to its file), starting at
     src/lib.rs, src/main.rs, src/bin/* and the [[bin]]/[lib] paths of Cargo.toml;
  2. finds in each file every reference to another module of the same package: `use`
     declarations (nested braces, `self`, globs, renames; `crate::`, `super::`, `self::`,
     a child module, the library's name from a binary) and paths written in code
     (`crate::a::b::f()`, `super::x::Y`, `child::f()`, `alias::f()` after `use crate::a;`),
     after removing comments, string/char literals and test code (`#[cfg(test)]` items,
     `#[cfg(test)] mod x;` files, files under a tests/ directory);
  3. resolves each reference to the FILE that defines what it names: the deepest module
     the path walks through, following `use`/`pub use` re-exports to the module that
     defines the item (so `crate::meta::Command`, re-exported by meta/mod.rs from
     meta/command.rs, is an import of meta/command.rs). A `pub use` re-export is itself an
     import of its file only when the file's own code uses the name; a path to something
     outside the package (std, another crate) is ignored;
  4. reports every import circle between files (strongly connected components, Tarjan)
     with one concrete cycle and the lines of its imports, and every import from a module
     of a higher layer than the importing file (scripts/layers.toml).

Exit status 0 when there is no circle and no upward import, 1 otherwise (2 on a usage or
configuration error). The last line is a summary such as
`check-layers: 0 circles, 0 upward imports in 123 files`.

Usage:
  python3 scripts/check-layers.py                # whole workspace
  python3 scripts/check-layers.py --crate gateway
  python3 scripts/check-layers.py --graph        # also print every import edge
  python3 scripts/check-layers.py --strict       # files not in the layer table are errors
  python3 scripts/check-layers.py --verbose      # every edge inside each circle
  python3 scripts/check-layers.py --self-test    # the checker's own test

Python 3.11+, standard library only.
"""

from __future__ import annotations

import argparse
import bisect
import glob
import io
import os
import re
import sys
import tempfile
import tomllib
from collections import deque
from contextlib import redirect_stdout
from dataclasses import dataclass, field

# Workspace members that are test or bench code, never checked as crates.
SKIP_MEMBERS = {"tests", "bench", "benches", "fuzz", "examples"}

IDENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"
KEYWORD_ROOTS = {"crate", "$crate", "super", "self"}


# --------------------------------------------------------------------------------------
# Source text: comments, literals and test code blanked out (offsets and lines preserved)
# --------------------------------------------------------------------------------------


def _blank(chars: list[str], start: int, end: int) -> None:
    for k in range(start, end):
        if chars[k] != "\n":
            chars[k] = " "


_RAW_STR = re.compile(r'(?:b|c)?r(#*)"')


def strip_comments_and_literals(text: str) -> str:
    """Same length as `text`, newlines kept; comments and string/char literals are spaces."""
    out = list(text)
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            _blank(out, i, j)
            i = j
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            _blank(out, i, j)
            i = j
            continue
        prev_ident = i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
        if c in "brc" and not prev_ident:
            m = _RAW_STR.match(text, i)
            if m:
                close = '"' + m.group(1)
                j = text.find(close, m.end())
                j = n if j < 0 else j + len(close)
                _blank(out, i, j)
                i = j
                continue
            if c in "bc" and i + 1 < n and text[i + 1] == '"':
                i += 1  # b"..." / c"...": the quote is handled below, the prefix blanked
                out[i - 1] = " "
                c = '"'
            elif c == "b" and i + 1 < n and text[i + 1] == "'":
                i += 1
                out[i - 1] = " "
                c = "'"
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            _blank(out, i, j)
            i = j
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{..}', '\''), or a lifetime/label ('a, 'static).
            if i + 1 < n and text[i + 1] == "\\":
                j = i + 2
                while j < n and text[j] != "'":
                    j += 2 if text[j] == "\\" else 1
                j = min(j + 1, n)
                _blank(out, i, j)
                i = j
                continue
            if i + 2 < n and text[i + 2] == "'" and text[i + 1] != "\n":
                _blank(out, i, i + 3)
                i += 3
                continue
        i += 1
    return "".join(out)


_CLOSE = {")": "(", "]": "[", "}": "{"}


def match_bracket(s: str, i: int) -> int:
    """Index just past the bracket closing the one at s[i] (brackets of any kind nest)."""
    depth = 0
    n = len(s)
    j = i
    while j < n:
        ch = s[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return n


def item_end(s: str, i: int) -> int:
    """End of the item starting at or after s[i]: its `;` or its closing `}` at depth 0."""
    n = len(s)
    # Further attributes of the same item.
    while True:
        while i < n and s[i].isspace():
            i += 1
        if s.startswith("#[", i):
            i = match_bracket(s, i + 1)
            continue
        break
    depth = 0
    j = i
    while j < n:
        ch = s[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and ch == "}":
                return j + 1
            if depth < 0:  # the item was the last of its block
                return j
        elif ch == ";" and depth == 0:
            return j + 1
        j += 1
    return n


_CFG_ATTR = re.compile(r"#\s*(!?)\s*\[\s*cfg\s*\(")


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def cfg_is_test_only(pred: str) -> bool:
    """True for `test` and `all(..., test, ...)`: code compiled only into unit tests."""
    pred = pred.strip()
    if pred == "test":
        return True
    m = re.fullmatch(r"all\s*\((.*)\)", pred, re.S)
    return bool(m) and any(cfg_is_test_only(p) for p in _split_top(m.group(1)))


def _test_cfgs(s: str):
    """(start, end, inner) of every `#[cfg(PRED)]` / `#![cfg(PRED)]` whose PRED is test-only."""
    for m in _CFG_ATTR.finditer(s):
        close = match_bracket(s, m.end() - 1)  # the `)` of cfg(
        pred = s[m.end() : close - 1]
        j = close
        while j < len(s) and s[j].isspace():
            j += 1
        if j < len(s) and s[j] == "]" and cfg_is_test_only(pred):
            yield m.start(), j + 1, m.group(1) == "!"


def blank_test_code(s: str) -> tuple[str, bool]:
    """Blank every `#[cfg(test)]` item; (text, whole_file_is_test)."""
    chars = list(s)
    pos = 0
    for start, end, inner in _test_cfgs(s):
        if inner:
            return s, True
        if start < pos:
            continue  # inside an item already blanked
        stop = item_end(s, end)
        _blank(chars, start, stop)
        pos = stop
    return "".join(chars), False


# --------------------------------------------------------------------------------------
# Use trees
# --------------------------------------------------------------------------------------

_USE_TOKEN = re.compile(r"::|[{},*]|\$crate|(?:r#)?[A-Za-z_][A-Za-z0-9_]*|\S")


@dataclass
class UseLeaf:
    segs: tuple[str, ...]  # path as written, `self` leaves folded into their prefix
    binding: str | None  # name it binds in the module (None for globs and `as _`)
    glob: bool
    pos: int  # offset of the leaf's last segment (for its line number)


def parse_use_tree(body: str, base: int) -> list[UseLeaf]:
    """Parse the text between `use` and `;`. Offsets are relative to the file (base)."""
    toks = [(m.group(0), base + m.start()) for m in _USE_TOKEN.finditer(body)]
    leaves: list[UseLeaf] = []
    k = 0

    def norm(t: str) -> str:
        return t[2:] if t.startswith("r#") else t

    def tree(prefix: tuple[str, ...]) -> None:
        nonlocal k
        segs = list(prefix)
        last_pos = toks[k][1] if k < len(toks) else base
        if k < len(toks) and toks[k][0] == "::":  # leading `::`: an external crate
            segs.append("::")
            k += 1
        while k < len(toks):
            t, p = toks[k]
            if t == "{":
                k += 1
                while k < len(toks) and toks[k][0] != "}":
                    if toks[k][0] == ",":
                        k += 1
                        continue
                    tree(tuple(segs))
                k += 1  # the `}`
                return
            if t == "*":
                k += 1
                leaves.append(UseLeaf(tuple(segs), None, True, p))
                return
            if re.match(r"\$crate|(?:r#)?[A-Za-z_]", t):
                segs.append(norm(t))
                last_pos = p
                k += 1
                if k < len(toks) and toks[k][0] == "::":
                    k += 1
                    continue
                binding: str | None = segs[-1]
                if k < len(toks) and toks[k][0] == "as":
                    k += 1
                    if k < len(toks):
                        binding = None if toks[k][0] == "_" else norm(toks[k][0])
                        k += 1
                if segs[-1] == "self":
                    segs.pop()
                    if binding == "self":
                        binding = segs[-1] if segs else None
                leaves.append(UseLeaf(tuple(segs), binding, False, last_pos))
                return
            k += 1  # anything unexpected: skip it
            return

    while k < len(toks):
        if toks[k][0] == ",":
            k += 1
            continue
        before = k
        tree(())
        if k == before:
            k += 1
    return leaves


# --------------------------------------------------------------------------------------
# Packages, targets, module tree
# --------------------------------------------------------------------------------------


@dataclass(eq=False)
class Module:
    path: tuple[str, ...]  # from the target's root; the root is ()
    file: "SourceFile"
    parent: "Module | None"
    target: "Target"
    child_dir: str  # where its `mod x;` children live
    children: dict[str, "Module"] = field(default_factory=dict)
    bindings: dict[str, tuple[UseLeaf, bool]] = field(default_factory=dict)  # name -> (leaf, pub)
    globs: list[tuple[UseLeaf, bool]] = field(default_factory=list)
    items: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.target.module_name(self.path)


@dataclass(eq=False)
class SourceFile:
    path: str  # absolute
    rel: str  # relative to the workspace root
    module: Module | None = None  # the file's (outermost) module
    text: str = ""  # comments, literals and test code blanked
    code: str = ""  # `text` with use declarations blanked too
    line_starts: list[int] = field(default_factory=list)
    scopes: list[tuple[int, int, Module]] = field(default_factory=list)  # inline modules
    uses: list[tuple[UseLeaf, bool, Module]] = field(default_factory=list)  # (leaf, pub, scope)

    def line(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos)

    def scope_at(self, pos: int) -> Module:
        best = self.module
        best_len = None
        for start, end, mod in self.scopes:
            if start <= pos < end and (best_len is None or end - start < best_len):
                best, best_len = mod, end - start
        return best


@dataclass(eq=False)
class Target:
    package: "Package"
    kind: str  # "lib" or "bin"
    root_file: str
    root_name: str  # "" for the library, "main" for src/main.rs, "bin::NAME" otherwise
    root: Module | None = None

    def module_name(self, path: tuple[str, ...]) -> str:
        parts = ([self.root_name] if self.root_name else []) + list(path)
        return "::".join(parts) if parts else "crate"


@dataclass(eq=False)
class Package:
    name: str
    dir: str
    lib_name: str | None = None
    targets: list[Target] = field(default_factory=list)
    files: dict[str, SourceFile] = field(default_factory=dict)  # abs path -> file
    warnings: list[str] = field(default_factory=list)

    @property
    def lib(self) -> Target | None:
        return next((t for t in self.targets if t.kind == "lib"), None)


def read_toml(path: str) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def workspace_packages(root: str) -> list[Package]:
    manifest = read_toml(os.path.join(root, "Cargo.toml"))
    members = manifest.get("workspace", {}).get("members", [])
    excluded = set(manifest.get("workspace", {}).get("exclude", []))
    dirs: list[str] = []
    for member in members:
        for d in sorted(glob.glob(os.path.join(root, member))) or [os.path.join(root, member)]:
            rel = os.path.relpath(d, root)
            if rel in excluded or os.path.basename(os.path.normpath(d)) in SKIP_MEMBERS:
                continue
            if os.path.isfile(os.path.join(d, "Cargo.toml")):
                dirs.append(d)
    if "package" in manifest and os.path.isdir(os.path.join(root, "src")):
        dirs.insert(0, root)
    packages = []
    for d in dirs:
        packages.append(load_package(root, d))
    return packages


def load_package(root: str, d: str) -> Package:
    cargo = read_toml(os.path.join(d, "Cargo.toml"))
    pkg_name = cargo.get("package", {}).get("name", os.path.basename(d))
    pkg = Package(pkg_name, d)
    lib = cargo.get("lib", {})
    lib_path = os.path.join(d, lib.get("path", "src/lib.rs"))
    if os.path.isfile(lib_path):
        pkg.lib_name = lib.get("name", pkg_name.replace("-", "_"))
        pkg.targets.append(Target(pkg, "lib", os.path.normpath(lib_path), ""))
    bins: list[str] = []
    for b in cargo.get("bin", []):
        if "path" in b:
            bins.append(os.path.normpath(os.path.join(d, b["path"])))
        elif b.get("name"):
            for cand in (f"src/bin/{b['name']}.rs", f"src/bin/{b['name']}/main.rs", "src/main.rs"):
                if os.path.isfile(os.path.join(d, cand)):
                    bins.append(os.path.normpath(os.path.join(d, cand)))
                    break
    if cargo.get("package", {}).get("autobins", True):
        auto = [os.path.join(d, "src/main.rs")]
        auto += sorted(glob.glob(os.path.join(d, "src/bin/*.rs")))
        auto += sorted(glob.glob(os.path.join(d, "src/bin/*/main.rs")))
        bins += [os.path.normpath(p) for p in auto if os.path.isfile(p)]
    src = os.path.join(d, "src")
    seen = set()
    for b in bins:
        if b in seen:
            continue
        seen.add(b)
        relsrc = os.path.relpath(b, src)
        if relsrc == "main.rs":
            name = "main"
        elif relsrc.startswith("bin" + os.sep):
            stem = relsrc[4:]
            stem = os.path.dirname(stem) if stem.endswith(os.sep + "main.rs") else stem[:-3]
            name = "bin::" + stem.replace(os.sep, "_").replace("-", "_")
        else:
            name = os.path.splitext(os.path.basename(b))[0].replace("-", "_")
        pkg.targets.append(Target(pkg, "bin", b, name))
    for t in pkg.targets:
        t.root = load_module(root, pkg, t, (), t.root_file, None, None)
    return pkg


_MOD_DECL = re.compile(r"(?<![\w$])mod\s+(" + IDENT + r")\s*([;{])")
_ITEM_DEF = re.compile(
    r"(?<![\w$])(?:struct|enum|fn|const|static|type|trait|union|macro_rules\s*!)\s+(" + IDENT + r")"
)
_USE_DECL = re.compile(r"(?<![\w$:.])use\s+(?!<)")
_VIS = re.compile(r"(?<![\w$])pub\s*(?:\([^)]*\))?\s*$")


def _in_tests_dir(pkg: Package, path: str) -> bool:
    rel = os.path.relpath(path, pkg.dir)
    return "tests" in rel.split(os.sep)[:-1]


def load_module(
    root: str,
    pkg: Package,
    target: Target,
    modpath: tuple[str, ...],
    path: str,
    parent: Module | None,
    warn_from: str | None,
    path_attr: bool = False,
) -> Module | None:
    path = os.path.normpath(path)
    if _in_tests_dir(pkg, path):
        return None
    if path in pkg.files:
        # The same file reached twice (e.g. a binary that `mod`s a file of the library).
        pkg.warnings.append(f"{os.path.relpath(path, root)}: a module more than once; checked once")
        return pkg.files[path].module
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
    except OSError:
        if warn_from:
            pkg.warnings.append(f"{warn_from}: module file not found: {os.path.relpath(path, root)}")
        return None
    stripped = strip_comments_and_literals(raw)
    text, all_test = blank_test_code(stripped)
    if all_test:
        return None
    sf = SourceFile(path, os.path.relpath(path, root))
    sf.text = text
    sf.line_starts = [0] + [m.end() for m in re.finditer(r"\n", raw)]
    base = os.path.basename(path)
    # Crate roots, mod.rs files and files named by #[path] keep their children beside them.
    is_modrs = parent is None or base == "mod.rs" or path_attr
    child_dir = os.path.dirname(path) if is_modrs else os.path.join(os.path.dirname(path), base[:-3])
    mod = Module(modpath, sf, parent, target, child_dir)
    sf.module = mod
    pkg.files[path] = sf

    # Inline modules first (their scopes), then `mod x;` declarations in order.
    decls = []
    for m in _MOD_DECL.finditer(text):
        name = m.group(1).removeprefix("r#")
        decls.append((m, name))
    inline: list[tuple[int, int, tuple[str, ...]]] = []  # (start, end, relative path)
    for m, name in decls:
        if m.group(2) == "{":
            start = m.end() - 1
            inline.append((start, match_bracket(text, start), (name,)))
    # Nesting of inline modules: a module's relative path is that of its ancestors + name.
    inline.sort(key=lambda x: (x[0], -x[1]))
    nested: list[tuple[int, int, tuple[str, ...]]] = []
    for start, end, rel in inline:
        outer = [x for x in nested if x[0] < start and end <= x[1]]
        prefix = max(outer, key=lambda x: x[0])[2] if outer else ()
        nested.append((start, end, prefix + rel))
    scope_mods: dict[tuple[str, ...], Module] = {(): mod}
    for start, end, rel in nested:
        parent_mod = scope_mods.get(rel[:-1], mod)
        inner = Module(
            modpath + rel, sf, parent_mod, target, os.path.join(parent_mod.child_dir, rel[-1])
        )
        parent_mod.children[rel[-1]] = inner
        scope_mods[rel] = inner
        sf.scopes.append((start, end, inner))

    for m, name in decls:
        if m.group(2) != ";":
            continue
        scope = sf.scope_at(m.start())
        # A #[path = "..."] attribute just before the declaration (its string is blanked in
        # `text`, so it is read from the raw file at the same offsets).
        explicit = None
        before = text[: m.start()]
        pm = re.search(r"#\s*\[\s*path\s*=\s*(\s*)\]\s*(?:pub\s*(?:\([^)]*\))?\s*)?$", before)
        if pm:
            lit = re.search(r'"([^"]*)"', raw[pm.start() : m.start()])
            if lit:
                base_dir = os.path.dirname(path) if scope is mod else scope.child_dir
                explicit = os.path.join(base_dir, lit.group(1))
        if explicit:
            child_path = explicit
        else:
            cands = [
                os.path.join(scope.child_dir, name + ".rs"),
                os.path.join(scope.child_dir, name, "mod.rs"),
            ]
            child_path = next((c for c in cands if os.path.isfile(c)), cands[0])
        child = load_module(
            root,
            pkg,
            target,
            scope.path + (name,),
            child_path,
            scope,
            f"{sf.rel}:{sf.line(m.start())}",
            path_attr=bool(explicit),
        )
        if child is not None:
            scope.children[name] = child

    # Items defined here (for glob imports).
    for m in _ITEM_DEF.finditer(text):
        sf.scope_at(m.start()).items.add(m.group(1).removeprefix("r#"))

    # Use declarations: recorded, and blanked in `code`.
    code = list(text)
    for m in _USE_DECL.finditer(text):
        end = text.find(";", m.end())
        end = len(text) if end < 0 else end
        scope = sf.scope_at(m.start())
        vis = _VIS.search(text[max(0, m.start() - 60) : m.start()])
        is_pub = bool(vis) and not re.fullmatch(r"pub\s*\(\s*self\s*\)\s*", vis.group(0))
        for leaf in parse_use_tree(text[m.end() : end], m.end()):
            sf.uses.append((leaf, is_pub, scope))
            if leaf.glob:
                scope.globs.append((leaf, is_pub))
            elif leaf.binding:
                scope.bindings.setdefault(leaf.binding, (leaf, is_pub))
        _blank(code, m.start(), min(end + 1, len(text)))
    sf.code = "".join(code)
    return mod


# --------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------

EXTERNAL = (None, False)


class Resolver:
    def __init__(self, pkg: Package):
        self.pkg = pkg
        self.memo: dict[tuple[int, str], tuple[Module | None, bool]] = {}
        self.active: set[tuple[int, str]] = set()

    def resolve(self, scope: Module, segs: tuple[str, ...], depth: int = 0) -> tuple[Module | None, bool]:
        """(module reached, whether the whole path names that module) or (None, False)."""
        if not segs or depth > 40:
            return EXTERNAL
        first = segs[0]
        if first == "::":
            return EXTERNAL
        if first in ("crate", "$crate"):
            return self.walk(scope.target.root, segs[1:], depth)
        if first == "super":
            m = scope
            i = 0
            while i < len(segs) and segs[i] == "super":
                m = m.parent if m.parent is not None else m
                i += 1
            return self.walk(m, segs[i:], depth)
        if first == "self":
            return self.walk(scope, segs[1:], depth)
        if first in scope.children or first in scope.bindings:
            return self.walk(scope, segs, depth)
        for k in range(len(scope.globs)):
            gm, whole = self.glob(scope, k, depth)
            if gm is not None and whole and gm is not scope and (first in gm.children or first in gm.bindings):
                return self.walk(gm, segs, depth + 1)
        lib = self.pkg.lib
        if lib is not None and scope.target is not lib and first == self.pkg.lib_name:
            return self.walk(lib.root, segs[1:], depth)
        return EXTERNAL

    def binding(self, m: Module, name: str, depth: int) -> tuple[Module | None, bool]:
        key = (id(m), name)
        if key in self.memo:
            return self.memo[key]
        if key in self.active:
            return EXTERNAL
        self.active.add(key)
        leaf, _pub = m.bindings[name]
        r = self.resolve(m, leaf.segs, depth + 1)
        self.active.discard(key)
        self.memo[key] = r
        return r

    def glob(self, m: Module, k: int, depth: int) -> tuple[Module | None, bool]:
        key = (id(m), f"*{k}")
        if key in self.memo:
            return self.memo[key]
        if key in self.active:
            return EXTERNAL
        self.active.add(key)
        r = self.resolve(m, m.globs[k][0].segs, depth + 1)
        self.active.discard(key)
        self.memo[key] = r
        return r

    def walk(self, m: Module, segs: tuple[str, ...], depth: int) -> tuple[Module | None, bool]:
        for i, s in enumerate(segs):
            if s == "self":
                continue
            if s == "super":
                m = m.parent if m.parent is not None else m
                continue
            if s in m.children:
                m = m.children[s]
                continue
            if s in m.bindings:
                bm, whole = self.binding(m, s, depth)
                if bm is None:
                    return EXTERNAL
                if whole:
                    m = bm
                    continue
                return bm, False
            for k in range(len(m.globs)):
                gm, whole = self.glob(m, k, depth)
                if gm is not None and whole and gm is not m and (
                    s in gm.children or s in gm.bindings or s in gm.items
                ):
                    return self.walk(gm, segs[i:], depth + 1)
            return m, False  # an item of m (or something the script cannot see)
        return m, True


@dataclass
class Edge:
    src: SourceFile
    dst: SourceFile
    line: int
    what: str  # the path as written


_INLINE_PATH = re.compile(
    r"(?<![\w$:])(\$crate|(?:r#)?[A-Za-z_][A-Za-z0-9_]*)((?:\s*::\s*(?:r#)?[A-Za-z_][A-Za-z0-9_]*)+)"
)


def package_edges(pkg: Package) -> list[Edge]:
    res = Resolver(pkg)
    edges: list[Edge] = []
    for sf in pkg.files.values():
        # Use declarations.
        for leaf, is_pub, scope in sf.uses:
            m, whole = res.resolve(scope, leaf.segs)
            if m is None or m.file is sf:
                continue
            if whole and not leaf.glob:
                continue  # `use crate::a;` binds a module: its uses `a::x` are paths below
            if is_pub:
                # A re-export: an import of this file only if its own code uses the name.
                if leaf.glob or not leaf.binding:
                    continue
                if not re.search(r"(?<![\w$])" + re.escape(leaf.binding) + r"(?!\w)", sf.code):
                    continue
            what = "::".join(leaf.segs) + ("::*" if leaf.glob else "")
            edges.append(Edge(sf, m.file, sf.line(leaf.pos), what))
        # Paths written in code.
        for pm in _INLINE_PATH.finditer(sf.code):
            first = pm.group(1).removeprefix("r#")
            rest = [s.strip().removeprefix("r#") for s in pm.group(2).split("::")[1:]]
            segs = (first, *rest)
            scope = sf.scope_at(pm.start())
            if first not in KEYWORD_ROOTS and first not in scope.children:
                if first in scope.bindings:
                    bm, whole = res.binding(scope, first, 0)
                    if bm is None or not whole:
                        continue  # an item imported by `use` (already an edge) or external
                elif not (scope.target.kind == "bin" and first == pkg.lib_name):
                    continue
            m, _whole = res.resolve(scope, segs)
            if m is None or m.file is sf:
                continue
            edges.append(Edge(sf, m.file, sf.line(pm.start()), "::".join(segs)))
    return edges


# --------------------------------------------------------------------------------------
# Graph: circles
# --------------------------------------------------------------------------------------


def tarjan(nodes: list[str], succ: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(sorted(comp))
    return sccs


def shortest_cycle(comp: list[str], succ: dict[str, set[str]]) -> list[str]:
    members = set(comp)
    best: list[str] | None = None
    for s in comp:
        prev = {s: None}
        q = deque([s])
        found = None
        while q and found is None:
            v = q.popleft()
            for w in sorted(succ.get(v, ())):
                if w not in members:
                    continue
                if w == s:
                    found = v
                    break
                if w not in prev:
                    prev[w] = v
                    q.append(w)
        if found is None:
            continue
        path = [found]
        while path[-1] != s:
            path.append(prev[path[-1]])
        path.reverse()
        if best is None or len(path) < len(best):
            best = path
    return best or comp[:1]


# --------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------


@dataclass
class LayerTable:
    names: list[str]  # layer names, lowest first
    prefixes: list[tuple[tuple[str, ...], int, str]]  # (prefix segments, layer, as written)

    def layer_of(self, module_name: str) -> tuple[int, str] | None:
        segs = tuple(module_name.split("::"))
        best = None
        for prefix, layer, written in self.prefixes:
            if segs[: len(prefix)] == prefix and (best is None or len(prefix) > len(best[0])):
                if prefix == ("crate",) and segs != ("crate",):
                    continue
                best = (prefix, layer, written)
        return (best[1], best[2]) if best else None


class ConfigError(Exception):
    pass


def load_layers(path: str) -> dict[str, LayerTable]:
    data = read_toml(path)
    tables = {}
    for crate, layers in data.items():
        if not isinstance(layers, list):
            raise ConfigError(f"{path}: [{crate}] must be a list of [[{crate}]] layers")
        names, prefixes = [], []
        for k, layer in enumerate(layers):
            if not isinstance(layer.get("modules", []), list):
                raise ConfigError(f"{path}: [[{crate}]] layer {k}: modules must be a list of strings")
            names.append(str(layer.get("layer", k)))
            for mod in layer.get("modules", []):
                prefixes.append((tuple(mod.split("::")), k, mod))
        tables[crate] = LayerTable(names, prefixes)
    return tables


# --------------------------------------------------------------------------------------
# Main check
# --------------------------------------------------------------------------------------


def run(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="workspace root (default: the script's ..)")
    ap.add_argument("--layers", default=None, help="layer table (default: scripts/layers.toml)")
    ap.add_argument("--crate", action="append", help="check only this crate (repeatable)")
    ap.add_argument("--graph", action="store_true", help="print every import edge")
    ap.add_argument("--strict", action="store_true", help="files outside the layer table are errors")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every edge inside each circle")
    ap.add_argument("--self-test", action="store_true", help="run the checker's own test")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    layers_path = args.layers or os.path.join(root, "scripts", "layers.toml")
    try:
        tables = load_layers(layers_path) if os.path.isfile(layers_path) else {}
    except (ConfigError, tomllib.TOMLDecodeError) as e:
        print(f"check-layers: {layers_path}: {e}", file=sys.stderr)
        return 2
    if not tables:
        print(f"check-layers: warning: no layer table at {os.path.relpath(layers_path, root)}")

    packages = workspace_packages(root)
    if args.crate:
        wanted = set(args.crate)
        unknown = wanted - {p.name for p in packages} - {os.path.basename(p.dir) for p in packages}
        if unknown:
            print(f"check-layers: no such crate: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        packages = [p for p in packages if p.name in wanted or os.path.basename(p.dir) in wanted]

    n_files = n_circles = n_upward = n_unlayered = 0
    for pkg in packages:
        for w in pkg.warnings:
            print(f"warning: {w}")
        edges = package_edges(pkg)
        files = sorted(pkg.files.values(), key=lambda f: f.rel)
        n_files += len(files)
        by_rel = {f.rel: f for f in files}
        succ: dict[str, set[str]] = {f.rel: set() for f in files}
        sites: dict[tuple[str, str], list[Edge]] = {}
        for e in edges:
            succ[e.src.rel].add(e.dst.rel)
            sites.setdefault((e.src.rel, e.dst.rel), []).append(e)
        for v in sites.values():
            v.sort(key=lambda e: e.line)

        if args.graph:
            print(f"== {pkg.name}: {len(files)} files, {len(sites)} file imports")
            for (a, b), es in sorted(sites.items()):
                where = ", ".join(f"{e.line} {e.what}" for e in es)
                print(f"  {a} -> {b}   [{where}]")

        # Circles.
        comps = [c for c in tarjan([f.rel for f in files], succ) if len(c) > 1]
        comps.sort(key=lambda c: (-len(c), c))
        for k, comp in enumerate(comps, 1):
            n_circles += 1
            print(f"circle {pkg.name}#{k}: {len(comp)} files import each other:")
            for rel in comp:
                print(f"    {rel}  ({by_rel[rel].module.name})")
            cyc = shortest_cycle(comp, succ)
            print("  for example:")
            for i, a in enumerate(cyc):
                b = cyc[(i + 1) % len(cyc)]
                e = sites[(a, b)][0]
                print(f"    {a}:{e.line}: {e.what}  -> {b}")
            if args.verbose:
                print("  every import inside it:")
                members = set(comp)
                for (a, b), es in sorted(sites.items()):
                    if a in members and b in members:
                        print(f"    {a} -> {b}   [{', '.join(f'{e.line} {e.what}' for e in es)}]")

        # Layers.
        table = tables.get(pkg.name) or tables.get(os.path.basename(pkg.dir))
        if table is None:
            msg = f"no layer table for crate {pkg.name} in {os.path.relpath(layers_path, root)}"
            print(("error: " if args.strict else "warning: ") + msg)
            if args.strict:
                n_unlayered += len(files)
            continue
        layer_of: dict[str, tuple[int, str] | None] = {}
        used_prefixes: set[str] = set()
        for f in files:
            lay = table.layer_of(f.module.name)
            layer_of[f.rel] = lay
            if lay is None:
                n_unlayered += 1
                kind = "error" if args.strict else "warning"
                print(f"{kind}: unlayered: {f.rel} (module {f.module.name}) is in no layer of [{pkg.name}]")
            else:
                used_prefixes.add(lay[1])
        for _prefix, layer, written in table.prefixes:
            if written not in used_prefixes:
                print(f"note: [{pkg.name}] layer {table.names[layer]!r}: {written!r} names no file")
        for (a, b), es in sorted(sites.items()):
            la, lb = layer_of[a], layer_of[b]
            if la is None or lb is None or la[0] >= lb[0]:
                continue
            by_line: dict[int, list[str]] = {}
            for e in es:
                by_line.setdefault(e.line, [])
                if e.what not in by_line[e.line]:
                    by_line[e.line].append(e.what)
            for line, whats in by_line.items():
                n_upward += 1
                print(
                    f"upward import: {a}:{line}: {', '.join(whats)} -> {b}"
                    f"  (layer {table.names[la[0]]!r} imports layer {table.names[lb[0]]!r})"
                )

    failed = n_circles > 0 or n_upward > 0 or (args.strict and n_unlayered > 0)
    circles = f"{n_circles} circle" + ("" if n_circles == 1 else "s")
    upward = f"{n_upward} upward import" + ("" if n_upward == 1 else "s")
    extra = f", {n_unlayered} unlayered" if args.strict and n_unlayered else ""
    print(f"check-layers: {circles}, {upward}{extra} in {n_files} files")
    return 1 if failed else 0


# --------------------------------------------------------------------------------------
# Self-test
# --------------------------------------------------------------------------------------

_SELF_TEST_LAYERS = """
# lowest first
[[demo]]
layer = "base"
modules = ["util", "pathmod"]
[[demo]]
layer = "middle"
modules = ["a", "b", "facade"]
[[demo]]
layer = "top"
modules = ["app", "main", "bin", "crate"]
"""

_SELF_TEST_FILES = {
    "Cargo.toml": '[workspace]\nmembers = ["demo", "tests"]\n',
    "tests/Cargo.toml": '[package]\nname = "tests"\n',
    "tests/src/lib.rs": "pub mod x;\n",
    "tests/src/x.rs": "use crate::y::Z; // the tests/ member is never checked\n",
    "demo/Cargo.toml": '[package]\nname = "demo-pkg"\n[lib]\nname = "demo"\n',
    "demo/src/lib.rs": (
        "//! use crate::app::App; (a comment)\n"
        "pub mod util;\npub mod a;\npub mod b;\npub mod facade;\npub mod app;\n"
        "#[cfg(test)]\nmod testonly;\n"
        '#[path = "elsewhere/p.rs"]\npub mod pathmod;\n'
        "pub use facade::Thing;\n"
    ),
    "demo/src/elsewhere/p.rs": "pub fn p() -> u32 { crate::util::LIMIT }\n",
    "demo/src/util.rs": (
        "pub const LIMIT: u32 = 3;\n"
        'pub fn f() -> &\'static str { "crate::app::App" }\n'
        "pub fn g(c: char) -> bool { c == '\"' || c == '{' }\n"
        "/* crate::app::App /* nested */ crate::app::App */\n"
        "#[cfg(test)]\nmod tests {\n    use crate::app::App;\n    fn t() { let _ = crate::b::B; }\n}\n"
        "#[cfg(all(unix, test))]\nfn u() { let _ = crate::app::App; }\n"
    ),
    "demo/src/a.rs": (
        "use crate::{util::{self, LIMIT}, b::B as Bee};\npub struct A;\n"
        "#[cfg(not(test))]\nfn y() { crate::pathmod::p(); }\n"
    ),
    "demo/src/b.rs": "use crate::util::*;\npub struct B;\npub fn h() -> u32 { super::util::LIMIT }\n",
    "demo/src/facade/mod.rs": (
        "mod inner;\npub use inner::Thing;\npub struct Error;\n"
        "pub mod nested {\n    pub fn k() { super::Error; super::super::util::f(); }\n}\n"
    ),
    "demo/src/facade/inner.rs": "use super::Error;\npub struct Thing;\nfn e(_: Error) {}\n",
    "demo/src/app/mod.rs": "mod run;\npub use self::run::start;\npub struct App;\n",
    "demo/src/app/run.rs": "use super::App;\nuse crate::Thing;\npub fn start(_: App) { crate::a::A; }\n",
    "demo/src/testonly.rs": "use crate::app::App;\n",
    "demo/src/main.rs": "use demo::app;\nfn main() { app::start(demo::app::App); }\n",
    "demo/src/bin/tool.rs": "use demo::facade::nested as n;\nfn main() { n::k(); }\n",
}

# The changes that put a circle (a <-> b) and an upward import (util -> app) in.
_SELF_TEST_BAD = {
    "demo/src/b.rs": (
        "use crate::util::*;\npub struct B;\npub fn h() -> u32 { super::util::LIMIT }\n"
        "pub fn i() { let _ = crate::a::A; }\n"
    ),
    "demo/src/util.rs": (
        "pub const LIMIT: u32 = 3;\n"
        "pub fn f() { let _ = crate::app::App; }\n"
    ),
}


def _write_tree(base: str, files: dict[str, str]) -> None:
    for rel, content in files.items():
        p = os.path.join(base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(content)


def _run_captured(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = run(argv)
    return rc, buf.getvalue()


def self_test() -> int:
    failures = []

    def check(cond: bool, what: str, out: str) -> None:
        if not cond:
            failures.append(f"{what}\n--- output ---\n{out}--- end ---")

    # Unit checks of the pieces.
    s = strip_comments_and_literals('a /* x /* y */ z */ "s\\"t" r#"u"# \'c\' \'a b\n// crate::x\n')
    check("crate" not in s and "u" not in s.split("r")[0] and s.count("\n") == 2, "stripping", s + "\n")
    leaves = parse_use_tree("crate::a::{self, b::{C as D, *}, e::F}", 0)
    got = [(l.segs, l.binding, l.glob) for l in leaves]
    want = [
        (("crate", "a"), "a", False),
        (("crate", "a", "b", "C"), "D", False),
        (("crate", "a", "b"), None, True),
        (("crate", "a", "e", "F"), "F", False),
    ]
    check(got == want, "use tree parsing", f"{got}\n")

    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good")
        _write_tree(good, _SELF_TEST_FILES)
        _write_tree(good, {"layers.toml": _SELF_TEST_LAYERS})
        rc, out = _run_captured(["--root", good, "--layers", os.path.join(good, "layers.toml"), "--graph", "--strict"])
        check(rc == 0, "a clean crate passes", out)
        check(out.rstrip().endswith("check-layers: 0 circles, 0 upward imports in 11 files"), "summary of a clean crate", out)
        check("demo/src/a.rs -> demo/src/elsewhere/p.rs   [4 crate::pathmod::p]" in out, "#[path] and cfg(not(test))", out)
        check("demo/src/b.rs -> demo/src/util.rs   [1 crate::util::*, 3 super::util::LIMIT]" in out, "globs", out)
        check("demo/src/facade/mod.rs -> demo/src/util.rs   [5 super::super::util::f]" in out, "inline modules", out)
        check("demo/src/bin/tool.rs -> demo/src/facade/mod.rs   [2 n::k]" in out, "src/bin/ and renamed modules", out)
        check("demo/src/util.rs ->" not in out, "comments, strings, chars, cfg(test) items are skipped", out)
        check("demo/src/app/run.rs -> demo/src/facade/inner.rs" in out, "a re-export resolves to its defining file", out)
        check("demo/src/main.rs -> demo/src/app/run.rs" in out, "a binary's imports of the library", out)
        check("testonly" not in out and "tests/src" not in out, "test code is not checked", out)

        bad = os.path.join(tmp, "bad")
        _write_tree(bad, _SELF_TEST_FILES)
        _write_tree(bad, {"layers.toml": _SELF_TEST_LAYERS})
        _write_tree(bad, _SELF_TEST_BAD)
        rc, out = _run_captured(["--root", bad, "--layers", os.path.join(bad, "layers.toml")])
        check(rc == 1, "a crate with a circle and an upward import fails", out)
        check("circle demo-pkg#1: 2 files" in out and "demo/src/a.rs:1: crate::b::B  -> demo/src/b.rs" in out
              and "demo/src/b.rs:4: crate::a::A  -> demo/src/a.rs" in out, "the circle a <-> b is found", out)
        check("upward import: demo/src/util.rs:2: crate::app::App -> demo/src/app/mod.rs" in out,
              "the upward import util -> app is found", out)
        check(out.rstrip().endswith("check-layers: 1 circle, 1 upward import in 11 files"), "summary of a bad crate", out)

        # A module outside the table: a warning, an error with --strict.
        _write_tree(good, {"demo/src/lib.rs": _SELF_TEST_FILES["demo/src/lib.rs"] + "mod stray;\n", "demo/src/stray.rs": ""})
        rc, out = _run_captured(["--root", good, "--layers", os.path.join(good, "layers.toml")])
        check(rc == 0 and "warning: unlayered: demo/src/stray.rs" in out, "unlayered is a warning", out)
        rc, out = _run_captured(["--root", good, "--layers", os.path.join(good, "layers.toml"), "--strict"])
        check(rc == 1 and "error: unlayered: demo/src/stray.rs" in out, "unlayered is an error with --strict", out)

    if failures:
        for f in failures:
            print("self-test FAILED:", f)
        return 1
    print("check-layers self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(run())
