//! Several RPC endpoints of one chain or cluster: a read fails over to the next endpoint, a send goes to every one, and each endpoint's errors and lag are counted in the metrics.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most endpoints one chain or cluster may name: each send goes to every one of them.
pub const ENDPOINTS_PER_NETWORK_MAX: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointsError {
    #[error("{network}: at least one RPC endpoint is needed")]
    None { network: String },
    #[error("{network}: {count} RPC endpoints, more than the {ENDPOINTS_PER_NETWORK_MAX} allowed")]
    TooMany { network: String, count: usize },
}

/// One endpoint's client and the name its metrics carry (scheme-less host and port: the path
/// and query of a hosted node's URL hold its API key).
pub struct Endpoint<T> {
    pub host: String,
    pub client: T,
}

/// The endpoints of one network, in the order the configuration gives them.
///
/// A read is one call on one endpoint: a proof that reads several values reads them all inside
/// that call, so it never mixes two endpoints' views. When the call fails (the endpoint down,
/// behind the block it is judged at, or refusing), the whole call is made again on the next
/// endpoint; the one that answered is asked first next time.
pub struct Endpoints<T> {
    network: String,
    lag_metric: &'static str,
    endpoints: Vec<Endpoint<T>>,
    preferred: AtomicUsize,
}

impl<T> Endpoints<T> {
    /// `network` names the chain or cluster in logs and metrics; `lag_metric` is the gauge of how
    /// far each endpoint's head is behind the highest (its unit in its name).
    pub fn new(
        network: impl Into<String>,
        lag_metric: &'static str,
        endpoints: Vec<Endpoint<T>>,
    ) -> Result<Endpoints<T>, EndpointsError> {
        let network = network.into();
        match endpoints.len() {
            0 => Err(EndpointsError::None { network }),
            count if count > ENDPOINTS_PER_NETWORK_MAX => {
                Err(EndpointsError::TooMany { network, count })
            }
            _ => Ok(Endpoints { network, lag_metric, endpoints, preferred: AtomicUsize::new(0) }),
        }
    }

    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    pub fn network(&self) -> &str {
        &self.network
    }

    /// The endpoint a read goes to first.
    pub fn preferred(&self) -> &T {
        &self.endpoints[self.preferred_index()].client
    }

    pub fn hosts(&self) -> Vec<&str> {
        self.endpoints.iter().map(|e| e.host.as_str()).collect()
    }

    fn preferred_index(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.endpoints.len()
    }

    /// `read` on the preferred endpoint, then on each other one in turn until one answers; the
    /// last error when none does. Each failure is counted against its endpoint under `call`.
    pub async fn read<'a, R, E, F, Fut>(&'a self, call: &'static str, read: F) -> Result<R, E>
    where
        E: std::fmt::Display,
        F: Fn(&'a T) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let first = self.preferred_index();
        let mut last_error = None;
        for step in 0..self.endpoints.len() {
            let index = (first + step) % self.endpoints.len();
            match read(&self.endpoints[index].client).await {
                Ok(answer) => {
                    if step > 0 {
                        self.preferred.store(index, Ordering::Relaxed);
                    }
                    return Ok(answer);
                }
                Err(error) => {
                    self.count_error(index, call);
                    if self.endpoints.len() > 1 {
                        tracing::debug!(network = %self.network, endpoint = index, host = %self.endpoints[index].host, call, %error, "endpoint failed a read; trying the next");
                    }
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.expect("an endpoint list is never empty"))
    }

    /// `call` on every endpoint at once; the answers in the endpoints' order.
    pub async fn every<'a, R, F, Fut>(&'a self, call: F) -> Vec<R>
    where
        F: Fn(&'a T) -> Fut,
        Fut: Future<Output = R>,
    {
        futures::future::join_all(self.endpoints.iter().map(|e| call(&e.client))).await
    }

    /// Counts one failed call on endpoint `index` (the errors in `/metrics`).
    pub fn count_error(&self, index: usize, call: &'static str) {
        let endpoint = &self.endpoints[index];
        metrics::counter!("payoutd_rpc_errors_total", "network" => self.network.clone(),
            "endpoint" => index.to_string(), "host" => endpoint.host.clone(), "call" => call)
        .increment(1);
    }

    /// The highest head of `answers` (one per endpoint, in order): each failure counted under
    /// `call`, each answer's lag behind the highest recorded; the last error when none answered.
    pub fn highest_head<E>(
        &self,
        call: &'static str,
        answers: Vec<Result<u64, E>>,
    ) -> Result<u64, E> {
        let (heads, last_error) = self.answered(call, answers);
        self.record_heads(&heads).ok_or_else(|| last_error.expect("no endpoint answered"))
    }

    /// The highest of `answers` (one per endpoint, in order), each failure counted under `call`;
    /// the last error when none answered. For a count any endpoint's pool may be right about (a
    /// wallet's pending nonce), not a head: no lag is recorded.
    pub fn highest<E>(&self, call: &'static str, answers: Vec<Result<u64, E>>) -> Result<u64, E> {
        let (values, last_error) = self.answered(call, answers);
        values
            .into_iter()
            .flatten()
            .max()
            .ok_or_else(|| last_error.expect("an endpoint list is never empty"))
    }

    /// Each endpoint's answer (`None` where it failed, counted under `call`) and the last error.
    fn answered<E>(
        &self,
        call: &'static str,
        answers: Vec<Result<u64, E>>,
    ) -> (Vec<Option<u64>>, Option<E>) {
        let mut last_error = None;
        let mut values = Vec::with_capacity(answers.len());
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(value) => values.push(Some(value)),
                Err(e) => {
                    self.count_error(index, call);
                    last_error = Some(e);
                    values.push(None);
                }
            }
        }
        (values, last_error)
    }

    /// Records each endpoint's head (`None` where it did not answer) and sets its lag behind the
    /// highest that answered; the highest head.
    pub fn record_heads(&self, heads: &[Option<u64>]) -> Option<u64> {
        assert_eq!(heads.len(), self.endpoints.len(), "one head per endpoint");
        let highest = heads.iter().flatten().copied().max()?;
        for (index, head) in heads.iter().enumerate() {
            let Some(head) = head else { continue };
            metrics::gauge!(self.lag_metric, "network" => self.network.clone(),
                "endpoint" => index.to_string(), "host" => self.endpoints[index].host.clone())
            .set((highest - head) as f64);
        }
        Some(highest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Endpoints<u32> {
        let endpoints =
            (0..3).map(|i| Endpoint { host: format!("node-{i}:8545"), client: i }).collect();
        Endpoints::new("evm:1", "lag_blocks", endpoints).unwrap()
    }

    #[test]
    fn no_endpoint_and_too_many_are_refused() {
        assert!(matches!(
            Endpoints::<u32>::new("evm:1", "lag", vec![]),
            Err(EndpointsError::None { .. })
        ));
        let nine = (0..9).map(|i| Endpoint { host: String::new(), client: i }).collect();
        assert!(matches!(
            Endpoints::<u32>::new("evm:1", "lag", nine),
            Err(EndpointsError::TooMany { count: 9, .. })
        ));
    }

    #[tokio::test]
    async fn a_failed_read_is_made_again_on_the_next_endpoint_which_is_then_asked_first() {
        let endpoints = three();
        let asked = std::sync::Mutex::new(Vec::new());
        let answer: Result<u32, String> = endpoints
            .read("read", |node| {
                asked.lock().unwrap().push(*node);
                async move { if *node < 2 { Err(format!("node {node} down")) } else { Ok(*node) } }
            })
            .await;
        assert_eq!(answer, Ok(2));
        assert_eq!(*asked.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(*endpoints.preferred(), 2, "the one that answered is asked first next time");
    }

    #[tokio::test]
    async fn when_no_endpoint_answers_the_last_error_is_the_answer() {
        let endpoints = three();
        let answer: Result<u32, String> =
            endpoints.read("read", |node| async move { Err(format!("node {node} down")) }).await;
        assert_eq!(answer, Err("node 2 down".to_owned()));
        assert_eq!(*endpoints.preferred(), 0, "no endpoint answered: the order stays");
    }

    #[test]
    fn the_highest_answer_counts_and_an_error_only_when_none_answered() {
        let endpoints = three();
        let answers = vec![Ok(3), Err("down"), Ok(5)];
        assert_eq!(endpoints.highest("pending_nonce", answers), Ok(5));
        assert_eq!(
            endpoints.highest::<&str>("pending_nonce", vec![Err("a"), Err("b"), Err("c")]),
            Err("c")
        );
    }

    #[tokio::test]
    async fn every_endpoint_is_called_and_answers_keep_their_order() {
        let endpoints = three();
        assert_eq!(endpoints.every(|node| async move { node * 10 }).await, vec![0, 10, 20]);
    }

    #[test]
    fn the_highest_answered_head_wins_and_no_answer_is_the_last_error() {
        let endpoints = three();
        assert_eq!(endpoints.highest_head::<&str>("head", vec![Ok(7), Err("down"), Ok(9)]), Ok(9));
        assert_eq!(
            endpoints.highest_head::<&str>("head", vec![Err("a"), Err("b"), Err("c")]),
            Err("c")
        );
    }

    #[test]
    fn the_highest_head_is_the_yardstick_of_lag() {
        let endpoints = three();
        assert_eq!(endpoints.record_heads(&[Some(100), None, Some(94)]), Some(100));
        assert_eq!(endpoints.record_heads(&[None, None, None]), None);
    }
}
