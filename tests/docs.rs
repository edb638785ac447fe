//! Every counter a user can see and every control command is documented:
//! drop reasons and events by name in README.md, commands in README.md's
//! control protocol list.

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
    let commands = missing(&text, control::api::COMMANDS.iter().copied());
    assert!(
        drops.is_empty() && events.is_empty() && commands.is_empty(),
        "not in README.md: drop reasons {drops:?}, events {events:?}, commands {commands:?}"
    );
}

#[test]
fn the_word_check_needs_whole_words() {
    assert_eq!(missing("a `int_sink_report` b", ["int_sink"]), vec!["int_sink"]);
    assert!(missing("counts (`int_sink`, x)", ["int_sink"]).is_empty());
}
