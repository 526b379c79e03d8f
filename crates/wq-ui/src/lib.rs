//! The web dashboard: server-rendered pages (askama templates in
//! `templates/`), a little hand-written CSS and JavaScript (`assets/`,
//! embedded), no build step. Served by the same binary beside the API
//! ([`router`]): `/` and `/ui/...`.
//!
//! - [`session`]: sign-in (OAuth proxy headers, or an API token exchanged
//!   for a server-side session), sign-out, one-time sign-in links, CSRF.
//! - [`pages`]: the list of changes (filters, search, paging) and the item
//!   page, whole or as fragments the script swaps in.
//! - [`view`]: the view models; every icon comes from the one derivation
//!   [`wq_core::DisplayState::of`] over the type's status summary, the same
//!   summary the API's list rows carry.
//! - [`actions`]: Merge now, Retry, Refresh, through the API's own
//!   handlers and checks.
//! - [`events`]: the live stream (`GET /ui/events`) over the audit trail.

pub mod actions;
pub mod events;
pub mod pages;
pub mod session;
pub mod view;

use std::sync::Arc;

use askama::Template;
use axum::Router;
use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use wq_api::AppState;

use crate::events::{Events, Feed};
use crate::pages::{html, require_api};
use crate::session::{
    SESSION_COOKIE, SESSION_TTL, SIGN_IN_COOKIE, clear_cookie, cookie, csrf_ok, random_token,
    set_cookie, signed_in, to_loopback,
};

/// The dashboard's shared state.
#[derive(Clone)]
pub struct Ui {
    pub state: AppState,
    pub feed: Arc<Feed>,
}

impl FromRef<Ui> for AppState {
    fn from_ref(ui: &Ui) -> AppState {
        ui.state.clone()
    }
}

impl FromRef<Ui> for Events {
    fn from_ref(ui: &Ui) -> Events {
        Events {
            state: ui.state.clone(),
            feed: Arc::clone(&ui.feed),
        }
    }
}

/// The dashboard's routes over the API's state; starts the change feed.
pub async fn router(state: AppState) -> Router {
    let feed = Feed::start(state.clone()).await;
    router_with(Ui { state, feed })
}

/// The routes over an existing [`Ui`] (its feed already running).
pub fn router_with(ui: Ui) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui", get(pages::list))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/items/{id}", get(pages::item))
        .route("/ui/items/{id}/actions/{action}", post(actions::run))
        .route("/ui/fragments/rows", get(pages::rows))
        .route("/ui/fragments/items/{id}", get(pages::item_fragment))
        .route("/ui/events", get(events::stream))
        .route("/ui/sign-in", get(sign_in_page).post(sign_in))
        .route("/ui/sign-in/link/{code}", get(sign_in_link))
        .route("/ui/sign-out", post(sign_out))
        .route("/ui/assets/ui.css", get(css))
        .route("/ui/assets/ui.js", get(js))
        .with_state(ui)
}

const CSS: &str = include_str!("../assets/ui.css");
const JS: &str = include_str!("../assets/ui.js");

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    csrf: String,
    message: Option<String>,
}

/// The sign-in form with its double-submit token: the one the browser
/// holds already (so that two open sign-in pages both work), else a fresh
/// one.
fn sign_in_form(status: StatusCode, message: Option<String>, request: &HeaderMap) -> Response {
    let loopback = to_loopback(request);
    let csrf = cookie(request, SIGN_IN_COOKIE)
        .filter(|held| held.len() == 64 && held.bytes().all(|b| b.is_ascii_hexdigit()))
        .map_or_else(random_token, str::to_owned);
    let mut response = html(SignInPage {
        csrf: csrf.clone(),
        message,
    });
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::SET_COOKIE,
        set_cookie(SIGN_IN_COOKIE, &csrf, session::LINK_TTL, loopback),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /ui/sign-in`.
async fn sign_in_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if signed_in(&state, &headers).await.is_ok() {
        return Redirect::to("/ui").into_response();
    }
    sign_in_form(StatusCode::OK, None, &headers)
}

#[derive(serde::Deserialize)]
struct SignInForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// The response that sets the session cookie and goes to the list.
fn enter(session_id: &str, loopback: bool) -> Response {
    let mut response = Redirect::to("/ui").into_response();
    let headers = response.headers_mut();
    headers.append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, session_id, SESSION_TTL, loopback),
    );
    headers.append(header::SET_COOKIE, clear_cookie(SIGN_IN_COOKIE, loopback));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `POST /ui/sign-in`: an API token, checked by the API's authenticator,
/// for a session.
async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignInForm>,
) -> Response {
    let loopback = to_loopback(&headers);
    let expected = cookie(&headers, SIGN_IN_COOKIE).unwrap_or_default();
    if !csrf_ok(expected, &HeaderMap::new(), Some(&form.csrf)) {
        return sign_in_form(
            StatusCode::FORBIDDEN,
            Some("The form expired or was not sent from this page; try again.".into()),
            &headers,
        );
    }
    let token = form.token.trim();
    if token.is_empty() {
        return sign_in_form(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("token: enter an API token.".into()),
            &headers,
        );
    }
    let principal = match state.authenticator().authenticate_token(token).await {
        Ok(principal) => principal,
        Err(failure) if failure.is_upstream_problem() => {
            tracing::warn!(reason = %failure, "dashboard sign-in cannot be checked: {failure}");
            return sign_in_form(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("The token cannot be checked right now; try again later.".into()),
                &headers,
            );
        }
        Err(failure) => {
            tracing::warn!(reason = %failure, "dashboard sign-in refused: {failure}");
            return sign_in_form(
                StatusCode::UNAUTHORIZED,
                Some("token: not accepted.".into()),
                &headers,
            );
        }
    };
    match session::open(&state, &principal).await {
        Ok(id) => {
            tracing::info!(caller = %principal.name(), "dashboard sign-in of {}", principal.name());
            enter(&id, loopback)
        }
        Err(error) => pages::PageError::from(error).into_response(),
    }
}

/// `GET /ui/sign-in/link/{code}`: a one-time link, used once, then the
/// clean URL.
async fn sign_in_link(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(code): Path<String>,
) -> Response {
    let loopback = to_loopback(&headers);
    match session::redeem_link(&state, &code).await {
        Ok(Some(id)) => enter(&id, loopback),
        Ok(None) => sign_in_form(
            StatusCode::UNAUTHORIZED,
            Some("That sign-in link was used already or has expired.".into()),
            &headers,
        ),
        Err(error) => pages::PageError::from(error).into_response(),
    }
}

#[derive(serde::Deserialize)]
struct SignOutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/sign-out`: deletes the session.
async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignOutForm>,
) -> Response {
    let who = match require_api(&state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    if !csrf_ok(&who.csrf, &headers, Some(&form.csrf)) {
        return pages::PageError(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token: reload the page".into(),
        )
        .into_response();
    }
    if let Some(hash) = &who.session_hash
        && let Err(error) = session::close(&state, hash).await
    {
        return pages::PageError::from(error).into_response();
    }
    let mut response = Redirect::to("/ui/sign-in").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        clear_cookie(SESSION_COOKIE, to_loopback(&headers)),
    );
    response
}
