//! Patterns of `messages` and `job_name`: a literal substring, or a regex
//! written between slashes (`/exit code 13[0-9]/`), and the compiled form
//! that searches one text for any of a matcher's patterns in one pass.

use memchr::memmem;
use regex::bytes::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};

/// Upper bound on the compiled size of one matcher's patterns (bytes of the
/// regex program). Far above any sensible configuration; it turns a
/// pathological pattern into a config error instead of a memory spike.
pub const PATTERN_SIZE_LIMIT_BYTES: usize = 16 * 1024 * 1024;

/// One configured pattern, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Found anywhere as a plain substring, case-sensitive.
    Literal(String),
    /// The text between the slashes, searched with the `regex` crate.
    Regex(String),
}

impl Pattern {
    /// `/.../` (at least two characters) is a regex; anything else a literal.
    pub(crate) fn parse(text: &str) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err("must not be empty".to_owned());
        }
        let is_regex = text.len() >= 2 && text.starts_with('/') && text.ends_with('/');
        if !is_regex {
            return Ok(Pattern::Literal(text.to_owned()));
        }
        let inner = &text[1..text.len() - 1];
        if inner.is_empty() {
            return Err("the regex `//` is empty and would match every text".to_owned());
        }
        // Compile alone first, so the error names this pattern.
        build(inner).map_err(|error| format!("invalid regex: {}", one_line(&error)))?;
        Ok(Pattern::Regex(inner.to_owned()))
    }

    /// The pattern as a regex fragment.
    fn as_regex(&self) -> String {
        match self {
            Pattern::Literal(literal) => regex::escape(literal),
            Pattern::Regex(regex) => format!("(?:{regex})"),
        }
    }
}

/// Several patterns, any of which may match. One literal is searched with
/// `memchr::memmem`; anything else becomes one regex alternation, which the
/// `regex` crate scans once (with SIMD literal prefilters where it can).
#[derive(Debug, Clone)]
pub(crate) struct PatternSet {
    /// The patterns as one regex alternation.
    source: String,
    search: Search,
}

#[derive(Debug, Clone)]
enum Search {
    Literal(Box<memmem::Finder<'static>>),
    Regex(Regex),
}

impl PatternSet {
    /// Compiles non-empty, already validated patterns. The error is the
    /// regex crate's (for example the size limit of the alternation).
    pub(crate) fn compile(patterns: &[Pattern]) -> Result<PatternSet, String> {
        debug_assert!(!patterns.is_empty());
        let alternation: Vec<String> = patterns.iter().map(Pattern::as_regex).collect();
        let source = alternation.join("|");
        let search = match patterns {
            [Pattern::Literal(literal)] => {
                let finder = memmem::Finder::new(literal.as_bytes()).into_owned();
                Search::Literal(Box::new(finder))
            }
            _ => Search::Regex(build(&source).map_err(|error| one_line(&error))?),
        };
        Ok(PatternSet { source, search })
    }

    /// Whether any pattern occurs in `text`.
    pub(crate) fn is_match(&self, text: &[u8]) -> bool {
        match &self.search {
            Search::Literal(finder) => finder.find(text).is_some(),
            Search::Regex(regex) => regex.is_match(text),
        }
    }
}

/// The patterns of several [`PatternSet`]s searched together: one regex of
/// all of them, whose single pass proves that none matches (the usual case
/// for a genuine failure), and a [`RegexSet`] that tells in one more pass
/// which of them match.
#[derive(Debug, Clone)]
pub(crate) struct CombinedSets {
    any: Regex,
    each: RegexSet,
}

impl CombinedSets {
    /// `None` when they would not compile together (the combination is
    /// only a shortcut; each set still works alone).
    pub(crate) fn of<'a>(sets: impl IntoIterator<Item = &'a PatternSet>) -> Option<CombinedSets> {
        let sources: Vec<&str> = sets.into_iter().map(|set| set.source.as_str()).collect();
        let any = build(&sources.join("|")).ok()?;
        let each = RegexSetBuilder::new(&sources)
            .multi_line(true)
            .crlf(true)
            .size_limit(PATTERN_SIZE_LIMIT_BYTES)
            .build()
            .ok()?;
        Some(CombinedSets { any, each })
    }

    /// For each set, in the order given to [`CombinedSets::of`], whether it
    /// matches in `text`.
    pub(crate) fn matches(&self, text: &[u8]) -> Vec<bool> {
        if !self.any.is_match(text) {
            return vec![false; self.each.len()];
        }
        let matched = self.each.matches(text);
        (0..self.each.len())
            .map(|index| matched.matched(index))
            .collect()
    }
}

/// `^` and `$` anchor at line ends (also before `\r\n`), as if every line
/// were searched on its own; `.` never crosses a line.
fn build(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .multi_line(true)
        .crlf(true)
        .size_limit(PATTERN_SIZE_LIMIT_BYTES)
        .build()
}

/// The regex crate's multi-line error text on one line.
fn one_line(error: &regex::Error) -> String {
    error
        .to_string()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> PatternSet {
        let parsed: Vec<Pattern> = patterns
            .iter()
            .map(|text| Pattern::parse(text).unwrap())
            .collect();
        PatternSet::compile(&parsed).unwrap()
    }

    #[test]
    fn slashes_make_a_regex_and_anything_else_a_literal() {
        assert_eq!(
            Pattern::parse("/a+b/").unwrap(),
            Pattern::Regex("a+b".to_owned())
        );
        assert_eq!(
            Pattern::parse("a+b").unwrap(),
            Pattern::Literal("a+b".to_owned())
        );
        assert_eq!(
            Pattern::parse("/").unwrap(),
            Pattern::Literal("/".to_owned())
        );
        assert_eq!(
            Pattern::parse("/usr/bin").unwrap(),
            Pattern::Literal("/usr/bin".to_owned())
        );
        assert!(Pattern::parse("").is_err());
        assert!(Pattern::parse("//").is_err());
        let error = Pattern::parse("/(unclosed/").unwrap_err();
        assert!(error.starts_with("invalid regex:"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }

    #[test]
    fn a_literal_is_not_a_regex() {
        let literal = set(&["a+b"]);
        assert!(literal.is_match(b"x a+b y"));
        assert!(!literal.is_match(b"aab"));
        // Two literals go through the alternation, still escaped.
        let two = set(&["a+b", "c.d"]);
        assert!(two.is_match(b"c.d"));
        assert!(!two.is_match(b"cxd aab"));
    }

    #[test]
    fn anchors_work_per_line_also_with_crlf() {
        let anchored = set(&["/^Killed$/"]);
        assert!(anchored.is_match(b"line one\nKilled\nline three\n"));
        assert!(anchored.is_match(b"line one\r\nKilled\r\n"));
        assert!(!anchored.is_match(b"Process Killed\n"));
        assert!(!anchored.is_match(b"Killed by test\n"));
    }

    #[test]
    fn dot_does_not_cross_lines() {
        let spanning = set(&["/start.*end/"]);
        assert!(spanning.is_match(b"start and end"));
        assert!(!spanning.is_match(b"start\nend"));
    }

    #[test]
    fn combined_sets_tell_which_sets_match() {
        let sets = [set(&["alpha"]), set(&["/^beta$/", "gamma"]), set(&["alph"])];
        let combined = CombinedSets::of(&sets).unwrap();
        assert_eq!(combined.matches(b"x alpha"), [true, false, true]);
        assert_eq!(combined.matches(b"beta\n"), [false, true, false]);
        assert_eq!(combined.matches(b"a gamma b alpha"), [true, true, true]);
        // Overlapping matches all count.
        assert_eq!(combined.matches(b"gammalpha"), [true, true, true]);
        assert_eq!(combined.matches(b"beta gamm alp"), [false, false, false]);
    }

    #[test]
    fn inline_flags_stay_inside_their_pattern() {
        let mixed = set(&["/(?i)oomkilled/", "Exact"]);
        assert!(mixed.is_match(b"reason: OOMKilled"));
        assert!(mixed.is_match(b"Exact"));
        assert!(!mixed.is_match(b"exact"));
    }
}
