//! `workqueue items list|show|retry|audit`: a thin client of the REST API. Prints a
//! table (or the API's JSON with `--json`); on failure, the API's error
//! message. Sends `--token` (or `WORKQUEUE_TOKEN`) as a bearer token.

use std::fmt::Write as _;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use wq_api::ErrorEnvelope;
use wq_api::models::{DimensionBody, ItemBody, ItemDetail, ItemList};

use crate::cli::{ItemsArgs, ItemsCommand};

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
        ItemsCommand::Audit { id } => {
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
