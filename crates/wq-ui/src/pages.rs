//! The list of changes and the item page, whole or as the fragments the
//! page's script swaps in when something changed.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use wq_api::routes::items::{PageQuery, permitted, retry_permission, status_of, visible_page};
use wq_api::{ApiError, AppState};
use wq_auth::{Permission, Scope};
use wq_core::{ItemId, Phase, StatusSummary, WorkItem};

use crate::session::{NotSignedIn, SignedIn, signed_in};
use crate::view::{RowView, StateView};

/// Rows on a page of the list.
pub const PAGE_SIZE: u32 = 50;
/// Rows a filtered listing looks at before it answers a short page.
const MAX_SCANNED: usize = 2000;
/// Longest accepted search or filter text.
const MAX_FILTER_LEN: usize = 200;

/// A failure as a page: the status and a sentence.
pub struct PageError(pub StatusCode, pub String);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = ErrorPage {
            status: self.0.as_u16(),
            message: self.1,
        }
        .render()
        .unwrap_or_else(|_| "error".to_owned());
        (self.0, Html(body)).into_response()
    }
}

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> Self {
        PageError(error.status(), error.message().to_owned())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    message: String,
}

/// The signed-in person, or (for a page) the way to the sign-in page.
pub async fn require(state: &AppState, headers: &HeaderMap) -> Result<SignedIn, Response> {
    match signed_in(state, headers).await {
        Ok(who) => Ok(who),
        Err(NotSignedIn::Refused) => Err(Redirect::to("/ui/sign-in").into_response()),
        Err(NotSignedIn::Unavailable(reason)) => {
            tracing::warn!(%reason, "dashboard sign-in cannot be checked: {reason}");
            Err(PageError(
                StatusCode::SERVICE_UNAVAILABLE,
                "the credentials cannot be checked right now; try again later".into(),
            )
            .into_response())
        }
    }
}

/// The signed-in person, or a 401 (for fragments, events and actions).
pub async fn require_api(state: &AppState, headers: &HeaderMap) -> Result<SignedIn, Response> {
    match signed_in(state, headers).await {
        Ok(who) => Ok(who),
        Err(NotSignedIn::Refused) => {
            Err(PageError(StatusCode::UNAUTHORIZED, "sign in first".into()).into_response())
        }
        Err(NotSignedIn::Unavailable(_)) => Err(PageError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the credentials cannot be checked right now; try again later".into(),
        )
        .into_response()),
    }
}

/// The list's filters, as the query string gives them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub forge: Option<String>,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub caller: Option<String>,
    /// `1`: failed items and failed merge attempts only.
    #[serde(default)]
    pub attention: Option<String>,
    /// Part of the branch or title.
    #[serde(default)]
    pub q: Option<String>,
    #[serde(default)]
    pub before: Option<String>,
}

fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// The filters, checked: a bad one is a 400 naming it.
struct Checked {
    phase: Option<Phase>,
    forge: Option<String>,
    project: Option<String>,
    caller: Option<String>,
    attention: bool,
    search: Option<String>,
    before: Option<ItemId>,
}

impl Filters {
    fn check(&self) -> Result<Checked, PageError> {
        let bad = |field: &str, why: String| {
            PageError(StatusCode::BAD_REQUEST, format!("filter {field}: {why}"))
        };
        for (field, value) in [
            ("forge", &self.forge),
            ("project", &self.project),
            ("caller", &self.caller),
            ("q", &self.q),
        ] {
            if given(value).is_some_and(|v| v.len() > MAX_FILTER_LEN) {
                return Err(bad(field, format!("at most {MAX_FILTER_LEN} characters")));
            }
        }
        let phase = given(&self.phase)
            .map(|p| p.parse::<Phase>())
            .transpose()
            .map_err(|e| bad("phase", e.to_string()))?;
        let before = given(&self.before)
            .map(|b| b.parse::<ItemId>())
            .transpose()
            .map_err(|_| bad("before", "must be a work item id".into()))?;
        Ok(Checked {
            phase,
            forge: given(&self.forge).map(str::to_owned),
            project: given(&self.project).map(str::to_owned),
            caller: given(&self.caller).map(str::to_lowercase),
            attention: given(&self.attention).is_some_and(|a| a == "1" || a == "on"),
            search: given(&self.q).map(str::to_lowercase),
            before,
        })
    }

    /// The query string of these filters with another cursor.
    fn with_before(&self, before: Option<ItemId>) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for (name, value) in [
            ("phase", &self.phase),
            ("forge", &self.forge),
            ("project", &self.project),
            ("caller", &self.caller),
            ("attention", &self.attention),
            ("q", &self.q),
        ] {
            if let Some(value) = given(value) {
                pairs.push((name, value.to_owned()));
            }
        }
        if let Some(before) = before {
            pairs.push(("before", before.to_string()));
        }
        pairs
            .iter()
            .map(|(name, value)| format!("{name}={}", encode(value)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn keeps(filters: &Checked, item: &WorkItem, summary: Option<&StatusSummary>) -> bool {
    let field = |pick: fn(&StatusSummary) -> Option<&String>| summary.and_then(pick);
    if let Some(forge) = &filters.forge
        && field(|s| s.forge.as_ref()) != Some(forge)
    {
        return false;
    }
    if let Some(project) = &filters.project
        && field(|s| s.project.as_ref()) != Some(project)
    {
        return false;
    }
    if let Some(caller) = &filters.caller
        && !item
            .caller_identity
            .as_deref()
            .is_some_and(|who| who.to_lowercase().contains(caller.as_str()))
    {
        return false;
    }
    if filters.attention
        && !(item.phase == Phase::Failed || summary.is_some_and(|s| s.needs_attention))
    {
        return false;
    }
    if let Some(search) = &filters.search {
        let hit = |text: Option<&String>| {
            text.is_some_and(|t| t.to_lowercase().contains(search.as_str()))
        };
        if !hit(field(|s| s.branch.as_ref())) && !hit(field(|s| s.title.as_ref())) {
            return false;
        }
    }
    true
}

/// The rows of one page: active items first, then recent terminal ones.
struct Listing {
    active: Vec<RowView>,
    done: Vec<RowView>,
    next: Option<String>,
}

async fn listing(
    state: &AppState,
    who: &SignedIn,
    filters: &Filters,
) -> Result<Listing, PageError> {
    let checked = filters.check()?;
    if who
        .principal
        .authorize(Permission::Read, &Scope::ANY)
        .is_err()
    {
        return Err(PageError(
            StatusCode::FORBIDDEN,
            "no rule of yours grants read".into(),
        ));
    }
    let filtered = checked.forge.is_some()
        || checked.project.is_some()
        || checked.caller.is_some()
        || checked.attention
        || checked.search.is_some();
    let keep = |item: &WorkItem, summary: Option<&StatusSummary>| keeps(&checked, item, summary);
    let query = |phase| PageQuery {
        phase,
        item_type: None,
        before: checked.before,
        limit: PAGE_SIZE,
        max_scanned: filtered.then_some(MAX_SCANNED),
    };
    let now = state.clock().now();
    let to_rows = |page: wq_api::routes::items::Page| -> (Vec<RowView>, Option<ItemId>) {
        (
            page.rows
                .iter()
                .map(|row| RowView::of(&row.item, row.status.as_ref(), now))
                .collect(),
            page.next_before,
        )
    };
    // A phase filter lists that phase; otherwise the active ones first,
    // then a page of the most recent of all (terminal ones among them).
    match checked.phase {
        Some(phase) => {
            let page = visible_page(state, &who.principal, query(Some(phase)), &keep).await?;
            let (rows, next) = to_rows(page);
            let (active, done) = rows.into_iter().partition(|r| r.phase == "active");
            Ok(Listing {
                active,
                done,
                next: next.map(|n| filters.with_before(Some(n))),
            })
        }
        None => {
            let active =
                visible_page(state, &who.principal, query(Some(Phase::Active)), &keep).await?;
            let (active, next_active) = to_rows(active);
            // The most recent terminal items: a page of each terminal
            // phase (each read by its own index), merged newest first.
            let mut done = Vec::new();
            for phase in [Phase::Completed, Phase::Failed, Phase::Cancelled] {
                let page = visible_page(state, &who.principal, query(Some(phase)), &keep).await?;
                done.extend(page.rows);
            }
            done.sort_by_key(|row| std::cmp::Reverse(row.item.id));
            let more_done = done.len() > PAGE_SIZE as usize;
            done.truncate(PAGE_SIZE as usize);
            let next_done = more_done
                .then(|| done.last().map(|row| row.item.id))
                .flatten();
            let done = done
                .iter()
                .map(|row| RowView::of(&row.item, row.status.as_ref(), now))
                .collect();
            Ok(Listing {
                active,
                done,
                next: next_active
                    .or(next_done)
                    .map(|n| filters.with_before(Some(n))),
            })
        }
    }
}

#[derive(Template)]
#[template(path = "list.html")]
struct ListPage {
    who: String,
    csrf: String,
    filters: Filters,
    active: Vec<RowView>,
    done: Vec<RowView>,
    next: Option<String>,
}

#[derive(Template)]
#[template(path = "rows.html")]
struct RowsFragment {
    active: Vec<RowView>,
    done: Vec<RowView>,
    next: Option<String>,
}

/// `GET /ui`: the list of changes.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(filters): Query<Filters>,
) -> Response {
    let who = match require(&state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    match listing(&state, &who, &filters).await {
        Ok(listing) => html(ListPage {
            who: who.principal.name(),
            csrf: who.csrf,
            filters,
            active: listing.active,
            done: listing.done,
            next: listing.next,
        }),
        Err(error) => error.into_response(),
    }
}

/// `GET /ui/fragments/rows`: the list's rows, for the script to swap in.
pub async fn rows(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(filters): Query<Filters>,
) -> Response {
    let who = match require_api(&state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    match listing(&state, &who, &filters).await {
        Ok(listing) => html(RowsFragment {
            active: listing.active,
            done: listing.done,
            next: listing.next,
        }),
        Err(error) => error.into_response(),
    }
}

/// Renders a template, or a 500 page.
pub fn html(template: impl Template) -> Response {
    match template.render() {
        Ok(body) => Html(body).into_response(),
        Err(error) => {
            tracing::error!(%error, "a dashboard template failed to render: {error}");
            PageError(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render".into(),
            )
            .into_response()
        }
    }
}

/// An action the person may take on an item.
#[derive(Debug, Clone)]
pub struct ActionView {
    /// The path segment: `merge`, `retry-merge`, `refresh`, `retry`.
    pub name: &'static str,
    pub label: &'static str,
    pub hint: &'static str,
}

/// One record of the timeline.
#[derive(Debug, Clone)]
pub struct TimelineView {
    pub at: String,
    pub actor: String,
    pub kind: String,
    pub what: String,
}

#[derive(Template)]
#[template(path = "item.html")]
struct ItemPage {
    who: String,
    csrf: String,
    body: ItemBody,
}

#[derive(Template)]
#[template(path = "item_body.html")]
struct ItemBody {
    id: String,
    row: RowView,
    state: StateView,
    error: Option<String>,
    head_sha: String,
    unmet: Vec<(String, String)>,
    last_merge: Option<String>,
    actions: Vec<ActionView>,
    sections: Vec<wq_core::status::DetailSection>,
    timeline: Vec<TimelineView>,
}

impl ItemBody {
    fn render_body(&self) -> String {
        self.render().unwrap_or_default()
    }
}

/// The actions `who` may take on `item` now, each shown only when a rule
/// grants it: Merge now (active, change request known, `merge`); Retry for
/// an `auto_merge` error (`retry`, one more automatic evaluation); Refresh
/// for any other stored error (`retry`, a forge re-read); Retry for a
/// failed item (`retry`, or `admin` when its type says so).
async fn actions_for(
    state: &AppState,
    who: &SignedIn,
    item: &WorkItem,
    summary: Option<&StatusSummary>,
) -> Result<Vec<ActionView>, ApiError> {
    let mut actions = Vec::new();
    let commands = state
        .types()
        .get(&item.item_type)
        .map(|t| t.commands())
        .unwrap_or_default();
    let offers = |name: &str| commands.iter().find(|spec| spec.name == name);
    let may = |permission| permitted(state, &who.principal, item, permission);
    if item.phase == Phase::Active {
        if let Some(spec) = offers("merge")
            && summary.is_some_and(|s| s.change.is_some())
            && may(spec.permission).await?
        {
            actions.push(ActionView {
                name: "merge",
                label: "Merge now",
                hint: "merge the head shown here now, through the forge",
            });
        }
        let last = summary.and_then(|s| s.last_merge.as_ref());
        let error_kind = last
            .filter(|m| m.result == "failed" || m.error.is_some())
            .and_then(|m| m.error_kind.as_deref());
        match error_kind {
            Some("auto_merge") => {
                if let Some(spec) = offers("retry-merge")
                    && may(spec.permission).await?
                {
                    actions.push(ActionView {
                        name: "retry-merge",
                        label: "Retry",
                        hint: "one more automatic merge evaluation",
                    });
                }
            }
            Some(_) => {
                if let Some(spec) = offers("refresh")
                    && may(spec.permission).await?
                {
                    actions.push(ActionView {
                        name: "refresh",
                        label: "Refresh",
                        hint: "read the change request again from the forge",
                    });
                }
            }
            None => {
                if item.error.is_some()
                    && let Some(spec) = offers("refresh")
                    && may(spec.permission).await?
                {
                    actions.push(ActionView {
                        name: "refresh",
                        label: "Refresh",
                        hint: "read the change request again from the forge",
                    });
                }
            }
        }
    }
    if matches!(item.phase, Phase::Failed | Phase::Cancelled)
        && may(retry_permission(state, item).await?).await?
    {
        actions.push(ActionView {
            name: "retry",
            label: "Retry",
            hint: "make the item active again",
        });
    }
    Ok(actions)
}

fn describe(record: &wq_store::audit::AuditRecord) -> String {
    let mut parts = Vec::new();
    if let Some(trigger) = &record.trigger {
        if let Some(action) = trigger.get("action").and_then(|a| a.as_str()) {
            parts.push(format!("action {action}"));
        }
        if let Some(error) = trigger.get("error").and_then(|a| a.as_str()) {
            parts.push(format!("error: {error}"));
        }
    }
    if let Some(new) = &record.new_state
        && let Some(phase) = new.get("phase").and_then(|p| p.as_str())
    {
        parts.push(format!("phase {phase}"));
    }
    if let Some(event) = record.metadata.get("event_type").and_then(|e| e.as_str()) {
        parts.push(event.to_owned());
    }
    wq_core::status::bounded_text(&parts.join(" · "))
}

async fn item_body(state: &AppState, who: &SignedIn, raw_id: &str) -> Result<ItemBody, PageError> {
    let not_found = || {
        PageError(
            StatusCode::NOT_FOUND,
            format!("work item {raw_id} not found"),
        )
    };
    let id: ItemId = raw_id.parse().map_err(|_| {
        PageError(
            StatusCode::BAD_REQUEST,
            format!("id must be a work item id (a UUID), got {raw_id:?}"),
        )
    })?;
    let item = state
        .store()
        .item_get(id)
        .await
        .map_err(ApiError::from)?
        .ok_or_else(not_found)?;
    if !permitted(state, &who.principal, &item, Permission::Read).await? {
        return Err(not_found());
    }
    let summary = status_of(state, &item).await?;
    let sections = match state.types().get(&item.item_type) {
        Some(handler) => handler.sections(&item).await.map_err(ApiError::from)?,
        None => Vec::new(),
    };
    let records = state
        .store()
        .audit_list(wq_store::audit::AuditQuery {
            item_id: Some(id),
            limit: 200,
            ..wq_store::audit::AuditQuery::default()
        })
        .await
        .map_err(ApiError::from)?;
    let timeline = records
        .iter()
        .rev()
        .map(|record| TimelineView {
            at: record
                .at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            actor: record.actor.clone(),
            kind: record.kind.clone(),
            what: describe(record),
        })
        .collect();
    let actions = actions_for(state, who, &item, summary.as_ref()).await?;
    let now = state.clock().now();
    let row = RowView::of(&item, summary.as_ref(), now);
    Ok(ItemBody {
        id: item.id.to_string(),
        state: StateView::of(&item, summary.as_ref()),
        row,
        error: item.error.clone(),
        head_sha: summary
            .as_ref()
            .and_then(|s| s.change.as_ref())
            .and_then(|c| c.head_sha.clone())
            .unwrap_or_default(),
        unmet: summary
            .as_ref()
            .map(|s| {
                s.unmet_gates
                    .iter()
                    .map(|g| (g.name.clone(), g.reason.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        last_merge: summary
            .as_ref()
            .and_then(|s| s.last_merge.as_ref())
            .map(|m| {
                let mut text = m.result.clone();
                if let Some(kind) = &m.error_kind {
                    text.push_str(&format!(" ({kind})"));
                }
                if let Some(error) = &m.error {
                    text.push_str(&format!(": {error}"));
                }
                text
            }),
        actions,
        sections,
        timeline,
    })
}

/// `GET /ui/items/{id}`: one item.
pub async fn item(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(raw_id): Path<String>,
) -> Response {
    let who = match require(&state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    match item_body(&state, &who, &raw_id).await {
        Ok(body) => html(ItemPage {
            who: who.principal.name(),
            csrf: who.csrf,
            body,
        }),
        Err(error) => error.into_response(),
    }
}

/// `GET /ui/fragments/items/{id}`: the item page's body.
pub async fn item_fragment(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(raw_id): Path<String>,
) -> Response {
    let who = match require_api(&state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    match item_body(&state, &who, &raw_id).await {
        Ok(body) => html(body),
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_filters_name_their_field() {
        let message = |filters: Filters| match filters.check() {
            Err(PageError(status, message)) => {
                assert_eq!(status, StatusCode::BAD_REQUEST);
                message
            }
            Ok(_) => panic!("accepted"),
        };
        assert!(
            message(Filters {
                phase: Some("pending".into()),
                ..Filters::default()
            })
            .starts_with("filter phase")
        );
        assert!(
            message(Filters {
                before: Some("x".into()),
                ..Filters::default()
            })
            .starts_with("filter before")
        );
        assert!(
            message(Filters {
                q: Some("x".repeat(201)),
                ..Filters::default()
            })
            .starts_with("filter q")
        );
    }

    #[test]
    fn the_next_page_keeps_the_filters() {
        let filters = Filters {
            q: Some("wq/a b".into()),
            attention: Some("1".into()),
            ..Filters::default()
        };
        let id = ItemId::new_v7();
        assert_eq!(
            filters.with_before(Some(id)),
            format!("attention=1&q=wq%2Fa%20b&before={id}")
        );
    }
}
