//! The status note on the change request: one note per item, linking to
//! it, saying how it merges and why failed CI jobs were (not) retried.
//! `post_dashboard_note` posts or updates it.

use wq_core::ItemView;

use crate::ci_retry::CiRetryDetail;

/// The status note of one item, before the forge's own escaping.
pub(crate) struct StatusNote {
    /// Finds the note again (with its author, the bot).
    pub marker: String,
    /// The item in the API.
    pub link: String,
    pub body: String,
}

impl StatusNote {
    pub(crate) fn of(public_url: &str, view: &ItemView, auto_merge: bool) -> Self {
        let id = view.item.id;
        let marker = format!("<!-- workqueue:item:{id} -->");
        let link = format!(
            "{}/api/v1/work-items/{id}",
            public_url.trim_end_matches('/')
        );
        let body = format!(
            "{marker}\nThis merge request is managed by workqueue (item `{id}`). \
             Status: {link}\n\nIt merges automatically when CI passes and every \
             merge requirement holds{}.{}",
            if auto_merge {
                ""
            } else {
                " — automatic merge is off for this item"
            },
            CiRetryDetail::of(view).note_section(),
        );
        Self { marker, link, body }
    }
}
