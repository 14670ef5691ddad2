//! The tree is the diagram: the library's modules, read from their `use` and path lines, form
//! layers that import only from below — handles → actors (and metrics, the diagnosis) →
//! protocol → connections → config and error — and no module imports one that imports it back,
//! directly or through others; inside `actors/`, its rooms stand on floors of their own. A
//! module's children may use their parent's items (they are one module).
//! The binaries' modules (`src/bin/<name>/`, below their `main.rs`) have no layers, but no
//! circle either. No Redis here: this reads `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module's floor: a module may import only from floors at or below its own.
fn floor(top: &str) -> Option<u8> {
    Some(match top {
        "handles" => 4,
        "actors" | "metrics" | "diagnose" => 3,
        "protocol" => 2,
        "connections" => 1,
        "config" | "error" => 0,
        _ => return None,
    })
}

/// Each room's floor inside `actors/`: a room may import only from floors below its own (or
/// its own room). The ground: what a grant carries (`lost`), the board, and the vocabulary the
/// states share (`name`); then the pure states; the messages; the deadlock detector and the
/// pub/sub actor; the Watchdog; the services; the shell; the adapters; the registry; and the
/// system that starts it all.
fn actors_floor(room: &str) -> Option<u8> {
    Some(match room {
        "name" | "lost" | "board" => 0,
        "lock_state" | "sync_state" => 1,
        "messages" => 2,
        "deadlock" | "pubsub" => 3,
        "watchdog" => 4,
        "services" | "failover" => 5,
        "shell" => 6,
        "lock_actor" | "sync_actor" => 7,
        "registry" => 8,
        "system" => 9,
        _ => return None,
    })
}

type Module = Vec<String>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The roots of the crate's module trees: the library's (`src/`), and each binary's that has
/// modules (`src/bin/<name>/`).
fn roots() -> Vec<PathBuf> {
    let mut roots = vec![src()];
    for entry in std::fs::read_dir(src().join("bin")).unwrap() {
        let path = entry.unwrap().path();
        if path.join("main.rs").exists() {
            roots.push(path);
        }
    }
    roots
}

/// Every source file of the tree at `root` (not its `lib.rs` or `main.rs`, not `src/bin`), with
/// its module path.
fn modules(root: &Path) -> Vec<(Module, PathBuf, bool)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    dirs.push(path);
                }
                continue;
            }
            let top = path == root.join("lib.rs") || path == root.join("main.rs");
            if path.extension().is_none_or(|e| e != "rs") || top {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Module = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let is_mod = parts.last().is_some_and(|p| p == "mod");
            if is_mod {
                parts.pop();
            }
            out.push((parts, path, is_mod));
        }
    }
    out
}

fn exists(root: &Path, module: &[String]) -> bool {
    let base = module.iter().fold(root.to_path_buf(), |p, m| p.join(m));
    base.with_extension("rs").exists() || base.join("mod.rs").exists()
}

/// The `a::b::c` paths after `prefix` in `code`.
fn paths_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = Vec<String>> + 'a {
    code.match_indices(prefix).map(move |(at, _)| {
        code[at + prefix.len()..]
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .next()
            .unwrap_or("")
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// Module → the modules it names (the longest prefix of each path that is a file), in the tree
/// at `root`.
fn imports(root: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, path, is_mod) in modules(root) {
        let code: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        // `super::` in a file is its parent's module; in a mod.rs, the grandparent's.
        let parent: Module = if is_mod {
            module[..module.len().saturating_sub(1)].to_vec()
        } else {
            module[..module.len() - 1].to_vec()
        };
        let mut targets: Vec<Module> = paths_after(&code, "crate::").collect();
        targets.extend(paths_after(&code, "super::").map(|p| [parent.clone(), p].concat()));
        let edges = graph.entry(module.clone()).or_default();
        for target in targets {
            let Some(named) = (1..=target.len())
                .rev()
                .map(|k| target[..k].to_vec())
                .find(|m| exists(root, m))
            else {
                continue;
            };
            let ancestor = named.len() < module.len() && module.starts_with(&named);
            if named != module && !ancestor {
                edges.insert(named);
            }
        }
    }
    graph
}

#[test]
fn every_import_points_down_the_layers() {
    let mut up = Vec::new();
    for (module, targets) in imports(&src()) {
        let Some(own) = floor(&module[0]) else {
            continue;
        };
        for target in targets {
            if floor(&target[0]).is_some_and(|f| f > own) {
                up.push(format!(
                    "{} imports {}",
                    module.join("::"),
                    target.join("::")
                ));
            }
        }
    }
    assert!(up.is_empty(), "arrows back up:\n{}", up.join("\n"));
}

#[test]
fn every_import_inside_actors_points_down_its_floors() {
    let room = |m: &Module| (m.len() >= 2 && m[0] == "actors").then(|| m[1].clone());
    let mut up = Vec::new();
    let mut unplaced = BTreeSet::new();
    for (module, targets) in imports(&src()) {
        let Some(from) = room(&module) else {
            continue;
        };
        let Some(own) = actors_floor(&from) else {
            unplaced.insert(from);
            continue;
        };
        for target in targets {
            let Some(to) = room(&target) else {
                continue;
            };
            match actors_floor(&to) {
                Some(f) if f >= own && to != from => up.push(format!(
                    "{} imports {}",
                    module.join("::"),
                    target.join("::")
                )),
                Some(_) => {}
                None => {
                    unplaced.insert(to);
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "rooms of actors/ with no floor in `actors_floor`: {unplaced:?}"
    );
    assert!(
        up.is_empty(),
        "arrows back up inside actors/:\n{}",
        up.join("\n")
    );
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    // A depth-first search for a back edge.
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, bool>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match state.get(m) {
            Some(true) => return None,
            Some(false) => {
                let at = stack.iter().position(|s| s == m).unwrap_or(0);
                return Some(stack[at..].to_vec());
            }
            None => {}
        }
        state.insert(m.clone(), false);
        stack.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, state, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        state.insert(m.clone(), true);
        None
    }
    let mut circles = Vec::new();
    for root in roots() {
        let graph = imports(&root);
        assert!(!graph.is_empty(), "no modules read in {}", root.display());
        let mut state = BTreeMap::new();
        // The first circle of each tree (the search's state is left mid-way by it).
        if let Some(cycle) = graph
            .keys()
            .find_map(|m| visit(m, &graph, &mut state, &mut Vec::new()))
        {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            let tree = root
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(&root);
            circles.push(format!("in {}: {}", tree.display(), names.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn nothing_inside_the_crate_imports_through_its_root() {
    let mut through_root = Vec::new();
    for (module, path, _) in modules(&src()) {
        for (n, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            // `crate::Name` (a re-export of lib.rs) rather than `crate::module::Name`.
            for p in paths_after(code, "crate::") {
                if p.first().is_some_and(|s| s.starts_with(char::is_uppercase)) {
                    through_root.push(format!("{}:{}: {}", module.join("::"), n + 1, code));
                }
            }
        }
    }
    assert!(through_root.is_empty(), "{}", through_root.join("\n"));
}

/// The rules of a per-name state are pure (`actors/lock_state/`, `actors/sync_state/` and the
/// vocabulary they share, `actors/name/`), and so are the waits-for graph's
/// (`actors/deadlock/graph.rs`): no actix, no tokio, no Redis, no actor messages, no
/// connection, and not the shell that carries their effects out. So they run, and are tested,
/// without a runtime or a server; the shell (`actors/shell/`), the two actors and the deadlock
/// detector are where IO lives.
#[test]
fn the_rules_of_a_name_are_pure() {
    const PURE: [&[&str]; 4] = [
        &["actors", "lock_state"],
        &["actors", "sync_state"],
        &["actors", "name"],
        &["actors", "deadlock", "graph"],
    ];
    const FORBIDDEN: [&str; 8] = [
        "actix",
        "tokio",
        "tokio_util",
        "futures_util",
        "redis",
        "crate::actors::messages",
        "crate::connections",
        "crate::actors::shell",
    ];
    let mut impure = Vec::new();
    for (module, path, _) in modules(&src()) {
        let under = |pure: &[&str]| {
            module.len() >= pure.len() && module.iter().zip(pure).all(|(m, p)| m == p)
        };
        if !PURE.iter().any(|pure| under(pure)) {
            continue;
        }
        for (n, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for name in FORBIDDEN {
                let used = code
                    .match_indices(name)
                    .any(|(at, _)| code[at + name.len()..].starts_with("::"))
                    || code.contains(&format!("use {name};"));
                // `redis` also prefixes the crate's own names (`redisson_…`): a path only.
                let path_start = code
                    .match_indices(name)
                    .all(|(at, _)| at == 0 || !code.as_bytes()[at - 1].is_ascii_alphanumeric());
                if used && path_start {
                    impure.push(format!("{}:{}: {}", module.join("::"), n + 1, code));
                }
            }
        }
    }
    assert!(impure.is_empty(), "{}", impure.join("\n"));
}

/// `code` with its comments, string literals and char literals blanked (its lines kept), so that
/// the braces counted in it are the code's.
fn blank(code: &str) -> String {
    let c: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    // Everything in c[from..to] as blanks, its newlines kept.
    let blank_run = |out: &mut String, from: usize, to: usize| {
        out.extend(
            c[from..to]
                .iter()
                .map(|&ch| if ch == '\n' { '\n' } else { ' ' }),
        );
    };
    let at = |i: usize, s: &str| {
        s.chars()
            .enumerate()
            .all(|(k, ch)| c.get(i + k) == Some(&ch))
    };
    let word_before = |i: usize| i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    while i < c.len() {
        let end = if at(i, "//") {
            (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len())
        } else if at(i, "/*") {
            let (mut depth, mut j) = (0, i);
            loop {
                if j >= c.len() {
                    break j;
                } else if at(j, "/*") {
                    (depth, j) = (depth + 1, j + 2);
                } else if at(j, "*/") {
                    (depth, j) = (depth - 1, j + 2);
                    if depth == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if (at(i, "r\"") || at(i, "r#") || at(i, "br\"") || at(i, "br#")) && !word_before(i)
        {
            let start = i + if c[i] == 'b' { 2 } else { 1 };
            let hashes = (start..c.len()).take_while(|&j| c[j] == '#').count();
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let from = start + hashes + 1;
            (from..c.len())
                .find(|&j| at(j, &close))
                .map_or(c.len(), |j| j + close.len())
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            // Past the escaped character, which may be a quote (`'\''`).
            (i + 3..c.len())
                .find(|&j| c[j] == '\'')
                .map_or(c.len(), |j| j + 1)
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        };
        let end = end.min(c.len());
        blank_run(&mut out, i, end);
        i = end;
    }
    out
}

/// Where the brace opened at char `open` of `code` closes.
fn closing(code: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (j, ch) in code.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// A library file: its path, its lines outside tests, and its functions `(name, first line,
/// lines)`.
type LibraryFile = (PathBuf, usize, Vec<(String, usize, usize)>);

/// The library's source files outside its tests (`#[cfg(test)] mod x;` files, and what is
/// under them) and its binaries, each with its lines outside `#[cfg(test)] mod x { … }` blocks
/// and its functions `(name, first line, lines)`.
fn library_code() -> Vec<LibraryFile> {
    let mut files = modules(&src());
    files.push((Vec::new(), src().join("lib.rs"), true));
    let mut tests: Vec<PathBuf> = Vec::new();
    for (module, path, _) in &files {
        let code = blank(&std::fs::read_to_string(path).unwrap());
        for (at, _) in code.match_indices("#[cfg(test)]") {
            let words: Vec<&str> = code[at + 12..].split_whitespace().take(3).collect();
            let name = match words.as_slice() {
                ["mod", name, ..] | [_, "mod", name] => name.strip_suffix(';'),
                _ => None,
            };
            if let Some(name) = name {
                let dir = module.iter().fold(src(), |p, m| p.join(m));
                tests.push(dir.join(format!("{name}.rs")));
                tests.push(dir.join(name));
            }
        }
    }
    let mut out = Vec::new();
    for (_, path, _) in files {
        if path.starts_with(src().join("bin")) || tests.iter().any(|t| path.starts_with(t)) {
            continue;
        }
        let code: Vec<char> = blank(&std::fs::read_to_string(&path).unwrap())
            .chars()
            .collect();
        let line_of = |at: usize| {
            code[..at.min(code.len())]
                .iter()
                .filter(|&&ch| ch == '\n')
                .count()
                + 1
        };
        let text: String = code.iter().collect();
        let mut test_spans = Vec::new();
        for (at, _) in text.match_indices("#[cfg(test)]") {
            let at = text[..at].chars().count();
            let rest: String = code[at + 12..].iter().take(200).collect();
            let words: Vec<&str> = rest.split_whitespace().collect();
            let is_mod = words.first() == Some(&"mod") || words.get(1) == Some(&"mod");
            if let Some(open) = (at..code.len()).find(|&j| code[j] == '{' || code[j] == ';')
                && is_mod
                && code[open] == '{'
            {
                test_spans.push((at, closing(&code, open)));
            }
        }
        let in_tests = |at: usize| test_spans.iter().any(|&(a, b)| a <= at && at <= b);
        let test_lines: usize = test_spans
            .iter()
            .map(|&(a, b)| line_of(b) - line_of(a) + 1)
            .sum();
        let lines = text.lines().count() - test_lines;
        let mut fns = Vec::new();
        for (at, _) in text.match_indices("fn ") {
            let at = text[..at].chars().count();
            let word = at > 0 && (code[at - 1].is_alphanumeric() || code[at - 1] == '_');
            let name: String = code[at + 3..]
                .iter()
                .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
                .collect();
            if word || name.is_empty() || in_tests(at) {
                continue;
            }
            let Some(open) = (at..code.len()).find(|&j| code[j] == '{' || code[j] == ';') else {
                continue;
            };
            if code[open] == '{' {
                fns.push((
                    name,
                    line_of(at),
                    line_of(closing(&code, open)) - line_of(at) + 1,
                ));
            }
        }
        out.push((path, lines, fns));
    }
    out
}

/// The house's size limits, kept: no library function over 80 lines, no library file over
/// 700 (tests aside: `#[cfg(test)]` modules and the files under them; the binaries aside), the
/// lock actor's adapter (`actors/lock_actor/`) within 600 lines and the synchronizer's within
/// 550. A longer function is split by meaning, a longer file by job.
#[test]
fn no_function_or_file_outgrows_its_limit() {
    let code = library_code();
    assert!(code.len() > 50, "only {} library files read", code.len());
    let rel = |p: &Path| p.strip_prefix(src()).unwrap_or(p).display().to_string();
    let mut over = Vec::new();
    for (path, lines, fns) in &code {
        if *lines > 700 {
            over.push(format!("{}: {lines} lines (at most 700)", rel(path)));
        }
        for (name, at, n) in fns.iter().filter(|f| f.2 > 80) {
            over.push(format!(
                "{}:{at}: fn {name} is {n} lines (at most 80)",
                rel(path)
            ));
        }
    }
    for (room, limit) in [("lock_actor", 600), ("sync_actor", 550)] {
        let dir = src().join("actors").join(room);
        let n: usize = code
            .iter()
            .filter(|(p, ..)| p.starts_with(&dir))
            .map(|(_, l, _)| l)
            .sum();
        if n > limit {
            over.push(format!("actors/{room}/: {n} lines (at most {limit})"));
        }
    }
    assert!(
        over.is_empty(),
        "over the house's limits:\n{}",
        over.join("\n")
    );
}

/// The per-name shell (`actors/shell/`) knows no family: it imports nothing of the deadlock
/// detection (`actors/deadlock/`), which is the lock family's; it tells a family's `Witness`.
#[test]
fn the_shell_imports_nothing_of_deadlock_detection() {
    let under = |m: &Module, room: &str| m.len() >= 2 && m[0] == "actors" && m[1] == room;
    let mut found = Vec::new();
    for (module, targets) in imports(&src()) {
        if under(&module, "shell") {
            for target in targets.iter().filter(|t| under(t, "deadlock")) {
                found.push(format!(
                    "{} imports {}",
                    module.join("::"),
                    target.join("::")
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
