//! Every counter a user can see, every control command and every config
//! key is documented: drop reasons, events and commands by name in
//! README.md, config keys in configs/reference.toml; and the documents'
//! links lead to a heading or a file that exists.

use dataplane::counters::Event;
use dataplane::drop_reason::DropReason;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap()
}

/// Names missing from the README as whole words (a name that is only part of a
/// longer one does not count: `int_sink` in `int_sink_report` is not `int_sink`).
fn missing<'a>(text: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    names
        .into_iter()
        .filter(|n| {
            !text.match_indices(n).any(|(at, _)| {
                let before = text[..at].chars().next_back();
                let after = text[at + n.len()..].chars().next();
                !before.is_some_and(word) && !after.is_some_and(word)
            })
        })
        .collect()
}

#[test]
fn every_drop_reason_event_and_command_is_in_the_readme() {
    let text = readme();
    let drops = missing(&text, DropReason::ALL.iter().map(|r| r.name()));
    let events = missing(&text, Event::ALL.iter().map(|e| e.name()));
    let commands = missing(&text, control::dispatch::commands());
    assert!(
        drops.is_empty() && events.is_empty() && commands.is_empty(),
        "not in README.md: drop reasons {drops:?}, events {events:?}, commands {commands:?}"
    );
}

/// The keys a config table takes, as serde lists them when it refuses an
/// unknown one ("expected one of `a`, `b`").
fn keys_of(section: &str) -> Vec<String> {
    let text = format!("{section}\nzzz_not_a_key = 1\n");
    let e = control::config::Config::from_toml(&text).map(|_| ()).unwrap_err().to_string();
    let list = e.split("expected").nth(1).unwrap_or_else(|| panic!("{section}: {e}"));
    list.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn every_config_key_is_in_the_reference_config() {
    let reference = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/reference.toml")).unwrap();
    // A key is documented where the reference sets it, or shows it commented out.
    let lines: Vec<&str> = reference.lines().map(|l| l.trim_start_matches(['#', ' '])).collect();
    let mut undocumented = Vec::new();
    for section in [
        "",
        "[eal]",
        "[dataplane]",
        "[flow_table]",
        "[bridge]",
        "[[bridge.static_mac]]",
        "[control]",
        "[[port]]",
        "[[worker]]",
        "[[route]]",
        "[[neighbour]]",
        "[[flow]]",
        "[int]",
        "[[int.watch]]",
        "[[int.collector]]",
        "[int.analytics]",
        "[int.analytics.events]",
        "[int.analytics.events.queue]",
        "[int.analytics.bins]",
        "[int.analytics.bins.queue]",
        "[[int.detect]]",
        "[[int.expr]]",
        "[gpint]",
        "[label]",
        "[[label.watch]]",
        "[[label.flow]]",
        "[ampm]",
        "[[ampm.flow]]",
        "[[ampm.collector]]",
    ] {
        let keys = keys_of(section);
        assert!(keys.len() >= 2, "{section}: {keys:?}");
        for k in keys {
            let set = |l: &&str| l.strip_prefix(k.as_str()).is_some_and(|r| r.trim_start().starts_with('='));
            // A table key is documented by its header: [k], [[k]], [p.k], [[p.k]].
            let header =
                |l: &&str| l.starts_with('[') && l.trim_matches(['[', ']']).rsplit('.').next() == Some(k.as_str());
            if !lines.iter().any(|l| set(l) || header(l)) {
                undocumented.push(format!("{section} {k}"));
            }
        }
    }
    assert!(undocumented.is_empty(), "not in configs/reference.toml: {undocumented:?}");
}

#[test]
fn the_word_check_needs_whole_words() {
    assert_eq!(missing("a `int_sink_report` b", ["int_sink"]), vec!["int_sink"]);
    assert!(missing("counts (`int_sink`, x)", ["int_sink"]).is_empty());
}

/// Every Python script under scripts/ answers `--help` with its usage on
/// stdout and exit status 0, and starts nothing (no output folder made of
/// the word `--help`, no percent sign that breaks argparse's formatting).
#[test]
fn every_script_answers_help() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
    let mut scripts: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 5, "scripts found: {scripts:?}");
    let cwd = std::env::temp_dir().join(format!("intswitch-help-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut failed = Vec::new();
    for s in &scripts {
        let out = std::process::Command::new("python3").arg(s).arg("--help").current_dir(&cwd).output().unwrap();
        if !out.status.success() || out.stdout.is_empty() {
            failed.push(format!("{}: {} {}", s.display(), out.status, String::from_utf8_lossy(&out.stderr)));
        }
    }
    let left: Vec<_> = std::fs::read_dir(&cwd).unwrap().map(|e| e.unwrap().file_name()).collect();
    std::fs::remove_dir_all(&cwd).unwrap();
    assert!(failed.is_empty(), "--help failed: {failed:#?}");
    assert!(left.is_empty(), "--help left {left:?} in its working folder");
}

/// The long-running shell scripts answer `--help` with their header
/// comment; those whose settings are all environment variables refuse
/// other arguments, rather than starting a benchmark or a build (soak.sh
/// takes MINUTES and refuses what is not a number, fuzz.sh SECONDS and
/// target names, stage_instructions.sh CONFIG:TRACE pairs of files,
/// worker_instructions.sh a config, a peer and a WORKER_CACHE of 0 or 1).
#[test]
fn long_running_scripts_answer_help_and_refuse_arguments() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
    let run = |script: &str, args: &[&str]| {
        std::process::Command::new("timeout")
            .args(["20", "bash", &format!("{dir}/{script}")])
            .args(args)
            .output()
            .unwrap()
    };
    for script in
        ["bench.sh", "soak.sh", "pgo.sh", "bench_ab.sh", "fuzz.sh", "stage_instructions.sh", "worker_instructions.sh"]
    {
        let help = run(script, &["--help"]);
        assert!(help.status.success(), "{script} --help: {}", help.status);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.lines().count() >= 3 && !text.contains("#!/"), "{script} --help printed {text:?}");
    }
    for script in ["bench.sh", "pgo.sh"] {
        let other = run(script, &["--rounds=3"]);
        assert_eq!(other.status.code(), Some(2), "{script} --rounds=3: {}", other.status);
        assert!(String::from_utf8_lossy(&other.stderr).contains("environment"), "{script}: {other:?}");
    }
    let soak = run("soak.sh", &["--minutes=3"]);
    assert_eq!(soak.status.code(), Some(2), "soak.sh --minutes=3: {}", soak.status);
    assert!(String::from_utf8_lossy(&soak.stderr).contains("positive number"), "soak.sh: {soak:?}");
    for (script, args, says) in [
        ("fuzz.sh", &["--seconds=3"][..], "positive whole number"),
        ("fuzz.sh", &["5", "no_such_target"], "no target 'no_such_target'"),
        ("stage_instructions.sh", &["configs/demo.toml"], "need CONFIG:TRACE"),
        ("stage_instructions.sh", &["configs/demo.toml:no-such.pcap"], "no-such.pcap: no such file"),
        ("worker_instructions.sh", &["no-such.toml"], "no-such.toml: no such file"),
        ("worker_instructions.sh", &["configs/demo.toml", "rxonly"], "peer rxonly: io, macswap"),
        ("worker_instructions.sh", &["configs/demo.toml", "l3fwd-em"], "l3fwd-em needs L3FWD_BIN"),
        ("worker_instructions.sh", &["configs/reference.toml", "io"], "no net_pcap port with an rx_pcap"),
    ] {
        let out = run(script, args);
        assert_eq!(out.status.code(), Some(2), "{script} {args:?}: {}", out.status);
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{script} {args:?}: {out:?}");
    }
    let cache = std::process::Command::new("timeout")
        .args(["20", "bash", &format!("{dir}/worker_instructions.sh"), "configs/demo.toml"])
        .env("WORKER_CACHE", "yes")
        .output()
        .unwrap();
    assert_eq!(cache.status.code(), Some(2), "WORKER_CACHE=yes: {}", cache.status);
    assert!(String::from_utf8_lossy(&cache.stderr).contains("WORKER_CACHE=yes: 0 or 1"), "{cache:?}");
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings' anchors and the link targets (`](target)`) of a Markdown
/// text, outside fenced code blocks.
fn anchors_and_links(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut anchors, mut links, mut fenced) = (Vec::new(), Vec::new(), false);
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // An ATX heading: hashes, then a space.
        let h = line.trim_start_matches('#');
        if line.starts_with('#') && h.starts_with(' ') {
            // A repeated heading's anchor gets -1, -2, ...
            let base = anchor(h);
            let n = seen.entry(base.clone()).or_default();
            anchors.push(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
            *n += 1;
        }
        for (at, _) in line.match_indices("](") {
            if let Some(end) = line[at + 2..].find(')') {
                links.push(line[at + 2..at + 2 + end].to_string());
            }
        }
    }
    (anchors, links)
}

#[test]
fn the_documents_links_resolve() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut broken = Vec::new();
    for doc in ["README.md", "configs/testbed/README.md", "scripts/wireshark/README.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let (anchors, links) = anchors_and_links(&text);
        let dir = root.join(doc).parent().unwrap().to_path_buf();
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            // A link in the same document names a heading; another, a file.
            let ok = match link.split_once('#').unwrap_or((&link, "")) {
                ("", a) => anchors.iter().any(|x| x == a),
                (path, _) => dir.join(path).exists(),
            };
            if !ok {
                broken.push(format!("{doc}: ]({link})"));
            }
        }
    }
    assert!(broken.is_empty(), "links to no heading or file: {broken:?}");
}

#[test]
fn anchors_follow_githubs_rule() {
    let (anchors, links) = anchors_and_links(
        "# A\n## AM-PM (Alternate Marking) measurement\n#tag\n### Where: `x`\n## A\n```\n# not a heading ](nope)\n```\nsee [x](#a-1)\n",
    );
    assert_eq!(anchors, ["a", "am-pm-alternate-marking-measurement", "where-x", "a-1"]);
    assert_eq!(links, ["#a-1"]);
}
