//! A type other than `mr` goes through the service's own wiring
//! ([`app::assemble_with`]): its migration runs, its webhook receiver
//! answers on the router and the engine runs its periodic task, with
//! nothing in `workqueue` naming it.

use std::sync::Arc;
use std::time::Duration;

use tower::ServiceExt as _;
use wq_core::{Clock, SystemClock, TypeRegistry};
use wq_testkit::ping::{PING, PONG, PingType, TICK_TASK, TOKEN_HEADER};
use wq_testkit::{Backend, backend_tests};

use workqueue::app;
use workqueue::config::Config;

async fn a_registered_type_is_wired_like_mr(backend: Backend) {
    let mut config = Config::default();
    config.database.url = backend.fresh_url().await;
    config.engine.handled_types = Some(vec![PING.to_owned()]);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut ping = None;
    let built = app::assemble_with(&config, clock, None, |store| {
        let made = Arc::new(PingType::new(store, "secret", Duration::from_secs(3600)));
        ping = Some(Arc::clone(&made));
        Ok(TypeRegistry::builder().register(made).build()?)
    })
    .await
    .expect("assemble");
    let ping = ping.expect("built");
    assert_eq!(ping.store().count(PONG).await.unwrap(), 0, "migrated");
    let refused = built
        .router
        .clone()
        .oneshot(
            axum::http::Request::post("/webhooks/ping")
                .header(TOKEN_HEADER, "wrong")
                .body(axum::body::Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let ran = built.engine.run_periodic(TICK_TASK).await;
    assert_eq!(ran.expect("handled").unwrap(), Vec::new());
    built.engine.shutdown().await;
}

backend_tests!(a_registered_type_is_wired_like_mr);
