//! `/api/v1/work-items`: list (filters and a keyset cursor), show (with
//! dimensions), submit, retry and the item types' commands.
//!
//! Each handler authorizes its caller ([`Caller::authorize`]): list and
//! show need `read`, submit `submit`, retry `retry`, a command the
//! permission its type names. Submissions are scoped by the body's
//! `item_type`, `forge` and `project`; an existing item by its type and the
//! forge and project its type reports ([`wq_core::ItemType::scope`]); when
//! a type whose items all have one reports none, only rules without a forge
//! or project restriction grant it. A caller without the permission
//! anywhere is refused before the item is read. An item outside the
//! caller's read scope answers 404, as an unknown id does (show, retry,
//! commands), and never appears in a listing or its cursor.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use wq_auth::Principal;
use wq_auth::{Permission, Scope};
use wq_core::{
    CommandStatus, FieldError, ItemId, OWNED_BY_ANOTHER_CALLER, Phase, Submission, SubmitOutcome,
    WorkItem,
};
use wq_store::{ItemListParams, ListedItem, StoreError, Visibility, VisibleScope};

use crate::auth::{Caller, command_permissions};
use crate::error::{ApiError, ErrorEnvelope};
use crate::extract::{ApiBytes, ApiJson, ApiPath, ApiQuery, UniqueKeys};
use crate::models::{DimensionBody, ItemBody, ItemDetail, ItemList, SubmitResponse};
use crate::state::AppState;

/// Page size when `limit` is not given.
pub const DEFAULT_PAGE_LIMIT: u32 = 50;
/// Largest accepted `limit`.
pub const MAX_PAGE_LIMIT: u32 = 500;
/// Longest accepted `item_type` filter.
const MAX_ITEM_TYPE_LEN: usize = 100;

/// The parsed query of `GET /api/v1/work-items`.
#[derive(Debug, Clone, PartialEq)]
struct ListQuery {
    phase: Option<Phase>,
    item_type: Option<String>,
    limit: u32,
    before: Option<ItemId>,
}

/// The query as written: each parameter at most once, no other (the
/// derive refuses both); the values are read by [`ListQuery::parse`].
/// The document's parameters of the listing come from here too.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct RawListQuery {
    /// Only items in this phase.
    #[serde(default, deserialize_with = "given")]
    #[param(value_type = Option<Phase>)]
    phase: Option<String>,
    /// Only items of this type.
    #[serde(default, deserialize_with = "given")]
    #[param(min_length = 1, max_length = 100)]
    item_type: Option<String>,
    /// Page size (default 50).
    #[serde(default, deserialize_with = "given")]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    limit: Option<String>,
    /// The previous page's `next_before`: items older than this id.
    #[serde(default, deserialize_with = "given")]
    #[param(value_type = Option<ItemId>)]
    before: Option<String>,
}

/// A parameter that is present (a query has no `null`).
fn given<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    <String as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// Why the parameters do not fit [`RawListQuery`], as the derive reports
/// it: the parameter's name, not a message to take apart.
#[derive(Debug, thiserror::Error)]
enum QueryShapeError {
    #[error("unknown query parameter {0:?}")]
    Unknown(String),
    #[error("query parameter {0:?} is given more than once")]
    Repeated(&'static str),
    #[error("{0}")]
    Other(String),
}

impl serde::de::Error for QueryShapeError {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        Self::Other(message.to_string())
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        Self::Unknown(field.to_owned())
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::Repeated(field)
    }
}

impl ListQuery {
    /// Parses the raw pairs; unknown, repeated and malformed parameters are
    /// refused with an error naming them.
    fn parse(pairs: Vec<(String, String)>) -> Result<Self, ApiError> {
        let pairs = serde::de::value::MapDeserializer::<_, QueryShapeError>::new(pairs.into_iter());
        let raw = <RawListQuery as serde::Deserialize>::deserialize(pairs).map_err(|error| {
            match error {
                QueryShapeError::Unknown(name) => ApiError::invalid_parameter(
                    name.clone(),
                    format!(
                        "unknown query parameter {name:?}: expected phase, item_type, limit or before"
                    ),
                ),
                QueryShapeError::Repeated(name) => {
                    ApiError::invalid_parameter(name, error.to_string())
                }
                QueryShapeError::Other(message) => ApiError::bad_request(message),
            }
        })?;
        let phase = raw
            .phase
            .map(|phase| phase.parse::<Phase>())
            .transpose()
            .map_err(|error| ApiError::invalid_parameter("phase", error.to_string()))?;
        if let Some(item_type) = &raw.item_type
            && (item_type.is_empty() || item_type.len() > MAX_ITEM_TYPE_LEN)
        {
            return Err(ApiError::invalid_parameter(
                "item_type",
                format!("item_type must be 1 to {MAX_ITEM_TYPE_LEN} characters"),
            ));
        }
        let limit = match raw.limit {
            None => DEFAULT_PAGE_LIMIT,
            Some(value) => value
                .parse::<u32>()
                .ok()
                .filter(|limit| (1..=MAX_PAGE_LIMIT).contains(limit))
                .ok_or_else(|| {
                    ApiError::invalid_parameter(
                        "limit",
                        format!(
                            "limit must be an integer between 1 and {MAX_PAGE_LIMIT}, got {value:?}"
                        ),
                    )
                })?,
        };
        let before = raw
            .before
            .map(|value| {
                value.parse::<ItemId>().map_err(|_| {
                    ApiError::invalid_parameter(
                        "before",
                        format!("before must be a work item id (a UUID), got {value:?}"),
                    )
                })
            })
            .transpose()?;
        Ok(ListQuery {
            phase,
            item_type: raw.item_type,
            limit,
            before,
        })
    }
}

/// The `{id}` path parameter, as the document shows it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "documentation only: the handlers parse `id` themselves"
)]
struct ItemIdParam {
    /// A work item id (a UUID).
    id: ItemId,
}

/// Parses the `{id}` path parameter.
fn parse_id(raw: &str) -> Result<ItemId, ApiError> {
    raw.parse::<ItemId>().map_err(|_| {
        ApiError::invalid_parameter(
            "id",
            format!("id must be a work item id (a UUID), got {raw:?}"),
        )
    })
}

fn not_found(id: ItemId) -> ApiError {
    ApiError::not_found(format!("work item {id} not found"))
}

/// What the caller's `read` grants may allow, for the store to narrow a
/// listing with: everything when one grant has no restriction.
fn read_visibility(principal: &Principal) -> Visibility {
    if principal.permits_everywhere(Permission::Read) {
        return Visibility::All;
    }
    Visibility::Grants(
        principal
            .rules()
            .filter(|rule| rule.permissions().allows(Permission::Read))
            .map(|rule| {
                let globs = rule.scope_globs();
                VisibleScope {
                    item_types: globs.item_types,
                    forges: globs.forges,
                    projects: globs.projects,
                }
            })
            .collect(),
    )
}

/// The item's scope, or the same 404 as for an unknown id when the caller
/// may not read it: an item outside the caller's read scope does not exist
/// for it.
async fn visible_scope(
    state: &AppState,
    caller: &Caller,
    item: &WorkItem,
) -> Result<ItemScope, ApiError> {
    let scope = ItemScope::of(state, &item.item_type, item.id).await?;
    if scope.readable_by(caller.principal()) {
        Ok(scope)
    } else {
        tracing::debug!(item_id = %item.id, caller = %caller.principal().name(), "work item {} is outside the caller's read scope", item.id);
        Err(not_found(item.id))
    }
}

/// Whether the caller submitted `item`: one of its rules records the
/// identity the item holds. An item without a recorded submitter has no
/// owner to protect.
fn is_owner(principal: &Principal, item: &WorkItem) -> bool {
    match &item.caller_identity {
        None => true,
        Some(owner) => principal
            .rules()
            .any(|rule| principal.caller_identity(rule) == *owner),
    }
}

/// What an existing item touches, for authorization: its type and, when the
/// type reports them, its forge and project. An item of a type whose items
/// all have a forge and project, but that reports none, is in an unknown
/// place: only rules without a forge or project restriction grant it.
struct ItemScope {
    item_type: String,
    place: Option<(String, String)>,
    place_unknown: bool,
}

impl ItemScope {
    async fn of(state: &AppState, item_type: &str, id: ItemId) -> Result<Self, ApiError> {
        let (place, scoped) = match state.types.get(item_type) {
            Some(handler) => (handler.scope(id).await?, handler.scoped_by_project()),
            None => (None, false),
        };
        Ok(Self {
            item_type: item_type.to_owned(),
            place_unknown: scoped && place.is_none(),
            place,
        })
    }

    /// The scope of a listed row: its stored place, or (for rows stored
    /// without one) what its type reports.
    async fn of_listed(state: &AppState, listed: &ListedItem) -> Result<Self, ApiError> {
        match &listed.place {
            Some(place) => Ok(Self {
                item_type: listed.item.item_type.clone(),
                place: Some(place.clone()),
                place_unknown: false,
            }),
            None => Self::of(state, &listed.item.item_type, listed.item.id).await,
        }
    }

    fn readable_by(&self, principal: &Principal) -> bool {
        principal.authorize(Permission::Read, &self.scope()).is_ok()
    }

    fn scope(&self) -> Scope<'_> {
        Scope {
            item_type: Some(&self.item_type),
            forge: self.place.as_ref().map(|(forge, _)| forge.as_str()),
            project: self.place.as_ref().map(|(_, project)| project.as_str()),
            place_unknown: self.place_unknown,
        }
    }
}

/// `GET /api/v1/work-items`: newest first, filtered, one page; each row
/// with its type's status summary ([`wq_core::ItemType::status`]).
#[utoipa::path(
    get,
    path = "/work-items",
    tag = "work items",
    params(RawListQuery),
    responses(
        (status = 200, description = "One page, newest first, of the items the caller may read.", body = ItemList),
        (status = 400, description = "A query parameter is malformed, unknown or repeated; `field` names it.", body = ErrorEnvelope),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
) -> Result<Json<ItemList>, ApiError> {
    caller.authorize(Permission::Read, &Scope::ANY)?;
    let query = ListQuery::parse(pairs)?;
    caller.authorize(
        Permission::Read,
        &Scope {
            item_type: query.item_type.as_deref(),
            ..Scope::ANY
        },
    )?;
    let page = visible_page(
        &state,
        caller.principal(),
        PageQuery {
            phase: query.phase,
            item_type: query.item_type,
            before: query.before,
            limit: query.limit,
            max_scanned: None,
        },
        &|_, _| true,
    )
    .await?;
    Ok(Json(ItemList {
        items: page
            .rows
            .into_iter()
            .map(|row| ItemBody::from(row.item).with_status(row.status))
            .collect(),
        next_before: page.next_before,
    }))
}

/// What [`visible_page`] lists.
#[derive(Debug, Clone, Default)]
pub struct PageQuery {
    pub phase: Option<Phase>,
    pub item_type: Option<String>,
    pub before: Option<ItemId>,
    pub limit: u32,
    /// Stop after looking at this many readable rows (a filter that keeps
    /// few of them would read the whole table otherwise); the page is then
    /// short and `next_before` goes on from the last row looked at.
    pub max_scanned: Option<usize>,
}

/// A listed item with its type's summary.
#[derive(Debug, Clone)]
pub struct PageRow {
    pub item: WorkItem,
    pub status: Option<wq_core::StatusSummary>,
}

/// One page of [`visible_page`].
#[derive(Debug, Clone)]
pub struct Page {
    pub rows: Vec<PageRow>,
    /// The cursor of the next page, `None` on the last.
    pub next_before: Option<ItemId>,
}

/// The item's summary by its type, `None` for an unknown type or one
/// without summaries.
pub async fn status_of(
    state: &AppState,
    item: &WorkItem,
) -> Result<Option<wq_core::StatusSummary>, ApiError> {
    match state.types.get(&item.item_type) {
        Some(handler) => Ok(handler.status(item).await?),
        None => Ok(None),
    }
}

/// One page of the items `principal` may read, newest first, that `keep`
/// accepts (given the item and its summary), each with its summary. The
/// listing of `GET /api/v1/work-items` and of the dashboard.
pub async fn visible_page(
    state: &AppState,
    principal: &Principal,
    query: PageQuery,
    keep: &(dyn Fn(&WorkItem, Option<&wq_core::StatusSummary>) -> bool + Sync),
) -> Result<Page, ApiError> {
    // One row more than the page tells whether another page exists. The
    // store narrows the rows to what the caller's read grants may allow;
    // each row is then checked exactly, and the store is read on until the
    // page is full or the rows run out, so `next_before` is always the id
    // of an item the caller may read.
    let wanted = query.limit as usize + 1;
    let visibility = read_visibility(principal);
    let mut rows: Vec<PageRow> = Vec::with_capacity(wanted);
    let mut cursor = query.before;
    let mut scanned = 0usize;
    let mut cut_short = None;
    'pages: loop {
        let listed = state
            .store
            .item_list_placed(ItemListParams {
                phase: query.phase,
                item_type: query.item_type.clone(),
                before: cursor,
                limit: query.limit + 1,
                visibility: visibility.clone(),
            })
            .await?;
        let exhausted = listed.len() < wanted;
        for listed in listed {
            cursor = Some(listed.item.id);
            if visibility == Visibility::All
                || ItemScope::of_listed(state, &listed)
                    .await?
                    .readable_by(principal)
            {
                scanned += 1;
                let status = status_of(state, &listed.item).await?;
                if keep(&listed.item, status.as_ref()) {
                    rows.push(PageRow {
                        item: listed.item,
                        status,
                    });
                    if rows.len() == wanted {
                        break 'pages;
                    }
                }
                if query.max_scanned.is_some_and(|max| scanned >= max) {
                    cut_short = cursor;
                    break 'pages;
                }
            }
        }
        if exhausted {
            break;
        }
    }
    let next_before = if rows.len() > query.limit as usize {
        rows.truncate(query.limit as usize);
        rows.last().map(|row| row.item.id)
    } else {
        cut_short
    };
    Ok(Page { rows, next_before })
}

/// Whether a rule of `principal` grants `permission` on `item`'s scope
/// (its type, forge and project), as the handlers check it: for showing
/// only the actions a caller may take.
pub async fn permitted(
    state: &AppState,
    principal: &Principal,
    item: &WorkItem,
    permission: Permission,
) -> Result<bool, ApiError> {
    let scope = ItemScope::of(state, &item.item_type, item.id).await?;
    Ok(principal.authorize(permission, &scope.scope()).is_ok())
}

/// The permission `POST .../retry` needs on `item`: `retry`, or `admin`
/// when its type says so.
pub async fn retry_permission(state: &AppState, item: &WorkItem) -> Result<Permission, ApiError> {
    let needs_admin = match state.types.get(&item.item_type) {
        Some(handler) => handler.retry_needs_admin(item).await?,
        None => false,
    };
    Ok(if needs_admin {
        Permission::Admin
    } else {
        Permission::Retry
    })
}

/// `GET /api/v1/work-items/{id}`: the item with its dimensions.
#[utoipa::path(
    get,
    path = "/work-items/{id}",
    tag = "work items",
    params(ItemIdParam),
    responses(
        (status = 200, description = "The item, its dimensions and its type's own view.", body = ItemDetail),
        (status = 400, description = "`id` is not a UUID.", body = ErrorEnvelope),
        (status = 404, description = "No such item, or one the caller may not read.", body = ErrorEnvelope),
    ),
)]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(raw_id): ApiPath<String>,
) -> Result<Json<ItemDetail>, ApiError> {
    caller.authorize(Permission::Read, &Scope::ANY)?;
    let id = parse_id(&raw_id)?;
    let view = state
        .store
        .item_view(id, state.clock.now())
        .await?
        .ok_or_else(|| not_found(id))?;
    visible_scope(&state, &caller, &view.item).await?;
    let detail = match state.types.get(&view.item.item_type) {
        Some(item_type) => item_type.detail(&view.item).await?,
        None => None,
    };
    Ok(Json(ItemDetail {
        item: ItemBody::from(view.item),
        dimensions: view
            .dimensions
            .into_iter()
            .map(DimensionBody::from)
            .collect(),
        detail,
    }))
}

/// Longest accepted `item_type` in a submission.
const MAX_SUBMIT_TYPE_LEN: usize = 100;

/// The item's `caller_identity` comes from the caller's credentials; a body
/// that names it is refused, whatever the item type.
pub const CALLER_IDENTITY_FIELD: &str = "caller_identity";

/// `POST /api/v1/work-items`: a submission, dispatched by `item_type` to the
/// type's own validation and upsert. 201 when an item was created, 200
/// otherwise; the engine is notified when there is work. The caller needs
/// `submit` for the body's `item_type`, `forge` and `project` (top-level
/// strings); the item records the caller identity of the granting rule.
#[utoipa::path(
    post,
    path = "/work-items",
    tag = "work items",
    request_body(content = Object, content_type = "application/json", description = "A submission; its `item_type` picks the schema (`Submission`)."),
    responses(
        (status = 201, description = "An item was created.", body = SubmitResponse),
        (status = 200, description = "The branch's live item was updated, left unchanged or retried.", body = SubmitResponse),
        (status = 400, description = "The body is not JSON.", body = ErrorEnvelope),
        (status = 409, description = "The branch's live item belongs to another caller (`owned_by_another_caller`), or cannot take the submission now.", body = ErrorEnvelope),
        (status = 415, description = "The body is not `application/json`.", body = ErrorEnvelope),
        (status = 422, description = "Fields are invalid; `errors` names each.", body = ErrorEnvelope),
        (status = 502, description = "The forge refused or failed.", body = ErrorEnvelope),
    ),
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(UniqueKeys(body)): ApiJson<UniqueKeys>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    caller.authorize(Permission::Submit, &Scope::ANY)?;
    let Some(object) = body.as_object() else {
        return Err(ApiError::invalid_fields(vec![FieldError::new(
            "body",
            "must be a JSON object",
        )]));
    };
    if object.contains_key(CALLER_IDENTITY_FIELD) {
        return Err(ApiError::invalid_fields(vec![FieldError::new(
            CALLER_IDENTITY_FIELD,
            "unknown field: the caller identity is taken from the credentials",
        )]));
    }
    let item_type = match object.get("item_type") {
        Some(serde_json::Value::String(name))
            if !name.is_empty() && name.len() <= MAX_SUBMIT_TYPE_LEN =>
        {
            name.clone()
        }
        Some(_) => {
            return Err(ApiError::invalid_fields(vec![FieldError::new(
                "item_type",
                "expected the name of an item type (a non-empty string)",
            )]));
        }
        None => {
            return Err(ApiError::invalid_fields(vec![FieldError::new(
                "item_type",
                "required",
            )]));
        }
    };
    let Some(handler) = state.types.get(&item_type) else {
        let known: Vec<&str> = state.types.names().collect();
        return Err(ApiError::invalid_fields(vec![FieldError::new(
            "item_type",
            format!(
                "unknown item type {item_type:?}; this service takes: {}",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        )]));
    };
    let text = |key: &str| object.get(key).and_then(serde_json::Value::as_str);
    let scope = Scope {
        item_type: Some(&item_type),
        forge: text("forge"),
        project: text("project"),
        place_unknown: false,
    };
    let caller_identity = caller.authorize(Permission::Submit, &scope)?;
    // Admin on the same scope lets a caller update or retry an item that
    // another caller submitted (the type checks the owner).
    let caller_is_admin = caller
        .principal()
        .authorize(Permission::Admin, &scope)
        .is_ok();
    let submitted = handler
        .submit(Submission {
            body,
            caller_identity,
            caller_is_admin,
            now: state.clock.now(),
        })
        .await?;
    if submitted.wake
        && let Some(engine) = &state.engine
    {
        engine.notify(submitted.id);
    }
    let item = state
        .store
        .item_get(submitted.id)
        .await?
        .ok_or_else(|| not_found(submitted.id))?;
    let status = if submitted.outcome == SubmitOutcome::Created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(SubmitResponse {
            outcome: submitted.outcome.as_str().to_owned(),
            item: ItemBody::from(item),
        }),
    ))
}

/// `POST /api/v1/work-items/{id}/{command}`: a command the item's type
/// offers (e.g. `retry-merge`), for callers granted the permission the
/// command names on the item's scope, or, for the item's submitter, the
/// command's `owner_permission` when it names one (`cancel`: `admin`, or
/// `submit` for the submitter). A caller granted none of the
/// permissions any command needs is refused before the item or the command
/// is looked up.
#[utoipa::path(
    post,
    path = "/work-items/{id}/{command}",
    tag = "work items",
    params(
        ItemIdParam,
        ("command" = String, Path, description = "A command the item's type offers (`retry-merge`, ...)."),
    ),
    request_body(content = Option<Object>, content_type = "application/json", description = "The command's parameters, if it takes any; may be empty."),
    responses(
        (status = 200, description = "Done; the command's answer.", body = Object),
        (status = 202, description = "Accepted: the engine carries it out.", body = Object),
        (status = 400, description = "`id` is not a UUID, the body is not JSON, or the command cannot be carried out as asked.", body = ErrorEnvelope),
        (status = 404, description = "No such item (or one the caller may not read), or its type has no such command.", body = ErrorEnvelope),
        (status = 409, description = "The item is not in a state that allows the command.", body = ErrorEnvelope),
        (status = 422, description = "The parameters are invalid.", body = ErrorEnvelope),
        (status = 502, description = "The forge refused or failed.", body = ErrorEnvelope),
    ),
)]
pub async fn command(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((raw_id, command)): ApiPath<(String, String)>,
    ApiBytes(body): ApiBytes,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    caller.authorize_any(&command_permissions(&state.types), &Scope::ANY)?;
    let id = parse_id(&raw_id)?;
    let item = state
        .store
        .item_get(id)
        .await?
        .ok_or_else(|| not_found(id))?;
    let scope = visible_scope(&state, &caller, &item).await?;
    let no_such_command = || {
        ApiError::not_found(format!(
            "work items of type {:?} have no command {command:?}",
            item.item_type
        ))
    };
    let handler = state
        .types
        .get(&item.item_type)
        .ok_or_else(no_such_command)?;
    let spec = handler
        .commands()
        .iter()
        .find(|spec| spec.name == command)
        .ok_or_else(no_such_command)?;
    // The submitter may need less than others (`owner_permission`).
    let caller_identity = match spec.owner_permission {
        Some(owner_permission)
            if caller
                .principal()
                .authorize(spec.permission, &scope.scope())
                .is_err()
                && is_owner(caller.principal(), &item) =>
        {
            caller.authorize(owner_permission, &scope.scope())?
        }
        _ => caller.authorize(spec.permission, &scope.scope())?,
    };
    // An optional JSON body; commands without parameters take none.
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        let UniqueKeys(body) = serde_json::from_slice(&body).map_err(|error| {
            let status = if error.is_data() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::BAD_REQUEST
            };
            ApiError::invalid_body(status, format!("invalid JSON body: {error}"))
        })?;
        body
    };
    let reply = handler
        .run_command(id, &command, body, &caller_identity)
        .await?;
    tracing::info!(
        item_id = %id,
        %command,
        caller = %caller_identity,
        status = reply.status.http_status(),
        "command {command} on work item {id} by {caller_identity}"
    );
    if reply.wake
        && let Some(engine) = &state.engine
    {
        engine.notify(id);
    }
    let status = match reply.status {
        CommandStatus::Done => StatusCode::OK,
        CommandStatus::Accepted => StatusCode::ACCEPTED,
    };
    Ok((status, Json(reply.body)))
}

/// `POST /api/v1/work-items/{id}/retry`: a failed or cancelled item becomes
/// active and actionable with no attempts, and the engine is notified.
/// Needs `retry` on the item's scope (`admin` when its type says so,
/// `ItemType::retry_needs_admin`); a caller other than the
/// submitter also needs `admin` there (409 `owned_by_another_caller`
/// otherwise). An item the caller may not read is a 404.
#[utoipa::path(
    post,
    path = "/work-items/{id}/retry",
    tag = "work items",
    params(ItemIdParam),
    responses(
        (status = 200, description = "The item, active and actionable again.", body = ItemBody),
        (status = 400, description = "`id` is not a UUID.", body = ErrorEnvelope),
        (status = 404, description = "No such item, or one the caller may not read.", body = ErrorEnvelope),
        (status = 409, description = "The item is not failed or cancelled, or another caller submitted it.", body = ErrorEnvelope),
    ),
)]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(raw_id): ApiPath<String>,
) -> Result<Json<ItemBody>, ApiError> {
    caller.authorize(Permission::Retry, &Scope::ANY)?;
    let id = parse_id(&raw_id)?;
    let current = state
        .store
        .item_get(id)
        .await?
        .ok_or_else(|| not_found(id))?;
    let scope = visible_scope(&state, &caller, &current).await?;
    let handler = state.types.get(&current.item_type);
    let needs_admin = match handler {
        Some(handler) => handler.retry_needs_admin(&current).await?,
        None => false,
    };
    let event_type = handler.and_then(|handler| handler.retry_event(&current));
    let permission = if needs_admin {
        Permission::Admin
    } else {
        Permission::Retry
    };
    let caller_identity = caller.authorize(permission, &scope.scope())?;
    let caller_is_admin = needs_admin
        || caller
            .principal()
            .authorize(Permission::Admin, &scope.scope())
            .is_ok();
    if !caller_is_admin && !is_owner(caller.principal(), &current) {
        // Who owns it is not said: the caller may read the item (and its
        // `caller_identity`), but the refusal need not repeat it.
        return Err(ApiError::conflict_with(
            OWNED_BY_ANOTHER_CALLER,
            format!(
                "work item {id} was submitted by another caller: only its submitter or a caller with admin on its scope may retry it"
            ),
        ));
    }
    let item = match state
        .store
        .item_retry(id, state.clock.now(), &caller_identity, event_type)
        .await
    {
        Ok(item) => item,
        Err(StoreError::NotFound(_)) => return Err(not_found(id)),
        Err(StoreError::Conflict(detail)) => {
            // Name the phase the item is in now; it may be gone meanwhile.
            let current = state
                .store
                .item_get(id)
                .await?
                .ok_or_else(|| not_found(id))?;
            tracing::debug!(item_id = %id, %detail, "retry of {id} refused: {detail}");
            return Err(ApiError::conflict(format!(
                "work item {id} is {}: only failed or cancelled items can be retried",
                current.phase
            )));
        }
        Err(other) => return Err(other.into()),
    };
    tracing::info!(item_id = %id, caller = %caller_identity, "work item {id} retried by {caller_identity}");
    if let Some(engine) = &state.engine {
        engine.notify(id);
    }
    Ok(Json(ItemBody::from(item)))
}

/// Longest page of audit records.
const MAX_AUDIT_LIMIT: u32 = 1000;
/// Default page of audit records.
const DEFAULT_AUDIT_LIMIT: u32 = 100;

/// A page of the audit trail.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub records: Vec<wq_store::audit::AuditRecord>,
    /// Pass as `after` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<i64>,
}

/// The query of `GET /api/v1/work-items/{id}/audit`, as the document
/// shows it; [`audit_query`] reads the names [`ITEM_AUDIT_PARAMETERS`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "documentation only: `audit_query` parses the query"
)]
struct ItemAuditParams {
    /// The previous page's `next_after`: records after this seq.
    #[param(minimum = 0)]
    after: Option<i64>,
    /// Page size (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// The query of `GET /api/v1/audit`, as the document shows it;
/// [`audit_query`] reads the names [`AUDIT_TRAIL_PARAMETERS`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "documentation only: `audit_query` parses the query"
)]
struct AuditTrailParams {
    /// Records at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    since: Option<String>,
    /// Records of this actor.
    #[param(min_length = 1, max_length = 200)]
    actor: Option<String>,
    /// Records of this kind.
    #[param(min_length = 1, max_length = 200)]
    kind: Option<String>,
    /// The previous page's `next_after`: records after this seq.
    #[param(minimum = 0)]
    after: Option<i64>,
    /// Page size (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// The parameters of the item's audit page.
const ITEM_AUDIT_PARAMETERS: &[&str] = &["after", "limit"];
/// The parameters of the whole trail.
const AUDIT_TRAIL_PARAMETERS: &[&str] = &["since", "actor", "kind", "after", "limit"];

/// The audit query parameters `allowed` names, each at most once; others
/// are refused by name.
fn audit_query(
    pairs: Vec<(String, String)>,
    allowed: &[&str],
) -> Result<wq_store::audit::AuditQuery, ApiError> {
    let mut query = wq_store::audit::AuditQuery {
        limit: DEFAULT_AUDIT_LIMIT,
        ..wq_store::audit::AuditQuery::default()
    };
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in pairs {
        if !allowed.contains(&name.as_str()) {
            return Err(ApiError::invalid_parameter(
                name.clone(),
                format!(
                    "unknown query parameter {name:?}: expected {}",
                    allowed.join(", ")
                ),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(ApiError::invalid_parameter(
                name.clone(),
                format!("query parameter {name:?} is given more than once"),
            ));
        }
        match name.as_str() {
            "after" => {
                query.after = value.parse::<i64>().ok().filter(|after| *after >= 0).ok_or_else(
                    || {
                        ApiError::invalid_parameter(
                            "after",
                            format!("after must be a record's seq (an integer, 0 or more), got {value:?}"),
                        )
                    },
                )?;
            }
            "limit" => {
                query.limit = value
                    .parse::<u32>()
                    .ok()
                    .filter(|limit| (1..=MAX_AUDIT_LIMIT).contains(limit))
                    .ok_or_else(|| {
                        ApiError::invalid_parameter(
                            "limit",
                            format!(
                                "limit must be an integer between 1 and {MAX_AUDIT_LIMIT}, got {value:?}"
                            ),
                        )
                    })?;
            }
            "since" => {
                let since = time::OffsetDateTime::parse(
                    &value,
                    &time::format_description::well_known::Rfc3339,
                )
                .map_err(|_| {
                    ApiError::invalid_parameter(
                        "since",
                        format!(
                            "since must be an RFC 3339 time (2026-12-01T12:00:00Z), got {value:?}"
                        ),
                    )
                })?;
                query.since = Some(since);
            }
            "actor" | "kind" => {
                if value.is_empty() || value.len() > 200 {
                    return Err(ApiError::invalid_parameter(
                        name.clone(),
                        format!("{name} must be 1 to 200 characters"),
                    ));
                }
                if name == "actor" {
                    query.actor = Some(value);
                } else {
                    query.kind = Some(value);
                }
            }
            _ => unreachable!("only allowed names reach here"),
        }
    }
    Ok(query)
}

async fn audit_page(
    state: &AppState,
    query: wq_store::audit::AuditQuery,
) -> Result<AuditPage, ApiError> {
    let limit = query.limit as usize;
    let mut records = state
        .store
        .audit_list(wq_store::audit::AuditQuery {
            limit: query.limit + 1,
            ..query
        })
        .await?;
    let next_after = if records.len() > limit {
        records.truncate(limit);
        records.last().map(|record| record.seq)
    } else {
        None
    };
    Ok(AuditPage {
        records,
        next_after,
    })
}

/// `GET /api/v1/work-items/{id}/audit?after=&limit=`: the item's audit
/// records in order (who asked for what, what was written to the forge and
/// what it answered). Needs `read` on the item's scope; an item the caller
/// may not read is a 404.
#[utoipa::path(
    get,
    path = "/work-items/{id}/audit",
    tag = "work items",
    params(ItemIdParam, ItemAuditParams),
    responses(
        (status = 200, description = "The item's audit records in order.", body = AuditPage),
        (status = 400, description = "A parameter is malformed, unknown or repeated; `field` names it.", body = ErrorEnvelope),
        (status = 404, description = "No such item, or one the caller may not read.", body = ErrorEnvelope),
    ),
)]
pub async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(raw_id): ApiPath<String>,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
) -> Result<Json<AuditPage>, ApiError> {
    caller.authorize(Permission::Read, &Scope::ANY)?;
    let id = parse_id(&raw_id)?;
    let mut query = audit_query(pairs, ITEM_AUDIT_PARAMETERS)?;
    let item = state
        .store
        .item_get(id)
        .await?
        .ok_or_else(|| not_found(id))?;
    visible_scope(&state, &caller, &item).await?;
    query.item_id = Some(id);
    Ok(Json(audit_page(&state, query).await?))
}

/// `GET /api/v1/audit?since=&actor=&kind=&after=&limit=`: the whole audit
/// trail in order, filtered. Needs `admin` without a scope restriction.
/// Answers records only up to a `seq` below which none is still being
/// written, so a client that follows the trail with `after` never passes
/// over a record that commits after one with a higher `seq`.
#[utoipa::path(
    get,
    path = "/audit",
    tag = "work items",
    params(AuditTrailParams),
    responses(
        (status = 200, description = "The audit trail in order, filtered, up to the newest record below which none is still being written.", body = AuditPage),
        (status = 400, description = "A parameter is malformed, unknown or repeated; `field` names it.", body = ErrorEnvelope),
        (status = 503, description = "The request timed out, the database (or the token's issuer) is not reachable, or records were still being written after a short wait; retry.", body = ErrorEnvelope),
    ),
)]
pub async fn audit_trail(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
) -> Result<Json<AuditPage>, ApiError> {
    if !caller.principal().permits_everywhere(Permission::Admin) {
        return Err(ApiError::forbidden(Permission::Admin));
    }
    let mut query = audit_query(pairs, AUDIT_TRAIL_PARAMETERS)?;
    // An item's records are numbered in the order they commit (its chain's
    // writers take turns); the whole trail's are not. The horizon without
    // waiting first (which holds no append up), then waiting for the
    // appends in progress.
    let horizon = match state.store.audit_horizon(false).await? {
        Some(horizon) => Some(horizon),
        None => state.store.audit_horizon(true).await?,
    };
    query.until = Some(horizon.ok_or_else(|| {
        ApiError::unavailable("the audit trail's newest records are still being written; retry")
    })?);
    Ok(Json(audit_page(&state, query).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(raw: &[(&str, &str)]) -> Vec<(String, String)> {
        raw.iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    fn field_of(raw: &[(&str, &str)]) -> Option<String> {
        ListQuery::parse(pairs(raw))
            .unwrap_err()
            .field()
            .map(str::to_owned)
    }

    #[test]
    fn defaults_and_valid_values_parse() {
        let query = ListQuery::parse(Vec::new()).unwrap();
        assert_eq!(query.limit, DEFAULT_PAGE_LIMIT);
        let id = ItemId::new_v7();
        let query = ListQuery::parse(pairs(&[
            ("phase", "failed"),
            ("item_type", "mr"),
            ("limit", "500"),
            ("before", &id.to_string()),
        ]))
        .unwrap();
        assert_eq!(
            query,
            ListQuery {
                phase: Some(Phase::Failed),
                item_type: Some("mr".into()),
                limit: 500,
                before: Some(id),
            }
        );
    }

    #[test]
    fn bad_values_name_their_parameter() {
        assert_eq!(field_of(&[("phase", "pending")]).as_deref(), Some("phase"));
        assert_eq!(field_of(&[("limit", "0")]).as_deref(), Some("limit"));
        assert_eq!(field_of(&[("limit", "501")]).as_deref(), Some("limit"));
        assert_eq!(field_of(&[("limit", "ten")]).as_deref(), Some("limit"));
        assert_eq!(field_of(&[("before", "nope")]).as_deref(), Some("before"));
        assert_eq!(field_of(&[("item_type", "")]).as_deref(), Some("item_type"));
        assert_eq!(field_of(&[("phse", "active")]).as_deref(), Some("phse"));
        assert_eq!(
            field_of(&[("limit", "5"), ("limit", "6")]).as_deref(),
            Some("limit")
        );
    }

    #[test]
    fn unknown_and_repeated_parameters_are_refused_by_name() {
        let message_of = |raw: &[(&str, &str)]| {
            let error = ListQuery::parse(pairs(raw)).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            error.message().to_owned()
        };
        assert_eq!(
            message_of(&[("limit", "5"), ("phse", "active")]),
            r#"unknown query parameter "phse": expected phase, item_type, limit or before"#
        );
        assert_eq!(
            message_of(&[("phase", "active"), ("phase", "failed")]),
            r#"query parameter "phase" is given more than once"#
        );
    }
}
