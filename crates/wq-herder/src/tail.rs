//! The last lines of a trace, found by scanning backwards for newlines so a
//! 10 MB trace is never split into lines.

use memchr::memrchr_iter;

/// Byte offset where the last `lines` lines of `trace` start (0 when it has
/// fewer): just after the `lines`-th newline from the end. A final newline
/// ends the last line; it does not start an empty one, so `"a\nb\n"` has the
/// two lines `a` and `b`, as `str::lines` counts them.
pub(crate) fn tail_start(trace: &[u8], lines: usize) -> usize {
    if lines == 0 {
        return trace.len();
    }
    let body = trace.strip_suffix(b"\n").unwrap_or(trace);
    // The iterator scans a vector of bytes at a time, so a window of many
    // short lines costs no call per line.
    match memrchr_iter(b'\n', body).nth(lines - 1) {
        Some(newline) => newline + 1,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_lines(trace: &[u8], lines: usize) -> &[u8] {
        &trace[tail_start(trace, lines)..]
    }

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
