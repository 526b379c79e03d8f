//! Caller text on its way to a forge.
//!
//! GitLab runs *quick actions* (`/merge`, `/approve`, `/target_branch`,
//! `/label`, `/assign_reviewer`, ...) found in the description of a merge
//! request or in a note created or edited through the API, as the API user:
//! a caller who writes `/merge` in a description would merge with
//! workqueue's rights, past every gate. GitLab's extractor
//! (`Gitlab::QuickActions::Extractor`) first deletes every `\r`, then takes
//! a line as a command when it *starts* with `/` followed by a command name
//! (case-insensitive, Unicode case folding), alone or followed by a space
//! and arguments; it skips some regions (fenced code, HTML blocks, `>>>`
//! quotes, and text between backticks over several lines), and returns the
//! remaining text with trailing whitespace removed, which is what it stores.
//!
//! [`gitlab_text`] escapes the leading `/` of every line that starts with
//! one, as `\/`, which Markdown renders as `/`: no line can start a quick
//! action, and the text reads the same. It does not rely on the skipped
//! regions (their rules are subtle and differ between GitLab versions), so a
//! line starting with `/` inside a fenced code block shows the backslash. A
//! line with leading whitespace, a list item (`- /merge`) or a quote
//! (`> /merge`) is no command and is left alone. It also applies GitLab's
//! own normalisation (no `\r`, no trailing whitespace), so what GitLab stores
//! equals what was sent and a comparison with the stored text finds no drift.
//!
//! GitHub has no quick actions and stores text as sent: text for it is left
//! alone.

use std::borrow::Cow;

use wq_forge::ForgeKind;

/// The characters Ruby's `String#rstrip` removes, which GitLab applies to a
/// description or note before storing it.
const RUBY_TRAILING_WHITESPACE: &[char] = &['\0', '\t', '\n', '\u{b}', '\u{c}', '\r', ' '];

/// `text` as workqueue sends it to a forge of `kind` as a description or a
/// note body.
pub fn for_forge(kind: ForgeKind, text: &str) -> Cow<'_, str> {
    match kind {
        ForgeKind::Gitlab => Cow::Owned(gitlab_text(text)),
        ForgeKind::Github => Cow::Borrowed(text),
    }
}

/// `text` with no line that GitLab would run as a quick action, normalised
/// as GitLab stores it. Idempotent.
pub fn gitlab_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (index, line) in text.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
        }
        // GitLab deletes every `\r` before it looks for commands, so a `\r`
        // at a line's start would hide nothing.
        let line = line.replace('\r', "");
        if line.starts_with('/') {
            out.push('\\');
        }
        out.push_str(&line);
    }
    let kept = out.trim_end_matches(RUBY_TRAILING_WHITESPACE).len();
    out.truncate(kept);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick actions GitLab documents for merge requests (and the
    /// substitutions), each of which runs as the API user.
    const QUICK_ACTIONS: &[&str] = &[
        "approve",
        "unapprove",
        "merge",
        "target_branch",
        "label",
        "unlabel",
        "relabel",
        "assign",
        "unassign",
        "reassign",
        "assign_reviewer",
        "request_review",
        "reviewer",
        "unassign_reviewer",
        "remove_reviewer",
        "reassign_reviewer",
        "close",
        "reopen",
        "title",
        "draft",
        "ready",
        "wip",
        "milestone",
        "remove_milestone",
        "estimate",
        "spend",
        "remove_estimate",
        "remove_time_spent",
        "lock",
        "unlock",
        "rebase",
        "submit_review",
        "copy_metadata",
        "subscribe",
        "unsubscribe",
        "award",
        "react",
        "todo",
        "done",
        "cc",
        "shrug",
        "tableflip",
        "squash",
        "unsquash",
    ];

    /// GitLab's command alternative: a line starting with `/name`, alone
    /// or followed by a space and arguments.
    fn gitlab_would_run(text: &str) -> Vec<String> {
        static COMMAND: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
            let names = QUICK_ACTIONS.join("|");
            regex::Regex::new(&format!(r"(?mi)^/({names})(?: [^\n]*)?(?:\s*\n|$)")).unwrap()
        });
        let text = text.replace('\r', "");
        COMMAND
            .captures_iter(&text)
            .map(|c| c[1].to_lowercase())
            .collect()
    }

    #[test]
    fn no_quick_action_at_a_line_start_survives() {
        for name in QUICK_ACTIONS {
            for text in [
                format!("/{name}"),
                format!("/{name} ~x @y"),
                format!("Intro.\n/{name}\nmore"),
                format!("Intro.\r\n/{name} evil\r\n"),
                format!("/{}", name.to_uppercase()),
                format!("text\n\n/{name}   \n"),
                // In a fenced code block GitLab skips it today; escaped
                // anyway, not relying on that.
                format!("```\n/{name}\n```"),
                format!("~~~\n/{name}\n~~~"),
            ] {
                assert!(!gitlab_would_run(&text).is_empty(), "{text:?}");
                let safe = gitlab_text(&text);
                assert_eq!(gitlab_would_run(&safe), Vec::<String>::new(), "{safe:?}");
                assert!(safe.contains("\\/"), "{safe:?}");
            }
        }
    }

    #[test]
    fn lines_that_start_no_command_are_left_alone() {
        for text in [
            "  /merge",
            "\t/approve",
            "- /merge",
            "* /label ~x",
            "1. /approve",
            "> /merge",
            "see /merge and /approve inline",
            "`/merge`",
            "\\/merge",
            "a/b/c",
        ] {
            assert_eq!(gitlab_text(text), text);
        }
    }

    #[test]
    fn the_text_is_normalised_as_gitlab_stores_it() {
        assert_eq!(
            gitlab_text("Title line\r\n\r\n/merge\r\nBody  \n\n"),
            "Title line\n\n\\/merge\nBody"
        );
        assert_eq!(gitlab_text("/merge"), "\\/merge");
        assert_eq!(gitlab_text(""), "");
        assert_eq!(gitlab_text("\n/approve\n"), "\n\\/approve");
        assert_eq!(gitlab_text("a\r/merge"), "a/merge");
        // Whatever a line begins with after `\r` removal counts.
        assert_eq!(gitlab_text("\r/merge"), "\\/merge");
    }

    #[test]
    fn escaping_is_idempotent() {
        for text in [
            "/merge\n/approve\r\n  /x\n\\/y\n",
            "plain",
            "```\n/usr/bin/env\n```\n",
        ] {
            let once = gitlab_text(text);
            assert_eq!(gitlab_text(&once), once, "{text:?}");
        }
    }

    #[test]
    fn github_text_is_sent_as_written() {
        let text = "/merge\r\ntrailing  \n";
        assert_eq!(for_forge(ForgeKind::Github, text), text);
        assert_eq!(for_forge(ForgeKind::Gitlab, text), "\\/merge\ntrailing");
    }
}
