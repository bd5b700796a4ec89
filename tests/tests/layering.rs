//! The layering rule: no module of a crate imports, directly or through
//! others, a module that imports it back. Read from the source: every
//! `crate::…` and `super::…` path of a module (comments, strings and
//! `#[cfg(test)]` modules left out), resolved to the module that defines
//! what it names, following `pub use` re-exports; the cycles are the
//! strongly connected components of more than one module. A `mod`
//! declaration and a parent's `pub use child::Item` are the parent's own
//! structure, not imports of the child.
//!
//! No crate has a cycle today. A cycle that must stay for a while can be
//! listed in [`KNOWN`], exactly: the test fails when a new cycle appears,
//! when a known one grows, and when one shrinks or goes (so the list only
//! ever gets shorter).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles not yet untangled, per crate, each as its sorted modules (none).
const KNOWN: &[(&str, &[&str])] = &[];

/// The crates checked, by folder.
const CRATES: &[&str] = &["core", "proto", "server", "client", "rig", "cli"];

type Module = Vec<String>;

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// Every `.rs` file under `src` as its module path (`lib.rs` is the root,
/// `a/mod.rs` is `a`), leaving out `bin/` and `tests` modules.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<Module, PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            if parts.first().is_some_and(|p| p == "bin") || parts.iter().any(|p| p == "tests") {
                continue;
            }
            out.insert(parts, path);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The text with comments blanked and string and char literals emptied.
fn code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !is_ident(out.chars().last())
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// The code without `#[cfg(test)]` modules.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        if trimmed.starts_with("mod ") {
            if let Some(open) = trimmed.find(['{', ';']) {
                if trimmed.as_bytes()[open] == b'{' {
                    let mut depth = 0;
                    let mut end = trimmed.len();
                    for (k, ch) in trimmed[open..].char_indices() {
                        match ch {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = open + k + 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    rest = &trimmed[end..];
                    continue;
                }
            }
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A path as a list of segments, for every leaf of a use tree or a plain
/// path starting at `text[at..]` (just after `crate::` or `super::`).
fn paths_from(text: &str, prefix: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    tree(text, &mut 0, prefix.to_vec(), &mut out);
    out
}

fn tree(text: &str, at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let bytes = text.as_bytes();
    let skip_ws = |at: &mut usize| {
        while *at < bytes.len() && (bytes[*at] as char).is_whitespace() {
            *at += 1;
        }
    };
    let mut path = prefix;
    loop {
        skip_ws(at);
        if *at < bytes.len() && bytes[*at] == b'{' {
            *at += 1;
            loop {
                skip_ws(at);
                if *at >= bytes.len() {
                    return;
                }
                if bytes[*at] == b'}' {
                    *at += 1;
                    return;
                }
                tree(text, at, path.clone(), out);
                skip_ws(at);
                if *at < bytes.len() && bytes[*at] == b',' {
                    *at += 1;
                }
            }
        }
        let start = *at;
        while *at < bytes.len() && is_ident(Some(bytes[*at] as char)) {
            *at += 1;
        }
        if *at == start {
            out.push(path);
            return;
        }
        let ident = &text[start..*at];
        if ident != "self" {
            path.push(ident.to_owned());
        }
        if text[*at..].starts_with("::") {
            *at += 2;
            continue;
        }
        out.push(path);
        // `as Alias`, then the end of this leaf.
        skip_ws(at);
        if text[*at..].starts_with("as ") {
            *at += 3;
            skip_ws(at);
            while *at < bytes.len() && is_ident(Some(bytes[*at] as char)) {
                *at += 1;
            }
        }
        return;
    }
}

/// Every absolute path a module's code names through `crate::` or
/// `super::`, and its re-exports: visible name -> absolute path.
struct Read {
    paths: Vec<Vec<String>>,
    reexports: BTreeMap<String, Vec<String>>,
}

fn read(module: &Module, code: &str, modules: &BTreeMap<Module, PathBuf>) -> Read {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let boundary = i == 0 || !is_ident(Some(bytes[i - 1] as char)) && bytes[i - 1] != b':';
        if boundary && rest.starts_with("crate::") {
            paths.extend(paths_from(&rest["crate::".len()..], &[]));
            i += "crate::".len();
        } else if boundary && rest.starts_with("super::") {
            let mut base = module.clone();
            let mut r = rest;
            while let Some(more) = r.strip_prefix("super::") {
                base.pop();
                r = more;
            }
            paths.extend(paths_from(r, &base));
            i += rest.len() - r.len();
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    // Re-exports: `pub use a::b::C;`, `pub(crate) use …`, relative to the
    // module when they start with a child module's name.
    let mut reexports = BTreeMap::new();
    for statement in code.split(';') {
        let s = statement.trim_start();
        let tail = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| s.find(p).map(|at| &s[at + p.len()..]));
        let Some(tail) = tail else { continue };
        let tail = tail.trim_start();
        let (base, tail): (Vec<String>, &str) = if let Some(t) = tail.strip_prefix("crate::") {
            (Vec::new(), t)
        } else if tail.starts_with("super::") {
            let mut base = module.clone();
            let mut t = tail;
            while let Some(more) = t.strip_prefix("super::") {
                base.pop();
                t = more;
            }
            (base, t)
        } else {
            let first: String = tail.chars().take_while(|c| is_ident(Some(*c))).collect();
            let mut child = module.clone();
            child.push(first);
            if !modules.contains_key(&child) {
                continue; // another crate's item
            }
            (module.clone(), tail)
        };
        for path in paths_from(tail, &base) {
            if let Some(last) = path.last() {
                reexports.insert(last.clone(), path.clone());
            }
        }
    }
    Read { paths, reexports }
}

/// The module that defines what `path` names: its longest module prefix,
/// then through that module's re-exports.
fn resolve(
    path: &[String],
    modules: &BTreeMap<Module, PathBuf>,
    reads: &BTreeMap<Module, Read>,
    depth: usize,
) -> Module {
    let mut module: Module = path.to_vec();
    while !module.is_empty() && !modules.contains_key(&module) {
        module.pop();
    }
    let rest = &path[module.len()..];
    if depth < 8 {
        if let Some(target) = rest
            .first()
            .and_then(|name| reads.get(&module).and_then(|r| r.reexports.get(name)))
        {
            if target.as_slice() != path {
                let mut full = target.clone();
                full.extend(rest[1..].iter().cloned());
                return resolve(&full, modules, reads, depth + 1);
            }
        }
    }
    module
}

/// The cycles of one crate, each as its sorted module names.
fn cycles(src: &Path) -> Vec<Vec<String>> {
    let modules = modules(src);
    let mut reads = BTreeMap::new();
    for (module, path) in &modules {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        reads.insert(
            module.clone(),
            read(module, &without_tests(&code(&text)), &modules),
        );
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, read) in &reads {
        for path in &read.paths {
            let target = resolve(path, &modules, &reads, 0);
            if &target != module {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    // Tarjan's strongly connected components.
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on_stack: BTreeSet<Module>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &Module) {
            self.index.insert(v.clone(), self.next);
            self.low.insert(v.clone(), self.next);
            self.next += 1;
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            let targets: Vec<Module> = self.edges.get(v).into_iter().flatten().cloned().collect();
            for w in targets {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let low = self.low[v].min(self.low[&w]);
                    self.low.insert(v.clone(), low);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[v].min(self.index[&w]);
                    self.low.insert(v.clone(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = &w == v;
                    component.push(name(&w));
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for module in modules.keys() {
        if !tarjan.index.contains_key(module) {
            tarjan.visit(module);
        }
    }
    tarjan.found.sort();
    tarjan.found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn no_crate_has_an_import_cycle_beyond_the_known_ones() {
    let mut problems = Vec::new();
    for krate in CRATES {
        let found = cycles(&root().join(krate).join("src"));
        let known: Vec<Vec<String>> = KNOWN
            .iter()
            .filter(|(k, _)| k == krate)
            .map(|(_, modules)| modules.iter().map(|m| (*m).to_owned()).collect())
            .collect();
        for cycle in &found {
            if !known.contains(cycle) {
                problems.push(format!(
                    "{krate}: a cycle not in KNOWN: {}",
                    cycle.join(", ")
                ));
            }
        }
        for cycle in &known {
            if !found.contains(cycle) {
                problems.push(format!(
                    "{krate}: the known cycle {} is gone or changed: update KNOWN",
                    cycle.join(", ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_cycle_is_found_and_named() {
    let dir = tempfile::tempdir().expect("a temporary dir");
    let src = dir.path();
    let write = |file: &str, text: &str| {
        let path = src.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a dir");
        std::fs::write(path, text).expect("written");
    };
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod c;\nmod d;\npub use c::Thing;\n",
    );
    // a -> b through a use tree, b -> c through a re-export at the root,
    // c -> a through super::; c's child uses a too, but nothing comes back
    // to it. A comment, a string and a test module name a as well, and
    // must not count.
    write("a.rs", "use crate::{b::B, c};\npub struct A;\n");
    write(
        "b.rs",
        "// crate::a::A\npub struct B(crate::Thing);\nconst S: &str = \"crate::a\";\n",
    );
    write("c/mod.rs", "mod inner;\npub struct Thing(super::a::A);\n");
    write("c/inner.rs", "fn f(_: super::super::a::A) {}\n");
    write(
        "d.rs",
        "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    );
    let found = cycles(src);
    assert_eq!(
        found,
        vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
    );

    // Without c reaching back, there is none.
    write("c/mod.rs", "mod inner;\npub struct Thing;\n");
    assert!(cycles(src).is_empty(), "{:?}", cycles(src));
}
