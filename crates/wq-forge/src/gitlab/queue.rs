//! Where a merge request stands in its merge train.

use super::GitlabClient;
use super::http::Call;
use super::wire::{self, TrainCar};
use crate::error::ForgeResult;
use crate::model::QueueObservation;

impl GitlabClient {
    /// Where the MR stands in its target branch's merge train: one list of
    /// the project's active cars (oldest first). GitLab appends cars, so
    /// list order is train order and the position counts the cars ahead
    /// on the same target branch. The list (rather than
    /// `GET merge_trains/merge_requests/:iid`) gives the position in the
    /// same single request.
    pub(super) async fn train_observation(
        &self,
        project: &str,
        mr: &wire::MergeRequest,
    ) -> ForgeResult<QueueObservation> {
        let call = Call::get(&["projects", project, "merge_trains"])
            .query("scope", "active")
            .query("sort", "asc");
        let cars: Vec<TrainCar> = self.http.list(call, "a list of merge train cars").await?;
        let mut position: i64 = 0;
        for car in &cars {
            let same_train = car.target_branch.is_empty() || car.target_branch == mr.target_branch;
            if !car.is_active() || !same_train {
                continue;
            }
            position += 1;
            if car.iid() == Some(mr.iid) {
                return Ok(QueueObservation::Entry(car.entry(Some(position))));
            }
        }
        Ok(QueueObservation::Absent)
    }

    /// Queue observation for `get_change`: only merge-train projects are
    /// looked at; a failed look leaves the stored observation alone.
    pub(super) async fn queue_for(
        &self,
        project: &str,
        mr: &wire::MergeRequest,
    ) -> QueueObservation {
        let settings = match self.project_settings(project).await {
            Ok(settings) => settings,
            Err(error) => {
                tracing::warn!(%project, %error, "cannot read project settings; merge train not observed");
                return QueueObservation::Unobserved;
            }
        };
        if !settings.merge_trains_enabled {
            return QueueObservation::Unobserved;
        }
        if !matches!(mr.state.as_str(), "opened" | "locked") {
            // Merged or closed: off any train, no request needed.
            return QueueObservation::Absent;
        }
        match self.train_observation(project, mr).await {
            Ok(observation) => observation,
            Err(error) => {
                tracing::warn!(%project, iid = mr.iid, %error, "cannot read the merge train of !{}", mr.iid);
                QueueObservation::Unobserved
            }
        }
    }
}
