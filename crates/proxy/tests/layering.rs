//! No two modules of the proxy crate import each other: each can be read, changed and tested with only
//! what lies below it (docs/architecture.md draws the graph). A module's imports are every `crate::<name>`
//! path in its files, and `super::<name>` from a file directly under `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its files name.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|(module, _)| module.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &files {
        let named = graph.entry(module.clone()).or_default();
        for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if name != *module && modules.contains(&name) {
                    named.insert(name);
                }
                // `use crate::{a, b::C}`: every name of the group.
                if let Some(group) = rest.strip_prefix('{') {
                    for part in group.split([',', '}']) {
                        let name = part.trim().split("::").next().unwrap_or_default();
                        if name != module && modules.contains(name) {
                            named.insert(name.to_owned());
                        }
                    }
                }
            }
        }
    }
    graph
}

/// (top-level module, text) for every file under `dir`; `lib.rs` is left out (it declares them all).
fn collect(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect(&path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).expect("under src");
        let first = relative.components().next().expect("a component").as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" {
            continue;
        }
        out.push((module, std::fs::read_to_string(&path).expect("read file")));
    }
}

#[test]
fn no_two_modules_import_each_other() {
    let graph = imports();
    assert!(graph.len() > 10, "the scan found the modules: {:?}", graph.keys());
    let mut both_ways = Vec::new();
    for (a, named) in &graph {
        for b in named {
            if a < b && graph.get(b).is_some_and(|back| back.contains(a)) {
                both_ways.push(format!("{a} <-> {b}"));
            }
        }
    }
    assert!(both_ways.is_empty(), "modules that import each other: {both_ways:?}");
}

#[test]
fn the_scan_sees_a_cycle_when_there_is_one() {
    // The pool lends server connections, so it names `server`; the check above would fail if `server`
    // named `pool` too. Here: that the scan finds such edges at all.
    let graph = imports();
    assert!(graph["pools"].contains("server") && graph["session"].contains("protocol"), "{graph:?}");
}
