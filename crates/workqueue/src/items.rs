//! `workqueue items list|show|submit|retry|merge|retry-merge|cancel|audit`:
//! a thin client of the REST API. Prints a table or text (or the API's JSON
//! with `--json`); on failure, the API's error message. Sends `--token` (or
//! `WORKQUEUE_TOKEN`) as a bearer token. `--wait` follows an item until it
//! ends, with a spinner on a terminal ([`crate::progress`]).

use std::fmt::Write as _;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use wq_api::ErrorEnvelope;
use wq_api::models::{DimensionBody, ItemBody, ItemDetail, ItemList, SubmitResponse};
use wq_core::{ItemId, Phase};

use crate::cli::{ItemsArgs, ItemsCommand};
use crate::progress::Progress;

/// How often `--wait` reads the item again.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs one `items` command and returns what to print on stdout.
pub async fn run(args: ItemsArgs) -> anyhow::Result<String> {
    let client = ApiClient::new(&args.url, args.token.as_deref())?;
    match args.command {
        ItemsCommand::List {
            phase,
            item_type,
            limit,
            before,
        } => {
            let mut query: Vec<(&str, String)> = Vec::new();
            if let Some(phase) = phase {
                query.push(("phase", phase.to_string()));
            }
            if let Some(item_type) = item_type {
                query.push(("item_type", item_type));
            }
            if let Some(limit) = limit {
                query.push(("limit", limit.to_string()));
            }
            if let Some(before) = before {
                query.push(("before", before.to_string()));
            }
            let request = client
                .http
                .get(client.url("/api/v1/work-items"))
                .query(&query);
            let (raw, list): (serde_json::Value, ItemList) = client.send(request).await?;
            Ok(if args.json {
                pretty(&raw)
            } else {
                list_table(&list)
            })
        }
        ItemsCommand::Show { id } => {
            let request = client
                .http
                .get(client.url(&format!("/api/v1/work-items/{id}")));
            let (raw, detail): (serde_json::Value, ItemDetail) = client.send(request).await?;
            Ok(if args.json {
                pretty(&raw)
            } else {
                detail_text(&detail)
            })
        }
        ItemsCommand::Submit { file, wait } => {
            let body = read_body(&file)?;
            let request = client
                .http
                .post(client.url("/api/v1/work-items"))
                .json(&body);
            let (raw, submitted): (serde_json::Value, SubmitResponse) =
                client.send(request).await?;
            let item = &submitted.item;
            let said = format!(
                "{} {}: {} item, phase {}\n",
                submitted.outcome, item.id, item.item_type, item.phase
            );
            if !wait {
                return Ok(if args.json { pretty(&raw) } else { said });
            }
            if !args.json {
                eprint!("{said}");
            }
            let (raw, detail) = wait_until_ended(&client, item.id).await?;
            let shown = if args.json {
                pretty(&raw)
            } else {
                detail_text(&detail)
            };
            if detail.item.phase != Phase::Completed {
                print!("{shown}");
                anyhow::bail!(
                    "work item {} ended {}: {}",
                    detail.item.id,
                    detail.item.phase,
                    detail.item.error.as_deref().unwrap_or("no reason given")
                );
            }
            Ok(shown)
        }
        ItemsCommand::Merge {
            id,
            method,
            expected_head,
        } => {
            let body = serde_json::json!({
                "merge_method": method.map(|method| method.as_str()),
                "expected_head_sha": expected_head,
            });
            let request = client
                .http
                .post(client.url(&format!("/api/v1/work-items/{id}/merge")))
                .json(&body);
            let (raw, reply): (serde_json::Value, serde_json::Value) = client.send(request).await?;
            Ok(if args.json {
                pretty(&raw)
            } else {
                match reply["status"].as_str() {
                    Some("queued") => format!("{id}: queued by the forge (merge queue or train)\n"),
                    Some(status) => format!("{id}: {status}\n"),
                    None => pretty(&raw),
                }
            })
        }
        ItemsCommand::RetryMerge { id } => {
            let request = client
                .http
                .post(client.url(&format!("/api/v1/work-items/{id}/retry-merge")));
            let (raw, reply): (serde_json::Value, serde_json::Value) = client.send(request).await?;
            Ok(if args.json {
                pretty(&raw)
            } else {
                format!(
                    "{id}: {}\n",
                    reply["message"].as_str().unwrap_or("merge retry accepted")
                )
            })
        }
        ItemsCommand::Cancel { id, reason, wait } => {
            let body = match reason {
                Some(reason) => serde_json::json!({ "reason": reason }),
                None => serde_json::json!({}),
            };
            let request = client
                .http
                .post(client.url(&format!("/api/v1/work-items/{id}/cancel")))
                .json(&body);
            let (raw, reply): (serde_json::Value, serde_json::Value) = client.send(request).await?;
            let said = format!(
                "{id}: {}\n",
                reply["message"].as_str().unwrap_or("cancel accepted")
            );
            if !wait {
                return Ok(if args.json { pretty(&raw) } else { said });
            }
            if !args.json {
                eprint!("{said}");
            }
            let (raw, detail) = wait_until_ended(&client, id).await?;
            Ok(if args.json {
                pretty(&raw)
            } else {
                format!(
                    "{id}: {}{}\n",
                    detail.item.phase,
                    detail
                        .item
                        .error
                        .as_deref()
                        .map(|error| format!(": {error}"))
                        .unwrap_or_default()
                )
            })
        }
        ItemsCommand::Audit { id } => {
            let progress = Progress::spinner(format!("reading the audit trail of {id}"));
            let mut records = Vec::new();
            let mut after: Option<i64> = None;
            loop {
                let mut query: Vec<(&str, String)> = vec![("limit", "1000".to_owned())];
                if let Some(after) = after {
                    query.push(("after", after.to_string()));
                }
                let request = client
                    .http
                    .get(client.url(&format!("/api/v1/work-items/{id}/audit")))
                    .query(&query);
                let (_, page): (serde_json::Value, serde_json::Value) =
                    client.send(request).await?;
                records.extend(page["records"].as_array().cloned().unwrap_or_default());
                progress.set(format!(
                    "reading the audit trail of {id}: {} records",
                    records.len()
                ));
                match page["next_after"].as_i64() {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            Ok(if args.json {
                pretty(&serde_json::json!({ "records": records }))
            } else {
                audit_text(&records)
            })
        }
        ItemsCommand::Retry { id } => {
            let request = client
                .http
                .post(client.url(&format!("/api/v1/work-items/{id}/retry")));
            let (raw, item): (serde_json::Value, ItemBody) = client.send(request).await?;
            Ok(if args.json {
                pretty(&raw)
            } else {
                format!(
                    "retried {}: phase {}, attempts {}\n",
                    item.id, item.phase, item.attempts
                )
            })
        }
    }
}

/// The body of `items submit FILE`: JSON or YAML, from FILE or `-` (stdin).
fn read_body(file: &str) -> anyhow::Result<serde_json::Value> {
    let (text, name) = if file == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("cannot read the submission from stdin")?;
        (text, "stdin".to_owned())
    } else {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the submission file {file}"))?;
        (text, file.to_owned())
    };
    if let Ok(body) = serde_json::from_str::<serde_json::Value>(&text) {
        return Ok(body);
    }
    let body: serde_json::Value = serde_saphyr::from_str(&text).map_err(|error| {
        anyhow::anyhow!(
            "the submission in {name} is neither JSON nor YAML: {}",
            error.to_string().lines().next().unwrap_or_default()
        )
    })?;
    if !body.is_object() {
        anyhow::bail!("the submission in {name} must be a JSON or YAML object");
    }
    Ok(body)
}

/// Reads item `id` until it is no longer active, saying on a terminal what
/// it is doing; the last answer.
async fn wait_until_ended(
    client: &ApiClient,
    id: ItemId,
) -> anyhow::Result<(serde_json::Value, ItemDetail)> {
    let progress = Progress::spinner(format!("{id}: waiting"));
    loop {
        let request = client
            .http
            .get(client.url(&format!("/api/v1/work-items/{id}")));
        let (raw, detail): (serde_json::Value, ItemDetail) = client.send(request).await?;
        if detail.item.phase != Phase::Active {
            progress.finish();
            return Ok((raw, detail));
        }
        progress.set(format!("{id}: {}", state_summary(&detail)));
        tokio::time::sleep(WAIT_POLL).await;
    }
}

/// Where an active item is, in a few words: its merge request and the
/// gates it waits for.
fn state_summary(detail: &ItemDetail) -> String {
    let Some(mr) = detail.detail.as_ref() else {
        return format!("phase {}", detail.item.phase);
    };
    let Some(number) = mr["mr"]["number"].as_u64() else {
        return "no merge request yet".to_owned();
    };
    let unmet = unmet_gates(detail);
    match unmet {
        Some(unmet) if unmet.is_empty() => {
            format!("{} {number}: every gate holds", change_noun(mr))
        }
        Some(unmet) => format!(
            "{} {number}: waiting for {}",
            change_noun(mr),
            unmet.join(", ")
        ),
        None => format!("{} {number}: gates not checked yet", change_noun(mr)),
    }
}

/// "merge request" or "pull request", by the change request's URL.
fn change_noun(mr: &serde_json::Value) -> &'static str {
    if mr["mr"]["url"]
        .as_str()
        .is_some_and(|url| url.contains("/pull/"))
    {
        "pull request"
    } else {
        "merge request"
    }
}

/// The gates the last reconcile found unmet (`needs_reconcile`'s detail);
/// `None` before any reconcile.
fn unmet_gates(detail: &ItemDetail) -> Option<Vec<String>> {
    let row = detail
        .dimensions
        .iter()
        .find(|row| row.dimension == wq_mr::dims::NEEDS_RECONCILE)?;
    let unmet = row.detail.get("unmet_gates")?.as_array()?;
    Some(
        unmet
            .iter()
            .filter_map(|gate| gate.as_str().map(str::to_owned))
            .collect(),
    )
}

/// The `mr` item's own part of `items show`: its change request, the
/// gates, the merge queue entry and the merge journal.
fn mr_text(detail: &ItemDetail, mr: &serde_json::Value) -> String {
    let text = |value: &serde_json::Value| match value {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let mut lines: Vec<(&str, String)> = Vec::new();
    let change = &mr["mr"];
    lines.push((
        "change",
        format!(
            "{} {} {} {} -> {}",
            text(&mr["forge"]),
            text(&mr["project"]),
            text(&mr["source_branch"]),
            text(&mr["title"]).replace('\n', " "),
            text(&mr["target_branch"]),
        ),
    ));
    lines.push((
        change_noun(mr),
        match change["number"].as_u64() {
            Some(number) => format!("{number} {}", text(&change["url"])),
            None => "not created yet".to_owned(),
        },
    ));
    lines.push((
        "head",
        format!(
            "{} (pipeline {})",
            text(&change["head_sha"]),
            text(&change["head_pipeline_id"])
        ),
    ));
    lines.push((
        "automation",
        format!(
            "auto_merge {}, ci_retry {}, generation {}",
            text(&mr["automation"]["auto_merge"]),
            text(&mr["automation"]["ci_retry"]),
            text(&mr["generation"])
        ),
    ));
    let review_gate = mr["review_gate"].as_str().unwrap_or(wq_mr::merge::APPROVED);
    let every = wq_mr::merge::gate_names(review_gate == wq_mr::merge::REVIEW_BY_PERSON);
    lines.push((
        "gates",
        match unmet_gates(detail) {
            None => format!("not checked yet ({})", every.join(", ")),
            Some(unmet) => {
                let held: Vec<&str> = every
                    .iter()
                    .copied()
                    .filter(|gate| !unmet.iter().any(|u| u == gate))
                    .collect();
                let held = if held.is_empty() {
                    "none".to_owned()
                } else {
                    held.join(", ")
                };
                if unmet.is_empty() {
                    format!("all hold ({held})")
                } else {
                    format!("waiting for {}; held: {held}", unmet.join(", "))
                }
            }
        },
    ));
    let queue = &mr["merge_queue"];
    lines.push((
        "merge queue",
        if queue.is_null() {
            "not queued".to_owned()
        } else {
            format!(
                "{}, position {}, eta {} s",
                text(&queue["state"]),
                text(&queue["position"]),
                text(&queue["eta_seconds"])
            )
        },
    ));
    let journal = &mr["merge"];
    lines.push((
        "merge journal",
        if journal["last_result"].is_null() {
            "no merge attempt yet".to_owned()
        } else {
            let mut said = format!(
                "{} at {} for head {}",
                text(&journal["last_result"]),
                text(&journal["last_attempt_at"]),
                text(&journal["queue_head_sha"])
            );
            if !journal["error"].is_null() {
                let _ = write!(
                    said,
                    "; error {}: {}",
                    text(&journal["error_kind"]),
                    text(&journal["error"])
                );
            }
            let _ = write!(
                said,
                "; transient failures {}",
                text(&journal["transient_failures"])
            );
            if journal["retry_authorized"] == true {
                said.push_str("; a retry is authorized");
            }
            if !journal["retry_at"].is_null() {
                let _ = write!(said, "; next call at {}", text(&journal["retry_at"]));
            }
            said
        },
    ));
    let mut out = String::new();
    for (name, value) in lines {
        let _ = writeln!(out, "{:<16} {value}", format!("{name}:"));
    }
    out
}

/// One line a record: time, actor, kind, then what it changed and said.
fn audit_text(records: &[serde_json::Value]) -> String {
    let mut out = String::new();
    for record in records {
        let text = |field: &str| record[field].as_str().unwrap_or("").to_owned();
        let mut line = format!("{}  {:<32} {}", text("at"), text("actor"), text("kind"));
        for field in ["old_state", "new_state", "metadata"] {
            let value = &record[field];
            let empty = value.is_null() || value.as_object().is_some_and(|map| map.is_empty());
            if !empty {
                let mut shown = value.clone();
                // The raw delivery is long; `--json` has it.
                if let Some(map) = shown.as_object_mut() {
                    map.remove("raw");
                }
                let _ = write!(line, "  {field}={shown}");
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("no audit records\n");
    }
    out
}

struct ApiClient {
    http: reqwest::Client,
    base: String,
    has_token: bool,
}

impl ApiClient {
    fn new(base: &str, token: Option<&str>) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--url must start with http:// or https://, got {base:?}");
        }
        let mut headers = reqwest::header::HeaderMap::new();
        let token = token.map(str::trim).filter(|token| !token.is_empty());
        if let Some(token) = token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .context("--token: not a valid token (it must be printable text)")?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .default_headers(headers)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            http,
            base,
            has_token: token.is_some(),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends the request; a non-2xx answer becomes the API's error message.
    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<(serde_json::Value, T)> {
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the workqueue API at {}", self.base))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("reading the API's answer ({status}) failed"))?;
        if !status.is_success() {
            let mut message = api_error_message(status, &bytes);
            if status == reqwest::StatusCode::UNAUTHORIZED && !self.has_token {
                message.push_str(" (no token given: pass --token or set WORKQUEUE_TOKEN)");
            }
            anyhow::bail!(message);
        }
        let raw: serde_json::Value =
            serde_json::from_slice(&bytes).context("the API answered with invalid JSON")?;
        let typed = serde_json::from_value(raw.clone())
            .context("the API's answer has an unexpected shape")?;
        Ok((raw, typed))
    }
}

/// `API error 404 (not_found): work item … not found`, naming the field when
/// the API did; the raw text when the body is not the envelope.
fn api_error_message(status: reqwest::StatusCode, body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(envelope) => {
            let error = envelope.error;
            let field = error
                .field
                .map(|field| format!(" [field: {field}]"))
                .unwrap_or_default();
            format!(
                "API error {} ({}): {}{field}",
                status.as_u16(),
                error.code,
                error.message
            )
        }
        Err(_) => format!(
            "API error {}: {}",
            status.as_u16(),
            String::from_utf8_lossy(body).trim()
        ),
    }
}

fn pretty(raw: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(raw).unwrap_or_else(|_| raw.to_string());
    text.push('\n');
    text
}

fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

fn optional_timestamp(at: Option<OffsetDateTime>) -> String {
    at.map_or_else(|| "-".to_owned(), timestamp)
}

/// Lays out rows in columns separated by two spaces.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (index, cell) in row.iter().enumerate() {
            widths[index] = widths[index].max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[index]);
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn list_table(list: &ItemList) -> String {
    if list.items.is_empty() {
        return "no work items\n".to_owned();
    }
    let rows: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|item| {
            vec![
                item.id.to_string(),
                item.item_type.clone(),
                item.phase.to_string(),
                item.actionable.to_string(),
                item.attempts.to_string(),
                timestamp(item.updated_at),
                item.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut text = table(
        &[
            "ID",
            "TYPE",
            "PHASE",
            "ACTIONABLE",
            "ATTEMPTS",
            "UPDATED",
            "ERROR",
        ],
        &rows,
    );
    if let Some(next) = list.next_before {
        let _ = writeln!(text, "more: --before {next}");
    }
    text
}

fn detail_text(detail: &ItemDetail) -> String {
    let item = &detail.item;
    let fields = [
        ("id", item.id.to_string()),
        ("item_type", item.item_type.clone()),
        ("phase", item.phase.to_string()),
        ("actionable", item.actionable.to_string()),
        ("attempts", item.attempts.to_string()),
        (
            "error",
            item.error.clone().unwrap_or_else(|| "-".to_owned()),
        ),
        ("leased_until", optional_timestamp(item.leased_until)),
        (
            "idempotency_key",
            item.idempotency_key
                .clone()
                .unwrap_or_else(|| "-".to_owned()),
        ),
        (
            "caller_identity",
            item.caller_identity
                .clone()
                .unwrap_or_else(|| "-".to_owned()),
        ),
        ("created_at", timestamp(item.created_at)),
        ("updated_at", timestamp(item.updated_at)),
        ("last_event_at", optional_timestamp(item.last_event_at)),
    ];
    let mut text = String::new();
    for (name, value) in fields {
        let _ = writeln!(text, "{:<16} {value}", format!("{name}:"));
    }
    text.push('\n');
    match &detail.detail {
        Some(mr) if item.item_type == wq_mr::TYPE_NAME && mr.is_object() => {
            text.push_str(&mr_text(detail, mr));
            text.push('\n');
        }
        Some(other) => {
            let _ = writeln!(text, "detail:\n{}", pretty(other).trim_end());
            text.push('\n');
        }
        None => {}
    }
    if detail.dimensions.is_empty() {
        text.push_str("no dimensions\n");
        return text;
    }
    let rows: Vec<Vec<String>> = detail.dimensions.iter().map(dimension_row).collect();
    text.push_str(&table(
        &["DIMENSION", "VARIANT", "STATUS", "PENDING_UNTIL", "DETAIL"],
        &rows,
    ));
    text
}

fn dimension_row(row: &DimensionBody) -> Vec<String> {
    vec![
        row.dimension.clone(),
        if row.variant.is_empty() {
            "-".to_owned()
        } else {
            row.variant.clone()
        },
        row.status.as_str().to_owned(),
        optional_timestamp(row.pending_until),
        row.detail.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_show_the_message_and_field() {
        let body = br#"{"error":{"code":"invalid_parameter","message":"limit must be an integer between 1 and 500, got \"0\"","field":"limit"}}"#;
        assert_eq!(
            api_error_message(reqwest::StatusCode::BAD_REQUEST, body),
            "API error 400 (invalid_parameter): limit must be an integer between 1 and 500, got \"0\" [field: limit]"
        );
        assert_eq!(
            api_error_message(reqwest::StatusCode::BAD_GATEWAY, b"upstream down\n"),
            "API error 502: upstream down"
        );
    }

    #[test]
    fn tables_align_columns() {
        let text = table(
            &["A", "BB"],
            &[vec!["long".into(), "x".into()], vec!["s".into(), "".into()]],
        );
        assert_eq!(text, "A     BB\nlong  x\ns\n");
    }
}
