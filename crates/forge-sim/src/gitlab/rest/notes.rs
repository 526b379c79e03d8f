//! GitLab merge request notes (comments): create, update, list, get; each emits a `Note Hook`.
//! A new note's quick actions run as its author and leave the note; a note made only of quick
//! actions is not kept and the API answers 202 with `commands_changes` and `summary`.

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ProjectCall, merge_requests, path_number};
use crate::gitlab::json::note_json;
use crate::gitlab::model::Note;
use crate::gitlab::{ApiError, ApiResult, Ctx, Params, created, hooks, ok, quick_actions};
use crate::state::User;

/// `{iid}` of a notes route: the merge request is the note's `noteable`, as Grape names it.
#[derive(Deserialize)]
pub struct NotesSegment {
    iid: String,
}

impl NotesSegment {
    fn iid(&self) -> Result<u64, ApiError> {
        path_number(&self.iid, "noteable_id")
    }
}

/// `{iid}/notes/{note_id}`: one note of a merge request.
#[derive(Deserialize)]
pub struct NoteSegments {
    iid: String,
    note_id: String,
}

impl NoteSegments {
    /// The merge request's and the note's numbers, checked in that order.
    fn ids(&self) -> Result<(u64, u64), ApiError> {
        Ok((
            path_number(&self.iid, "noteable_id")?,
            path_number(&self.note_id, "note_id")?,
        ))
    }
}

fn emit_note_hook(ctx: &Ctx<'_>, pid: u64, iid: u64, note_id: u64, action: &str) {
    let project = ctx.project(pid);
    let Some(mr) = project.merge_requests.get(&iid) else {
        return;
    };
    let Some(note) = mr.notes.iter().find(|note| note.id == note_id) else {
        return;
    };
    let payload = hooks::note_hook(project, mr, note, action, ctx.base);
    ctx.emit(pid, "Note Hook", payload);
}

pub async fn list(call: ProjectCall<NotesSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    let ascending = params.str("sort").as_deref() == Some("asc");
    let notes = call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let mut notes: Vec<Value> = mr
            .notes
            .iter()
            .map(|note| note_json(project, mr, note, ctx.base))
            .collect();
        if !ascending {
            notes.reverse();
        }
        Ok(notes)
    })?;
    call.paged(&params, notes)
}

pub async fn get_one(call: ProjectCall<NoteSegments>) -> ApiResult {
    let (iid, note_id) = call.segments.ids()?;
    call.with_project(|ctx, pid| {
        let project = ctx.project(pid);
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let note = mr
            .notes
            .iter()
            .find(|note| note.id == note_id)
            .ok_or_else(|| ApiError::not_found("Note"))?;
        ok(note_json(project, mr, note, ctx.base))
    })
}

/// Adds a user note to an MR and emits the hook; returns the note id.
pub fn add_note(
    ctx: &mut Ctx<'_>,
    pid: u64,
    iid: u64,
    body: &str,
    user: &User,
) -> Result<u64, ApiError> {
    let now = ctx.now;
    if !ctx.project(pid).merge_requests.contains_key(&iid) {
        return Err(ApiError::not_found(""));
    }
    let note_id = ctx.gl.alloc_note_id();
    let mr = ctx
        .project_mut(pid)
        .merge_requests
        .get_mut(&iid)
        .ok_or_else(|| ApiError::not_found(""))?;
    mr.notes.push(Note {
        id: note_id,
        body: body.to_string(),
        author: user.clone(),
        created_at: now,
        updated_at: now,
        system: false,
    });
    emit_note_hook(ctx, pid, iid, note_id, "create");
    Ok(note_id)
}

pub async fn create(call: ProjectCall<NotesSegment>, params: Params) -> ApiResult {
    let iid = call.segments.iid()?;
    let (body, actions) = quick_actions::extract(&params.req_str("body")?);
    let diff_head_sha = params.str("merge_request_diff_head_sha");
    call.with_project(|ctx, pid| {
        if !ctx.project(pid).merge_requests.contains_key(&iid) {
            return Err(ApiError::not_found(""));
        }
        let note_id = if body.is_empty() {
            None
        } else {
            Some(add_note(ctx, pid, iid, &body, &call.user)?)
        };
        let mut updates = None;
        if !actions.is_empty() {
            // `/merge` with a stale `merge_request_diff_head_sha` does not merge.
            let stale = diff_head_sha.as_ref().is_some_and(|sha| {
                ctx.project(pid)
                    .merge_requests
                    .get(&iid)
                    .is_some_and(|mr| &mr.sha != sha)
            });
            let actions: Vec<_> = actions
                .iter()
                .filter(|action| !(stale && action.name == "merge"))
                .cloned()
                .collect();
            updates = Some(merge_requests::execute_quick_actions(
                ctx, pid, iid, &actions, &call.user,
            )?);
        }
        let Some(note_id) = note_id else {
            // A note made only of quick actions is not kept: 202 with what the commands did.
            let updates = updates.unwrap_or_default();
            let summary = if updates.messages.is_empty() {
                vec!["Failed to apply commands.".to_string()]
            } else {
                updates.messages.clone()
            };
            return Ok((
                StatusCode::ACCEPTED,
                axum::Json(json!({
                    "commands_changes": updates.changes_json(),
                    "summary": summary,
                })),
            )
                .into_response());
        };
        let project = ctx.project(pid);
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let note = mr
            .notes
            .iter()
            .find(|note| note.id == note_id)
            .ok_or_else(|| ApiError::not_found("Note"))?;
        created(note_json(project, mr, note, ctx.base))
    })
}

pub async fn update(call: ProjectCall<NoteSegments>, params: Params) -> ApiResult {
    let (iid, note_id) = call.segments.ids()?;
    let body = params.req_str("body")?;
    call.with_project(|ctx, pid| {
        let now = ctx.now;
        let mr = ctx
            .project_mut(pid)
            .merge_requests
            .get_mut(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let note = mr
            .notes
            .iter_mut()
            .find(|note| note.id == note_id)
            .ok_or_else(|| ApiError::not_found("Note"))?;
        if note.system || note.author.id != call.user.id {
            return Err(ApiError::forbidden("You are not allowed to edit this note"));
        }
        note.body = body;
        note.updated_at = now;
        let note_id = note.id;
        emit_note_hook(ctx, pid, iid, note_id, "update");
        let project = ctx.project(pid);
        let mr = project
            .merge_requests
            .get(&iid)
            .ok_or_else(|| ApiError::not_found(""))?;
        let note = mr
            .notes
            .iter()
            .find(|note| note.id == note_id)
            .ok_or_else(|| ApiError::not_found("Note"))?;
        ok(note_json(project, mr, note, ctx.base))
    })
}
