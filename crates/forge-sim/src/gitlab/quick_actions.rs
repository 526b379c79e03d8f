//! GitLab quick actions in merge request descriptions and notes.
//!
//! GitLab reads a quick action from a line that starts with `/` followed by a known command name
//! (case-insensitive, no leading spaces), then either the end of the line or one space and the
//! argument (the rest of the line). Lines inside fenced code blocks (```` ``` ````), inline code
//! spans (`` `...` ``, which may span lines), HTML blocks (`<tag>` … `</tag>` on their own lines)
//! and multi-line quotes (`>>>` … `>>>`) are left alone. Every recognised command line is removed
//! from the text (with the blank lines that follow it); the remaining text loses its `\r`s and
//! trailing whitespace, and that is what GitLab stores as the description or note body.
//!
//! A command runs only where GitLab makes it available: on a merge request being created only
//! `/label`, `/target_branch`, `/assign_reviewer`, `/draft` and `/ready` apply; `/merge`,
//! `/approve`, `/unapprove`, `/close`, `/reopen`, `/title` and `/unlabel` need an existing
//! merge request. Commands GitLab knows but this simulator does not model (e.g. `/assign`,
//! `/milestone`) are removed from the text and otherwise ignored. Labels need not exist
//! beforehand here (GitLab applies only project labels that already exist).

use serde_json::{Map, Value, json};

use crate::state::User;

/// One quick action found in a text: the command name (lower-case, aliases resolved) and its
/// argument (trimmed; `None` when absent or blank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuickAction {
    pub name: String,
    pub arg: Option<String>,
}

/// Commands the simulator carries out, with their aliases.
const EXECUTED: &[(&str, &[&str])] = &[
    ("merge", &[]),
    ("approve", &[]),
    ("unapprove", &[]),
    ("target_branch", &[]),
    ("label", &["labels"]),
    ("unlabel", &["remove_label"]),
    ("assign_reviewer", &["reviewer", "request_review"]),
    ("close", &[]),
    ("reopen", &[]),
    ("draft", &[]),
    ("ready", &[]),
    ("title", &[]),
];

/// Commands GitLab knows on merge requests that the simulator removes but does not carry out.
const RECOGNISED: &[&str] = &[
    "assign",
    "unassign",
    "unassign_reviewer",
    "remove_reviewer",
    "relabel",
    "milestone",
    "remove_milestone",
    "estimate",
    "remove_estimate",
    "spend",
    "remove_time_spent",
    "due",
    "remove_due_date",
    "todo",
    "done",
    "subscribe",
    "unsubscribe",
    "award",
    "lock",
    "unlock",
    "rebase",
    "submit_review",
    "copy_metadata",
    "cc",
];

/// The canonical name of a known command (`None` for text that merely starts with `/`).
pub fn canonical_name(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    for (canonical, aliases) in EXECUTED {
        if *canonical == lower || aliases.contains(&lower.as_str()) {
            return Some(canonical);
        }
    }
    RECOGNISED.iter().copied().find(|known| *known == lower)
}

/// Whether any line of `text` would be taken by GitLab as a quick action.
pub fn contains_quick_action(text: &str) -> bool {
    !extract(text).1.is_empty()
}

/// Splits `content` into the text GitLab keeps and the quick actions it runs, in order.
pub fn extract(content: &str) -> (String, Vec<QuickAction>) {
    let text: String = content.chars().filter(|c| *c != '\r').collect();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut commands = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let line_start = pos == 0 || bytes[pos - 1] == b'\n';
        let skipped = if line_start {
            fenced_block(&text, pos)
                .or_else(|| inline_code(&text, pos))
                .or_else(|| html_block(&text, pos))
                .or_else(|| quote_block(&text, pos))
        } else {
            inline_code(&text, pos)
        };
        if let Some(end) = skipped {
            out.push_str(&text[pos..end]);
            pos = end;
            continue;
        }
        if line_start && let Some((end, action)) = command(&text, pos) {
            commands.push(action);
            pos = end;
            continue;
        }
        let step = text[pos..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[pos..pos + step]);
        pos += step;
    }
    // GitLab strips the text with Ruby's `String#rstrip`: ASCII whitespace
    // and NUL only, not Unicode spaces such as U+00A0.
    let kept = out
        .trim_end_matches(['\0', '\t', '\n', '\u{b}', '\u{c}', '\r', ' '])
        .len();
    out.truncate(kept);
    (out, commands)
}

/// Whether `pos` is at the end of a line (before `\n` or at the end of the text).
fn line_end(text: &str, pos: usize) -> bool {
    pos == text.len() || text.as_bytes()[pos] == b'\n'
}

/// ```` ^```.+?\n```$ ````: the end of a fenced code block starting at `pos`.
fn fenced_block(text: &str, pos: usize) -> Option<usize> {
    let rest = text.get(pos..)?;
    if !rest.starts_with("```") {
        return None;
    }
    let body_start = pos + 3;
    let mut search = body_start + 1;
    while let Some(found) = text.get(search..).and_then(|t| t.find("\n```")) {
        let close = search + found;
        let end = close + 4;
        if close > body_start && line_end(text, end) {
            return Some(end);
        }
        search = close + 1;
    }
    None
}

/// `` `.+?` `` (across lines): the end of an inline code span starting at `pos`.
fn inline_code(text: &str, pos: usize) -> Option<usize> {
    if text.as_bytes().get(pos) != Some(&b'`') {
        return None;
    }
    let first = text[pos + 1..].chars().next()?;
    let from = pos + 1 + first.len_utf8();
    text[from..].find('`').map(|found| from + found + 1)
}

/// `^<[^>]+?>\n.+?\n</[^>]+?>$`: the end of an HTML block starting at `pos`.
fn html_block(text: &str, pos: usize) -> Option<usize> {
    let rest = &text[pos..];
    let open_end = rest.strip_prefix('<')?.find('>')?;
    let tag = &rest[1..1 + open_end];
    if tag.is_empty() || tag.contains('\n') {
        return None;
    }
    let body_start = pos + open_end + 2;
    if text.as_bytes().get(body_start) != Some(&b'\n') {
        return None;
    }
    let mut search = body_start + 2;
    while let Some(found) = text.get(search..).and_then(|t| t.find("\n</")) {
        let close = search + found;
        let after = close + 3;
        if let Some(gt) = text[after..].find('>') {
            let name = &text[after..after + gt];
            let end = after + gt + 1;
            if !name.is_empty() && !name.contains('\n') && line_end(text, end) {
                return Some(end);
            }
        }
        search = close + 1;
    }
    None
}

/// `^>>>.+?\n>>>$`: the end of a multi-line quote starting at `pos`.
fn quote_block(text: &str, pos: usize) -> Option<usize> {
    if !text[pos..].starts_with(">>>") {
        return None;
    }
    let body_start = pos + 3;
    let mut search = body_start + 1;
    while let Some(found) = text.get(search..).and_then(|t| t.find("\n>>>")) {
        let close = search + found;
        let end = close + 4;
        if line_end(text, end) {
            return Some(end);
        }
        search = close + 1;
    }
    None
}

/// `^/(?<cmd>names)(?:[ ](?<arg>[^\n]*))?(?:\s*\n|$)`: a command line starting at `pos`;
/// returns where the removed text ends and the action.
fn command(text: &str, pos: usize) -> Option<(usize, QuickAction)> {
    let rest = text[pos..].strip_prefix('/')?;
    let name_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    let name = canonical_name(&rest[..name_len])?;
    let mut at = pos + 1 + name_len;
    let mut arg = None;
    if text.as_bytes().get(at) == Some(&b' ') {
        let line = &text[at + 1..];
        let len = line.find('\n').unwrap_or(line.len());
        arg = Some(line[..len].trim().to_string()).filter(|a| !a.is_empty());
        at += 1 + len;
    }
    // `\s*\n`: the longest run of whitespace that ends in a newline; else the end of the text.
    let tail = &text[at..];
    let ws_len = tail.bytes().take_while(|b| b.is_ascii_whitespace()).count();
    let end = match tail[..ws_len].rfind('\n') {
        Some(newline) => at + newline + 1,
        None if at + ws_len == text.len() => text.len(),
        None => return None,
    };
    Some((
        end,
        QuickAction {
            name: name.to_string(),
            arg,
        },
    ))
}

/// Labels in a `/label` argument: `~name`, `~"two words"` or bare words.
pub fn parse_labels(arg: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut rest = arg.trim();
    while !rest.is_empty() {
        let token = rest.strip_prefix('~').unwrap_or(rest);
        let (label, remaining) = if let Some(quoted) = token.strip_prefix('"') {
            match quoted.find('"') {
                Some(close) => (&quoted[..close], &quoted[close + 1..]),
                None => (quoted, ""),
            }
        } else {
            let end = token
                .find(|c: char| c.is_whitespace() || c == '~')
                .unwrap_or(token.len());
            (&token[..end], &token[end..])
        };
        let label = label.trim();
        if !label.is_empty() && !labels.iter().any(|l| l == label) {
            labels.push(label.to_string());
        }
        rest = remaining.trim_start();
    }
    labels
}

/// Usernames in an argument such as `@alice @bob` (`me` is the acting user).
pub fn parse_usernames(arg: &str) -> Vec<String> {
    arg.split(|c: char| c.is_whitespace() || c == ',')
        .map(|word| word.trim_start_matches('@'))
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect()
}

/// What a merge request looks like to the availability checks of the commands.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// False while the merge request is being created.
    pub persisted: bool,
    /// `opened`, `closed`, `merged`, `locked` (`opened` while being created).
    pub state: &'a str,
    pub draft: bool,
    pub source_branch: &'a str,
    pub target_branch: &'a str,
    pub labels: &'a [String],
    pub approved_by_user: bool,
}

/// The effect of the quick actions of one text on one merge request, as GitLab hands them to
/// its update service (`commands_changes`) plus the actions it runs at once.
#[derive(Debug, Clone, Default)]
pub struct Updates {
    pub title: Option<String>,
    pub add_labels: Vec<String>,
    pub remove_labels: Vec<String>,
    pub remove_all_labels: bool,
    pub target_branch: Option<String>,
    pub add_reviewers: Vec<User>,
    /// `Some(true)` for `/draft`, `Some(false)` for `/ready`.
    pub draft: Option<bool>,
    /// `close` or `reopen`.
    pub state_event: Option<&'static str>,
    pub approve: bool,
    pub unapprove: bool,
    pub merge: bool,
    /// GitLab's execution messages (the `summary` of a commands-only note).
    pub messages: Vec<String>,
}

impl Updates {
    pub fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.add_labels.is_empty()
            && self.remove_labels.is_empty()
            && !self.remove_all_labels
            && self.target_branch.is_none()
            && self.add_reviewers.is_empty()
            && self.draft.is_none()
            && self.state_event.is_none()
            && !self.approve
            && !self.unapprove
            && !self.merge
    }

    /// The `commands_changes` object of GitLab's answer to a commands-only note.
    pub fn changes_json(&self) -> Value {
        let mut changes = Map::new();
        if let Some(title) = &self.title {
            changes.insert("title".into(), json!(title));
        }
        if !self.add_labels.is_empty() {
            changes.insert("add_label_ids".into(), json!(self.add_labels));
        }
        if !self.remove_labels.is_empty() {
            changes.insert("remove_label_ids".into(), json!(self.remove_labels));
        }
        if self.remove_all_labels {
            changes.insert("label_ids".into(), json!([]));
        }
        if let Some(branch) = &self.target_branch {
            changes.insert("target_branch".into(), json!(branch));
        }
        if !self.add_reviewers.is_empty() {
            let ids: Vec<u64> = self.add_reviewers.iter().map(|u| u.id).collect();
            changes.insert("reviewer_ids".into(), json!(ids));
        }
        if let Some(draft) = self.draft {
            changes.insert(
                "wip_event".into(),
                json!(if draft { "draft" } else { "ready" }),
            );
        }
        if let Some(event) = self.state_event {
            changes.insert("state_event".into(), json!(event));
        }
        if self.merge {
            changes.insert("merge".into(), Value::Null);
        }
        Value::Object(changes)
    }
}

/// Resolves `actions` against `target` as the acting `user`: commands that are not available
/// (wrong state, not yet created, unknown branch or user) are dropped, as GitLab does.
pub fn interpret(
    actions: &[QuickAction],
    target: &Target<'_>,
    user: &User,
    branch_exists: impl Fn(&str) -> bool,
    find_user: impl Fn(&str) -> Option<User>,
) -> Updates {
    let mut updates = Updates::default();
    let mut draft = target.draft;
    for action in actions {
        let arg = action.arg.as_deref().unwrap_or("");
        match action.name.as_str() {
            "merge" if target.persisted && target.state == "opened" => {
                updates.merge = true;
                updates.messages.push("Merged this merge request.".into());
            }
            "approve"
                if target.persisted && target.state != "merged" && !target.approved_by_user =>
            {
                updates.approve = true;
                updates.unapprove = false;
                updates
                    .messages
                    .push("Approved the current merge request.".into());
            }
            "unapprove"
                if target.persisted
                    && target.state != "merged"
                    && (target.approved_by_user || updates.approve) =>
            {
                updates.unapprove = true;
                updates.approve = false;
                updates
                    .messages
                    .push("Unapproved the current merge request.".into());
            }
            "target_branch" if target.state == "opened" => {
                let branch = arg.split_whitespace().next().unwrap_or("");
                if !branch.is_empty() && branch != target.source_branch && branch_exists(branch) {
                    updates.target_branch = Some(branch.to_string());
                    updates
                        .messages
                        .push(format!("Set target branch to {branch}."));
                }
            }
            "label" => {
                let labels = parse_labels(arg);
                if !labels.is_empty() {
                    updates.messages.push(format!(
                        "Added {} label(s).",
                        labels
                            .iter()
                            .map(|l| format!("~\"{l}\""))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ));
                    for label in labels {
                        updates.remove_labels.retain(|l| *l != label);
                        if !updates.add_labels.contains(&label) {
                            updates.add_labels.push(label);
                        }
                    }
                }
            }
            "unlabel" if target.persisted => {
                let labels = parse_labels(arg);
                if labels.is_empty() {
                    if !target.labels.is_empty() || !updates.add_labels.is_empty() {
                        updates.remove_all_labels = true;
                        updates.add_labels.clear();
                        updates.messages.push("Removed all labels.".into());
                    }
                } else {
                    updates.messages.push(format!(
                        "Removed {} label(s).",
                        labels
                            .iter()
                            .map(|l| format!("~\"{l}\""))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ));
                    for label in labels {
                        updates.add_labels.retain(|l| *l != label);
                        if !updates.remove_labels.contains(&label) {
                            updates.remove_labels.push(label);
                        }
                    }
                }
            }
            "assign_reviewer" => {
                for name in parse_usernames(arg) {
                    let found = if name == "me" {
                        Some(user.clone())
                    } else {
                        find_user(&name)
                    };
                    if let Some(reviewer) = found
                        && !updates.add_reviewers.iter().any(|r| r.id == reviewer.id)
                    {
                        updates
                            .messages
                            .push(format!("Assigned @{} as reviewer.", reviewer.username));
                        updates.add_reviewers.push(reviewer);
                    }
                }
            }
            "close" if target.persisted && target.state == "opened" => {
                updates.state_event = Some("close");
                updates.messages.push("Closed this merge request.".into());
            }
            "reopen" if target.persisted && target.state == "closed" => {
                updates.state_event = Some("reopen");
                updates.messages.push("Reopened this merge request.".into());
            }
            "draft" if !draft => {
                draft = true;
                updates.draft = Some(true);
                updates
                    .messages
                    .push("Marked this merge request as a draft.".into());
            }
            "ready" if draft => {
                draft = false;
                updates.draft = Some(false);
                updates
                    .messages
                    .push("Marked this merge request as ready.".into());
            }
            "title" if target.persisted && !arg.is_empty() => {
                updates.title = Some(arg.to_string());
                updates
                    .messages
                    .push(format!("Changed the title to \"{arg}\"."));
            }
            _ => {}
        }
    }
    updates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<(String, Option<String>)> {
        extract(text)
            .1
            .into_iter()
            .map(|a| (a.name, a.arg))
            .collect()
    }

    #[test]
    fn trailing_whitespace_is_stripped_as_ruby_rstrip_does() {
        let (kept, _) = extract("Body\u{a0}\t \n\r\n");
        assert_eq!(kept, "Body\u{a0}", "rstrip keeps a no-break space");
    }

    #[test]
    fn command_lines_are_removed_and_returned_in_order() {
        let (kept, actions) = extract("Intro\n/label ~bug ~\"two words\"\n\n/MERGE\nOutro\r\n\n");
        assert_eq!(kept, "Intro\nOutro");
        assert_eq!(
            actions,
            vec![
                QuickAction {
                    name: "label".into(),
                    arg: Some("~bug ~\"two words\"".into())
                },
                QuickAction {
                    name: "merge".into(),
                    arg: None
                },
            ]
        );
        assert_eq!(
            parse_labels("~bug ~\"two words\" plain"),
            ["bug", "two words", "plain"]
        );
    }

    #[test]
    fn only_line_starts_outside_code_and_quotes_count() {
        assert!(names(" /merge").is_empty());
        assert!(names("see /merge").is_empty());
        assert!(names("/merge-now").is_empty());
        assert!(names("/merge\tnow").is_empty());
        assert!(names("/unknown thing").is_empty());
        assert!(names("```\n/merge\n```").is_empty());
        assert!(names("```sh\n/merge\n```\n").is_empty());
        assert!(names("`\n/merge\n`").is_empty());
        assert!(names(">>>\n/close\n>>>").is_empty());
        assert!(names("<details>\n/close\n</details>").is_empty());
        assert_eq!(names("```\ncode\n```\n/close"), [("close".into(), None)]);
        assert_eq!(names("> quoted\n/close"), [("close".into(), None)]);
        assert_eq!(
            names("/labels ~x"),
            [("label".to_string(), Some("~x".to_string()))]
        );
        assert_eq!(extract("a\n/assign @bob\nb").0, "a\nb");
    }
}
