//! The forge conformance suite: the same cases against `GitlabClient` and
//! `GithubClient`, each on forge-sim over real HTTP. A case is written
//! once against `dyn Forge` and a [`Harness`] (the simulator's forge-
//! specific set-up); `forge_suite!` runs every case on both forges.
//! Behaviour only one forge has (merge-async polling and budget, merge
//! trains, GitLab job traces, GitHub's log redirect) stays in
//! `tests/github.rs` and `tests/gitlab.rs`.

mod cases;
mod harness;
mod redirect;

/// A `#[tokio::test]` per (forge, case): `gitlab::notes_…`, `github::notes_…`.
macro_rules! forge_suite {
    ([$($forge:ident => $harness:ty),+ $(,)?], $cases:tt $(,)?) => {
        $(forge_suite!(@forge $forge, $harness, $cases);)+
    };
    (@forge $forge:ident, $harness:ty, [$($case:ident),+ $(,)?]) => {
        mod $forge {
            $(
                #[tokio::test]
                async fn $case() {
                    crate::cases::$case::<$harness>().await;
                }
            )+
        }
    };
}

forge_suite!(
    [
        gitlab => crate::harness::Gitlab,
        github => crate::harness::Github,
    ],
    [
        current_user_is_the_token_user_read_once,
        a_label_a_person_adds_meanwhile_survives_an_update,
        change_authors_tell_the_token_user_from_a_person,
        project_path_is_the_forges_spelling,
        notes_are_created_updated_and_listed_across_pages,
        re_reads_are_conditional_and_a_304_reads_as_the_kept_answer,
        the_rate_limit_budget_is_read_from_the_answers,
        ci_jobs_are_offered_where_the_forge_has_them,
        a_flaky_ci_job_is_listed_its_log_read_and_retried,
        redirects_are_not_followed_and_the_token_stays,
        plain_http_off_loopback_is_refused_unless_configured,
        branch_heads_are_read_and_a_missing_project_is_an_error,
        empty_diffs_compare_trees,
        a_merge_bound_to_a_stale_head_is_a_conflict,
        webhooks_are_authenticated_before_they_are_read,
        commits_create_force_update_delete_move_and_chmod,
        a_push_says_whether_it_changes_anything,
        changes_are_created_found_updated_closed_and_reopened,
    ],
);
