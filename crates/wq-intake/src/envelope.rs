//! A queued message back into the delivery it carries: the forge's body
//! and headers. Two shapes arrive:
//!
//! - **SNS-wrapped**: the SQS body is SNS's JSON notification
//!   (`"Type": "Notification"`); its `Message` is the delivery's body and
//!   its `MessageAttributes` (`{"Name": {"Type": "String", "Value": ...}}`)
//!   the headers.
//! - **Raw** (SNS raw message delivery, or a relay writing to SQS itself):
//!   the SQS body is the delivery's body and the SQS message attributes are
//!   the headers.
//!
//! Header names are lower-cased, as the webhook receivers expect them.
//! Binary attributes carry no header and are left out.

use serde::Deserialize;
use wq_core::Headers;

/// The delivery a message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedDelivery {
    /// (lower-case name, value).
    pub headers: Headers,
    pub body: Vec<u8>,
    /// Whether it came wrapped in an SNS notification.
    pub sns: bool,
}

#[derive(Deserialize)]
struct SnsNotification {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "TopicArn")]
    topic_arn: String,
    #[serde(rename = "Message")]
    message: String,
    #[serde(rename = "MessageAttributes", default)]
    attributes: std::collections::BTreeMap<String, SnsAttribute>,
}

#[derive(Deserialize)]
struct SnsAttribute {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "Value")]
    value: String,
}

/// The delivery in an SQS message's `body` with its string message
/// `attributes` (name, value).
pub fn unwrap(
    body: &str,
    attributes: impl IntoIterator<Item = (String, String)>,
) -> QueuedDelivery {
    let mut delivery = unwrapped(body, attributes);
    // The channel is the intake's to say, never the sender's.
    delivery
        .headers
        .retain(|(name, _)| name != wq_core::CHANNEL_HEADER);
    delivery
        .headers
        .push((wq_core::CHANNEL_HEADER.to_owned(), "sqs".to_owned()));
    delivery
}

fn unwrapped(body: &str, attributes: impl IntoIterator<Item = (String, String)>) -> QueuedDelivery {
    let attributes: Headers = attributes
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    if let Some(notification) = sns_notification(body) {
        let mut headers: Headers = notification
            .attributes
            .into_iter()
            .filter(|(_, attribute)| attribute.kind == "String" || attribute.kind == "Number")
            .map(|(name, attribute)| (name.to_ascii_lowercase(), attribute.value))
            .collect();
        headers.extend(attributes);
        return QueuedDelivery {
            headers,
            body: notification.message.into_bytes(),
            sns: true,
        };
    }
    QueuedDelivery {
        headers: attributes,
        body: body.as_bytes().to_vec(),
        sns: false,
    }
}

/// SNS's notification envelope, when `body` is one. A forge payload is
/// never one: it has no `TopicArn` and `Type` of `Notification`.
fn sns_notification(body: &str) -> Option<SnsNotification> {
    if !body.trim_start().starts_with('{') {
        return None;
    }
    let notification: SnsNotification = serde_json::from_str(body).ok()?;
    (notification.kind == "Notification" && notification.topic_arn.starts_with("arn:"))
        .then_some(notification)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sns_notification_gives_its_message_and_attributes() {
        let delivery = serde_json::json!({"object_kind": "pipeline", "id": 7}).to_string();
        let body = serde_json::json!({
            "Type": "Notification",
            "MessageId": "5b7a1c7e",
            "TopicArn": "arn:aws:sns:eu-west-1:123456789012:forge-events",
            "Message": delivery,
            "Timestamp": "2026-12-01T12:00:00.000Z",
            "SignatureVersion": "1",
            "MessageAttributes": {
                "X-Gitlab-Event": {"Type": "String", "Value": "Pipeline Hook"},
                "X-Gitlab-Token": {"Type": "String", "Value": "s3cret"},
                "Blob": {"Type": "Binary", "Value": "AAEC"}
            }
        })
        .to_string();
        let queued = unwrap(&body, []);
        assert!(queued.sns);
        assert_eq!(queued.body, delivery.as_bytes());
        assert_eq!(
            queued.headers,
            vec![
                ("x-gitlab-event".to_owned(), "Pipeline Hook".to_owned()),
                ("x-gitlab-token".to_owned(), "s3cret".to_owned()),
                ("x-workqueue-channel".to_owned(), "sqs".to_owned()),
            ]
        );
    }

    #[test]
    fn a_raw_message_is_the_body_with_the_queue_attributes_as_headers() {
        let body = r#"{"action":"opened","number":3}"#;
        let queued = unwrap(
            body,
            [
                ("X-GitHub-Event".to_owned(), "pull_request".to_owned()),
                ("X-Hub-Signature-256".to_owned(), "sha256=00".to_owned()),
            ],
        );
        assert!(!queued.sns);
        assert_eq!(queued.body, body.as_bytes());
        assert_eq!(
            queued.headers[0],
            ("x-github-event".to_owned(), "pull_request".to_owned())
        );
        assert_eq!(queued.headers[1].0, "x-hub-signature-256");
        // A sender cannot name the channel.
        let spoofed = unwrap(body, [("X-Workqueue-Channel".to_owned(), "api".to_owned())]);
        assert_eq!(
            spoofed.headers,
            vec![("x-workqueue-channel".to_owned(), "sqs".to_owned())]
        );
    }

    #[test]
    fn a_payload_that_only_looks_like_a_notification_stays_raw() {
        // A forge payload with a "Type" field, or text that is not JSON.
        for body in [
            r#"{"Type":"Notification","Message":"x"}"#,
            r#"{"Type":"Notification","TopicArn":"topic","Message":"x"}"#,
            "not json",
            "",
        ] {
            let queued = unwrap(body, []);
            assert!(!queued.sns, "{body}");
            assert_eq!(queued.body, body.as_bytes());
        }
    }
}
