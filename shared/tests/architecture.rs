//! The crate's layering, checked from its source files:
//!
//! - no import cycle between files anywhere in `src/`, nor in the benchmarks'
//!   `bench/forewarn-bench/src/` (an import is any `crate::` or `super::` path in code, a `use`
//!   or inline, tests included: doc comments do not count);
//! - a file of `domain/` imports nothing outside `domain/` and no I/O crate (AWS SDK, kube,
//!   k8s-openapi, redb, tokio, hyper, Lambda runtime and events) nor `std::fs`, `std::net`,
//!   `std::env`, `std::process`, `std::io`;
//! - `ports.rs` imports only `domain/`;
//! - no test file of the repository is over 1,500 lines (a file of tests, or a source file's
//!   inline `#[cfg(test)]` module).
//!
//! See `docs/architecture.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates a file of `domain/` must not use.
const IO_CRATES: &[&str] = &[
    "aws_config",
    "aws_sdk_dynamodb",
    "aws_sdk_ec2",
    "aws_sdk_eks",
    "aws_sdk_autoscaling",
    "aws_sdk_elasticloadbalancingv2",
    "aws_sigv4",
    "aws_credential_types",
    "kube",
    "k8s_openapi",
    "redb",
    "tokio",
    "hyper",
    "hyper_util",
    "hyper_rustls",
    "http_body_util",
    "lambda_runtime",
    "aws_lambda_events",
    "futures",
    "async_trait",
];
/// Modules of `std` a file of `domain/` must not use.
const IO_STD: &[&str] = &["fs", "net", "env", "process", "io"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The workspace's root: `shared/`'s parent.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `.rs` files under `dir`, build output (`target/`) and hidden folders left out.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `root`: `a/b.rs` and `a/b/mod.rs` are `[a, b]`, `lib.rs`
/// (or a binary's `main.rs`) is `[]`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "mod.rs" | "lib.rs" | "main.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// Code without comments (line and block) and without string literals' contents.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < bytes.len() && !(bytes[i] == '*' && bytes[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && matches!(next, Some('"') | Some('#')) && !prev_ident(&bytes, i) {
            // raw string r"..." or r#"..."#
            let mut j = i + 1;
            let mut hashes = 0;
            while bytes.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if bytes.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= bytes.len() {
                    break;
                }
                if bytes[j] == '"' && (1..=hashes).all(|k| bytes.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                if bytes[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next.is_some() && bytes.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            while i < bytes.len() && !(bytes[i] == '\'' && bytes[i - 1] != '\\' && i > 0) {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap().trim();
        return vec![path.to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(|item| {
            expand(item)
                .into_iter()
                .map(|p| {
                    if p == "self" {
                        prefix.trim_end_matches("::").to_string()
                    } else {
                        format!("{prefix}{p}")
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One path found in a file's code, and whether it stood at the top level (not indented, so a
/// `super::` there is the parent module; indented, it is inside an inline `mod`).
struct Found {
    path: String,
    top_level: bool,
}

/// Every path of the code: the paths of its `use` trees, and inline `crate::`, `super::`, and
/// `name::` paths.
fn paths_of(code: &str) -> Vec<Found> {
    let mut found = Vec::new();
    // `use` trees (possibly spanning lines)
    let mut rest = code;
    while let Some(at) = find_word(rest, "use ") {
        let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let before = &rest[line_start..at];
        let top_level = !before.starts_with(char::is_whitespace);
        let end = rest[at..].find(';').map_or(rest.len(), |i| at + i);
        for path in expand(&rest[at + 4..end]) {
            found.push(Found {
                path: path.replace(char::is_whitespace, ""),
                top_level,
            });
        }
        rest = &rest[end..];
    }
    // inline paths
    for line in code.lines() {
        let top_level = !line.starts_with(char::is_whitespace);
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if (chars[i].is_alphabetic() || chars[i] == '_')
                && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
                && !(i >= 2 && chars[i - 1] == ':' && chars[i - 2] == ':')
            {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric()
                        || chars[i] == '_'
                        || (chars[i] == ':' && chars.get(i + 1) == Some(&':')))
                {
                    i += if chars[i] == ':' { 2 } else { 1 };
                }
                let path: String = chars[start..i].iter().collect();
                if path.contains("::") {
                    found.push(Found {
                        path: path.trim_end_matches("::").to_string(),
                        top_level,
                    });
                }
            } else {
                i += 1;
            }
        }
    }
    found
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let ok_before = at == 0
            || !text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if ok_before {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The file that defines the longest prefix of `module` (a path from the crate root).
fn file_of(module: &[String], files: &BTreeMap<Vec<String>, PathBuf>) -> Option<PathBuf> {
    (0..=module.len())
        .rev()
        .find_map(|n| files.get(&module[..n]).cloned())
}

struct Crate {
    root: PathBuf,
    files: BTreeMap<Vec<String>, PathBuf>,
    /// file → files it imports, with the paths that import them.
    edges: BTreeMap<PathBuf, BTreeMap<PathBuf, Vec<String>>>,
    /// file → every path of its code (for the domain rules).
    paths: BTreeMap<PathBuf, Vec<String>>,
}

/// The files of the crate whose sources are in `root` (its `src/`), and their imports.
fn read_crate(root: &Path) -> Crate {
    let mut list = Vec::new();
    rust_files(root, &mut list);
    let files: BTreeMap<Vec<String>, PathBuf> = list
        .iter()
        .map(|f| (module_of(root, f), f.clone()))
        .collect();
    let mut edges = BTreeMap::new();
    let mut paths = BTreeMap::new();
    for file in &list {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let own = module_of(root, file);
        let mut out: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        let mut all = Vec::new();
        for found in paths_of(&code) {
            let segments: Vec<&str> = found.path.split("::").collect();
            let target: Option<Vec<String>> = match segments[0] {
                "crate" => Some(segments[1..].iter().map(|s| s.to_string()).collect()),
                "super" if found.top_level => {
                    let mut m = own.clone();
                    let mut rest = &segments[..];
                    while rest.first() == Some(&"super") {
                        m.pop();
                        rest = &rest[1..];
                    }
                    m.extend(rest.iter().map(|s| s.to_string()));
                    Some(m)
                }
                "self" if found.top_level => {
                    let mut m = own.clone();
                    m.extend(segments[1..].iter().map(|s| s.to_string()));
                    Some(m)
                }
                _ => None,
            };
            all.push(match &target {
                Some(m) => format!("crate::{}", m.join("::")),
                None => found.path.clone(),
            });
            if let Some(m) = target
                && let Some(to) = file_of(&m, &files)
                && &to != file
            {
                out.entry(to).or_default().push(found.path.clone());
            }
        }
        edges.insert(file.clone(), out);
        paths.insert(file.clone(), all);
    }
    Crate {
        root: root.to_path_buf(),
        files,
        edges,
        paths,
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap().display().to_string()
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(edges: &BTreeMap<PathBuf, BTreeMap<PathBuf, Vec<String>>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeMap<PathBuf, Vec<String>>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges[v].keys() {
            let w = s.edges.get_key_value(w).map(|(k, _)| k).unwrap();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The import cycles between the crate's files, each with the imports that close it.
fn import_cycles(krate: &Crate) -> Vec<String> {
    let name = |p: &Path| rel(&krate.root, p);
    cycles(&krate.edges)
        .iter()
        .map(|c| {
            let names: Vec<String> = c.iter().map(|f| name(f)).collect();
            let detail: Vec<String> = c
                .iter()
                .flat_map(|from| {
                    krate.edges[from]
                        .iter()
                        .filter(|(to, _)| c.contains(to))
                        .map(move |(to, via)| {
                            format!("{} -> {} ({})", name(from), name(to), via[0])
                        })
                })
                .collect();
            format!("{}: {}", names.join(", "), detail.join("; "))
        })
        .collect()
}

#[test]
fn no_import_cycle_between_files() {
    let krate = read_crate(&src());
    assert!(krate.files.len() > 30, "read {} files", krate.files.len());
    let text = import_cycles(&krate);
    assert!(text.is_empty(), "import cycles:\n{}", text.join("\n"));
}

/// The benchmarks (`bench/forewarn-bench`, a binary: `main.rs` is its root) have no import cycle
/// either.
#[test]
fn no_import_cycle_between_the_benchmarks_files() {
    let krate = read_crate(&workspace().join("bench/forewarn-bench/src"));
    assert!(krate.files.len() > 10, "read {} files", krate.files.len());
    let text = import_cycles(&krate);
    assert!(
        text.is_empty(),
        "import cycles in bench/forewarn-bench/src:\n{}",
        text.join("\n")
    );
}

#[test]
fn the_domain_is_pure() {
    let krate = read_crate(&src());
    let mut wrong = Vec::new();
    for (file, paths) in &krate.paths {
        let name = rel(&krate.root, file);
        let domain = name.starts_with("domain/");
        let ports = name == "ports.rs";
        if !domain && !ports {
            continue;
        }
        for path in paths {
            let first = path.split("::").next().unwrap();
            let second = path.split("::").nth(1).unwrap_or("");
            let bad = (first == "crate" && second != "domain")
                || (domain && IO_CRATES.contains(&first))
                || (domain && first == "std" && IO_STD.contains(&second));
            if bad {
                wrong.push(format!("{name}: {path}"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "domain/ and ports.rs may import only domain/ (and domain/ no I/O crate):\n{}",
        wrong.join("\n")
    );
}

/// The checker itself finds what it must: a cycle, an outside import, an I/O crate.
#[test]
fn the_checker_sees_cycles_and_outside_imports() {
    let code = code_of(
        "use crate::a::{b::{C, D}, e};\n// use crate::not::this;\nfn f() { let s = \"crate::x::y\"; super::g(); }\n    use super::*;\nuse tokio::time;\n",
    );
    let paths: Vec<(String, bool)> = paths_of(&code)
        .into_iter()
        .map(|f| (f.path, f.top_level))
        .collect();
    assert!(
        paths.contains(&("crate::a::b::C".into(), true)),
        "{paths:?}"
    );
    assert!(paths.contains(&("crate::a::e".into(), true)), "{paths:?}");
    assert!(paths.contains(&("tokio::time".into(), true)), "{paths:?}");
    assert!(paths.contains(&("super::*".into(), false)), "{paths:?}");
    assert!(
        !paths
            .iter()
            .any(|(p, _)| p.contains("not") || p.contains("x::y"))
    );

    let a = PathBuf::from("a.rs");
    let b = PathBuf::from("b.rs");
    let c = PathBuf::from("c.rs");
    let mut edges: BTreeMap<PathBuf, BTreeMap<PathBuf, Vec<String>>> = BTreeMap::new();
    edges.insert(a.clone(), BTreeMap::from([(b.clone(), vec!["x".into()])]));
    edges.insert(b.clone(), BTreeMap::from([(c.clone(), vec!["x".into()])]));
    edges.insert(c.clone(), BTreeMap::new());
    assert!(cycles(&edges).is_empty());
    edges
        .get_mut(&c)
        .unwrap()
        .insert(a.clone(), vec!["x".into()]);
    assert_eq!(cycles(&edges).len(), 1);
}

/// docs/architecture.md's layer table names every module of `domain/`, `adapters/` and `app/`
/// and every trait of `ports.rs`.
#[test]
fn the_architecture_doc_names_every_module_and_port() {
    let doc = std::fs::read_to_string(src().join("../../docs/architecture.md")).unwrap();
    let table: String = doc.lines().filter(|l| l.starts_with("| ")).collect();
    let mut missing = Vec::new();
    for layer in ["domain", "adapters", "app"] {
        for entry in std::fs::read_dir(src().join(layer)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if name == "mod" {
                continue;
            }
            if !table.contains(&format!("`{name}`")) {
                missing.push(format!("{layer}::{name}"));
            }
        }
    }
    let ports = std::fs::read_to_string(src().join("ports.rs")).unwrap();
    for line in ports.lines() {
        if let Some(rest) = line.strip_prefix("pub trait ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !table.contains(&format!("`{name}`")) {
                missing.push(format!("ports::{name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/architecture.md's table: {missing:?}"
    );
}

/// The source without its `#[cfg(test)] mod … { … }` blocks, line by line.
fn without_tests(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let starts_tests = lines[i].trim() == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|l| l.trim_start().starts_with("mod "));
        if !starts_tests {
            out.push(lines[i]);
            i += 1;
            continue;
        }
        let mut depth = 0i64;
        let mut opened = false;
        i += 1;
        while i < lines.len() {
            depth += lines[i].matches('{').count() as i64 - lines[i].matches('}').count() as i64;
            opened |= lines[i].contains('{');
            i += 1;
            if opened && depth <= 0 {
                break;
            }
        }
    }
    out
}

/// The non-test source files of `src/` (a `tests.rs` is a test module of its folder).
fn product_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .into_iter()
        .filter(|f| f.file_name().is_none_or(|n| n != "tests.rs"))
        .map(|f| {
            let rel = f.strip_prefix(src()).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&f).unwrap())
        })
        .collect()
}

/// The wall clock is read in at most 3 places: everything else asks the `Clock` port. (The sizes
/// of functions and their argument lists are clippy's `too_many_lines` and `too_many_arguments`,
/// set in clippy.toml.)
#[test]
fn the_wall_clock_is_read_in_few_places() {
    let mut clock_reads = Vec::new();
    for (rel, text) in product_files() {
        for line in without_tests(&text) {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for read in ["Utc::now()", "Instant::now()", "SystemTime::now()"] {
                if code.contains(read) {
                    clock_reads.push(format!("{rel}: {code}"));
                }
            }
        }
    }
    assert!(
        clock_reads.len() <= 3,
        "the wall clock is read in: {clock_reads:#?}"
    );
}

/// The most lines a test file may have.
const TEST_FILE_LINES: usize = 1_500;

/// The folders of the repository that hold Rust code.
const CODE_DIRS: &[&str] = &["shared", "cli", "functions", "tests", "bench", "fuzz"];

/// How many lines of the file at `rel` (from the repository's root) are tests: all of them for a
/// file of tests (anything under a `tests/` folder, the `tests/` crate included, a `tests.rs`
/// module, a fuzz target), else those of its inline `#[cfg(test)]` modules.
fn test_lines(rel: &str, text: &str) -> usize {
    let all = text.lines().count();
    let tests_only = rel.split('/').any(|part| part == "tests")
        || rel.ends_with("/tests.rs")
        || rel.starts_with("fuzz/");
    if tests_only {
        all
    } else {
        all - without_tests(text).len()
    }
}

/// The files (`(path from the root, text)`) with more than [`TEST_FILE_LINES`] lines of tests.
fn long_test_files(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .map(|(rel, text)| (rel, test_lines(rel, text)))
        .filter(|(_, lines)| *lines > TEST_FILE_LINES)
        .map(|(rel, lines)| format!("{rel}: {lines} lines of tests"))
        .collect()
}

/// No test file is over 1,500 lines: split a longer one by subject (a test target can be a folder,
/// `tests/tests/<area>/main.rs` with a module per subject).
#[test]
fn no_test_file_is_over_1500_lines() {
    let root = workspace();
    let mut paths = Vec::new();
    for dir in CODE_DIRS {
        rust_files(&root.join(dir), &mut paths);
    }
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|f| (rel(&root, f), std::fs::read_to_string(f).unwrap()))
        .collect();
    let with_tests = files
        .iter()
        .filter(|(rel, text)| test_lines(rel, text) > 0)
        .count();
    assert!(with_tests > 100, "read {with_tests} files with tests");
    let long = long_test_files(&files);
    assert!(
        long.is_empty(),
        "test files over {TEST_FILE_LINES} lines:\n{}",
        long.join("\n")
    );
}

/// The checkers themselves: a test file over the limit is found, whether a file of tests or a
/// source file's inline module (its product lines do not count); a cycle between the files of a
/// binary (whose root is `main.rs`, as the benchmarks') is found.
#[test]
fn the_checker_sees_long_test_files_and_cycles_in_a_binary() {
    let product = "fn f() {}\n".repeat(2_000);
    let module = |lines: usize| {
        format!(
            "#[cfg(test)]\nmod tests {{\n{}}}\n",
            "    // a line\n".repeat(lines - 3)
        )
    };
    assert_eq!(test_lines("shared/src/a.rs", &product), 0);
    assert_eq!(
        test_lines("shared/src/a.rs", &format!("{product}{}", module(1_500))),
        1_500
    );
    for file_of_tests in [
        "tests/tests/a.rs",
        "shared/src/a/tests.rs",
        "fuzz/fuzz_targets/a.rs",
    ] {
        assert_eq!(
            test_lines(file_of_tests, &product),
            2_000,
            "{file_of_tests}"
        );
    }
    let files = vec![
        (
            "shared/src/ok.rs".to_string(),
            format!("{product}{}", module(1_500)),
        ),
        (
            "shared/src/long.rs".to_string(),
            format!("{product}{}", module(1_501)),
        ),
        ("cli/tests/long.rs".to_string(), product.clone()),
        ("cli/src/product.rs".to_string(), product.clone()),
    ];
    assert_eq!(
        long_test_files(&files),
        [
            "shared/src/long.rs: 1501 lines of tests",
            "cli/tests/long.rs: 2000 lines of tests"
        ]
    );

    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("main.rs", "mod a;\nmod b;\nmod c;\nfn main() { a::A; }\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "pub struct B;\nfn f() { crate::a::A; }\n"),
        ("c.rs", "use super::a::A;\n"),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let krate = read_crate(dir.path());
    assert_eq!(krate.files.len(), 4);
    let found = import_cycles(&krate);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("a.rs, b.rs: ") || found[0].starts_with("b.rs, a.rs: "),
        "{found:?}"
    );
}
