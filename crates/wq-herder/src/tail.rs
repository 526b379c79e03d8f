//! The last lines of a trace, found by scanning backwards for newlines so a
//! 10 MB trace is never split into lines.

use memchr::memrchr;

/// The last `lines` lines of `trace` (all of it when it has fewer). A final
/// newline ends the last line; it does not start an empty one, so
/// `"a\nb\n"` has the two lines `a` and `b`, as `str::lines` counts them.
pub(crate) fn last_lines(trace: &[u8], lines: usize) -> &[u8] {
    &trace[tail_start(trace, lines)..]
}

/// Byte offset where the last `lines` lines start.
fn tail_start(trace: &[u8], lines: usize) -> usize {
    if lines == 0 {
        return trace.len();
    }
    let mut search_end = trace.len();
    if trace.last() == Some(&b'\n') {
        search_end -= 1;
    }
    for _ in 0..lines {
        match memrchr(b'\n', &trace[..search_end]) {
            Some(newline) => search_end = newline,
            None => return 0,
        }
    }
    search_end + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: what splitting into lines would give.
    fn by_splitting(trace: &str, lines: usize) -> String {
        let all: Vec<&str> = trace.lines().collect();
        let skip = all.len().saturating_sub(lines);
        all[skip..].join("\n")
    }

    #[test]
    fn agrees_with_splitting_into_lines() {
        let traces = [
            "",
            "\n",
            "\n\n",
            "one",
            "one\n",
            "one\ntwo",
            "one\ntwo\n",
            "one\ntwo\nthree\n",
            "\none\n\ntwo\n\n",
            "a\r\nb\r\nc\r\n",
        ];
        for trace in traces {
            for lines in 0..6 {
                let tail = std::str::from_utf8(last_lines(trace.as_bytes(), lines)).unwrap();
                let tail_lines: Vec<&str> = tail.lines().collect();
                assert_eq!(
                    tail_lines.join("\n"),
                    by_splitting(trace, lines),
                    "trace {trace:?}, {lines} lines"
                );
                // The window is a suffix of the trace.
                assert!(trace.ends_with(tail));
            }
        }
    }

    #[test]
    fn keeps_exactly_the_last_lines() {
        assert_eq!(last_lines(b"a\nb\nc\n", 1), b"c\n");
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(last_lines(b"a\nb\nc\n", 3), b"a\nb\nc\n");
        assert_eq!(last_lines(b"a\nb\nc\n", 10), b"a\nb\nc\n");
        assert_eq!(last_lines(b"a\nb\nc\n", 0), b"");
    }
}
