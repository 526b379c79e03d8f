//! Debian's chromium, headless, driven over the DevTools protocol
//! (chromiumoxide, no browser download). A missing `/usr/bin/chromium`
//! fails the test: `.ci/run` installs it.

use std::path::PathBuf;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::emulation::{
    SetDeviceMetricsOverrideParams, SetEmitTouchEventsForMouseParams,
    SetTouchEmulationEnabledParams,
};
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchKeyEventParams, DispatchKeyEventType, GestureSourceType, SynthesizeTapGestureParams,
};
use chromiumoxide::page::ScreenshotParams;
use futures::StreamExt;
use serde::de::DeserializeOwned;

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a page condition may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

/// A screen size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    /// 1280 × 800, a mouse (fine pointer, hover).
    Desktop,
    /// 390 × 844, touch (coarse pointer, no hover).
    Phone,
}

impl Screen {
    pub fn size(self) -> (i64, i64) {
        match self {
            Screen::Desktop => (1280, 800),
            Screen::Phone => (390, 844),
        }
    }
}

pub struct Chrome {
    browser: Browser,
    handler: tokio::task::JoinHandle<()>,
    profile: PathBuf,
}

impl Chrome {
    pub async fn launch() -> Self {
        assert!(
            std::path::Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; .ci/run does)"
        );
        let profile = std::env::temp_dir().join(format!("wq-ui-chromium-{}", uuid::Uuid::now_v7()));
        let config = BrowserConfig::builder()
            .chrome_executable(CHROMIUM)
            .user_data_dir(&profile)
            .disable_default_args()
            // `--headless`, `--hide-scrollbars` and `--mute-audio` come
            // with the default headless mode, `--no-sandbox` with
            // `no_sandbox`; names without their dashes.
            .no_sandbox()
            .args([
                "disable-gpu",
                "disable-quic",
                "disable-background-networking",
                "disable-component-update",
                "disable-sync",
                "no-first-run",
            ])
            .window_size(1280, 800)
            .viewport(None)
            .launch_timeout(Duration::from_secs(60))
            .build()
            .expect("browser config");
        let (browser, mut events) = Browser::launch(config).await.expect("launch chromium");
        let handler = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if event.is_err() {
                    break;
                }
            }
        });
        Self {
            browser,
            handler,
            profile,
        }
    }

    /// A blank page of `screen`'s size and pointer.
    pub async fn page(&self, screen: Screen) -> Page {
        let page = self
            .browser
            .new_page("about:blank")
            .await
            .expect("new page");
        let (width, height) = screen.size();
        let phone = screen == Screen::Phone;
        page.execute(
            SetDeviceMetricsOverrideParams::builder()
                .width(width)
                .height(height)
                .device_scale_factor(if phone { 2.0 } else { 1.0 })
                .mobile(phone)
                .build()
                .unwrap(),
        )
        .await
        .expect("device metrics");
        page.execute(
            SetTouchEmulationEnabledParams::builder()
                .enabled(phone)
                .max_touch_points(if phone { 5 } else { 1 })
                .build()
                .unwrap(),
        )
        .await
        .expect("touch emulation");
        if phone {
            page.execute(
                SetEmitTouchEventsForMouseParams::builder()
                    .enabled(true)
                    .build()
                    .unwrap(),
            )
            .await
            .expect("touch events");
        }
        page
    }

    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Navigates and waits for the load.
pub async fn open(page: &Page, url: &str) {
    page.goto(url).await.expect("navigate");
    page.wait_for_navigation().await.expect("load");
}

/// The value of a script expression.
pub async fn eval<T: DeserializeOwned>(page: &Page, expression: &str) -> T {
    page.evaluate(expression)
        .await
        .unwrap_or_else(|error| panic!("evaluating {expression}: {error}"))
        .into_value()
        .unwrap_or_else(|error| panic!("reading the value of {expression}: {error}"))
}

/// Waits until `condition` (a script expression) holds, re-checked on every
/// change of the document (a MutationObserver), not on a timer.
pub async fn wait_until(page: &Page, condition: &str, what: &str) {
    let script = format!(
        "new Promise(resolve => {{
            const check = () => {{ try {{ if ({condition}) {{ observer.disconnect(); resolve(true); }} }} catch (e) {{}} }};
            const observer = new MutationObserver(check);
            observer.observe(document, {{ subtree: true, childList: true, attributes: true, characterData: true }});
            for (const kind of ['focusin', 'pointerover', 'mouseover', 'click', 'transitionend']) document.addEventListener(kind, check, true);
            check();
        }})"
    );
    let waited = tokio::time::timeout(WAIT, page.evaluate(script.as_str())).await;
    match waited {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => panic!("waiting for {what}: {error}"),
        Err(_) => {
            let body: String = eval(page, "document.body ? document.body.innerText : ''").await;
            panic!("{what}: not seen within {WAIT:?}; the page says:\n{body}")
        }
    }
}

/// A full-page PNG, non-empty, into cargo's target tmp dir; into `docs/`
/// (the README's pictures) only with `WQ_UPDATE_SCREENSHOTS=1`, so a test
/// run leaves the checkout as it found it.
pub async fn screenshot(page: &Page, name: &str) {
    let png = page
        .screenshot(ScreenshotParams::builder().full_page(true).build())
        .await
        .expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG"),
        "{name}: the browser answered no PNG"
    );
    let directory = if std::env::var("WQ_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
    };
    std::fs::create_dir_all(&directory).expect("the screenshots' directory");
    let path = directory.join(name);
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// Presses a key (`Tab`, `Enter`) as a keyboard would.
pub async fn press(page: &Page, key: &str, code: i64) {
    for kind in [
        DispatchKeyEventType::RawKeyDown,
        DispatchKeyEventType::KeyUp,
    ] {
        let mut event = DispatchKeyEventParams::builder()
            .r#type(kind.clone())
            .key(key)
            .code(key)
            .windows_virtual_key_code(code)
            .native_virtual_key_code(code);
        if key == "Enter" && kind == DispatchKeyEventType::RawKeyDown {
            event = event.text("\r");
        }
        page.execute(event.build().unwrap()).await.expect("key");
        if key == "Enter" && kind == DispatchKeyEventType::RawKeyDown {
            page.execute(
                DispatchKeyEventParams::builder()
                    .r#type(DispatchKeyEventType::Char)
                    .key(key)
                    .text("\r")
                    .build()
                    .unwrap(),
            )
            .await
            .expect("key");
        }
    }
}

/// Taps the middle of the element `selector` with a finger (a touch
/// gesture, which the page sees as a tap and its click).
pub async fn tap(page: &Page, selector: &str) {
    let element = page.find_element(selector).await.expect("element to tap");
    element.scroll_into_view().await.expect("scroll");
    let point = element.clickable_point().await.expect("point");
    page.execute(
        SynthesizeTapGestureParams::builder()
            .x(point.x)
            .y(point.y)
            .gesture_source_type(GestureSourceType::Touch)
            .build()
            .unwrap(),
    )
    .await
    .expect("tap");
}
