//! The matcher engine's acceptance tests, in one binary: matching semantics
//! (`matching`), configuration errors (`config`) and the shipped default set
//! (`defaults`).

mod config;
mod defaults;
mod matching;
mod support;
