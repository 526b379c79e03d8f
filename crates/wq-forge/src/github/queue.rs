//! Merge queue entries of several pull requests in one GraphQL query.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::GithubClient;
use super::http::Repo;
use super::wire;
use crate::error::ForgeResult;
use crate::model::QueueObservation;

/// Pull requests per `queue_entries` GraphQL query (larger asks are split).
pub const QUEUE_ALIASES_PER_QUERY: usize = 100;

impl GithubClient {
    /// One GraphQL query, an alias per pull request
    /// (`pr7: pullRequest(number: 7) { mergeQueueEntry { … } }`). A pull
    /// request the answer has an error for (missing, no access) is
    /// `Unobserved`; `null` is `Absent`. A failed request is an error.
    pub(super) async fn queue_entries(
        &self,
        project: &str,
        numbers: &[u64],
    ) -> ForgeResult<BTreeMap<u64, QueueObservation>> {
        let repo = Repo::parse(project)?;
        let unique: Vec<u64> = numbers
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut observed = BTreeMap::new();
        for chunk in unique.chunks(QUEUE_ALIASES_PER_QUERY) {
            let aliases: Vec<String> = chunk
                .iter()
                .map(|n| {
                    format!(
                        "pr{n}: pullRequest(number: {n}) {{ mergeQueueEntry {{ state position estimatedTimeToMerge }} }}"
                    )
                })
                .collect();
            let query = format!(
                "query($owner: String!, $name: String!) {{ repository(owner: $owner, name: $name) {{ {} }} }}",
                aliases.join(" ")
            );
            let answer = self
                .http
                .graphql(&query, json!({ "owner": repo.owner, "name": repo.name }))
                .await?;
            let Some(data) = answer.pointer("/data/repository").filter(|r| r.is_object()) else {
                return Err(wire::graphql_error(
                    &format!("merge queue entries of {project}"),
                    &answer,
                ));
            };
            let paths = wire::error_paths(&answer);
            for n in chunk {
                let alias = format!("pr{n}");
                let observation =
                    if wire::errored_at(&paths, &["repository", &alias, "mergeQueueEntry"]) {
                        QueueObservation::Unobserved
                    } else {
                        match data.get(&alias).filter(|pr| pr.is_object()) {
                            Some(pr) => wire::queue_observation(pr.get("mergeQueueEntry")),
                            None => QueueObservation::Unobserved,
                        }
                    };
                observed.insert(*n, observation);
            }
        }
        Ok(observed)
    }
}
