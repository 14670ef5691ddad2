//! What the README says of the crate agrees with `Cargo.toml`: its feature table lists exactly
//! the crate's features with their defaults, and its badges give the crate's licence and
//! `rust-version`; the licence files `Cargo.toml` names exist. No Redis here.

use std::collections::BTreeMap;

const MANIFEST: &str = include_str!("../Cargo.toml");
const README: &str = include_str!("../README.md");

/// The value of `key = "…"` in the manifest's `[package]` section.
fn package_field(key: &str) -> String {
    let prefix = format!("{key} = \"");
    MANIFEST
        .lines()
        .take_while(|l| !l.starts_with("[dependencies]"))
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{key} in Cargo.toml"))
        .to_owned()
}

/// The manifest's features, each with whether it is a default one.
fn manifest_features() -> BTreeMap<String, bool> {
    let section = MANIFEST
        .split("\n[features]\n")
        .nth(1)
        .expect("a [features] section");
    let section = section.split("\n[").next().unwrap_or(section);
    let mut defaults = Vec::new();
    let mut features = BTreeMap::new();
    for line in section
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(" = "))
    {
        let (name, value) = line.split_once(" = ").unwrap();
        if name == "default" {
            defaults = value
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|f| f.trim().trim_matches('"').to_owned())
                .filter(|f| !f.is_empty())
                .collect();
        } else {
            features.insert(name.to_owned(), false);
        }
    }
    for d in defaults {
        features.insert(d, true);
    }
    features
}

/// The README's feature table: `| \`name\` | yes/no | … |` rows.
fn readme_features() -> BTreeMap<String, bool> {
    let table = README
        .split("## Features")
        .nth(1)
        .expect("a Features section");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| feature"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2] == "yes")
        })
        .collect()
}

#[test]
fn the_readme_feature_table_is_the_manifests() {
    assert_eq!(readme_features(), manifest_features());
}

#[test]
fn the_readme_badges_give_the_licence_and_rust_version() {
    let version = package_field("rust-version");
    assert!(
        README.contains(&format!("rust--version-{version}-")),
        "the rust-version badge is not {version}"
    );
    assert!(README.contains(&format!("minimum supported Rust is {version}")));
    let license = package_field("license");
    assert_eq!(license, "MIT OR Apache-2.0");
    assert!(README.contains("license-MIT%20OR%20Apache--2.0"));
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        assert!(path.exists(), "{file} is missing");
        assert!(
            MANIFEST.contains(&format!("\"/{file}\"")),
            "{file} is not packaged"
        );
    }
}

/// The value of `key = "…"` in the manifest section headed `header` (`[lib]`, `[[bin]]`).
fn section_field(header: &str, key: &str) -> String {
    let section = MANIFEST
        .split(&format!("\n{header}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("a {header} section"));
    let prefix = format!("{key} = \"");
    section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{key} in {header}"))
        .to_owned()
}

/// The package is published as `lockman-redis` (`lockman` is another crate on crates.io) while
/// the library stays `lockman` and the command `lockman`; the README's badges, docs.rs link and
/// dependency lines, and the manifest's docs.rs URL, all name the package.
#[test]
fn the_published_name_is_the_same_everywhere() {
    let package = package_field("name");
    assert_eq!(package, "lockman-redis");
    assert_eq!(section_field("[lib]", "name"), "lockman");
    assert_eq!(section_field("[[bin]]", "name"), "lockman");
    assert_eq!(
        package_field("documentation"),
        format!("https://docs.rs/{package}")
    );
    for needle in [
        format!("https://img.shields.io/crates/v/{package}.svg"),
        format!("](https://crates.io/crates/{package})"),
        format!("https://docs.rs/{package}/badge.svg"),
        format!("](https://docs.rs/{package})"),
        format!("\n{package} = \"0.1\"\n"),
        format!("`{package} = {{ version = \"0.1\", features = [\"metrics\"] }}`"),
    ] {
        assert!(README.contains(&needle), "the README lacks {needle}");
    }
    // No line of the README names the crate by the taken name on a registry.
    for stale in [
        "crates/v/lockman.svg",
        "crates.io/crates/lockman)",
        "docs.rs/lockman/",
        "docs.rs/lockman)",
        "\nlockman = ",
        "`lockman = {",
    ] {
        assert!(!README.contains(stale), "the README still says {stale}");
    }
}

/// The tests' map (`tests/README.md`) names only tests that exist: each row's tests are
/// functions of the files its row names, and every test file is on the map.
#[test]
fn the_tests_map_names_tests_that_exist() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let map = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let (mut rows, mut wrong) = (0, Vec::new());
    for line in map
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let [_, files, tests] = cells.as_slice() else {
            continue;
        };
        if *files == "file" {
            continue;
        }
        rows += 1;
        let code: Vec<String> = ticked(files)
            .iter()
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
            .collect();
        for test in ticked(tests) {
            let defined = |c: &String| {
                c.match_indices(&format!("fn {test}"))
                    .any(|(at, m)| c[at + m.len()..].starts_with('('))
            };
            if !code.iter().any(defined) {
                wrong.push(format!("{test} is in none of {files}"));
            }
        }
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") && !map.contains(&format!("`{name}`")) {
            wrong.push(format!("{name} is on no row"));
        }
    }
    assert!(rows > 80, "only {rows} rows read");
    assert!(wrong.is_empty(), "the tests' map:\n{}", wrong.join("\n"));
}
