#!/usr/bin/env python3
"""The layering check (issue 33): the workspace's crate and module graph, and its circles.

Prints, for each crate, every module and the modules of the same crate it names (`use
crate::a::b`, `crate::a::b::f()`, `super::x`, `self::x`), then fails (exit 1) when:

- a crate depends on a crate above it in the architecture's order (Cargo.toml's
  dependencies: abi < platform < mm < platform-kvm, platform-trap < kernel < hibernate <
  torpor < bench; testutil and fuzz may use anything);
- two modules of a crate name each other, directly or through a longer cycle, unless the
  cycle is in KNOWN (the circles left to break, listed by their modules): a new circle fails,
  and so does a KNOWN one that no longer exists (so the list only shrinks).

A module is a file (`a/b.rs`, `a/b/mod.rs`: `a::b`); a reference to an item of a module
counts for the module (`crate::fd::table::FdTable` names `fd::table`), one to a module's
re-export counts for that module (`crate::task::Task` names `task`). A module does not depend
on its own submodules or on its parents for this check (`mod` declarations and
`super::` up to an ancestor are structure, not use).

    scripts/check-layers.py [--graph]
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ORDER = ["abi", "platform", "mm", "platform-kvm", "platform-trap", "kernel", "hibernate", "dormant", "torpor", "bench"]
RANK = {c: i for i, c in enumerate(ORDER)}
RANK["platform-trap"] = RANK["platform-kvm"]
FREE = {"testutil"}

# Circles not broken yet, each the crate and its modules, sorted: none since issue 33 (any
# circle fails the check; one that must stay for a while goes here with its reason).
KNOWN = set()


def crate_deps(crate_dir):
    text = open(os.path.join(crate_dir, "Cargo.toml")).read()
    deps = re.search(r"^\[dependencies\](.*?)(^\[|\Z)", text, re.M | re.S)
    names = re.findall(r"^([a-z0-9_-]+)\s*[.=]", deps.group(1), re.M) if deps else []
    return {n for n in names if n in RANK or n in FREE}


def modules(src):
    """module path -> file, for every .rs file under src (lib.rs/main.rs: the root ""; a
    main.rs beside a lib.rs is a module "main" of its own, the binary on top of the library)."""
    out = {}
    has_lib = os.path.isfile(os.path.join(src, "lib.rs"))
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel == ["main"] and has_lib:
                out["main"] = os.path.join(dirpath, f)
                continue
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and rel[0] == "bin":
                continue
            # A module's unit tests in a file of their own (`a/tests.rs`): not its code.
            if rel and rel[-1] == "tests":
                continue
            out["::".join(rel)] = os.path.join(dirpath, f)
    return out


def strip_tests_and_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    # The unit tests of a file: `#[cfg(test)] [pub(crate)] mod tests { ... }` at its end.
    m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def resolve(path, mods):
    """The longest module that `path` (a list of segments from the crate root) names."""
    for n in range(len(path), 0, -1):
        cand = "::".join(path[:n])
        if cand in mods:
            return cand
    return None


def references(mod, text, mods):
    """The modules of the crate that module `mod` names."""
    here = mod.split("::") if mod else []
    found = set()
    # `use` trees: expand one level of braces ({a, b::c}).
    for m in re.finditer(r"\buse\s+((?:crate|super|self)(?:::\w+)*)(?:::\{([^;]*?)\})?\s*(?:as\s+\w+)?;", text, re.S):
        base, inner = m.group(1), m.group(2)
        items = [""] if inner is None else [s.strip() for s in re.split(r",(?![^{]*\})", inner) if s.strip()]
        for it in items:
            it = re.sub(r"\s+as\s+\w+$", "", it).split("::{")[0]
            full = base + ("::" + it if it and it != "self" else "")
            found.add(full)
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", text):
        found.add(m.group(1))
    out = set()
    for f in found:
        segs = f.split("::")
        if segs[0] == "crate":
            path = segs[1:]
        else:
            path = list(here)
            # `super` in a mod.rs names the parent of the directory's module.
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    if not path:
                        break
                    path = path[:-1]
                segs = segs[1:]
            path = path + segs
        target = resolve(path, mods)
        if target is None or target == mod:
            continue
        # Structure, not use: a module's own submodules and its ancestors.
        if target.startswith(mod + "::") if mod else True:
            continue
        if mod.startswith(target + "::") or target == "":
            continue
        out.add(target)
    return out


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    show_graph = "--graph" in sys.argv
    failures = []
    crates_dir = os.path.join(ROOT, "crates")
    found_cycles = set()
    for crate in sorted(os.listdir(crates_dir)):
        cdir = os.path.join(crates_dir, crate)
        if not os.path.isfile(os.path.join(cdir, "Cargo.toml")):
            continue
        if crate in RANK:
            for d in sorted(crate_deps(cdir)):
                if d in RANK and RANK[d] >= RANK[crate] and d != crate:
                    failures.append(f"crate {crate} depends on {d}, which is not below it")
        mods = modules(os.path.join(cdir, "src"))
        graph = {}
        for mod, path in sorted(mods.items()):
            text = strip_tests_and_comments(open(path, errors="replace").read())
            graph[mod] = references(mod, text, mods)
        if show_graph:
            print(f"# {crate}")
            for mod in sorted(graph):
                deps = ", ".join(sorted(graph[mod])) or "-"
                print(f"  {mod or '(root)'} -> {deps}")
        for comp in cycles(graph):
            key = (crate,) + comp
            found_cycles.add(key)
            if key not in KNOWN:
                failures.append(f"circle in {crate}: {' <-> '.join(comp)}")
    for key in sorted(KNOWN - found_cycles):
        failures.append(f"circle {key} is gone: take it out of KNOWN")
    print(f"{len(found_cycles)} circle(s), {len(KNOWN & found_cycles)} of them known")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
