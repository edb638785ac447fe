//! Shell completions and man pages of the three binaries, from their clap
//! definitions (`intswitch|intctl|intcollector completions SHELL`,
//! `... manpage`), so they never drift from `--help`.

use std::io::Write;

/// The shells completions are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes `cmd`'s completion script for `shell` to `out`.
pub fn completions(mut cmd: clap::Command, shell: Shell, out: &mut dyn Write) {
    let name = cmd.get_name().to_string();
    let g = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(g, &mut cmd, name, out);
}

/// Writes `cmd`'s man page (roff, section 1) to `out`, with one section per
/// subcommand.
pub fn manpage(cmd: clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = cmd.disable_help_subcommand(true);
    clap_mangen::Man::new(cmd.clone()).render(out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        writeln!(out, ".SH \"{} {}\"", cmd.get_name().to_uppercase(), sub.get_name().to_uppercase())?;
        let about = sub.get_long_about().or(sub.get_about()).map(|a| a.to_string()).unwrap_or_default();
        writeln!(out, "{}", roff_escape(&about))?;
        for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let flag = match (a.get_long(), a.get_short()) {
                (Some(l), _) => format!("\\-\\-{l}"),
                (None, Some(s)) => format!("\\-{s}"),
                (None, None) => a.get_id().to_string().to_uppercase(),
            };
            writeln!(out, ".TP\n\\fB{flag}\\fR")?;
            if let Some(h) = a.get_long_help().or(a.get_help()) {
                writeln!(out, "{}", roff_escape(&h.to_string()))?;
            }
        }
    }
    Ok(())
}

/// Text safe in a roff paragraph: backslashes doubled, a leading '.' or '\''
/// guarded.
fn roff_escape(s: &str) -> String {
    s.lines()
        .map(|l| {
            let l = l.replace('\\', "\\\\");
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> clap::Command {
        clap::Command::new("demo")
            .about("A demo")
            .arg(clap::Arg::new("config").long("config").help("The file"))
            .subcommand(
                clap::Command::new("gen-traffic").about(".starts with a dot").arg(clap::Arg::new("out").long("out")),
            )
    }

    #[test]
    fn completions_name_the_subcommands_and_flags() {
        for sh in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            completions(cmd(), sh, &mut out);
            let s = String::from_utf8(out).unwrap();
            assert!(s.contains("gen-traffic") && s.contains("config"), "{sh:?}: {s}");
        }
    }

    #[test]
    fn the_man_page_has_every_subcommand_and_escapes_roff() {
        let mut out = Vec::new();
        manpage(cmd(), &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with(".ie") || s.contains(".TH demo 1"), "{s}");
        assert!(s.contains(".SH \"DEMO GEN-TRAFFIC\"") && s.contains("\\&.starts with a dot"), "{s}");
        assert!(s.contains("\\-\\-out"), "{s}");
    }
}
