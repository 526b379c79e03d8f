//! The deployment files: every YAML document in `deploy/` parses and has
//! the shape the README promises (two replicas, non-root, probes on
//! `/healthz` and `/readyz`, Secret references and no secret value, a
//! NetworkPolicy, the oauth2-proxy sidecar in front of the dashboard and
//! `/api/v1/me` only), the config the ConfigMap carries passes `workqueue
//! config check` with the environment the Deployment gives it, and the
//! Containerfile builds in two stages into a non-root image with a health
//! check. (No image is built here.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_workqueue");

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every document of every `deploy/*.yaml`, with its file's name.
fn documents() -> Vec<(String, Value)> {
    let dir = repository().join("deploy");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML in {}", dir.display());
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for document in parsed.into_iter().filter(|document| !document.is_null()) {
            assert!(
                document["apiVersion"].is_string() && document["kind"].is_string(),
                "{name}: a document without apiVersion and kind"
            );
            assert!(
                document["metadata"]["name"].is_string(),
                "{name}: a document without a name"
            );
            documents.push((name.clone(), document));
        }
    }
    documents
}

fn of_kind<'a>(documents: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    documents
        .iter()
        .filter(|(_, document)| document["kind"] == kind)
        .map(|(_, document)| document)
        .collect()
}

fn one<'a>(documents: &'a [(String, Value)], kind: &str) -> &'a Value {
    let found = of_kind(documents, kind);
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn container<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|container| container["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_manifests_describe_two_non_root_replicas_with_probes_and_a_proxy() {
    let documents = documents();
    for kind in [
        "Deployment",
        "Service",
        "ConfigMap",
        "NetworkPolicy",
        "ServiceAccount",
        "PodDisruptionBudget",
    ] {
        assert!(!of_kind(&documents, kind).is_empty(), "no {kind}");
    }
    // No secret value is committed: Secrets are referenced, never defined.
    assert!(
        of_kind(&documents, "Secret").is_empty(),
        "a Secret in deploy/"
    );

    let deployment = one(&documents, "Deployment");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    let labels = &spec["template"]["metadata"]["labels"];
    assert_eq!(&spec["selector"]["matchLabels"], labels);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    assert_eq!(pod["automountServiceAccountToken"], false);

    let workqueue = container(deployment, "workqueue");
    assert_eq!(
        strings(&workqueue["args"])[..3],
        ["serve", "--config", "/etc/workqueue/workqueue.yaml"]
    );
    assert_eq!(workqueue["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(workqueue["readinessProbe"]["httpGet"]["path"], "/readyz");
    for container in pod["containers"].as_array().unwrap() {
        let security = &container["securityContext"];
        let name = &container["name"];
        assert_eq!(security["runAsNonRoot"], true, "{name}");
        assert_eq!(security["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(security["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(
            strings(&security["capabilities"]["drop"]),
            ["ALL"],
            "{name}"
        );
        // Every variable that carries a secret comes from a Secret.
        for variable in container["env"].as_array().into_iter().flatten() {
            let variable_name = variable["name"].as_str().unwrap();
            let secret_like = ["TOKEN", "SECRET", "DATABASE__URL", "PASSWORD"]
                .iter()
                .any(|word| variable_name.contains(word));
            if secret_like {
                let reference = &variable["valueFrom"]["secretKeyRef"];
                assert!(
                    reference["name"].is_string() && reference["key"].is_string(),
                    "{name}: {variable_name} is not from a Secret"
                );
                assert!(variable["value"].is_null(), "{variable_name} has a value");
            }
        }
    }
    // The config is the ConfigMap's, mounted read-only.
    let volumes = pod["volumes"].as_array().unwrap();
    let config_volume = volumes
        .iter()
        .find(|volume| {
            volume["configMap"]["name"] == one(&documents, "ConfigMap")["metadata"]["name"]
        })
        .expect("the ConfigMap as a volume");
    let mount = workqueue["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["name"] == config_volume["name"])
        .expect("mounted");
    assert_eq!(mount["mountPath"], "/etc/workqueue");
    assert_eq!(mount["readOnly"], true);

    // The proxy logs people in for the dashboard and /api/v1/me (DDR-27):
    // the API's other routes, webhooks, probes and metrics pass through.
    let proxy = container(deployment, "oauth2-proxy");
    let args = strings(&proxy["args"]);
    for wanted in [
        "--upstream=http://127.0.0.1:8080/",
        "--pass-access-token=true",
        "--cookie-refresh=1h",
    ] {
        assert!(args.iter().any(|arg| arg == wanted), "{wanted} in {args:?}");
    }
    let skipped: Vec<String> = args
        .iter()
        .filter_map(|arg| arg.strip_prefix("--skip-auth-route="))
        .map(|route| {
            route
                .trim_start_matches('^')
                .trim_end_matches('$')
                .to_owned()
        })
        .collect();
    let passes = |path: &str| {
        skipped
            .iter()
            .any(|prefix| path.starts_with(prefix.as_str()))
    };
    for path in [
        "/api/v1/work-items",
        "/api/v1/work-items/1/cancel",
        "/api/v1/audit",
        "/webhooks/gitlab",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(passes(path), "{path} needs a session: {skipped:?}");
    }
    for path in ["/", "/ui", "/ui/items", "/api/v1/me"] {
        assert!(!passes(path), "{path} passes the proxy without a session");
    }
    assert!(
        skipped
            .iter()
            .all(|route| !route.contains(['(', '?', '*', '|'])),
        "literal prefixes only: {skipped:?}"
    );

    // The Service reaches both, by the containers' port names.
    let service = one(&documents, "Service");
    assert_eq!(&service["spec"]["selector"], labels);
    let port_names: Vec<String> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|container| container["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|port| port["name"].as_str().map(str::to_owned))
        .collect();
    for port in service["spec"]["ports"].as_array().unwrap() {
        let target = port["targetPort"].as_str().expect("a named targetPort");
        assert!(port_names.iter().any(|name| name == target), "{target}");
    }

    let policy = one(&documents, "NetworkPolicy");
    assert_eq!(&policy["spec"]["podSelector"]["matchLabels"], labels);
    assert_eq!(
        strings(&policy["spec"]["policyTypes"]),
        ["Ingress", "Egress"]
    );
    assert!(!policy["spec"]["ingress"].as_array().unwrap().is_empty());
    let budget = one(&documents, "PodDisruptionBudget");
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], labels);
}

/// The ConfigMap's config passes `workqueue config check` with the
/// environment the Deployment gives the container (Secret values made up),
/// and every variable it names for a secret is one the Deployment sets.
#[test]
fn the_configmap_config_passes_config_check_with_the_deployments_environment() {
    let documents = documents();
    let config = one(&documents, "ConfigMap")["data"]["workqueue.yaml"]
        .as_str()
        .expect("data.workqueue.yaml")
        .to_owned();
    let deployment = one(&documents, "Deployment");
    let env: BTreeMap<String, String> = container(deployment, "workqueue")["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|variable| {
            let name = variable["name"].as_str().unwrap().to_owned();
            let value = match variable["value"].as_str() {
                Some(value) => value.to_owned(),
                None if name == "WORKQUEUE__DATABASE__URL" => {
                    "postgres://workqueue:made-up-password@postgresql:5432/workqueue".to_owned()
                }
                None => format!("made-up-{}", name.to_lowercase()),
            };
            (name, value)
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("wq-deploy-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("workqueue.yaml");
    std::fs::write(&path, &config).unwrap();
    let output = Command::new(BINARY)
        .args(["config", "check"])
        .arg(&path)
        .env_clear()
        .envs(&env)
        .output()
        .expect("run the workqueue binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("with WORKQUEUE__DATABASE__URL is valid"),
        "{stderr}"
    );
    let effective = workqueue::config::Config::parse(&stdout).expect("the effective config");
    assert_eq!(effective.server.bind, "0.0.0.0:8080");
    assert_eq!(
        effective.database.url, "postgres://workqueue:***@postgresql:5432/workqueue",
        "from the Secret, redacted"
    );
    assert!(!stdout.contains("made-up"), "{stdout}");
    assert!(effective.auth.oauth_proxy.enabled, "the proxy guards /me");
    assert!(
        effective.engine.handled_types.is_none(),
        "both replicas process every type"
    );
    // The check can fail: the same file with a broken setting is refused.
    let broken = dir.join("broken.yaml");
    std::fs::write(
        &broken,
        config.replace("bind: 0.0.0.0:8080", "bind: everywhere"),
    )
    .unwrap();
    let output = Command::new(BINARY)
        .args(["config", "check"])
        .arg(&broken)
        .env_clear()
        .envs(&env)
        .output()
        .expect("run the workqueue binary");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("server.bind: must be an IP address"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for forge in effective.forges.instances.values() {
        for variable in [&forge.token_env, &forge.webhook_secret_env] {
            let variable = variable.as_deref().expect("named");
            assert!(
                env.contains_key(variable),
                "{variable} is not set by the Deployment"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_containerfile_builds_a_small_non_root_image_with_a_health_check() {
    let text = std::fs::read_to_string(repository().join("Containerfile")).expect("Containerfile");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .collect();
    let stages: Vec<&str> = lines
        .iter()
        .filter(|line| line.starts_with("FROM "))
        .copied()
        .collect();
    assert_eq!(stages.len(), 2, "a builder and a runtime stage: {stages:?}");
    assert!(stages[0].contains("rust:") && stages[0].ends_with(" AS builder"));
    assert!(
        stages[1].contains("-slim"),
        "a small runtime image: {}",
        stages[1]
    );
    assert!(text.contains("cargo build --release --locked -p workqueue --no-default-features"));
    let user = lines
        .iter()
        .rev()
        .find_map(|line| line.strip_prefix("USER "))
        .expect("a USER");
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "{user}"
    );
    let health = lines
        .iter()
        .position(|line| line.starts_with("HEALTHCHECK"))
        .expect("a HEALTHCHECK");
    let command = lines[health..].join(" ");
    assert!(
        command.contains("\"health\"") && command.contains("/healthz"),
        "{command}"
    );
    // The subcommand the health check runs exists in the binary.
    let output = Command::new(BINARY)
        .args(["health", "--help"])
        .output()
        .expect("run the workqueue binary");
    assert!(output.status.success());
    let ignored =
        std::fs::read_to_string(repository().join(".dockerignore")).expect(".dockerignore");
    assert!(
        ignored.lines().any(|line| line == "target"),
        "target/ stays out of the context"
    );
}
