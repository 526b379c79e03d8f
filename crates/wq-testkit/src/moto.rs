//! `moto_server`: the AWS APIs the service uses (SQS, SNS, S3) on
//! loopback, for tests that must talk to a real AWS API rather than a mock.
//!
//! [`moto`] starts one server per test process: `moto[server]` (pinned in
//! `moto/requirements.txt`) is installed from PyPI into a virtualenv under
//! the given directory (cargo's target tmp dir), keyed by the pins' hash,
//! so only the first run installs it. The server runs behind a shell that
//! holds its standard input: when the test process ends, however it ends,
//! the shell reads end-of-file and stops the server. `WQ_TEST_MOTO_URL`
//! names a server already running instead. Without python3, venv, pip or
//! PyPI the tests fail and say which step failed; they never skip.
//!
//! moto takes any credentials: [`Moto::credentials`] are fixed test ones.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;

/// The region the tests use.
pub const REGION: &str = "us-east-1";
/// moto's default account id (it appears in queue URLs and ARNs).
pub const ACCOUNT: &str = "123456789012";

const REQUIREMENTS: &str = include_str!("../moto/requirements.txt");

/// A running moto server.
pub struct Moto {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The shell holding the server; its stdin closes with this process.
    _keeper: Option<Mutex<Child>>,
}

impl Moto {
    /// Test credentials (moto checks none).
    pub fn credentials() -> (&'static str, &'static str) {
        ("testing", "testing")
    }
}

fn credentials() -> aws_sdk_sqs::config::Credentials {
    let (key, secret) = Moto::credentials();
    aws_sdk_sqs::config::Credentials::new(key, secret, None, None, "moto")
}

pub fn sqs_client(url: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new(REGION))
            .endpoint_url(url)
            .credentials_provider(credentials())
            .build(),
    )
}

pub fn sns_client(url: &str) -> aws_sdk_sns::Client {
    let (key, secret) = Moto::credentials();
    aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::Config::builder()
            .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
            .region(aws_sdk_sns::config::Region::new(REGION))
            .endpoint_url(url)
            .credentials_provider(aws_sdk_sns::config::Credentials::new(
                key, secret, None, None, "moto",
            ))
            .build(),
    )
}

/// An SNS topic, an SQS queue subscribed to it (raw or wrapped) with a
/// dead-letter queue after two receives, and the clients, on [`moto`].
pub struct Queues {
    pub sqs: aws_sdk_sqs::Client,
    pub sns: aws_sdk_sns::Client,
    pub topic: String,
    pub queue: String,
    pub dead_letters: String,
}

impl Queues {
    /// New uniquely named queues on the moto server (started under `root`
    /// if need be); a message becomes visible again `visibility_seconds`
    /// after a receive.
    pub async fn new(root: &Path, raw: bool, visibility_seconds: u32) -> Self {
        let root = root.to_owned();
        let moto = tokio::task::spawn_blocking(move || moto(&root))
            .await
            .expect("moto");
        let sqs = sqs_client(&moto.url);
        let sns = sns_client(&moto.url);
        let name = format!("forge-events-{}", uuid::Uuid::now_v7().simple());
        let dead_letters = sqs
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .send()
            .await
            .expect("dead-letter queue")
            .queue_url
            .expect("url");
        let dead_arn = queue_arn(&sqs, &dead_letters).await;
        let queue = sqs
            .create_queue()
            .queue_name(&name)
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                visibility_seconds.to_string(),
            )
            .attributes(
                QueueAttributeName::RedrivePolicy,
                serde_json::json!({"deadLetterTargetArn": dead_arn, "maxReceiveCount": 2})
                    .to_string(),
            )
            .send()
            .await
            .expect("queue")
            .queue_url
            .expect("url");
        let topic = sns
            .create_topic()
            .name(&name)
            .send()
            .await
            .expect("topic")
            .topic_arn
            .expect("arn");
        let mut subscribe = sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(queue_arn(&sqs, &queue).await);
        if raw {
            subscribe = subscribe.attributes("RawMessageDelivery", "true");
        }
        subscribe.send().await.expect("subscription");
        Self {
            sqs,
            sns,
            topic,
            queue,
            dead_letters,
        }
    }

    /// Publishes a delivery with `headers` as message attributes.
    pub async fn publish(&self, body: &str, headers: &[(&str, &str)]) {
        let mut publish = self.sns.publish().topic_arn(&self.topic).message(body);
        for (name, value) in headers {
            publish = publish.message_attributes(
                *name,
                aws_sdk_sns::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(*value)
                    .build()
                    .expect("attribute"),
            );
        }
        publish.send().await.expect("published");
    }

    /// Messages in the queue, visible or in flight.
    pub async fn left(&self, queue: &str) -> u64 {
        let attributes = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("attributes")
            .attributes
            .unwrap_or_default();
        [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|name| {
            attributes
                .get(name)
                .and_then(|count| count.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
    }

    /// Receives (without deleting) what is visible now, waiting up to
    /// `wait_seconds`.
    pub async fn peek(&self, queue: &str, wait_seconds: i32) -> Vec<String> {
        self.sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .visibility_timeout(30)
            .send()
            .await
            .expect("receive")
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|message| message.body)
            .collect()
    }
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes")
        .attributes
        .and_then(|attributes| attributes.get(&QueueAttributeName::QueueArn).cloned())
        .expect("queue arn")
}

static MOTO: OnceLock<Moto> = OnceLock::new();

/// The moto server of this test process, started on first use; the
/// virtualenv lives under `root`.
pub fn moto(root: &Path) -> &'static Moto {
    MOTO.get_or_init(|| match std::env::var("WQ_TEST_MOTO_URL") {
        Ok(url) if !url.is_empty() => {
            wait_ready(&url, None);
            Moto { url, _keeper: None }
        }
        _ => start(root),
    })
}

fn start(root: &Path) -> Moto {
    let venv = virtualenv(root);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let log = root.join(format!("moto-{}.log", std::process::id()));
    // The interpreter, not the `moto_server` script: the virtualenv was
    // renamed into place, and its scripts name the old path.
    let python = venv.join("bin/python");
    // `read` returns when this process's end of the pipe closes.
    let script = format!(
        "{} -m moto.server -H 127.0.0.1 -p {port} >{} 2>&1 & server=$!; read _; kill $server",
        shell_quote(&python),
        shell_quote(&log),
    );
    let mut keeper = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start moto_server through sh: {error}"));
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&url, Some((&mut keeper, &log)));
    Moto {
        url,
        _keeper: Some(Mutex::new(keeper)),
    }
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// Waits (at most 60 s) until the server answers HTTP.
fn wait_ready(url: &str, mut keeper: Option<(&mut Child, &Path)>) {
    let address = url.trim_start_matches("http://").to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(&address) {
            let request = format!("GET /moto-api/ HTTP/1.0\r\nHost: {address}\r\n\r\n");
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut answer = [0u8; 12];
                if std::io::Read::read_exact(&mut stream, &mut answer).is_ok()
                    && answer.starts_with(b"HTTP/1.")
                {
                    return;
                }
            }
        }
        if let Some((child, log)) = keeper.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!(
                "moto_server ended ({status}) before answering; its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "moto_server at {url} did not answer within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A virtualenv with the pinned moto, created once per pins' hash.
fn virtualenv(root: &Path) -> PathBuf {
    crate::python::virtualenv(root, "moto", REQUIREMENTS)
}
