//! The rate-limit budget of one client's token, shared by every caller of
//! the client: what the forge's last answers reported (GitHub's
//! `X-RateLimit-*`, GitLab's `RateLimit-*`), per resource (GitHub keeps
//! REST `core` and `graphql` apart; GitLab has one).

use std::collections::BTreeMap;
use std::sync::Mutex;

use reqwest::header::HeaderMap;

/// The most [`RateBudget::pace`] stretches background reads.
pub const MAX_PACE: f64 = 8.0;

/// What the forge last reported of one budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateBudget {
    /// `core`, `graphql`, ... (GitHub's `X-RateLimit-Resource`; `core` when
    /// the forge names none).
    pub resource: String,
    /// Requests allowed per window.
    pub limit: u64,
    /// Requests left in the current window.
    pub remaining: u64,
    /// When the window renews, in Unix seconds, when the forge said.
    pub reset_unix: Option<i64>,
}

impl RateBudget {
    /// Whether fewer than `reserve` (a share of the limit, 0.0 to 1.0) of
    /// the requests are left, in a window that has not renewed by
    /// `now_unix`.
    pub fn below(&self, reserve: f64, now_unix: i64) -> bool {
        if self.reset_unix.is_some_and(|reset| reset <= now_unix) {
            return false;
        }
        (self.remaining as f64) < reserve * self.limit as f64
    }

    /// How much longer background reads should wait than they would with
    /// a full budget, so that they spread out before the budget runs dry:
    /// 1.0 while at least half of what lies above the `reserve` (a share
    /// of the limit) is left, then in inverse proportion to what is left
    /// (a quarter: 2.0, a tenth: 5.0), at most [`MAX_PACE`]; 1.0 in a window
    /// that renewed by `now_unix`. Below the reserve background reads stop
    /// ([`RateBudget::below`]).
    pub fn pace(&self, reserve: f64, now_unix: i64) -> f64 {
        if self.reset_unix.is_some_and(|reset| reset <= now_unix) || self.limit == 0 {
            return 1.0;
        }
        let floor = reserve.clamp(0.0, 1.0) * self.limit as f64;
        let above = self.limit as f64 - floor;
        if above <= 0.0 {
            return 1.0;
        }
        let left = ((self.remaining as f64 - floor) / above).clamp(0.0, 1.0);
        if left >= 0.5 {
            1.0
        } else {
            (0.5 / left).min(MAX_PACE)
        }
    }

    /// The budget an answer reports, if it reports one (a limit and what
    /// is left).
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let number = |names: [&str; 2]| {
            names
                .iter()
                .find_map(|name| headers.get(*name))
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<i64>().ok())
        };
        let limit = number(["x-ratelimit-limit", "ratelimit-limit"])?;
        let remaining = number(["x-ratelimit-remaining", "ratelimit-remaining"])?;
        let resource = headers
            .get("x-ratelimit-resource")
            .and_then(|value| value.to_str().ok())
            .map_or("core", str::trim)
            .to_owned();
        Some(Self {
            resource,
            limit: u64::try_from(limit).ok()?,
            remaining: u64::try_from(remaining).unwrap_or(0),
            reset_unix: number(["x-ratelimit-reset", "ratelimit-reset"]),
        })
    }
}

/// The budgets of one client, by resource, as last reported.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    inner: Mutex<BTreeMap<String, RateBudget>>,
}

impl Budgets {
    /// Notes what an answer reports (nothing when it reports no budget).
    pub(crate) fn update(&self, headers: &HeaderMap) {
        if let Some(budget) = RateBudget::from_headers(headers) {
            self.inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(budget.resource.clone(), budget);
        }
    }

    /// Every budget reported so far.
    pub(crate) fn all(&self) -> Vec<RateBudget> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_util::test_support::headers;

    #[test]
    fn budgets_are_read_from_either_forges_headers() {
        let github = RateBudget::from_headers(&headers(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "42"),
            ("x-ratelimit-reset", "1700000000"),
            ("x-ratelimit-resource", "graphql"),
        ]))
        .expect("reported");
        assert_eq!(
            github,
            RateBudget {
                resource: "graphql".into(),
                limit: 5000,
                remaining: 42,
                reset_unix: Some(1_700_000_000),
            }
        );
        let gitlab = RateBudget::from_headers(&headers(&[
            ("ratelimit-limit", "600"),
            ("ratelimit-remaining", "599"),
        ]))
        .expect("reported");
        assert_eq!(gitlab.resource, "core");
        assert_eq!(gitlab.reset_unix, None);
        assert_eq!(RateBudget::from_headers(&headers(&[])), None);
    }

    #[test]
    fn background_reads_spread_out_as_the_budget_drains() {
        let budget = |remaining| RateBudget {
            resource: "core".into(),
            limit: 1100,
            remaining,
            reset_unix: Some(1000),
        };
        // A reserve of 100 (1100 × 1/11): 1000 requests above it.
        let reserve = 1.0 / 11.0;
        let pace = |remaining| budget(remaining).pace(reserve, 999);
        assert_eq!(pace(1100), 1.0, "a full budget");
        assert_eq!(pace(600), 1.0, "half of it left");
        assert!((pace(350) - 2.0).abs() < 1e-9, "a quarter: twice as long");
        assert!((pace(200) - 5.0).abs() < 1e-9, "a tenth: five times");
        assert_eq!(pace(150), MAX_PACE, "at most MAX_PACE");
        assert_eq!(pace(50), MAX_PACE, "below the reserve too");
        assert!(pace(300) > pace(400), "the less is left, the slower");
        assert_eq!(budget(200).pace(reserve, 1000), 1.0, "a renewed window");
    }

    #[test]
    fn a_budget_is_low_below_its_reserve_until_it_renews() {
        let budget = RateBudget {
            resource: "core".into(),
            limit: 100,
            remaining: 9,
            reset_unix: Some(1000),
        };
        assert!(budget.below(0.1, 999));
        assert!(!budget.below(0.05, 999));
        assert!(!budget.below(0.1, 1000), "renewed");
        let budgets = Budgets::default();
        budgets.update(&headers(&[
            ("ratelimit-limit", "10"),
            ("ratelimit-remaining", "1"),
        ]));
        budgets.update(&headers(&[("content-type", "text/plain")]));
        assert_eq!(
            budgets.all().len(),
            1,
            "an answer without a budget changes nothing"
        );
        assert_eq!(budgets.all()[0].remaining, 1);
    }
}
