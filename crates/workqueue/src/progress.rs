//! Progress of long-running commands (`items submit --wait`, `items cancel
//! --wait`, `items audit`, `audit verify`): an indicatif spinner on stderr
//! with the elapsed time and what is going on, shown only when stderr is a
//! terminal, so scripts, pipes and logs see nothing of it.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A spinner, or nothing when stderr is not a terminal.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// Starts a spinner saying `message` (on a terminal only).
    pub fn spinner(message: impl Into<String>) -> Self {
        Self::spinner_if(std::io::stderr().is_terminal(), message)
    }

    /// [`Progress::spinner`] when `shown`, else nothing.
    pub fn spinner_if(shown: bool, message: impl Into<String>) -> Self {
        if !shown {
            return Self(None);
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed}] {msg}") {
            bar.set_style(style);
        }
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(120));
        Self(Some(bar))
    }

    /// Whether anything is shown.
    pub fn is_shown(&self) -> bool {
        self.0.is_some()
    }

    /// Says what is going on now.
    pub fn set(&self, message: impl Into<String>) {
        if let Some(bar) = &self.0 {
            bar.set_message(message.into());
        }
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_a_terminal_nothing_is_shown() {
        let progress = Progress::spinner_if(false, "working");
        assert!(!progress.is_shown());
        progress.set("still working");
        progress.finish();
        let shown = Progress::spinner_if(true, "working");
        assert!(shown.is_shown());
    }
}
