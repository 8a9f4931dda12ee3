//! The book in `docs/` and the front page: every relative link points at a file that exists,
//! every `#anchor` at a heading of its page, and every page of the book is in its SUMMARY.md
//! (a broken internal link fails the build). `mdbook build docs` in `.ci/run`
//! renders it; this test needs neither mdbook nor services.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The markdown files of the book and the repository's top-level pages.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "book") {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let r = root();
    let mut out = vec![r.join("README.md"), r.join("CHANGELOG.md")];
    walk(&r.join("docs"), &mut out);
    out
}

/// GitHub's (and mdBook's) anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `[text](target)` links outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans hold schedules and TOML, not links.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(j) = after.find(')') else { break };
            out.push(after[..j].to_string());
            rest = &after[j..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_book_and_the_front_page_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
            let file = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            if !file.exists() {
                broken.push(format!("{}: `{target}`: no file {}", page.display(), file.display()));
                continue;
            }
            if let Some(a) = anchor.filter(|_| file.extension().is_some_and(|x| x == "md")) {
                if !anchors(&std::fs::read_to_string(&file).unwrap()).contains(a) {
                    broken.push(format!(
                        "{}: `{target}`: no heading with anchor `#{a}` in {}",
                        page.display(),
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).iter().map(|l| docs.join(l)).collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&docs) && !p.ends_with("SUMMARY.md") && !listed.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(missing.is_empty(), "pages missing from docs/SUMMARY.md: {missing:?}");
}

#[test]
fn the_front_page_is_short_and_carries_no_dated_figure() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.lines().count() <= 200, "README.md has {} lines", readme.lines().count());
    let dated: Vec<&str> = readme.lines().filter(|l| l.contains("2026-") || l.contains("2025-")).collect();
    assert!(dated.is_empty(), "dated lines in README.md: {dated:?}");
}

#[test]
fn links_and_anchors_are_read_as_github_and_mdbook_read_them() {
    assert_eq!(
        slug(" Emulator fidelity: SQS calibration and AWS-only faults"),
        "emulator-fidelity-sqs-calibration-and-aws-only-faults"
    );
    assert_eq!(slug(" `report.json` (schema 1)"), "reportjson-schema-1");
    let text = "see [a](b.md#c) and `[x](y)`, [d](https://e)\n```\n[f](g)\n```\n## Two words\n";
    assert_eq!(links(text), vec!["b.md#c".to_string(), "https://e".to_string()]);
    assert_eq!(anchors(text), BTreeSet::from(["two-words".to_string()]));
}

/// The text of `crashpoint <args>` run in the checkout.
fn crashpoint(args: &[&str]) -> String {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_crashpoint")).args(args).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "crashpoint {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Every command of `crashpoint --help` has its row in the command reference, and
/// every fault and decision `crashpoint list` names has its row in the schedule reference.
#[test]
fn every_command_and_every_fault_has_its_place_in_the_reference() {
    let commands_md = std::fs::read_to_string(root().join("docs/reference/commands.md")).unwrap();
    let help = crashpoint(&["--help"]);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "commands not read from --help:\n{help}");
    let missing: Vec<&&str> = commands.iter().filter(|c| !commands_md.contains(&format!("`crashpoint {c}"))).collect();
    assert!(missing.is_empty(), "commands without a row in docs/reference/commands.md: {missing:?}");

    let schedules_md = std::fs::read_to_string(root().join("docs/reference/schedules.md")).unwrap();
    let list = crashpoint(&["list"]);
    let forms: Vec<String> = list
        .lines()
        .skip_while(|l| !l.starts_with("faults (schedule text):"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split("  ").next())
        .flat_map(|f| f.split(", ").map(str::to_string).collect::<Vec<_>>())
        .collect();
    assert!(forms.len() >= 20, "faults not read from list:\n{list}");
    let missing: Vec<&String> = forms
        .iter()
        .filter(|f| {
            let name = f.trim_start_matches("<w>:");
            let name = name.split('<').next().unwrap_or(name);
            !schedules_md.contains(name)
        })
        .collect();
    assert!(missing.is_empty(), "faults without a row in docs/reference/schedules.md: {missing:?}");
}
