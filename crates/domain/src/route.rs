//! Routes across rails: one obligation (a payout in one asset) whose attempts may be made on other rails paying the same money, in a fixed order.
//!
//! A route lists, after the payout's own asset, the assets of the rails that take its later
//! attempts (`evm:1/USDC`, then `provider:circle/USDC`, then `provider:coinbase/USDC`). Attempt
//! `n` is made on the rail of the route's `n`th asset, and every attempt past the list's end on
//! its last. The rail of an attempt is therefore a function of the payout's asset and the attempt
//! number alone: two workers can never disagree on it, and an attempt is made on the next rail
//! only after the one before it was proven dead (the lifecycle's rule for any next attempt).

use std::collections::HashMap;

use crate::AssetCode;

/// Rails one route may list after the payout's own.
pub const ROUTE_RAILS_AFTER_OWN_MAX: usize = 4;
/// Routes one deployment may configure.
pub const ROUTES_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("a route of {0} must list at least one rail after its own")]
    Empty(AssetCode),
    #[error(
        "a route of {asset} lists {count} rails after its own; at most {ROUTE_RAILS_AFTER_OWN_MAX}"
    )]
    TooLong { asset: AssetCode, count: usize },
    #[error("a route of {asset} lists {twice} twice (or its own asset again)")]
    Repeated { asset: AssetCode, twice: AssetCode },
    #[error("{0} has two routes; one asset has one order of rails")]
    TwoRoutes(AssetCode),
    #[error("{count} routes configured; at most {ROUTES_MAX}")]
    TooMany { count: usize },
}

/// One asset's rails in the order its attempts take them; the first is the asset's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    rails: Vec<AssetCode>,
}

impl Route {
    /// `then`: the assets whose rails take attempts 2, 3, … of payouts in `asset`.
    pub fn new(asset: AssetCode, then: Vec<AssetCode>) -> Result<Route, RouteError> {
        if then.is_empty() {
            return Err(RouteError::Empty(asset));
        }
        if then.len() > ROUTE_RAILS_AFTER_OWN_MAX {
            return Err(RouteError::TooLong { asset, count: then.len() });
        }
        let mut rails = vec![asset.clone()];
        for next in then {
            if rails.contains(&next) {
                return Err(RouteError::Repeated { asset, twice: next });
            }
            rails.push(next);
        }
        Ok(Route { rails })
    }

    pub fn asset(&self) -> &AssetCode {
        &self.rails[0]
    }

    /// The payout's own asset first, then the assets of the rails after it.
    pub fn rails(&self) -> &[AssetCode] {
        &self.rails
    }

    /// The rail's asset taking attempt `attempt_no` (1-based): the last rail takes every attempt
    /// past the list's end.
    fn rail_for(&self, attempt_no: u32) -> &AssetCode {
        assert!(attempt_no >= 1, "attempts are numbered from 1");
        let index = usize::try_from(attempt_no - 1).unwrap_or(usize::MAX).min(self.rails.len() - 1);
        &self.rails[index]
    }
}

/// Payouts in `asset` whose next attempt is numbered within `attempt_no_min..=attempt_no_max`:
/// what one rail takes of the payouts waiting for a next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTurn {
    pub asset: AssetCode,
    pub attempt_no_min: u32,
    pub attempt_no_max: u32,
}

/// Every configured route, one per asset at most. An asset without one is paid on its own rail only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    by_asset: HashMap<AssetCode, Route>,
}

impl Routes {
    pub fn new(routes: Vec<Route>) -> Result<Routes, RouteError> {
        if routes.len() > ROUTES_MAX {
            return Err(RouteError::TooMany { count: routes.len() });
        }
        let mut by_asset = HashMap::with_capacity(routes.len());
        for route in routes {
            let asset = route.asset().clone();
            if by_asset.insert(asset.clone(), route).is_some() {
                return Err(RouteError::TwoRoutes(asset));
            }
        }
        Ok(Routes { by_asset })
    }

    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.by_asset.values()
    }

    pub fn is_routed(&self, asset: &AssetCode) -> bool {
        self.by_asset.contains_key(asset)
    }

    /// The assets whose rails may make attempts for payouts in `asset`, in the route's order.
    pub fn rails_of<'a>(&'a self, asset: &'a AssetCode) -> &'a [AssetCode] {
        match self.by_asset.get(asset) {
            Some(route) => &route.rails,
            None => std::slice::from_ref(asset),
        }
    }

    /// The asset of the rail that makes attempt `attempt_no` of a payout in `asset`.
    pub fn rail_for<'a>(&'a self, asset: &'a AssetCode, attempt_no: u32) -> &'a AssetCode {
        match self.by_asset.get(asset) {
            Some(route) => route.rail_for(attempt_no),
            None => asset,
        }
    }

    /// What the rail paying `own` takes of the payouts waiting for a next attempt (numbered 2 and
    /// up): all of its own unrouted assets' payouts, and of each route it stands in at position
    /// `i` (0-based, `i >= 1`), attempt `i + 1` alone, or every attempt from `i + 1` on when it
    /// is the route's last. A routed asset's own rail takes none of its next attempts.
    pub fn next_attempt_turns(&self, own: &[AssetCode]) -> Vec<AttemptTurn> {
        let mut turns: Vec<AttemptTurn> = own
            .iter()
            .filter(|asset| !self.is_routed(asset))
            .map(|asset| AttemptTurn {
                asset: asset.clone(),
                attempt_no_min: 2,
                attempt_no_max: u32::MAX,
            })
            .collect();
        for route in self.by_asset.values() {
            for (index, _) in
                route.rails.iter().enumerate().skip(1).filter(|(_, rail)| own.contains(rail))
            {
                let attempt_no = u32::try_from(index + 1).expect("a route is short");
                let last = index == route.rails.len() - 1;
                turns.push(AttemptTurn {
                    asset: route.asset().clone(),
                    attempt_no_min: attempt_no,
                    attempt_no_max: if last { u32::MAX } else { attempt_no },
                });
            }
        }
        turns.sort_by(|a, b| {
            (a.asset.as_str(), a.attempt_no_min).cmp(&(b.asset.as_str(), b.attempt_no_min))
        });
        turns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(text: &str) -> AssetCode {
        AssetCode::parse(text).unwrap().0
    }

    fn routes() -> Routes {
        let usdc = Route::new(
            code("evm:1/USDC"),
            vec![code("provider:circle/USDC"), code("provider:coinbase/USDC")],
        )
        .unwrap();
        Routes::new(vec![usdc]).unwrap()
    }

    #[test]
    fn each_attempt_number_has_one_rail_and_the_last_takes_the_rest() {
        let routes = routes();
        let usdc = code("evm:1/USDC");
        let rails: Vec<&str> = (1..=5).map(|n| routes.rail_for(&usdc, n).as_str()).collect();
        assert_eq!(
            rails,
            [
                "evm:1/USDC",
                "provider:circle/USDC",
                "provider:coinbase/USDC",
                "provider:coinbase/USDC",
                "provider:coinbase/USDC"
            ]
        );
        let eth = code("evm:1/ETH");
        assert_eq!(routes.rail_for(&eth, 3), &eth, "an unrouted asset stays on its rail");
    }

    #[test]
    fn every_waiting_next_attempt_is_taken_by_exactly_one_rail() {
        let routes = routes();
        let owners: [&[&str]; 3] =
            [&["evm:1/USDC", "evm:1/ETH"], &["provider:circle/USDC"], &["provider:coinbase/USDC"]];
        let turns: Vec<Vec<AttemptTurn>> = owners
            .iter()
            .map(|own| routes.next_attempt_turns(&own.iter().map(|c| code(c)).collect::<Vec<_>>()))
            .collect();
        for (asset, n) in [
            ("evm:1/USDC", 2),
            ("evm:1/USDC", 3),
            ("evm:1/USDC", 9),
            ("evm:1/ETH", 2),
            ("provider:circle/USDC", 2),
            ("provider:coinbase/USDC", 7),
        ] {
            let takers: Vec<usize> = turns
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.iter().any(|t| {
                        t.asset.as_str() == asset
                            && (t.attempt_no_min..=t.attempt_no_max).contains(&n)
                    })
                })
                .map(|(i, _)| i)
                .collect();
            let expected = match (asset, n) {
                ("evm:1/USDC", 2) => vec![1],
                ("evm:1/USDC", _) => vec![2],
                ("evm:1/ETH", _) => vec![0],
                ("provider:circle/USDC", _) => vec![1],
                _ => vec![2],
            };
            assert_eq!(takers, expected, "attempt {n} of a payout in {asset}");
            assert!(
                owners[expected[0]].contains(&routes.rail_for(&code(asset), n).as_str()),
                "the rail taking attempt {n} of {asset} makes it"
            );
        }
    }

    #[test]
    fn a_route_must_name_other_rails_once_each_and_an_asset_one_route() {
        let usdc = code("evm:1/USDC");
        let circle = code("provider:circle/USDC");
        assert_eq!(Route::new(usdc.clone(), vec![]), Err(RouteError::Empty(usdc.clone())));
        assert!(matches!(
            Route::new(usdc.clone(), vec![circle.clone(), circle.clone()]),
            Err(RouteError::Repeated { .. })
        ));
        assert!(matches!(
            Route::new(usdc.clone(), vec![usdc.clone()]),
            Err(RouteError::Repeated { .. })
        ));
        let five: Vec<AssetCode> = (0..5).map(|n| code(&format!("provider:p{n}/USDC"))).collect();
        assert!(matches!(
            Route::new(usdc.clone(), five),
            Err(RouteError::TooLong { count: 5, .. })
        ));
        let one = Route::new(usdc.clone(), vec![circle.clone()]).unwrap();
        assert_eq!(Routes::new(vec![one.clone(), one]), Err(RouteError::TwoRoutes(usdc)));
    }
}
