//! `GET /metrics`: the item gauge from the store and the engine's metrics.

use std::time::Duration;

use wq_core::Phase;
use wq_testkit::types::PROBE_TYPE;
use wq_testkit::{Backend, backend_tests};

use crate::api_app;

async fn metrics_show_the_item_gauge_and_engine_metrics(backend: Backend) {
    let app = api_app(backend).start().await;
    app.insert("alpha").await;
    app.insert("alpha").await;
    let failed = app.insert("alpha").await;
    app.set_phase(&failed, Phase::Failed).await;
    let probe = app.insert(PROBE_TYPE).await;

    // Let the engine run one item so its loop histogram has a sample.
    app.engine.start();
    app.engine.notify(probe.id);
    tokio::time::timeout(Duration::from_secs(20), app.engine.wait_idle())
        .await
        .expect("the engine goes idle");

    let response = app.get("/metrics").await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    for line in [
        "# TYPE workqueue_items gauge",
        "workqueue_items{item_type=\"alpha\",phase=\"active\"} 2",
        "workqueue_items{item_type=\"alpha\",phase=\"failed\"} 1",
        "workqueue_items{item_type=\"alpha\",phase=\"completed\"} 0",
        "workqueue_items{item_type=\"alpha\",phase=\"cancelled\"} 0",
        "workqueue_items{item_type=\"probe\",phase=\"active\"} 1",
    ] {
        assert!(
            text.lines().any(|candidate| candidate == line),
            "missing {line:?} in:\n{text}"
        );
    }
    assert!(
        text.contains("workqueue_loop_duration_seconds_bucket"),
        "missing the loop histogram in:\n{text}"
    );
    app.finish().await;
}
backend_tests!(metrics_show_the_item_gauge_and_engine_metrics);
