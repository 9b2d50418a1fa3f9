//! The proxy crate's folders are its layers (docs/architecture.md draws them), and imports go one way only:
//! each top-level module names only modules of the layers below it, and inside every folder no circle runs
//! through its parts, however long. So each part can be read, changed and tested with only what lies below.
//!
//! A module's imports are the `crate::…` and `super::…` paths in its non-test code, resolved to the
//! longest module path they name. An import between a module and one of its own ancestors or descendants
//! (a folder's `mod.rs` re-exporting a part, a part naming its parent's types) is not an edge: only
//! siblings of one folder are compared, at every level.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules from the bottom layer up: each may import only those before it.
const LAYERS: &[&str] =
    &["config", "runtime", "net", "protocol", "observe", "server", "pools", "client", "ops", "session", "listener"];

/// A module path, `["protocol", "router", "check"]`; the crate root is `[]`.
type ModPath = Vec<String>;

/// Every module of the crate (from its files) and, for each, the text of its non-test code.
fn modules() -> BTreeMap<ModPath, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    collect(&src, &src, &mut out);
    out
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<ModPath, String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("a name").to_string_lossy().into_owned();
        if path.is_dir() {
            // Test code, like the files below: `tests/` folders and the test-only fakes in `testing/`.
            if name != "tests" && name != "testing" {
                collect(root, &path, out);
            }
            continue;
        }
        let Some(stem) = name.strip_suffix(".rs") else { continue };
        if matches!(stem, "tests" | "testing" | "lib") || stem.ends_with("_tests") {
            continue;
        }
        let relative = path.parent().expect("a parent").strip_prefix(root).expect("under src");
        let mut module: ModPath = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        if stem != "mod" {
            module.push(stem.to_owned());
        }
        out.insert(module, without_tests(&std::fs::read_to_string(&path).expect("read a source file")));
    }
}

/// The text with comments and `#[cfg(test)]` items (an inline `mod tests { … }`, a `mod tests;`) left out.
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            // Skip the item: attributes, then either one line ending in `;` or a braced block.
            let mut depth = 0i32;
            let mut opened = false;
            for next in lines.by_ref() {
                depth += next.matches('{').count() as i32 - next.matches('}').count() as i32;
                opened |= next.contains('{');
                let t = next.trim();
                if (opened && depth <= 0) || (!opened && t.ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The module paths a module's text names, resolved against the crate's modules.
fn imports(module: &ModPath, text: &str, known: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let mut out = BTreeSet::new();
    // `super` from a file `a/b.rs` (module a::b) is `a`; from `a/b/mod.rs` (module a::b) it is `a` too.
    let parent: ModPath = module[..module.len().saturating_sub(1)].to_vec();
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent)] {
        for (at, _) in text.match_indices(prefix) {
            if prefix == "super::" && text[..at].ends_with("super::") {
                continue; // `super::super::` is read from the first `super::`
            }
            let mut base = base.clone();
            let mut rest = &text[at + prefix.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            for path in paths_at(rest) {
                let mut full = base.clone();
                full.extend(path);
                // The longest prefix that is a module.
                while !full.is_empty() && !known.contains(&full) {
                    full.pop();
                }
                if !full.is_empty() {
                    out.insert(full);
                }
            }
        }
    }
    out
}

/// The paths written at the start of `rest`: `a::b::C`, or each member of a group `{a, b::{c, D}}`.
fn paths_at(rest: &str) -> Vec<Vec<String>> {
    let word = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 1;
        let end = group
            .char_indices()
            .find(|&(_, c)| {
                depth += i32::from(c == '{') - i32::from(c == '}');
                depth == 0
            })
            .map_or(group.len(), |(i, _)| i);
        let inner = &group[..end];
        let mut out = Vec::new();
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(paths_at(inner[start..i].trim()));
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.extend(paths_at(inner[start..].trim()));
        return out;
    }
    let first = word(rest);
    if first.is_empty() || first == "self" {
        return Vec::new();
    }
    let after = &rest[first.len()..];
    match after.strip_prefix("::") {
        Some(more) => paths_at(more)
            .into_iter()
            .map(|mut p| {
                p.insert(0, first.clone());
                p
            })
            .collect::<Vec<_>>()
            .into_iter()
            .chain(std::iter::once(vec![first.clone()]))
            .collect(),
        None => vec![vec![first]],
    }
}

/// For every folder (module with parts), the edges between its parts: `from` part names `to` part.
fn sibling_edges() -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let modules = modules();
    let known: BTreeSet<ModPath> = modules.keys().cloned().collect();
    let mut folders: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, text) in &modules {
        for target in imports(module, text, &known) {
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            // An ancestor or a descendant: not a sibling.
            if common == module.len() || common == target.len() {
                continue;
            }
            let folder = module[..common].to_vec();
            folders
                .entry(folder)
                .or_default()
                .entry(module[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    folders
}

/// A circle in `graph`, as the names along it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_circle_runs_through_the_parts_of_any_folder() {
    let folders = sibling_edges();
    assert!(folders.len() > 8, "the scan found folders: {:?}", folders.keys());
    let circles: Vec<String> = folders
        .iter()
        .filter_map(|(folder, graph)| {
            circle(graph).map(|c| {
                format!("in {}: {}", if folder.is_empty() { "src".into() } else { folder.join("/") }, c.join(" -> "))
            })
        })
        .collect();
    assert!(circles.is_empty(), "modules that import each other, around a circle: {circles:#?}");
}

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    let folders = sibling_edges();
    let top = &folders[&Vec::new()];
    let modules = modules();
    let tops: BTreeSet<&str> = modules.keys().filter_map(|m| m.first().map(String::as_str)).collect();
    let listed: BTreeSet<&str> = LAYERS.iter().copied().collect();
    assert_eq!(tops, listed, "a top-level module is missing from LAYERS (and from docs/architecture.md), or gone");
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m).expect("listed");
    let upward: Vec<String> = top
        .iter()
        .flat_map(|(from, tos)| tos.iter().filter(|to| rank(to) > rank(from)).map(move |to| format!("{from} -> {to}")))
        .collect();
    assert!(upward.is_empty(), "imports of a higher layer: {upward:?}");
}

#[test]
fn the_scan_sees_edges_and_circles_when_there_are_some() {
    let folders = sibling_edges();
    let top = &folders[&Vec::new()];
    assert!(top["pools"].contains("server") && top["session"].contains("protocol"), "{top:?}");
    let console = &folders[&vec!["ops".to_owned(), "console".to_owned()]];
    assert!(console["grammar"].contains("lexer"), "a part's import of a sibling: {console:?}");
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")].iter().fold(BTreeMap::new(), |mut g, (from, to)| {
            g.entry((*from).to_owned()).or_insert_with(BTreeSet::new).insert((*to).to_owned());
            g
        });
    assert_eq!(circle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    assert_eq!(
        paths_at("{a, b::{c, D}}::x"),
        vec![vec!["a".to_owned()], vec!["b".into(), "c".into()], vec!["b".into(), "D".into()], vec!["b".into()]]
    );
}
